// What every message struct of the codec (wire/*_messages.h) provides.
//
// A message struct holds the fields of one request or response body (no
// header) of one API across the versions the codec supports, with Kafka's
// defaults for fields absent from older versions. Field names follow Kafka's
// schema names in snake_case; a field the struct's comments mark "vN+" or
// "vA-B" is read and written only at those versions and otherwise keeps its
// default. Record sets are opaque bytes here (wire/record_batch.h is not
// this codec's concern).
//
//   static constexpr ApiKey kApiKey;
//   // Appends the body at `version`. Never fails; values that the version
//   // cannot carry (null where it has no null) are written as their nearest
//   // form (null array -> empty array).
//   void Encode(ByteWriter& writer, int16_t version) const;
//   // Replaces *this with the body read at `version`. kCorruption (with the
//   // byte position) if the bytes do not decode; *this is then unspecified.
//   // Does not check that the reader is at its end.
//   base::Status Decode(ByteReader& reader, int16_t version);
//   bool operator==(const Type&) const;  // field by field
//   // Sets every field present at `version` to a distinct non-default value
//   // and every array to two elements; fields absent at `version` keep their
//   // defaults. For tests: Decode(Encode(x)) must give x back exactly.
//   void FillForTest(int16_t version);
//
// Thread model: value types; externally synchronized.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "wire/api_versions.h"
#include "wire/byte_reader.h"
#include "wire/byte_writer.h"
#include "wire/error_code.h"
#include "wire/uuid.h"

#define TALLY_WIRE_MESSAGE(Type, api_key)                   \
  static constexpr ApiKey kApiKey = api_key;                \
  void Encode(ByteWriter& writer, int16_t version) const;   \
  base::Status Decode(ByteReader& reader, int16_t version); \
  void FillForTest(int16_t version);                        \
  bool operator==(const Type&) const = default
