// What the transport's tests share: a raw HTTP/1.1 client over one TCP
// connection, and a fixture serving a small test state on a free port.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "query/http_server.h"
#include "query/query_service.h"
#include "store/state_store.h"
#include "test_state.h"

namespace tally::query {

constexpr char kPost7[] = R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10})";

struct HttpResponse {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
  std::string Header(const std::string& name) const {
    std::string needle = "\r\n" + name + ": ";
    size_t p = head.find(needle);
    if (p == std::string::npos) return "";
    p += needle.size();
    return head.substr(p, head.find("\r\n", p) - p);
  }
};

// A blocking HTTP/1.1 client over one TCP connection, enough to test the
// server byte by byte: raw writes, pipelining, responses parsed by
// Content-Length.
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Closes with a reset (SO_LINGER 0), as a client that crashed does: the
  // server sees the connection fail at once, whatever it is doing.
  void Reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads one response; status 0 if the connection closed or timed out first.
  HttpResponse Read(int timeout_ms = 10000) {
    HttpResponse r;
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(timeout_ms)) return r;
    }
    r.head = buf_.substr(0, end + 2);
    buf_.erase(0, end + 4);
    r.status = std::atoi(r.head.c_str() + 9);
    size_t len = std::stoul("0" + r.Header("Content-Length"));
    while (buf_.size() < len) {
      if (!Fill(timeout_ms)) return HttpResponse{};
    }
    r.body = buf_.substr(0, len);
    buf_.erase(0, len);
    return r;
  }

  HttpResponse Get(const std::string& target) {
    Send("GET " + target + " HTTP/1.1\r\nHost: test\r\n\r\n");
    return Read();
  }

  // True if the server closes the connection (EOF or reset) within the timeout.
  bool ClosedByPeer(int timeout_ms = 5000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  bool Fill(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = testing::OpenTestStore(dir_.path());
    QueryServiceOptions o;
    o.store = store_.get();
    service_ = std::make_unique<QueryService>(std::move(o));
    Restart(ServerOptions{});
  }

  // Replaces the server by one with `so` (on a new port).
  void Restart(ServerOptions so) {
    server_.reset();
    so.listen = "127.0.0.1:0";
    auto server = HttpServer::Start(so, service_.get());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_NE(server_->bound_port(), 0);
  }

  testing::TempDir dir_;
  std::unique_ptr<store::StateStore> store_;
  std::unique_ptr<QueryService> service_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace tally::query
