// The requests PeerClient sends: where a peer is (its base URL parsed) and
// the bytes of a GET, checked so that nothing a caller passes can split a
// request or smuggle a header.
//
// Thread model: pure functions, safe anywhere.
#pragma once

#include <string>
#include <string_view>

#include "query/peer_client.h"

namespace tally::query::internal {

// A peer's address, from "http://HOST[:PORT][/]".
struct PeerAddress {
  std::string host;       // a name or an IP address, without IPv6 brackets
  std::string port;       // decimal, 1..65535 (80 if the URL has none)
  std::string authority;  // for the Host header: as given, without the slash
};

// Parses `peer` into *out; false (and why, in *error) if it is not
// http://HOST[:PORT] with an optional trailing slash.
bool ParsePeer(std::string_view peer, PeerAddress* out, std::string* error);

// "" if `name: value` may go on the wire as is, else why not.
std::string CheckHeader(std::string_view name, std::string_view value);

// Appends "name: value\r\n".
void AppendHeader(std::string* wire, std::string_view name, std::string_view value);

// Writes the GET of `request` to `address` into *wire: the request line,
// Host, `extra_headers` (already checked, as sent), the request's own
// headers. Returns "" or why the request cannot be sent (a target that is
// not origin-form or has blanks or control bytes, a bad header).
std::string BuildRequest(const PeerAddress& address, std::string_view extra_headers,
                         const PeerRequest& request, std::string* wire);

}  // namespace tally::query::internal
