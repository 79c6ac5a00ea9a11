#include "wire/byte_reader.h"

#include <fmt/core.h>

#include <cstring>

namespace tally::broker {

base::Status ByteReader::status() const {
  if (ok()) return base::Status::Ok();
  return base::Status::Corruption(fmt::format("{} at byte {}", error_, error_pos_));
}

void ByteReader::Fail(const char* what) {
  if (error_ != nullptr) return;
  error_ = what;
  error_pos_ = pos_;
}

bool ByteReader::Need(size_t n) {
  if (!ok()) return false;
  if (data_.size() - pos_ < n) {
    Fail("truncated");
    return false;
  }
  return true;
}

void ByteReader::Skip(size_t n) {
  if (Need(n)) pos_ += n;
}

std::string_view ByteReader::ReadRaw(size_t n) {
  if (!Need(n)) return {};
  std::string_view out(reinterpret_cast<const char*>(data_.data() + pos_), n);
  pos_ += n;
  return out;
}

int8_t ByteReader::ReadInt8() {
  if (!Need(1)) return 0;
  return static_cast<int8_t>(data_[pos_++]);
}

int16_t ByteReader::ReadInt16() {
  if (!Need(2)) return 0;
  uint16_t v = static_cast<uint16_t>((data_[pos_] << 8) | data_[pos_ + 1]);
  pos_ += 2;
  return static_cast<int16_t>(v);
}

uint32_t ByteReader::ReadUint32() {
  if (!Need(4)) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = (v << 8) | data_[pos_ + i];
  pos_ += 4;
  return v;
}

int32_t ByteReader::ReadInt32() { return static_cast<int32_t>(ReadUint32()); }

int64_t ByteReader::ReadInt64() {
  if (!Need(8)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | data_[pos_ + i];
  pos_ += 8;
  return static_cast<int64_t>(v);
}

Uuid ByteReader::ReadUuid() {
  Uuid id;
  if (!Need(16)) return id;
  std::memcpy(id.bytes.data(), data_.data() + pos_, 16);
  pos_ += 16;
  return id;
}

uint64_t ByteReader::ReadUnsignedVarlong(int max_bytes) {
  uint64_t v = 0;
  for (int i = 0; i < max_bytes; i++) {
    if (!Need(1)) return 0;
    uint8_t b = data_[pos_++];
    v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) return v;
  }
  Fail("varint too long");
  return 0;
}

uint32_t ByteReader::ReadUnsignedVarint() {
  uint64_t v = ReadUnsignedVarlong(5);
  if (v > UINT32_MAX) {
    Fail("varint out of range");
    return 0;
  }
  return static_cast<uint32_t>(v);
}

int32_t ByteReader::ReadVarint() {
  uint32_t u = ReadUnsignedVarint();
  return static_cast<int32_t>((u >> 1) ^ (~(u & 1) + 1));
}

int64_t ByteReader::ReadVarlong() {
  uint64_t u = ReadUnsignedVarlong(10);
  return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
}

std::optional<std::string> ByteReader::ReadSized(int64_t length, bool nullable) {
  if (!ok()) return std::nullopt;
  if (length == -1 && nullable) return std::nullopt;
  if (length < 0) {
    Fail(length == -1 ? "null where not nullable" : "negative length");
    return std::nullopt;
  }
  std::string_view raw = ReadRaw(static_cast<size_t>(length));
  if (!ok()) return std::nullopt;
  return std::string(raw);
}

std::string ByteReader::ReadString() {
  return ReadSized(ReadInt16(), /*nullable=*/false).value_or(std::string());
}

std::optional<std::string> ByteReader::ReadNullableString() {
  return ReadSized(ReadInt16(), /*nullable=*/true);
}

std::string ByteReader::ReadCompactString() {
  int64_t n = static_cast<int64_t>(ReadUnsignedVarint()) - 1;
  return ReadSized(n, /*nullable=*/false).value_or(std::string());
}

std::optional<std::string> ByteReader::ReadCompactNullableString() {
  int64_t n = static_cast<int64_t>(ReadUnsignedVarint()) - 1;
  return ReadSized(n, /*nullable=*/true);
}

std::string ByteReader::ReadBytes() {
  return ReadSized(ReadInt32(), /*nullable=*/false).value_or(std::string());
}

std::optional<std::string> ByteReader::ReadNullableBytes() {
  return ReadSized(ReadInt32(), /*nullable=*/true);
}

std::string ByteReader::ReadCompactBytes() { return ReadCompactString(); }

std::optional<std::string> ByteReader::ReadCompactNullableBytes() {
  return ReadCompactNullableString();
}

int32_t ByteReader::ReadArrayLength(bool nullable) {
  int32_t n = ReadInt32();
  if (!ok()) return 0;
  if (n == -1 && nullable) return -1;
  if (n < 0) {
    Fail(n == -1 ? "null array where not nullable" : "negative array length");
    return 0;
  }
  if (static_cast<size_t>(n) > remaining()) {
    Fail("array longer than the bytes left");
    return 0;
  }
  return n;
}

int32_t ByteReader::ReadCompactArrayLength(bool nullable) {
  uint32_t u = ReadUnsignedVarint();
  if (!ok()) return 0;
  if (u == 0) {
    if (nullable) return -1;
    Fail("null array where not nullable");
    return 0;
  }
  uint32_t n = u - 1;
  if (n > remaining()) {
    Fail("array longer than the bytes left");
    return 0;
  }
  return static_cast<int32_t>(n);
}

void ByteReader::SkipTaggedFields() {
  uint32_t count = ReadUnsignedVarint();
  if (ok() && count > remaining()) {
    Fail("more tagged fields than bytes left");
    return;
  }
  int64_t last_tag = -1;
  for (uint32_t i = 0; i < count && ok(); i++) {
    uint32_t tag = ReadUnsignedVarint();
    uint32_t size = ReadUnsignedVarint();
    if (!ok()) return;
    if (static_cast<int64_t>(tag) <= last_tag) {
      Fail("tagged fields out of order");
      return;
    }
    last_tag = tag;
    Skip(size);
  }
}

}  // namespace tally::broker
