// Internal to the codec: one description of a message's fields serves both
// directions. A message's field list is a function template over an "Io"
// (ReadIo or WriteIo) and the message (non-const to decode, const to
// encode); the Io picks the classic or the flexible (compact) form of each
// type, so a field list is written once and encode and decode cannot drift
// apart.
//
// Thread model: stack objects over a borrowed reader or writer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wire/byte_reader.h"
#include "wire/byte_writer.h"
#include "wire/error_code.h"
#include "wire/uuid.h"

namespace tally::broker::internal {

class ReadIo {
 public:
  ReadIo(ByteReader& reader, bool flexible) : r_(reader), flexible_(flexible) {}

  void Int8(int8_t& v) { v = r_.ReadInt8(); }
  void Int16(int16_t& v) { v = r_.ReadInt16(); }
  void Int32(int32_t& v) { v = r_.ReadInt32(); }
  void Int64(int64_t& v) { v = r_.ReadInt64(); }
  void Bool(bool& v) { v = r_.ReadBool(); }
  void Error(ErrorCode& v) { v = static_cast<ErrorCode>(r_.ReadInt16()); }
  void UuidField(Uuid& v) { v = r_.ReadUuid(); }
  void String(std::string& s) { s = flexible_ ? r_.ReadCompactString() : r_.ReadString(); }
  void NullableString(std::optional<std::string>& s) {
    s = flexible_ ? r_.ReadCompactNullableString() : r_.ReadNullableString();
  }
  void Bytes(std::string& b) { b = flexible_ ? r_.ReadCompactBytes() : r_.ReadBytes(); }
  void NullableBytes(std::optional<std::string>& b) {
    b = flexible_ ? r_.ReadCompactNullableBytes() : r_.ReadNullableBytes();
  }

  // Elements are appended one by one as they decode (never reserved from the
  // count), so memory grows with the bytes actually consumed.
  template <typename T, typename F>
  void Array(std::vector<T>& v, F&& each) {
    int32_t n = Length(/*nullable=*/false);
    ReadElements(v, n, each);
  }
  // A nullable array; with `nullable` false (a version where the field is not
  // nullable) null is an error and the value is always engaged.
  template <typename T, typename F>
  void NullableArray(std::optional<std::vector<T>>& v, F&& each, bool nullable = true) {
    int32_t n = Length(nullable);
    if (n < 0 || !r_.ok()) {
      v.reset();
      return;
    }
    v.emplace();
    ReadElements(*v, n, each);
  }

  void TaggedFields() {
    if (flexible_) r_.SkipTaggedFields();
  }

 private:
  int32_t Length(bool nullable) {
    return flexible_ ? r_.ReadCompactArrayLength(nullable) : r_.ReadArrayLength(nullable);
  }
  template <typename T, typename F>
  void ReadElements(std::vector<T>& v, int32_t n, F& each) {
    v.clear();
    for (int32_t i = 0; i < n && r_.ok(); i++) {
      v.emplace_back();
      each(v.back());
    }
  }

  ByteReader& r_;
  bool flexible_;
};

class WriteIo {
 public:
  WriteIo(ByteWriter& writer, bool flexible) : w_(writer), flexible_(flexible) {}

  void Int8(int8_t v) { w_.WriteInt8(v); }
  void Int16(int16_t v) { w_.WriteInt16(v); }
  void Int32(int32_t v) { w_.WriteInt32(v); }
  void Int64(int64_t v) { w_.WriteInt64(v); }
  void Bool(bool v) { w_.WriteBool(v); }
  void Error(ErrorCode v) { w_.WriteInt16(static_cast<int16_t>(v)); }
  void UuidField(const Uuid& v) { w_.WriteUuid(v); }
  void String(const std::string& s) {
    if (flexible_) {
      w_.WriteCompactString(s);
    } else {
      w_.WriteString(s);
    }
  }
  void NullableString(const std::optional<std::string>& s) {
    if (flexible_) {
      w_.WriteCompactNullableString(s);
    } else {
      w_.WriteNullableString(s);
    }
  }
  void Bytes(const std::string& b) {
    if (flexible_) {
      w_.WriteCompactBytes(b);
    } else {
      w_.WriteBytes(b);
    }
  }
  void NullableBytes(const std::optional<std::string>& b) {
    if (flexible_) {
      w_.WriteCompactNullableBytes(b);
    } else {
      w_.WriteNullableBytes(b);
    }
  }

  template <typename T, typename F>
  void Array(const std::vector<T>& v, F&& each) {
    Length(static_cast<int32_t>(v.size()));
    for (const T& e : v) each(e);
  }
  // Null is written as an empty array where the version has no null.
  template <typename T, typename F>
  void NullableArray(const std::optional<std::vector<T>>& v, F&& each, bool nullable = true) {
    if (!v) {
      Length(nullable ? -1 : 0);
      return;
    }
    Array(*v, each);
  }

  void TaggedFields() {
    if (flexible_) w_.WriteEmptyTaggedFields();
  }

 private:
  void Length(int32_t n) {
    if (flexible_) {
      w_.WriteCompactArrayLength(n);
    } else {
      w_.WriteArrayLength(n);
    }
  }

  ByteWriter& w_;
  bool flexible_;
};

// Fills a message with distinct values (see FillForTest in wire/message.h).
class FillIo {
 public:
  void Int8(int8_t& v) { v = static_cast<int8_t>(Next() % 100); }
  void Int16(int16_t& v) { v = static_cast<int16_t>(Next()); }
  void Int32(int32_t& v) { v = static_cast<int32_t>(Next() * 1000 + 7); }
  void Int64(int64_t& v) { v = Next() * 1000000007LL; }
  void Bool(bool& v) { v = true; }
  void Error(ErrorCode& v) { v = static_cast<ErrorCode>(Next() % 100); }
  void UuidField(Uuid& v) { v.bytes.fill(static_cast<uint8_t>(Next())); }
  void String(std::string& s) { s = "s" + std::to_string(Next()); }
  void NullableString(std::optional<std::string>& s) { s = "n" + std::to_string(Next()); }
  void Bytes(std::string& b) { b = std::string("\0\xff", 2) + std::to_string(Next()); }
  void NullableBytes(std::optional<std::string>& b) {
    b = std::string("\0\x01", 2) + std::to_string(Next());
  }
  template <typename T, typename F>
  void Array(std::vector<T>& v, F&& each) {
    v.assign(2, T());
    for (T& e : v) each(e);
  }
  template <typename T, typename F>
  void NullableArray(std::optional<std::vector<T>>& v, F&& each, bool = true) {
    v.emplace();
    Array(*v, each);
  }
  void TaggedFields() {}

 private:
  int64_t Next() { return ++n_; }
  int64_t n_ = 0;
};

}  // namespace tally::broker::internal

// Defines Type::Encode and Type::Decode from one field list, written as the
// body that follows the macro, with `io` (ReadIo or WriteIo), `m` (the
// message) and `v` (the version) in scope. Decode starts from a
// default-constructed message, so fields absent at `v` keep their defaults.
#define TALLY_WIRE_FIELDS(Type)                                            \
  template <typename Io, typename M>                                       \
  static void Type##Fields(Io& io, M& m, int16_t v);                       \
  void Type::Encode(ByteWriter& writer, int16_t version) const {           \
    internal::WriteIo io(writer, IsFlexible(Type::kApiKey, version));      \
    Type##Fields(io, *this, version);                                      \
  }                                                                        \
  base::Status Type::Decode(ByteReader& reader, int16_t version) {         \
    *this = Type();                                                        \
    internal::ReadIo io(reader, IsFlexible(Type::kApiKey, version));       \
    Type##Fields(io, *this, version);                                      \
    return reader.status();                                                \
  }                                                                        \
  void Type::FillForTest(int16_t version) {                                \
    *this = Type();                                                        \
    internal::FillIo io;                                                   \
    Type##Fields(io, *this, version);                                      \
  }                                                                        \
  template <typename Io, typename M>                                       \
  static void Type##Fields([[maybe_unused]] Io& io, [[maybe_unused]] M& m, \
                           [[maybe_unused]] int16_t v)
