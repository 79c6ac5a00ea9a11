#include "schemas/deltas_position.h"

#include <fmt/core.h>
#include <fmt/format.h>  // format_to_n is compiled here, not taken from libfmt

#include <charconv>

namespace tally::schemas {

namespace {
constexpr std::string_view kVersion = "d1";
}  // namespace

void EncodeDeltasPositions(const std::vector<DeltasPosition>& positions, std::string* out,
                           size_t max_bytes) {
  out->assign(kVersion);
  char entry[96];
  for (const DeltasPosition& p : positions) {
    auto r = fmt::format_to_n(entry, sizeof(entry), ";{},{},{},{}", p.partition, p.last,
                              p.first_input, p.previous);
    if (out->size() + r.size > max_bytes) break;
    out->append(entry, r.size);
  }
}

base::Result<std::vector<DeltasPosition>> DecodeDeltasPositions(std::string_view text) {
  std::vector<DeltasPosition> out;
  if (text.empty()) return out;
  auto bad = [&](std::string_view why) {
    return base::Status::Corruption(
        fmt::format("deltas positions in commit metadata: {}: {:.64}", why, text));
  };
  if (text.substr(0, kVersion.size()) != kVersion) return bad("unknown version");
  size_t pos = kVersion.size();
  while (pos < text.size()) {
    if (text[pos] != ';') return bad("expected ';'");
    pos++;
    int64_t v[4];
    for (int i = 0; i < 4; i++) {
      if (i > 0) {
        if (pos >= text.size() || text[pos] != ',') return bad("expected ','");
        pos++;
      }
      auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), v[i]);
      if (ec != std::errc() || end == text.data() + pos) return bad("expected a number");
      pos = static_cast<size_t>(end - text.data());
    }
    if (v[0] < 0 || v[0] > INT32_MAX || v[1] < -1 || v[2] < 0 || v[3] < -1 || v[3] > v[1]) {
      return bad("entry out of range");
    }
    out.push_back(DeltasPosition{static_cast<uint32_t>(v[0]), v[1], v[2], v[3]});
  }
  return out;
}

}  // namespace tally::schemas
