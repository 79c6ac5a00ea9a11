#include "wire/byte_writer.h"

#include <cassert>
#include <cstdint>

namespace tally::broker {

void ByteWriter::WriteInt16(int16_t v) {
  uint16_t u = static_cast<uint16_t>(v);
  char b[2] = {static_cast<char>(u >> 8), static_cast<char>(u)};
  out_->append(b, 2);
}

void ByteWriter::WriteUint32(uint32_t v) {
  char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
               static_cast<char>(v)};
  out_->append(b, 4);
}

void ByteWriter::WriteInt64(int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  char b[8];
  for (int i = 0; i < 8; i++) b[i] = static_cast<char>(u >> (56 - 8 * i));
  out_->append(b, 8);
}

void ByteWriter::WriteUuid(const Uuid& id) {
  out_->append(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
}

void ByteWriter::WriteUnsignedVarint(uint32_t v) {
  while (v >= 0x80) {
    out_->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_->push_back(static_cast<char>(v));
}

void ByteWriter::WriteVarint(int32_t v) {
  uint32_t u = (static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31);
  WriteUnsignedVarint(u);
}

void ByteWriter::WriteVarlong(int64_t v) {
  uint64_t u = (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  while (u >= 0x80) {
    out_->push_back(static_cast<char>((u & 0x7f) | 0x80));
    u >>= 7;
  }
  out_->push_back(static_cast<char>(u));
}

void ByteWriter::WriteString(std::string_view s) {
  assert(s.size() <= INT16_MAX);
  s = s.substr(0, INT16_MAX);
  WriteInt16(static_cast<int16_t>(s.size()));
  out_->append(s);
}

void ByteWriter::WriteNullableString(const std::optional<std::string>& s) {
  if (!s) {
    WriteInt16(-1);
  } else {
    WriteString(*s);
  }
}

void ByteWriter::WriteCompactString(std::string_view s) {
  assert(s.size() < UINT32_MAX);
  s = s.substr(0, UINT32_MAX - 1);
  WriteUnsignedVarint(static_cast<uint32_t>(s.size()) + 1);
  out_->append(s);
}

void ByteWriter::WriteCompactNullableString(const std::optional<std::string>& s) {
  if (!s) {
    WriteUnsignedVarint(0);
  } else {
    WriteCompactString(*s);
  }
}

void ByteWriter::WriteBytes(std::string_view b) {
  assert(b.size() <= INT32_MAX);
  b = b.substr(0, INT32_MAX);
  WriteInt32(static_cast<int32_t>(b.size()));
  out_->append(b);
}

void ByteWriter::WriteNullableBytes(const std::optional<std::string>& b) {
  if (!b) {
    WriteInt32(-1);
  } else {
    WriteBytes(*b);
  }
}

void ByteWriter::PatchInt32(size_t pos, int32_t v) {
  assert(pos + 4 <= out_->size());
  uint32_t u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; i++) (*out_)[pos + i] = static_cast<char>(u >> (24 - 8 * i));
}

}  // namespace tally::broker
