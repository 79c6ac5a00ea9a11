#include "request_target.h"

#include <fmt/core.h>

namespace tally::query {

void SplitTarget(std::string_view target, std::string_view* path, std::string_view* query) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) {
    *path = target;
    *query = {};
  } else {
    *path = target.substr(0, q);
    *query = target.substr(q + 1);
  }
}

PathSegments SplitPath(std::string_view path) {
  PathSegments out;
  if (path.empty() || path[0] != '/') return out;
  size_t pos = 1;
  while (true) {
    if (out.count == PathSegments::kMax) return out;  // ok stays false
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) {
      out.segment[out.count++] = path.substr(pos);
      break;
    }
    out.segment[out.count++] = path.substr(pos, slash - pos);
    pos = slash + 1;
  }
  out.ok = true;
  return out;
}

namespace {
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

bool PercentDecode(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); i++) {
    char c = in[i];
    if (c == '+') {
      out->push_back(' ');
    } else if (c == '%') {
      if (i + 2 >= in.size()) return false;  // needs two hex digits
      int hi = HexValue(in[i + 1]);
      int lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out->push_back(c);
    }
  }
  return true;
}

base::Status FindQueryParam(std::string_view query, std::string_view name, bool* found,
                            std::string* value) {
  *found = false;
  std::string decoded_name;
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view pair = query.substr(pos, amp - pos);
    pos = amp + 1;
    if (pair.empty()) continue;  // "a=1&&b=2", a trailing '&'
    size_t eq = pair.find('=');
    std::string_view raw_name = pair.substr(0, eq);
    std::string_view raw_value =
        eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (!PercentDecode(raw_name, &decoded_name)) {
      return base::Status::InvalidArgument(
          fmt::format("malformed percent-encoding in query parameter \"{}\"", Clip(raw_name)));
    }
    if (decoded_name != name) continue;
    if (*found) {
      return base::Status::InvalidArgument(fmt::format("parameter {} given more than once", name));
    }
    if (!PercentDecode(raw_value, value)) {
      return base::Status::InvalidArgument(
          fmt::format("malformed percent-encoding in parameter {}: \"{}\"", name, Clip(raw_value)));
    }
    *found = true;
  }
  return base::Status::Ok();
}

std::string_view Clip(std::string_view text) { return text.substr(0, 64); }

}  // namespace tally::query
