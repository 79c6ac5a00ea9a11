// Ids as decimal text: the one parser of canonical decimal ids in tally.
// Events use it for ids given as strings and for feed snapshot keys
// (defs.json#/$defs/id_string); the HTTP tier for the ids in paths and in
// `ids=` (query/README.md, "Request targets"). Both accept exactly the same
// language, so an id has one spelling everywhere.
//
// Thread model: a pure function.
#pragma once

#include <cstdint>
#include <string_view>

namespace tally::schemas {

enum class IdStringCheck : uint8_t {
  kOk = 0,
  kMalformed,   // not a canonical decimal: empty, a non-digit, or a leading zero
  kOutOfRange,  // canonical decimal digits, but 0 or above 2^63-1
};

// Checks `s` against defs.json#/$defs/id_string: ASCII digits only, no sign,
// no spaces, no leading zero, value 1..2^63-1. On kOk sets *out; otherwise
// leaves it untouched.
IdStringCheck ParseIdString(std::string_view s, uint64_t* out);

}  // namespace tally::schemas
