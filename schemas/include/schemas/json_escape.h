// JSON string literals for everything tally renders: events it publishes,
// HTTP answers, error messages that echo a caller's bytes.
// Thread model: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace tally::schemas {

// Appends `text` to *out as a JSON string literal, quotes included: '"' and
// '\' are escaped, control characters become \b \f \n \r \t or \u00XX, valid
// UTF-8 is copied as is, and each byte that is not part of valid UTF-8
// (overlongs, surrogates, truncated sequences, above U+10FFFF) becomes
// \ufffd, so the result is valid JSON whatever `text` holds.
void AppendJsonString(std::string* out, std::string_view text);

}  // namespace tally::schemas
