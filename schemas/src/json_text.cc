#include "json_text.h"

#include "schemas/event.h"
#include "schemas/json_escape.h"

namespace tally::schemas::internal {
namespace {

constexpr std::string_view kMaxIdDigits = "9223372036854775807";
constexpr size_t kReasonValueLimit = 64;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

JsonNumber ClassifyJsonNumber(std::string_view t) {
  size_t i = 0;
  const size_t n = t.size();
  const bool negative = i < n && t[i] == '-';
  if (negative) ++i;
  if (i == n) return JsonNumber::kInvalid;
  if (t[i] == '0') {
    ++i;
  } else if (t[i] >= '1' && t[i] <= '9') {
    while (i < n && IsDigit(t[i])) ++i;
  } else {
    return JsonNumber::kInvalid;
  }
  if (i == n) return negative ? JsonNumber::kNegativeInteger : JsonNumber::kInteger;
  if (t[i] == '.') {
    ++i;
    const size_t start = i;
    while (i < n && IsDigit(t[i])) ++i;
    if (i == start) return JsonNumber::kInvalid;
  }
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < n && (t[i] == '+' || t[i] == '-')) ++i;
    const size_t start = i;
    while (i < n && IsDigit(t[i])) ++i;
    if (i == start) return JsonNumber::kInvalid;
  }
  return i == n ? JsonNumber::kOther : JsonNumber::kInvalid;
}

std::string_view TrimTrailingJsonWhitespace(std::string_view s) {
  while (!s.empty()) {
    const char c = s.back();
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    s.remove_suffix(1);
  }
  return s;
}

bool IsChannelName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || IsDigit(c) || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsEventId(std::string_view s) {
  if (s.empty() || s.size() > kMaxEventIdLength) return false;
  for (char c : s) {
    if (c < ' ' || c > '~') return false;  // char may be signed: bytes >= 0x80 are < ' '
  }
  return true;
}

size_t CountCodePoints(std::string_view utf8) {
  size_t n = 0;
  for (char c : utf8) {
    // Every code point has exactly one byte that is not a continuation byte.
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

void AppendQuotedForReason(std::string* out, std::string_view s) {
  if (s.size() <= kReasonValueLimit) {
    AppendJsonString(out, s);
    return;
  }
  size_t cut = kReasonValueLimit;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  AppendJsonString(out, s.substr(0, cut));
  out->append("...");
}

}  // namespace tally::schemas::internal

namespace tally::schemas {

IdStringCheck ParseIdString(std::string_view s, uint64_t* out) {
  if (s.empty()) return IdStringCheck::kMalformed;
  for (char c : s) {
    if (!internal::IsDigit(c)) return IdStringCheck::kMalformed;
  }
  if (s[0] == '0') {
    // "0" is a canonical decimal, just out of range; "01" is not canonical.
    return s.size() == 1 ? IdStringCheck::kOutOfRange : IdStringCheck::kMalformed;
  }
  if (s.size() > internal::kMaxIdDigits.size()) return IdStringCheck::kOutOfRange;
  // Same length decimals without leading zeros compare like their values.
  if (s.size() == internal::kMaxIdDigits.size() && s > internal::kMaxIdDigits)
    return IdStringCheck::kOutOfRange;
  uint64_t v = 0;
  for (char c : s) v = v * 10 + static_cast<uint64_t>(c - '0');
  *out = v;
  return IdStringCheck::kOk;
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0
// if it is not one (overlongs, surrogates, above U+10FFFF, truncated).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n;
  uint32_t min, cp;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, min = 0x80, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, min = 0x800, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; k++) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

void AppendJsonString(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t run = 0;  // start of the pending run of bytes copied as they are
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t n = Utf8SequenceLength(s, i);
      if (n > 0) {
        i += n;
        continue;
      }
      out->append(s.data() + run, i - run);
      out->append("\\ufffd");
      run = ++i;
      continue;
    }
    if (c >= 0x20 && c != '"' && c != '\\') {
      i++;
      continue;
    }
    out->append(s.data() + run, i - run);
    run = ++i;
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default: {
        const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out->append(esc, sizeof(esc));
      }
    }
  }
  out->append(s.data() + run, s.size() - run);
  out->push_back('"');
}

}  // namespace tally::schemas
