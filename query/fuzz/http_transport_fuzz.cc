// Fuzz target: the HTTP transport (HttpServer's loops over libhttp-parser)
// with every byte the client's: request lines, headers, bodies, chunking,
// pipelining and garbage, against limits small enough for short inputs to
// cross them. Input: the bytes one connection sends, then it half-closes.
// The server must close the connection within 5 s, and write only
// well-formed answers (a status line, headers, Content-Length bytes of
// body); a crash, a hang or a torn answer aborts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz_fixture.h"
#include "query/http_server.h"

namespace {

tally::query::HttpServer* Server() {
  static tally::query::HttpServer* server = [] {
    tally::query::ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.threads = 1;
    so.blocking_threads = 2;
    so.max_body_bytes = 512;
    so.max_readable_body_bytes = 1024;
    so.max_url_bytes = 256;
    so.max_header_bytes = 128;
    so.max_header_count = 8;
    so.read_timeout_ms = 2000;
    auto s = tally::query::HttpServer::Start(so, tally::query::fuzz::GetFixture()->service.get());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      std::abort();
    }
    tally::query::HttpServer* raw = std::move(s).value().release();
    // Stopped before the fixture (registered earlier) goes.
    std::atexit([] { delete Server(); });
    return raw;
  }();
  return server;
}

// The answers in `out` are whole and well formed: each a status line
// "HTTP/1.1 NNN ...", header lines, a blank line and Content-Length bytes.
bool WellFormed(std::string_view out) {
  while (!out.empty()) {
    const size_t end = out.find("\r\n\r\n");
    if (end == std::string_view::npos || out.substr(0, 9) != "HTTP/1.1 ") return false;
    const std::string_view head = out.substr(0, end + 2);
    out.remove_prefix(end + 4);
    if (head.substr(9, 3) == "100") continue;  // 100 Continue has no body
    const size_t at = head.find("\r\nContent-Length: ");
    if (at == std::string_view::npos) return false;
    const size_t length = std::strtoul(head.data() + at + 18, nullptr, 10);
    if (out.size() < length) return false;
    out.remove_prefix(length);
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint16_t port = Server()->bound_port();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  // Each connection from another loopback address (127.1.0.0 on): tens of
  // thousands of inputs a second from one address would reuse its ports
  // while their last connections still wait in TIME_WAIT.
  static uint32_t next_source = 0;
  const uint32_t n = next_source++ % (250u << 16);
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl((127u << 24) | ((1 + (n >> 16)) << 16) | (n & 0xffff));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0) {
    std::fprintf(stderr, "bind: %s\n", std::strerror(errno));
    std::abort();
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // libFuzzer's SIGALRM (its -timeout check, every few seconds) interrupts
  // system calls here: an interrupted connect goes on by itself.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int error = errno;
    if (error == EINTR) {
      pollfd p{fd, POLLOUT, 0};
      while (::poll(&p, 1, 5000) < 0 && errno == EINTR) {
      }
      socklen_t len = sizeof(error);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    }
    if (error != 0) {
      std::fprintf(stderr, "connect: %s\n", std::strerror(error));
      std::abort();
    }
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // The server may close before it has read everything (bytes that are not
  // HTTP): a failed send ends the sending, not the input.
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    const int ready = left <= 0 ? 0 : ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      std::fprintf(stderr, "the server did not close the connection within 5 s\n");
      std::abort();
    }
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed (or reset, after bytes that are not HTTP)
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!WellFormed(out)) {
    std::fprintf(stderr, "a torn or malformed answer: %s\n", out.substr(0, 400).c_str());
    std::abort();
  }
  return 0;
}
