#include "query/peer_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "peer_request.h"
#include "query/http_server.h"
#include "query/query_service.h"
#include "store/state_store.h"
#include "test_state.h"
#include "testing/free_port.h"
#include "testing/wait_for.h"

namespace tally::query {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kPost7[] = R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10})";
constexpr char kUser42[] = R"({"user_id":42,"posts":5,"followers":2,"following":1})";

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

std::string PeerOf(uint16_t port) { return "http://127.0.0.1:" + std::to_string(port); }

// Whether a timed-out answer says it timed out in `phase`. On a loaded
// machine the client's thread may come late, and then it says that it took
// the call after its deadline, or the caller gave up waiting for it: both
// are accepted too.
bool TimedOutWhile(const PeerResponse& r, std::string_view phase) {
  return r.outcome == PeerOutcome::kTimedOut &&
         (r.error.find(phase) != std::string::npos ||
          r.error.find("deadline passed before sending") != std::string::npos ||
          r.error.find("no answer by the deadline") != std::string::npos);
}

// A loopback TCP server that misbehaves on purpose: each accepted
// connection runs `behavior` on a thread of its own.
class RawServer {
 public:
  // One accepted connection, as a behavior sees it.
  class Conn {
   public:
    Conn(int fd, const std::atomic<bool>* stop, RawServer* server)
        : fd_(fd), stop_(stop), server_(server) {}
    // Reads one request head (to its blank line); "" on EOF or stop.
    std::string ReadRequest() {
      size_t end;
      while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
        if (!Fill()) return "";
      }
      std::string head = buf_.substr(0, end + 4);
      buf_.erase(0, end + 4);
      server_->Record(head);
      return head;
    }
    void Send(std::string_view bytes) {
      while (!bytes.empty()) {
        ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n <= 0) return;
        bytes.remove_prefix(static_cast<size_t>(n));
      }
    }
    // Reads a request, then never answers: waits until the server stops
    // (or the client closes).
    void Hold() {
      ReadRequest();
      while (Fill()) {
      }
    }
    bool stopping() const { return stop_->load(); }

   private:
    bool Fill() {
      while (!stop_->load()) {
        pollfd p{fd_, POLLIN, 0};
        int r = ::poll(&p, 1, 20);
        if (r < 0) return false;
        if (r == 0) continue;
        char tmp[4096];
        ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
        if (n <= 0) return false;
        buf_.append(tmp, static_cast<size_t>(n));
        return true;
      }
      return false;
    }
    int fd_;
    const std::atomic<bool>* stop_;
    RawServer* server_;
    std::string buf_;
  };
  using Behavior = std::function<void(Conn&)>;

  explicit RawServer(Behavior behavior) : behavior_(std::move(behavior)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listen_fd_, 64), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~RawServer() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : conns_) t.join();
    ::close(listen_fd_);
  }

  std::string peer() const { return PeerOf(port_); }
  int accepted() const { return accepted_.load(); }
  int finished() const { return finished_.load(); }  // connections whose behavior returned
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  void Record(const std::string& head) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(head);
  }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      accepted_++;
      conns_.emplace_back([this, fd] {
        Conn c(fd, &stop_, this);
        behavior_(c);
        ::close(fd);
        finished_++;
      });
    }
  }

  Behavior behavior_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> finished_{0};
  std::thread acceptor_;
  std::vector<std::thread> conns_;  // touched by the acceptor only, then joined
  std::mutex mu_;
  std::vector<std::string> requests_;
};

std::string Answer(std::string_view body, std::string_view extra_headers = "") {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + std::string(extra_headers) +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

// Answers every request on the connection, after `delay`.
RawServer::Behavior AnswerAll(milliseconds delay = milliseconds(0)) {
  return [delay](RawServer::Conn& c) {
    while (!c.ReadRequest().empty()) {
      std::this_thread::sleep_for(delay);
      c.Send(Answer(R"({"ok":true})"));
    }
  };
}

class PeerClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = testing::OpenTestStore(dir_.path());
    QueryServiceOptions o;
    o.store = store_.get();
    service_ = std::make_unique<QueryService>(std::move(o));
  }

  // A real tally HTTP server over the test state; returns its base URL.
  std::string StartServer(ServerOptions so = {}) {
    so.listen = "127.0.0.1:0";
    so.threads = 1;
    auto server = HttpServer::Start(so, service_.get());
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (!server.ok()) return "";
    servers_.push_back(std::move(server).value());
    return PeerOf(servers_.back()->bound_port());
  }

  std::unique_ptr<PeerClient> NewClient(PeerClientOptions o = {}) {
    auto c = PeerClient::Start(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  testing::TempDir dir_;
  std::unique_ptr<store::StateStore> store_;
  std::unique_ptr<QueryService> service_;
  std::vector<std::unique_ptr<HttpServer>> servers_;
};

TEST_F(PeerClientTest, GetAnswersWithStatusHeadersAndBody) {
  std::string peer = StartServer();
  auto client = NewClient();
  PeerResponse r = client->Get(peer, "/v1/posts/7/counts", {}, PeerClient::In(5000));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, kPost7);
  EXPECT_EQ(r.Header("Content-Type"), "application/json");
  EXPECT_EQ(r.Header("content-length"), std::to_string(r.body.size()));
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(r.ToStatus().ok());

  // Any HTTP status is an answer.
  r = client->Get(peer, "/nope", {}, PeerClient::In(5000));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.status, 404);
  r = client->Get(peer, "/v1/posts/01/counts", {}, PeerClient::In(5000));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("bad_id"), std::string::npos) << r.body;
  r = client->Get(peer, "/v1/posts/counts?ids=7,8", {}, PeerClient::In(5000));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, std::string(R"({"posts":[)") + kPost7 +
                        R"(,{"post_id":8,"like":0,"repost":0,"comment":0,"view":0}]})");
}

TEST_F(PeerClientTest, SendsHostTheExtraHeadersAndTheRequestsOwn) {
  RawServer raw(AnswerAll());
  PeerClientOptions o;
  o.extra_headers = {{"X-Tally-Forwarded", "m1"}};
  auto client = NewClient(o);
  PeerResponse r = client->Get(raw.peer(), "/v1/users/42/unread", {{"X-Request-Id", "abc"}},
                               PeerClient::In(5000));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.body, R"({"ok":true})");
  ASSERT_EQ(raw.requests().size(), 1u);
  EXPECT_EQ(raw.requests()[0],
            "GET /v1/users/42/unread HTTP/1.1\r\nHost: 127.0.0.1:" + raw.peer().substr(17) +
                "\r\nX-Tally-Forwarded: m1\r\nX-Request-Id: abc\r\n\r\n");
}

TEST_F(PeerClientTest, KeepAliveServesManyRequestsOnOneConnection) {
  std::string peer = StartServer();
  auto client = NewClient();
  for (int i = 0; i < 2000; i++) {
    PeerResponse r = client->Get(peer, i % 2 ? "/v1/posts/7/counts" : "/v1/users/42/counts", {},
                                 PeerClient::In(5000));
    ASSERT_TRUE(r.ok()) << i << ": " << r.error;
    ASSERT_EQ(r.body, i % 2 ? kPost7 : kUser42) << i;
  }
  PeerClientStats s = client->stats();
  EXPECT_EQ(s.requests, 2000u);
  EXPECT_EQ(s.ok, 2000u);
  EXPECT_EQ(s.connects, 1u);
  EXPECT_EQ(s.reused, 1999u);
  EXPECT_EQ(s.open_connections, 1u);

  // The server's side of it, counted by a server that counts.
  RawServer raw(AnswerAll());
  for (int i = 0; i < 200; i++) {
    ASSERT_TRUE(client->Get(raw.peer(), "/healthz", {}, PeerClient::In(5000)).ok()) << i;
  }
  EXPECT_EQ(raw.accepted(), 1);
  EXPECT_EQ(raw.requests().size(), 200u);
}

TEST_F(PeerClientTest, ConcurrentCallersShareABoundedPool) {
  std::string peer = StartServer();
  for (int io_threads : {1, 2}) {
    PeerClientOptions o;
    o.io_threads = io_threads;  // 8 connections per peer on each
    auto client = NewClient(o);
    constexpr int kThreads = 8, kEach = 300;
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; i++) {
          bool post = (i + t) % 2 == 0;
          PeerResponse r = client->Get(peer, post ? "/v1/posts/7/counts" : "/v1/users/42/counts",
                                       {}, PeerClient::In(10000));
          if (!r.ok() || r.body != (post ? kPost7 : kUser42)) wrong++;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(wrong.load(), 0) << io_threads;
    PeerClientStats s = client->stats();
    EXPECT_EQ(s.ok, uint64_t{kThreads * kEach}) << io_threads;
    EXPECT_LE(s.connects, 8u * static_cast<unsigned>(io_threads));
    EXPECT_LE(s.open_connections, 8u * static_cast<unsigned>(io_threads));
  }
}

TEST_F(PeerClientTest, GetAllFansOutToSeveralServersAndKeepsTheOrder) {
  std::vector<std::string> peers = {StartServer(), StartServer(), StartServer()};
  auto client = NewClient();
  std::vector<PeerRequest> requests;
  for (int round = 0; round < 4; round++) {
    for (const auto& p : peers) {
      requests.push_back({p, round % 2 ? "/v1/posts/7/counts" : "/v1/users/42/counts", {}});
    }
  }
  std::vector<PeerResponse> answers = client->GetAll(requests, PeerClient::In(5000));
  ASSERT_EQ(answers.size(), requests.size());
  for (size_t i = 0; i < answers.size(); i++) {
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].error;
    EXPECT_EQ(answers[i].body, (i / 3) % 2 ? kPost7 : kUser42) << i;
  }
  EXPECT_TRUE(client->GetAll({}, PeerClient::In(5000)).empty());
}

TEST_F(PeerClientTest, GetAllAsksSlowPeersInParallel) {
  RawServer a(AnswerAll(milliseconds(300))), b(AnswerAll(milliseconds(300))),
      c(AnswerAll(milliseconds(300)));
  auto client = NewClient();
  auto start = Clock::now();
  std::vector<PeerResponse> answers = client->GetAll(
      {{a.peer(), "/x", {}}, {b.peer(), "/x", {}}, {c.peer(), "/x", {}}, {a.peer(), "/y", {}}},
      PeerClient::In(5000));
  int64_t took = MsSince(start);
  for (const auto& r : answers) EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_GE(took, 300);
  EXPECT_LT(took, 900) << "asked one after the other";  // that takes 1200
  EXPECT_EQ(a.accepted(), 2);  // two requests to a at once: two connections
}

TEST_F(PeerClientTest, ConnectionsPerPeerAreBounded) {
  RawServer raw(AnswerAll(milliseconds(20)));
  PeerClientOptions o;
  o.max_connections_per_peer = 2;
  auto client = NewClient(o);
  std::vector<PeerRequest> requests(10, PeerRequest{raw.peer(), "/x", {}});
  auto start = Clock::now();
  std::vector<PeerResponse> answers = client->GetAll(requests, PeerClient::In(5000));
  for (const auto& r : answers) EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(raw.accepted(), 2);
  EXPECT_GE(MsSince(start), 100);  // 10 requests, 2 at a time, 20 ms each
  EXPECT_EQ(client->stats().reused, 8u);

  // A request that waits for a connection is bounded by its deadline too.
  requests.assign(4, PeerRequest{raw.peer(), "/x", {}});
  answers = client->GetAll(requests, PeerClient::In(30));
  int timed_out = 0;
  for (const auto& r : answers) {
    if (r.outcome == PeerOutcome::kTimedOut) timed_out++;
  }
  EXPECT_GE(timed_out, 2) << "only 2 of 4 can be in flight within 30 ms of 20 ms answers";
}

// The peer closes a kept-alive connection after answering (an idle
// timeout, a restart): the next request meets the closed connection and is
// sent again on a new one, transparently.
TEST_F(PeerClientTest, AConnectionThePeerClosedIsReplacedTransparently) {
  RawServer raw([](RawServer::Conn& c) {
    if (!c.ReadRequest().empty()) c.Send(Answer(R"({"n":1})"));
  });
  auto client = NewClient();
  for (int i = 0; i < 5; i++) {
    PeerResponse r = client->Get(raw.peer(), "/x", {}, PeerClient::In(5000));
    ASSERT_TRUE(r.ok()) << i << ": " << r.error;
    EXPECT_EQ(r.body, R"({"n":1})");
    // Once the server has closed it, the pooled connection is stale.
    ASSERT_TRUE(::tally::testing::WaitFor([&] { return raw.finished() == i + 1; }, 5000));
  }
  PeerClientStats s = client->stats();
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.connects, 5u);
  // Each stale connection is found by a retry or, if it sat idle a second,
  // by the check before use.
  EXPECT_EQ(s.retries + s.stale_closed, 4u);
  EXPECT_EQ(raw.accepted(), 5);
}

// The peer closes a pooled connection as the request arrives, unanswered
// (its idle timeout racing the request): the request is sent again, once,
// on a fresh connection. If that one fails too, the request fails.
TEST_F(PeerClientTest, ARequestLostOnAPooledConnectionIsSentAgainOnce) {
  std::atomic<int> connection{0};
  std::atomic<bool> answer_second{true};
  RawServer raw([&](RawServer::Conn& c) {
    int n = connection++;
    if (n == 0) {  // answers one request, then drops the next
      if (!c.ReadRequest().empty()) c.Send(Answer(R"({"n":1})"));
      c.ReadRequest();
    } else if (answer_second) {
      while (!c.ReadRequest().empty()) c.Send(Answer(R"({"n":2})"));
    } else {
      c.ReadRequest();
    }
  });
  auto client = NewClient();
  ASSERT_TRUE(client->Get(raw.peer(), "/x", {}, PeerClient::In(5000)).ok());
  PeerResponse r = client->Get(raw.peer(), "/x", {}, PeerClient::In(5000));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.body, R"({"n":2})");
  EXPECT_EQ(client->stats().retries, 1u);
  EXPECT_EQ(raw.accepted(), 2);
  EXPECT_EQ(raw.requests().size(), 3u);

  // Again, with the fresh connection dropping the request as well.
  connection = 0;
  answer_second = false;
  auto client2 = NewClient();
  ASSERT_TRUE(client2->Get(raw.peer(), "/x", {}, PeerClient::In(5000)).ok());
  r = client2->Get(raw.peer(), "/x", {}, PeerClient::In(5000));
  EXPECT_EQ(r.outcome, PeerOutcome::kFailed) << r.error;
  EXPECT_EQ(client2->stats().retries, 1u);
  EXPECT_EQ(raw.accepted(), 4);
}

// The same against the real server's idle timeout: the client notices the
// close on its own (the sweep every second) and opens a new connection for
// the next request.
TEST_F(PeerClientTest, TheServersIdleTimeoutIsTransparent) {
  ServerOptions so;
  so.read_timeout_ms = 200;  // checked every 100 ms
  std::string peer = StartServer(so);
  auto client = NewClient();
  ASSERT_TRUE(client->Get(peer, "/v1/posts/7/counts", {}, PeerClient::In(5000)).ok());
  // The counters move one after the other on the client's thread: wait
  // for both (the connection counted closed, and gone from the pool).
  ASSERT_TRUE(::tally::testing::WaitFor(
      [&] {
        auto st = client->stats();
        return st.retries + st.stale_closed == 1 && st.open_connections == 0;
      },
      10000))
      << "retries " << client->stats().retries << ", stale closed " << client->stats().stale_closed
      << ", open " << client->stats().open_connections;
  PeerResponse r = client->Get(peer, "/v1/posts/7/counts", {}, PeerClient::In(5000));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.body, kPost7);
  EXPECT_EQ(client->stats().connects, 2u);
  EXPECT_EQ(client->stats().failed, 0u);
}

// A fresh connection closed before an answer is not retried: the request
// reached the peer and the peer chose not to answer.
TEST_F(PeerClientTest, AFreshConnectionClosedWithoutAnswerFails) {
  RawServer raw([](RawServer::Conn& c) { c.ReadRequest(); });
  auto client = NewClient();
  PeerResponse r = client->Get(raw.peer(), "/x", {}, PeerClient::In(5000));
  EXPECT_EQ(r.outcome, PeerOutcome::kFailed) << r.error;
  EXPECT_NE(r.error.find("before an answer"), std::string::npos) << r.error;
  EXPECT_EQ(r.ToStatus().code(), base::StatusCode::kUnavailable);
  EXPECT_EQ(raw.accepted(), 1);
  EXPECT_EQ(client->stats().retries, 0u);
}

TEST_F(PeerClientTest, AnAnswerSayingCloseIsNotReused) {
  RawServer raw([](RawServer::Conn& c) {
    while (!c.ReadRequest().empty()) c.Send(Answer("{}", "Connection: close\r\n"));
  });
  auto client = NewClient();
  for (int i = 0; i < 3; i++) {
    ASSERT_TRUE(client->Get(raw.peer(), "/x", {}, PeerClient::In(5000)).ok());
  }
  EXPECT_EQ(raw.accepted(), 3);
  EXPECT_EQ(client->stats().retries, 0u);
  EXPECT_EQ(client->stats().open_connections, 0u);
}

TEST_F(PeerClientTest, ChunkedLargeAndBadAnswers) {
  RawServer raw([](RawServer::Conn& c) {
    std::string head;
    while (!(head = c.ReadRequest()).empty()) {
      if (head.find("/chunked") != std::string::npos) {
        c.Send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
      } else if (head.find("/big") != std::string::npos) {
        c.Send(Answer(std::string(2000, 'x')));
      } else {
        c.Send("not http at all\r\n\r\n");
      }
    }
  });
  PeerClientOptions o;
  o.max_body_bytes = 1000;
  auto client = NewClient(o);
  PeerResponse r = client->Get(raw.peer(), "/chunked", {}, PeerClient::In(5000));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.body, "abc");
  r = client->Get(raw.peer(), "/big", {}, PeerClient::In(5000));
  EXPECT_EQ(r.outcome, PeerOutcome::kFailed);
  EXPECT_EQ(r.body, "");
  r = client->Get(raw.peer(), "/junk", {}, PeerClient::In(5000));
  EXPECT_EQ(r.outcome, PeerOutcome::kFailed);
  EXPECT_NE(r.error.find("bad answer"), std::string::npos) << r.error;
}

TEST_F(PeerClientTest, ConnectionRefusedFailsFast) {
  int port = ::tally::testing::FreePort();
  ASSERT_GT(port, 0);
  auto client = NewClient();
  auto start = Clock::now();
  PeerResponse r = client->Get(PeerOf(static_cast<uint16_t>(port)), "/v1/posts/7/counts", {},
                               PeerClient::In(5000));
  EXPECT_EQ(r.outcome, PeerOutcome::kConnectFailed) << r.error;
  EXPECT_LT(MsSince(start), 500);
  EXPECT_NE(r.error.find(PeerOf(static_cast<uint16_t>(port))), std::string::npos) << r.error;
  EXPECT_EQ(client->stats().connect_failed, 1u);
  EXPECT_EQ(client->stats().open_connections, 0u);
}

TEST_F(PeerClientTest, APeerThatNeverAnswersTimesOutAtTheDeadline) {
  RawServer raw([](RawServer::Conn& c) { c.Hold(); });
  auto client = NewClient();
  for (int deadline_ms : {100, 300}) {
    // The best of three, so a test machine's hiccup is not taken for a
    // late deadline (a client that waits for anything else is late in all).
    int64_t best = INT64_MAX;
    for (int attempt = 0; attempt < 3; attempt++) {
      auto start = Clock::now();
      PeerResponse r = client->Get(raw.peer(), "/x", {}, PeerClient::In(deadline_ms));
      int64_t took = MsSince(start);
      EXPECT_TRUE(TimedOutWhile(r, "deadline passed while awaiting the answer")) << r.error;
      EXPECT_EQ(r.ToStatus().code(), base::StatusCode::kDeadlineExceeded);
      EXPECT_GE(took, deadline_ms);
      best = std::min(best, took);
    }
    EXPECT_LE(best, deadline_ms + 100);
  }
  // The connections of timed-out requests are closed: an answer could still
  // come on them.
  EXPECT_TRUE(
      ::tally::testing::WaitFor([&] { return client->stats().open_connections == 0; }, 5000));
  EXPECT_TRUE(::tally::testing::WaitFor([&] { return raw.finished() == raw.accepted(); }, 5000));
}

// A listener whose accept queue is full drops SYNs: a connect there hangs
// as it would to a blackholed host.
TEST_F(PeerClientTest, ABlackholedConnectTimesOutAtTheDeadline) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 0), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  // Fill the queue, then check that a further connect really hangs.
  std::vector<int> fillers;
  bool hangs = false;
  for (int i = 0; i < 4 && !hangs; i++) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    fillers.push_back(fd);
    ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    pollfd p{fd, POLLOUT, 0};
    hangs = ::poll(&p, 1, 200) == 0;
  }
  if (hangs) {
    auto client = NewClient();
    int64_t best = INT64_MAX;
    for (int attempt = 0; attempt < 3; attempt++) {  // best of three, as above
      auto start = Clock::now();
      PeerResponse r = client->Get(PeerOf(ntohs(addr.sin_port)), "/x", {}, PeerClient::In(300));
      int64_t took = MsSince(start);
      EXPECT_TRUE(TimedOutWhile(r, "deadline passed while connecting")) << r.error;
      EXPECT_GE(took, 300);
      best = std::min(best, took);
    }
    EXPECT_LE(best, 400);
    EXPECT_TRUE(
        ::tally::testing::WaitFor([&] { return client->stats().open_connections == 0; }, 1000));
  }
  for (int fd : fillers) ::close(fd);
  ::close(listener);
  if (!hangs) GTEST_SKIP() << "this kernel does not drop SYNs at a full accept queue";
}

// Requests to a dead peer hold nothing the others need: a batch gets the
// live peers' answers at once and the dead one's at the deadline, and
// other callers meanwhile are answered as fast as ever.
TEST_F(PeerClientTest, ADeadPeerCostsOnlyItsOwnRequests) {
  std::string live = StartServer();
  RawServer dead([](RawServer::Conn& c) { c.Hold(); });
  auto client = NewClient();
  std::atomic<bool> stop{false};
  std::vector<std::thread> stuck;
  for (int t = 0; t < 12; t++) {  // all the dead peer's connections, and waiters
    stuck.emplace_back([&] {
      while (!stop) client->Get(dead.peer(), "/x", {}, PeerClient::In(1000));
    });
  }
  ASSERT_TRUE(::tally::testing::WaitFor([&] { return dead.accepted() == 8; }, 5000));
  // A live request queued behind the dead peer's would take up to a second.
  int64_t slowest = 0;
  for (int i = 0; i < 200; i++) {
    auto start = Clock::now();
    PeerResponse r = client->Get(live, "/v1/posts/7/counts", {}, PeerClient::In(5000));
    ASSERT_TRUE(r.ok()) << r.error;
    slowest = std::max(slowest, MsSince(start));
  }
  EXPECT_LT(slowest, 800);
  auto start = Clock::now();
  std::vector<PeerResponse> answers = client->GetAll(
      {{live, "/v1/posts/7/counts", {}}, {dead.peer(), "/x", {}}, {live, "/healthz", {}}},
      PeerClient::In(300));
  EXPECT_LE(MsSince(start), 600);
  EXPECT_TRUE(answers[0].ok()) << answers[0].error;
  EXPECT_EQ(answers[1].outcome, PeerOutcome::kTimedOut);
  EXPECT_TRUE(answers[2].ok()) << answers[2].error;
  stop = true;
  for (auto& t : stuck) t.join();
}

TEST_F(PeerClientTest, StopEndsRequestsInFlightAtOnce) {
  RawServer raw([](RawServer::Conn& c) { c.Hold(); });
  PeerClientOptions o;
  o.max_connections_per_peer = 4;  // 4 sent, 4 waiting for a connection
  auto client = NewClient(o);
  std::vector<std::future<PeerResponse>> calls;
  for (int i = 0; i < 8; i++) {
    calls.push_back(std::async(std::launch::async, [&] {
      return client->Get(raw.peer(), "/x", {}, PeerClient::In(30000));
    }));
  }
  std::promise<std::vector<PeerResponse>> async_answers;
  client->GetAllAsync({{raw.peer(), "/y", {}}}, PeerClient::In(30000),
                      [&](std::vector<PeerResponse> r) { async_answers.set_value(std::move(r)); });
  ASSERT_TRUE(::tally::testing::WaitFor([&] { return raw.requests().size() == 4; }, 5000));
  ASSERT_TRUE(::tally::testing::WaitFor([&] { return client->stats().requests == 9; }, 5000));
  auto start = Clock::now();
  client->Stop();
  EXPECT_LT(MsSince(start), 2000);  // the requests' deadlines are 30 s away
  for (auto& f : calls) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(1)), std::future_status::ready);
    PeerResponse r = f.get();
    EXPECT_EQ(r.outcome, PeerOutcome::kStopped) << r.error;
  }
  auto a = async_answers.get_future().get();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].outcome, PeerOutcome::kStopped);

  // After the stop: answered at once, on the caller's thread.
  PeerResponse r = client->Get(raw.peer(), "/x", {}, PeerClient::In(30000));
  EXPECT_EQ(r.outcome, PeerOutcome::kStopped);
  EXPECT_EQ(r.ToStatus().code(), base::StatusCode::kAborted);
  bool called = false;
  client->GetAllAsync({{raw.peer(), "/x", {}}}, PeerClient::In(30000),
                      [&](std::vector<PeerResponse> r) {
                        called = r.size() == 1 && r[0].outcome == PeerOutcome::kStopped;
                      });
  EXPECT_TRUE(called);
  client->Stop();  // idempotent
  EXPECT_TRUE(::tally::testing::WaitFor([&] { return raw.finished() == 4; }, 5000))
      << "the client's connections were not closed";
}

// Destroying a client with idle connections, requests on the wire and
// requests waiting for a connection leaks nothing (the sanitizer build
// checks) and ends every request.
TEST_F(PeerClientTest, DestroyingTheClientEndsEverything) {
  std::string live = StartServer();
  RawServer raw([](RawServer::Conn& c) { c.Hold(); });
  std::atomic<int> ended{0};
  {
    PeerClientOptions o;
    o.max_connections_per_peer = 1;
    auto client = NewClient(o);
    ASSERT_TRUE(client->Get(live, "/healthz", {}, PeerClient::In(5000)).ok());  // one idle
    for (int i = 0; i < 3; i++) {
      client->GetAllAsync({{raw.peer(), "/x", {}}, {"http://localhost:1", "/x", {}}},
                          PeerClient::In(30000), [&](std::vector<PeerResponse> r) {
                            if (r[0].outcome == PeerOutcome::kStopped) ended++;
                          });
    }
    ASSERT_TRUE(::tally::testing::WaitFor([&] { return raw.requests().size() == 1; }, 5000));
  }
  EXPECT_EQ(ended.load(), 3);
}

TEST_F(PeerClientTest, AsyncCallsAnswerOnTheClientsThread) {
  std::string peer = StartServer();
  auto client = NewClient();
  std::promise<std::pair<std::vector<PeerResponse>, std::thread::id>> got;
  client->GetAllAsync({{peer, "/v1/posts/7/counts", {}}, {peer, "/v1/users/42/counts", {}}},
                      PeerClient::In(5000), [&](std::vector<PeerResponse> r) {
                        got.set_value({std::move(r), std::this_thread::get_id()});
                      });
  auto [answers, thread] = got.get_future().get();
  EXPECT_NE(thread, std::this_thread::get_id());
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].body, kPost7);
  EXPECT_EQ(answers[1].body, kUser42);
}

TEST_F(PeerClientTest, AHostNameIsResolved) {
  std::string peer = StartServer();
  auto client = NewClient();
  // localhost may resolve to ::1 first, where nothing listens: the next
  // address is tried.
  PeerResponse r = client->Get("http://localhost:" + peer.substr(17) + "/", "/v1/posts/7/counts",
                               {}, PeerClient::In(5000));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.body, kPost7);
  r = client->Get("http://no-such-host.invalid:80", "/x", {}, PeerClient::In(5000));
  EXPECT_EQ(r.outcome, PeerOutcome::kConnectFailed) << r.error;
}

TEST_F(PeerClientTest, MalformedRequestsSendNothing) {
  RawServer raw(AnswerAll());
  auto client = NewClient();
  for (std::string peer : {"127.0.0.1:80", "http://", "http://:80", "http://h:0", "http://h:99999",
                           "http://h:80/path", "https://h:80", "http://[::1", "http://a b:80"}) {
    PeerResponse r = client->Get(peer, "/x", {}, PeerClient::In(5000));
    EXPECT_EQ(r.outcome, PeerOutcome::kInvalid) << peer;
    EXPECT_EQ(r.ToStatus().code(), base::StatusCode::kInvalidArgument) << peer;
  }
  for (std::string target : {"", "x", "/a b", "/a\r\nX: y"}) {
    EXPECT_EQ(client->Get(raw.peer(), target, {}, PeerClient::In(5000)).outcome,
              PeerOutcome::kInvalid)
        << target;
  }
  EXPECT_EQ(client->Get(raw.peer(), "/x", {{"X-A", "1\r\nX-B: 2"}}, PeerClient::In(5000)).outcome,
            PeerOutcome::kInvalid);
  EXPECT_EQ(client->Get(raw.peer(), "/x", {{"Bad Name", "1"}}, PeerClient::In(5000)).outcome,
            PeerOutcome::kInvalid);
  // A deadline already past sends nothing either.
  EXPECT_EQ(client->Get(raw.peer(), "/x", {}, Clock::now() - milliseconds(1)).outcome,
            PeerOutcome::kTimedOut);
  EXPECT_EQ(raw.accepted(), 0);
  EXPECT_EQ(client->stats().connects, 0u);

  PeerClientOptions o;
  o.extra_headers = {{"X-Tally-Forwarded", "a\nb"}};
  EXPECT_EQ(PeerClient::Start(o).status().code(), base::StatusCode::kInvalidArgument);
  o = {};
  o.max_connections_per_peer = 0;
  EXPECT_EQ(PeerClient::Start(o).status().code(), base::StatusCode::kInvalidArgument);
}

TEST(PeerRequestTest, ParsesPeerAddresses) {
  struct Case {
    std::string peer, host, port, authority;
  };
  for (const Case& c : std::vector<Case>{
           {"http://127.0.0.1:8080", "127.0.0.1", "8080", "127.0.0.1:8080"},
           {"http://member-2.tally:18080/", "member-2.tally", "18080", "member-2.tally:18080"},
           {"http://host", "host", "80", "host"},
           {"http://[::1]:9000", "::1", "9000", "[::1]:9000"},
           {"http://[fe80::1]", "fe80::1", "80", "[fe80::1]"},
       }) {
    internal::PeerAddress a;
    std::string error;
    ASSERT_TRUE(internal::ParsePeer(c.peer, &a, &error)) << c.peer << ": " << error;
    EXPECT_EQ(a.host, c.host) << c.peer;
    EXPECT_EQ(a.port, c.port) << c.peer;
    EXPECT_EQ(a.authority, c.authority) << c.peer;
    EXPECT_EQ(error, "");
  }
  for (std::string bad : {"", "127.0.0.1:80", "http://", "http:///", "http://:80", "http://h:",
                          "http://h:0", "http://h:65536", "http://h:123456", "http://h:8a",
                          "http://h:80/path", "http://u@h:80", "https://h:80", "http://[::1",
                          "http://[::1]x", "http://[::1]:", "http://a b:80", "HTTP://h:80"}) {
    internal::PeerAddress a;
    std::string error;
    EXPECT_FALSE(internal::ParsePeer(bad, &a, &error)) << bad;
    EXPECT_NE(error.find("is not http://HOST:PORT"), std::string::npos) << bad;
  }
}

TEST(PeerRequestTest, BuildsTheRequestBytes) {
  internal::PeerAddress a{"10.0.0.7", "8080", "10.0.0.7:8080"};
  std::string wire = "stale";
  EXPECT_EQ(internal::BuildRequest(
                a, "X-Tally-Forwarded: m1\r\n",
                {"http://10.0.0.7:8080", "/v1/posts/counts?ids=1,2", {{"A", "b"}}}, &wire),
            "");
  EXPECT_EQ(wire,
            "GET /v1/posts/counts?ids=1,2 HTTP/1.1\r\nHost: 10.0.0.7:8080\r\n"
            "X-Tally-Forwarded: m1\r\nA: b\r\n\r\n");
  EXPECT_NE(internal::BuildRequest(a, "", {"", "/a\tb", {}}, &wire), "");
  EXPECT_NE(internal::BuildRequest(a, "", {"", "*", {}}, &wire), "");
  EXPECT_NE(internal::BuildRequest(a, "", {"", "/", {{"A:", "b"}}}, &wire), "");
  EXPECT_NE(internal::BuildRequest(a, "", {"", "/", {{"A", std::string("b\0c", 3)}}}, &wire), "");
  EXPECT_EQ(internal::CheckHeader("X-Tally-Member", "m1, m2 \t"), "");
}

}  // namespace
}  // namespace tally::query
