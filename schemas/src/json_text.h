// Text-level rules shared by the event parser and EventToJson: the id string
// rule, the JSON number grammar, channel names, event ids, code point counting and JSON
// string escaping. Each function mirrors one keyword of the JSON Schema files
// in schemas/json/ exactly; the conformance test holds them to it.
// Internal to schemas/: not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "schemas/id_string.h"
#include "schemas/json_escape.h"

namespace tally::schemas::internal {

// The id string rule is public (schemas/id_string.h): the HTTP tier parses
// its ids with it too.
using schemas::IdStringCheck;
using schemas::ParseIdString;

enum class JsonNumber : uint8_t {
  kInvalid = 0,      // not exactly one JSON number
  kInteger,          // digits only: 0|[1-9][0-9]*
  kNegativeInteger,  // -(0|[1-9][0-9]*)
  kOther,            // with a fraction or an exponent
};

// Classifies `token` against the JSON number grammar (RFC 8259 section 6):
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
JsonNumber ClassifyJsonNumber(std::string_view token);

// True if `token` is exactly one JSON number.
inline bool IsJsonNumber(std::string_view token) {
  return ClassifyJsonNumber(token) != JsonNumber::kInvalid;
}

// Removes trailing JSON whitespace (space, tab, LF, CR).
std::string_view TrimTrailingJsonWhitespace(std::string_view s);

// True if `s` matches defs.json#/$defs/channel: 1..64 of [a-z0-9_.-].
bool IsChannelName(std::string_view s);

// True if `s` matches defs.json#/$defs/event_id: 1..64 printable ASCII
// characters (0x20 ' ' .. 0x7E '~').
bool IsEventId(std::string_view s);

// The number of Unicode code points in `utf8`, which must be valid UTF-8
// (what JSON Schema's maxLength counts).
size_t CountCodePoints(std::string_view utf8);

// Defined in schemas/json_escape.h; used here by the encoders.
using schemas::AppendJsonString;

// Appends `s` quoted for a one-line error reason: as AppendJsonString, but
// cut after 64 bytes (at a UTF-8 boundary) with "..." so that a hostile
// value cannot make a reason long or multi-line.
void AppendQuotedForReason(std::string* out, std::string_view s);

}  // namespace tally::schemas::internal
