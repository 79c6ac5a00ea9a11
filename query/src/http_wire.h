// HTTP/1.1 details shared by the transport and the peer client: the reason
// phrases, the Date header, header names compared as HTTP compares them,
// and the listen address. Internal to query/.
//
// Thread model: pure functions; HttpDate() keeps a per-thread cache.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tally::query::internal {

// True when `a` and `b` are the same header name: equal but for the case
// of ASCII letters (RFC 9110 section 5.1).
bool SameHeaderName(std::string_view a, std::string_view b);

// The reason phrase of an HTTP status we answer; "Unknown" for others.
const char* ReasonPhrase(int status);

// The Date header (RFC 9110 section 6.6.1) for now, formatted once per
// second per thread. Independent of the C locale. Valid until the calling
// thread's next call.
std::string_view HttpDate();

// Parses a listen address: "HOST:PORT", "[V6]:PORT", ":PORT" (all
// interfaces), "localhost:PORT". InvalidArgument naming the address when it
// is none of these or HOST is not an IP address.
base::Status ParseListen(const std::string& listen, boost::asio::ip::address* address,
                         uint16_t* port);

}  // namespace tally::query::internal
