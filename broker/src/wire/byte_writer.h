// ByteWriter: appends the Kafka protocol's primitive types, big-endian, to a
// borrowed std::string. The writing half of ByteReader (wire/byte_reader.h).
//
// Writing cannot fail. Lengths beyond what a field's width can carry (a
// STRING over 32767 bytes) are a caller's bug: asserted in debug builds,
// truncated to the width otherwise; the decoders never produce such values.
//
// Thread model: externally synchronized; the string must outlive the writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "wire/uuid.h"

namespace tally::broker {

class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}

  // Bytes in the output string (including what was there before).
  size_t size() const { return out_->size(); }
  std::string* out() { return out_; }

  void WriteInt8(int8_t v) { out_->push_back(static_cast<char>(v)); }
  void WriteInt16(int16_t v);
  void WriteInt32(int32_t v) { WriteUint32(static_cast<uint32_t>(v)); }
  void WriteInt64(int64_t v);
  void WriteUint32(uint32_t v);
  void WriteBool(bool v) { WriteInt8(v ? 1 : 0); }
  void WriteUuid(const Uuid& id);

  void WriteVarint(int32_t v);
  void WriteVarlong(int64_t v);
  void WriteUnsignedVarint(uint32_t v);

  void WriteString(std::string_view s);
  void WriteNullableString(const std::optional<std::string>& s);
  void WriteCompactString(std::string_view s);
  void WriteCompactNullableString(const std::optional<std::string>& s);

  void WriteBytes(std::string_view b);
  void WriteNullableBytes(const std::optional<std::string>& b);
  void WriteCompactBytes(std::string_view b) { WriteCompactString(b); }
  void WriteCompactNullableBytes(const std::optional<std::string>& b) {
    WriteCompactNullableString(b);
  }

  // An ARRAY / COMPACT_ARRAY count; -1 writes a null array.
  void WriteArrayLength(int32_t n) { WriteInt32(n); }
  void WriteCompactArrayLength(int32_t n) {
    WriteUnsignedVarint(n < 0 ? 0 : static_cast<uint32_t>(n) + 1);
  }

  // An empty tagged-field section (flexible versions).
  void WriteEmptyTaggedFields() { WriteUnsignedVarint(0); }

  void WriteRaw(std::string_view b) { out_->append(b); }

  // Overwrites 4 bytes at `pos` (already written) with `v` big-endian; used
  // to fill in a size prefix once the body is known.
  void PatchInt32(size_t pos, int32_t v);

 private:
  std::string* out_;
};

}  // namespace tally::broker
