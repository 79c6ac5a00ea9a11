#include "bootstrap_forwarder.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "testing/free_port.h"
#include "testing/wait_for.h"

namespace tally::app {
namespace {

using testing::FreePort;
using testing::WaitFor;

// A blocking TCP server on 127.0.0.1 that runs `handler` for every
// connection on its own thread. Stops when destroyed.
class TestServer {
 public:
  explicit TestServer(std::function<void(int fd)> handler) : handler_(std::move(handler)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
    listen(fd_, 128);
    socklen_t len = sizeof(sin);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sin), &len);
    port_ = ntohs(sin.sin_port);
    acceptor_ = std::thread([this] {
      for (;;) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // shutdown() below
        accepted_++;
        workers_.emplace_back([this, c] {
          handler_(c);
          close(c);
        });
      }
    });
  }
  ~TestServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    acceptor_.join();
    for (auto& t : workers_) t.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }

 private:
  std::function<void(int)> handler_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  std::vector<std::thread> workers_;  // touched by the acceptor only, then joined
};

void Echo(int fd) {
  char buf[8192];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    if (send(fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) return;
  }
}

int Connect(const std::string& address) {
  auto colon = address.rfind(':');
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &sin.sin_addr);
  sin.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};  // no test may hang on a lost byte
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Reads exactly `n` bytes; false on EOF, error or timeout.
bool ReadExactly(int fd, char* out, size_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, out, n, 0);
    if (r <= 0) return false;
    out += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// True when the peer closed: recv returns 0 or a reset.
bool SeesEof(int fd) {
  char c;
  ssize_t r = recv(fd, &c, 1, 0);
  return r == 0 || (r < 0 && errno == ECONNRESET);
}

std::unique_ptr<BootstrapForwarder> StartForwarder(const std::string& upstream) {
  auto fwd = BootstrapForwarder::Listen("127.0.0.1", FreePort());
  EXPECT_TRUE(fwd.ok()) << fwd.status().ToString();
  EXPECT_TRUE((*fwd)->Start(upstream).ok());
  return std::move(fwd).value();
}

TEST(BootstrapForwarderTest, RelaysBytesBothWaysOnManyConnectionsAtOnce) {
  TestServer echo(Echo);
  auto fwd = StartForwarder(echo.address());
  constexpr int kClients = 32;
  constexpr size_t kBytes = 512 * 1024;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; i++) {
    clients.emplace_back([&, i] {
      int fd = Connect(fwd->address());
      if (fd < 0) return;
      std::mt19937 rng(i);
      std::string sent(kBytes, '\0');
      for (auto& c : sent) c = static_cast<char>(rng());
      std::string got(kBytes, '\0');
      // Chunks larger than the relay's buffer, so it must flow-control.
      constexpr size_t kChunk = 100 * 1024;
      bool good = true;
      for (size_t off = 0; off < kBytes && good; off += kChunk) {
        size_t n = std::min(kChunk, kBytes - off);
        std::thread writer(
            [&] { good = send(fd, sent.data() + off, n, MSG_NOSIGNAL) == ssize_t(n); });
        bool read_ok = ReadExactly(fd, got.data() + off, n);
        writer.join();
        good = good && read_ok;
      }
      if (good && got == sent) ok++;
      close(fd);
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kClients);
  EXPECT_TRUE(WaitFor([&] { return fwd->connections() == 0; }, 5000))
      << fwd->connections() << " connections left open";
}

TEST(BootstrapForwarderTest, ClientEofClosesTheUpstreamSide) {
  std::atomic<bool> upstream_saw_eof{false};
  TestServer server([&](int fd) {
    char buf[64];
    std::string got;
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) got.append(buf, static_cast<size_t>(n));
    upstream_saw_eof = got == "last words";
  });
  auto fwd = StartForwarder(server.address());
  int fd = Connect(fwd->address());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, "last words", 10, MSG_NOSIGNAL), 10);
  close(fd);
  EXPECT_TRUE(WaitFor([&] { return upstream_saw_eof.load(); }, 5000))
      << "what the client sent before closing is relayed, then the upstream side closes";
  EXPECT_TRUE(WaitFor([&] { return fwd->connections() == 0; }, 5000));
}

TEST(BootstrapForwarderTest, UpstreamEofClosesTheClientAfterItsBytes) {
  TestServer server([](int fd) { send(fd, "bye", 3, MSG_NOSIGNAL); });
  auto fwd = StartForwarder(server.address());
  int fd = Connect(fwd->address());
  ASSERT_GE(fd, 0);
  char buf[3];
  ASSERT_TRUE(ReadExactly(fd, buf, 3));
  EXPECT_EQ(std::string(buf, 3), "bye");
  EXPECT_TRUE(SeesEof(fd));
  close(fd);
}

TEST(BootstrapForwarderTest, UnreachableUpstreamClosesTheClient) {
  auto fwd = StartForwarder("127.0.0.1:" + std::to_string(FreePort()));
  int fd = Connect(fwd->address());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(SeesEof(fd));
  close(fd);
  EXPECT_TRUE(WaitFor([&] { return fwd->connections() == 0; }, 5000));
  // And it keeps accepting.
  fd = Connect(fwd->address());
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

TEST(BootstrapForwarderTest, StopClosesOpenConnectionsAndIsIdempotent) {
  TestServer echo(Echo);
  auto fwd = StartForwarder(echo.address());
  int fd = Connect(fwd->address());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, "x", 1, MSG_NOSIGNAL), 1);
  char c;
  ASSERT_TRUE(ReadExactly(fd, &c, 1));
  fwd->Stop();
  fwd->Stop();
  EXPECT_TRUE(SeesEof(fd));
  close(fd);
  EXPECT_LT(Connect(fwd->address()), 0) << "nothing listens after Stop";
}

TEST(BootstrapForwarderTest, TakenPortAndBadArguments) {
  auto first = BootstrapForwarder::Listen("127.0.0.1", FreePort());
  ASSERT_TRUE(first.ok());
  int port = std::stoi((*first)->address().substr((*first)->address().rfind(':') + 1));
  auto second = BootstrapForwarder::Listen("127.0.0.1", port);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), base::StatusCode::kIOError);
  EXPECT_NE(second.status().message().find("Address already in use"), std::string::npos)
      << second.status().message();

  EXPECT_EQ(BootstrapForwarder::Listen("example.com", 9092).status().code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_EQ(BootstrapForwarder::Listen("127.0.0.1", 0).status().code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_EQ((*first)->Start("no-port").code(), base::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*first)->Start("127.0.0.1:1").ok());
  EXPECT_EQ((*first)->Start("127.0.0.1:1").code(), base::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tally::app
