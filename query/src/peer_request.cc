#include "peer_request.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace tally::query::internal {

namespace {

bool IsTokenChar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

}  // namespace

bool ParsePeer(std::string_view peer, PeerAddress* out, std::string* error) {
  constexpr std::string_view kScheme = "http://";
  *error = fmt::format("peer '{}' is not http://HOST:PORT", peer);
  if (peer.substr(0, kScheme.size()) != kScheme) return false;
  std::string_view rest = peer.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty()) return false;
  std::string_view host, port;
  if (rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(1, close - 1);
    std::string_view after = rest.substr(close + 1);
    if (!after.empty() && (after.front() != ':' || after.size() == 1)) return false;
    port = after.empty() ? "" : after.substr(1);
  } else {
    size_t colon = rest.rfind(':');
    host = rest.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = rest.substr(colon + 1);
      if (port.empty()) return false;
    }
    for (char c : host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
        return false;
      }
    }
  }
  if (host.empty() || port.size() > 5) return false;
  int port_number = port.empty() ? 80 : 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    port_number = port_number * 10 + (c - '0');
  }
  if (port_number < 1 || port_number > 65535) return false;
  out->host = std::string(host);
  out->port = std::to_string(port_number);
  out->authority = std::string(rest);
  error->clear();
  return true;
}

std::string CheckHeader(std::string_view name, std::string_view value) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), IsTokenChar)) {
    return fmt::format("bad header name '{}'", name);
  }
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') return fmt::format("bad value of header {}", name);
  }
  return "";
}

void AppendHeader(std::string* wire, std::string_view name, std::string_view value) {
  wire->append(name).append(": ").append(value).append("\r\n");
}

std::string BuildRequest(const PeerAddress& address, std::string_view extra_headers,
                         const PeerRequest& request, std::string* wire) {
  const std::string& target = request.target;
  if (target.empty() || target.front() != '/' ||
      std::any_of(target.begin(), target.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; })) {
    return "bad request target";
  }
  wire->clear();
  wire->reserve(48 + target.size() + address.authority.size() + extra_headers.size());
  wire->append("GET ").append(target).append(" HTTP/1.1\r\n");
  AppendHeader(wire, "Host", address.authority);
  wire->append(extra_headers);
  for (const auto& [name, value] : request.headers) {
    std::string bad = CheckHeader(name, value);
    if (!bad.empty()) return bad;
    AppendHeader(wire, name, value);
  }
  wire->append("\r\n");
  return "";
}

}  // namespace tally::query::internal
