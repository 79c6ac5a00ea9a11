// Hand parsing of request targets for the query tier: path segments, ids,
// query parameters. Internal to query/.
//
// Choices (query/README.md, "Request targets"):
// - Ids are canonical decimal: 1..9223372036854775807, digits only, no sign,
//   no leading zero. "0", "-1", "+1", "01", " 1", "1e3" and anything longer
//   than 2^63-1 are bad ids.
// - Path segments are compared byte for byte and never percent-decoded, so a
//   '%' in a path id makes it a bad id; there is no trailing-slash or
//   double-slash normalization ("/v1/info/" is not "/v1/info").
// - Query parameter names and values are percent-decoded ('+' is a space),
//   as every HTTP client encodes them (Python's urlencode sends ids=1%2C2).
// Thread model: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "schemas/id_string.h"

namespace tally::query {

// Parses a canonical decimal id into *out. False if `text` is not one
// (*out untouched). The rule is schemas' id string rule, the one id parser.
inline bool ParseId(std::string_view text, uint64_t* out) {
  return schemas::ParseIdString(text, out) == schemas::IdStringCheck::kOk;
}

// Splits a request target into its path and its query (without the '?';
// empty when there is none).
void SplitTarget(std::string_view target, std::string_view* path, std::string_view* query);

// The segments of an origin-form path: "/v1/posts/7/counts" gives
// {"v1","posts","7","counts"}. "/" gives one empty segment.
struct PathSegments {
  static constexpr int kMax = 8;
  std::string_view segment[kMax];
  int count = 0;
  // False when the path does not start with '/' or has more than kMax
  // segments: no route can match it.
  bool ok = false;
};
PathSegments SplitPath(std::string_view path);

// Percent-decodes `in` ('+' becomes a space) into *out. False on a
// malformed escape ("%", "%4", "%zz").
bool PercentDecode(std::string_view in, std::string* out);

// Finds parameter `name` in `query` ("a=1&ids=1,2"). Returns OK with
// *found = false if absent; OK with *found and the decoded value in *value
// if present once; InvalidArgument if it is present more than once or the
// query string is malformed. Parameters with other names are ignored.
base::Status FindQueryParam(std::string_view query, std::string_view name, bool* found,
                            std::string* value);

// `text` shortened to at most 64 bytes for echoing in an error message.
std::string_view Clip(std::string_view text);

}  // namespace tally::query
