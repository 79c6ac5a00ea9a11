// JSON output helpers for the query tier. Internal to query/.
// Thread model: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace tally::query {

// Appends `text` as a JSON string literal (with the quotes) to *out.
// Escapes '"', '\\' and control characters; bytes that are not valid UTF-8
// become U+FFFD, so the output is always valid JSON whatever the input.
void AppendJsonString(std::string* out, std::string_view text);

}  // namespace tally::query
