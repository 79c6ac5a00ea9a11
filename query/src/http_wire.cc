#include "http_wire.h"

#include <fmt/core.h>

#include <ctime>
#include <string>

namespace tally::query::internal {

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 202:
      return "Accepted";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

bool SameHeaderName(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view HttpDate() {
  thread_local time_t cached_second = -1;
  thread_local char buf[40];
  thread_local size_t len = 0;
  time_t now = std::time(nullptr);
  if (now != cached_second) {
    static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                              "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    gmtime_r(&now, &tm);
    auto r = fmt::format_to_n(buf, sizeof(buf), "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
                              kDays[tm.tm_wday], tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900,
                              tm.tm_hour, tm.tm_min, tm.tm_sec);
    len = r.size < sizeof(buf) ? r.size : sizeof(buf);
    cached_second = now;
  }
  return std::string_view(buf, len);
}

base::Status ParseListen(const std::string& listen, boost::asio::ip::address* address,
                         uint16_t* port) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return base::Status::InvalidArgument(
        fmt::format("listen address \"{}\": expected HOST:PORT", listen));
  }
  std::string host = listen.substr(0, colon);
  std::string port_text = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  unsigned long p = 0;
  bool port_ok = !port_text.empty() && port_text.size() <= 5;
  for (char c : port_text) {
    if (c < '0' || c > '9') port_ok = false;
  }
  if (port_ok) p = std::stoul(port_text);
  if (!port_ok || p > 65535) {
    return base::Status::InvalidArgument(
        fmt::format("listen address \"{}\": bad port \"{}\"", listen, port_text));
  }
  boost::system::error_code ec;
  *address = boost::asio::ip::make_address(host, ec);
  if (ec) {
    return base::Status::InvalidArgument(fmt::format(
        "listen address \"{}\": \"{}\" is not an IP address (or localhost)", listen, host));
  }
  *port = static_cast<uint16_t>(p);
  return base::Status::Ok();
}

}  // namespace tally::query::internal
