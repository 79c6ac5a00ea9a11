// ByteReader: bounds-checked reading of the Kafka protocol's primitive types
// from a borrowed buffer.
//
// Every read checks the bytes left first. A read that would pass the end, or
// a length that makes no sense (negative where null is not allowed, longer
// than the bytes left, a varint of more than 5 or 10 bytes), puts the reader
// in a sticky error state: that read and every later one returns a zero
// value and consumes nothing, so a decoder may read a whole message and look
// at ok() once at the end. Hostile input never causes a read past the end,
// undefined behaviour or an allocation larger than the input itself.
//
// Thread model: a value type over borrowed bytes; externally synchronized.
// The buffer must outlive the reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "wire/uuid.h"

namespace tally::broker {

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> data) : data_(data) {}
  explicit ByteReader(std::string_view data)
      : data_(reinterpret_cast<const uint8_t*>(data.data()), data.size()) {}
  // A reader over a temporary string would outlive its bytes.
  explicit ByteReader(std::string&&) = delete;

  // True while no read has failed.
  bool ok() const { return error_ == nullptr; }
  // OK, or kCorruption naming the first failure and its byte position.
  base::Status status() const;
  // Bytes not read yet (0 once in error).
  size_t remaining() const { return ok() ? data_.size() - pos_ : 0; }
  // Position of the next byte to read, counted from the start of the buffer.
  size_t position() const { return pos_; }

  // Puts the reader in the error state with `what` (a static string) unless
  // it already is in one; what a decoder calls on a semantic error.
  void Fail(const char* what);

  // Fixed-width big-endian integers.
  int8_t ReadInt8();
  int16_t ReadInt16();
  int32_t ReadInt32();
  int64_t ReadInt64();
  uint32_t ReadUint32();
  // Kafka's BOOLEAN: any non-zero byte is true.
  bool ReadBool() { return ReadInt8() != 0; }
  Uuid ReadUuid();

  // Zigzag-encoded VARINT (at most 5 bytes) and VARLONG (at most 10).
  int32_t ReadVarint();
  int64_t ReadVarlong();
  // UNSIGNED_VARINT (at most 5 bytes).
  uint32_t ReadUnsignedVarint();

  // STRING (int16 length), NULLABLE_STRING (length -1 is null) and their
  // COMPACT_ forms (unsigned varint length + 1, 0 is null). The non-nullable
  // readers fail on null. Strings are bytes; UTF-8 is not checked.
  std::string ReadString();
  std::optional<std::string> ReadNullableString();
  std::string ReadCompactString();
  std::optional<std::string> ReadCompactNullableString();

  // BYTES (int32 length), NULLABLE_BYTES and their COMPACT_ forms.
  std::string ReadBytes();
  std::optional<std::string> ReadNullableBytes();
  std::string ReadCompactBytes();
  std::optional<std::string> ReadCompactNullableBytes();

  // The element count of an ARRAY (int32) or COMPACT_ARRAY (unsigned varint
  // N+1). Returns -1 for a null array (only when `nullable`), else a count
  // that is at most remaining(): every element takes at least one byte, so a
  // larger count is an error and a caller may reserve that many elements.
  int32_t ReadArrayLength(bool nullable);
  int32_t ReadCompactArrayLength(bool nullable);

  // Reads a tagged-field section (flexible versions) and skips every field:
  // no tag this codec reads is defined for the versions it supports. Fails on
  // tags out of order or a field longer than the bytes left.
  void SkipTaggedFields();

  // Skips `n` bytes; fails if fewer are left.
  void Skip(size_t n);
  // Returns the next `n` bytes as a view into the buffer and skips them, or
  // an empty view (and the error state) if fewer are left.
  std::string_view ReadRaw(size_t n);

 private:
  // True if `n` more bytes can be read; otherwise enters the error state.
  bool Need(size_t n);
  std::optional<std::string> ReadSized(int64_t length, bool nullable);
  uint64_t ReadUnsignedVarlong(int max_bytes);

  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  const char* error_ = nullptr;
  size_t error_pos_ = 0;
};

}  // namespace tally::broker
