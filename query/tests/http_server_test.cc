#include "query/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "http_server_fixture.h"
#include "http_wire.h"
#include "mock_kafka.h"
#include "query/query_service.h"
#include "store/state_store.h"
#include "test_state.h"

namespace tally::query {
namespace {

TEST_F(HttpServerTest, AnswersWithJsonAndStandardHeaders) {
  Client c(server_->bound_port());
  ASSERT_TRUE(c.connected());
  HttpResponse r = c.Get("/v1/posts/7/counts");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r.head;
  EXPECT_EQ(r.body, kPost7);
  EXPECT_EQ(r.Header("Content-Type"), "application/json");
  EXPECT_EQ(r.Header("Content-Length"), std::to_string(r.body.size()));
  EXPECT_EQ(r.Header("Date").size(), 29u) << r.Header("Date");  // "Sun, 06 Nov 1994 08:49:37 GMT"
}

// Every status tally answers goes out with its own reason phrase (504 once
// went out as "504 Unknown").
TEST(HttpWireTest, EveryStatusTallyAnswersHasItsReasonPhrase) {
  for (int status : {200, 202, 400, 401, 404, 405, 413, 429, 500, 501, 503, 504}) {
    EXPECT_STRNE(internal::ReasonPhrase(status), "Unknown") << status;
  }
  EXPECT_STREQ(internal::ReasonPhrase(504), "Gateway Timeout");
}

TEST_F(HttpServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  Client c(server_->bound_port());
  for (int i = 0; i < 50; i++) {
    HttpResponse r = c.Get(i % 2 ? "/v1/posts/7/counts" : "/v1/users/42/counts");
    ASSERT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.body, i % 2 ? kPost7 : R"({"user_id":42,"posts":5,"followers":2,"following":1})");
  }
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  Client c(server_->bound_port());
  std::string batch;
  const std::vector<std::string> targets = {"/v1/posts/7/counts", "/nope",
                                            "/v1/posts/8/counts", "/v1/posts/abc/counts",
                                            "/healthz",           "/v1/posts/7/likes/42"};
  for (const auto& t : targets) batch += "GET " + t + " HTTP/1.1\r\nHost: test\r\n\r\n";
  ASSERT_TRUE(c.Send(batch));
  std::vector<int> statuses;
  std::vector<std::string> bodies;
  for (size_t i = 0; i < targets.size(); i++) {
    HttpResponse r = c.Read();
    statuses.push_back(r.status);
    bodies.push_back(r.body);
  }
  EXPECT_EQ(statuses, (std::vector<int>{200, 404, 200, 400, 200, 200}));
  EXPECT_EQ(bodies[0], kPost7);
  EXPECT_EQ(bodies[2], R"({"post_id":8,"like":0,"repost":0,"comment":0,"view":0})");
  EXPECT_EQ(bodies[4], R"({"ok":true})");
  EXPECT_EQ(bodies[5], R"({"liked":true})");
}

// Many pipelined requests, in one send and in small pieces: each is
// answered in order (an earlier transport, RESTinio, closed the connection
// after 3 answers when handlers answered from inside its read loop).
TEST_F(HttpServerTest, MorePipelinedRequestsThanTheLimitAreAllAnsweredInOrder) {
  for (size_t piece : {size_t{0}, size_t{7}}) {  // 0: one send
    Client c(server_->bound_port());
    std::string batch;
    const int n = 1000;
    for (int i = 0; i < n; i++) {
      batch += "GET " +
               std::string(i % 3 == 0   ? "/v1/posts/7/counts"
                           : i % 3 == 1 ? "/healthz"
                                        : "/v1/posts/8/counts") +
               " HTTP/1.1\r\nHost: test\r\n\r\n";
    }
    // Sent from another thread: the server pushes back (TCP) until answers
    // are read.
    std::thread sender([&c, &batch, piece] {
      if (piece == 0) {
        c.Send(batch);
        return;
      }
      for (size_t i = 0; i < batch.size(); i += piece) {
        if (!c.Send(std::string_view(batch).substr(i, piece))) return;
      }
    });
    int answered = 0;
    for (int i = 0; i < n; i++) {
      HttpResponse r = c.Read();
      const char* want = i % 3 == 0   ? kPost7
                         : i % 3 == 1 ? R"({"ok":true})"
                                      : R"({"post_id":8,"like":0,"repost":0,"comment":0,"view":0})";
      if (r.status != 200 || r.body != want) {
        ADD_FAILURE() << "answer " << i << " of " << n << " (sends of " << piece
                      << " bytes): " << r.status << " " << r.body;
        break;
      }
      answered++;
    }
    sender.join();
    EXPECT_EQ(answered, n) << "sends of " << piece << " bytes";
  }
}

TEST_F(HttpServerTest, MethodNotAllowedCarriesAllow) {
  Client c(server_->bound_port());
  c.Send("DELETE /v1/posts/7/counts HTTP/1.1\r\nHost: test\r\n\r\n");
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.Header("Allow"), "GET");
  EXPECT_EQ(r.head.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u);
  // The connection stays usable.
  EXPECT_EQ(c.Get("/v1/posts/7/counts").body, kPost7);
}

TEST_F(HttpServerTest, GarbageConnectionIsClosedAndOthersAreUnaffected) {
  Client good(server_->bound_port());
  EXPECT_EQ(good.Get("/v1/posts/7/counts").status, 200);
  Client bad(server_->bound_port());
  static constexpr char kTlsHello[] =
      "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n";
  bad.Send(std::string_view(kTlsHello, sizeof(kTlsHello) - 1));
  EXPECT_TRUE(bad.ClosedByPeer());
  EXPECT_EQ(good.Get("/v1/posts/7/counts").body, kPost7);
}

TEST_F(HttpServerTest, BodyOverOneMebibyteIs413AndTheConnectionSurvives) {
  Client c(server_->bound_port());
  std::string body((1 << 20) + 1, ' ');
  c.Send(
      "POST /v1/events HTTP/1.1\r\nHost: test\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n");
  c.Send(body);
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.body.rfind("{\"error\":{\"code\":\"payload_too_large\",", 0), 0u) << r.body;
  EXPECT_EQ(c.Get("/v1/posts/7/counts").body, kPost7);
}

// The server over a service that publishes to an embedded broker.
class HttpServerPublishTest : public HttpServerTest {
 protected:
  void SetUp() override {
    HttpServerTest::SetUp();
    kafka_.CreateTopic("tally.events", 2);
    publisher_ = kafka_.NewPublisher();
    ASSERT_NE(publisher_, nullptr);
  }
  void TearDown() override { server_.reset(); }  // before the publisher and the broker

  // Restarts the server with `so` over a service with the publisher; the
  // broker answers `broker_rtt_ms` late from then on.
  void Serve(ServerOptions so, int broker_rtt_ms) {
    server_.reset();
    QueryServiceOptions o;
    o.store = store_.get();
    o.publisher = publisher_.get();
    service_ = std::make_unique<QueryService>(std::move(o));
    Restart(so);
    ASSERT_EQ(rd_kafka_mock_broker_set_rtt(kafka_.mock(), 1, broker_rtt_ms),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }

  testing::MockKafka kafka_;
  std::unique_ptr<ingest::EventPublisher> publisher_;
};

// A publish handed off the I/O thread whose client resets the connection
// while the broker is slow to acknowledge: its answer comes after the
// connection went, when another connection likely holds the descriptor,
// and is dropped, never written there.
TEST_F(HttpServerPublishTest, AnAnswerForAConnectionThatWentIsNeverWrittenToAnother) {
  ASSERT_NO_FATAL_FAILURE(Serve(ServerOptions{}, /*broker_rtt_ms=*/300));

  const auto post = [](const std::string& body) {
    return "POST /v1/events HTTP/1.1\r\nHost: test\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  const std::string one = R"([{"type":"view","ts":1,"post_id":7}])";
  const std::string two =
      R"([{"type":"view","ts":1,"post_id":7},{"type":"view","ts":2,"post_id":7}])";
  for (int i = 0; i < 3; i++) {
    Client gone(server_->bound_port());
    ASSERT_TRUE(gone.connected());
    gone.Send(post(one));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // read and handed off
    gone.Reset();
    // The next connection waits on a publish of its own when the first
    // one's answer comes.
    Client next(server_->bound_port());
    next.Send(post(two));
    HttpResponse r = next.Read();
    EXPECT_EQ(r.status, 202) << "round " << i << ": " << r.head << r.body;
    EXPECT_EQ(r.body, R"({"accepted":2})") << "round " << i;
  }
}

// A publish that waits on a slow broker longer than the read timeout is
// bound by the handle timeout, and answered.
TEST_F(HttpServerPublishTest, AHandedOffRequestWaitsOutTheHandleTimeoutNotTheReadTimeout) {
  ServerOptions so;
  so.read_timeout_ms = 200;
  so.handle_timeout_ms = 10000;
  ASSERT_NO_FATAL_FAILURE(Serve(so, /*broker_rtt_ms=*/800));

  const std::string body = R"([{"type":"view","ts":1,"post_id":7}])";
  Client c(server_->bound_port());
  c.Send("POST /v1/events HTTP/1.1\r\nHost: test\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body);
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 202) << r.head << r.body;
  EXPECT_EQ(r.body, R"({"accepted":1})");
}

TEST_F(HttpServerTest, HugeAnnouncedBodyClosesTheConnectionUnread) {
  Client c(server_->bound_port());
  c.Send("POST /v1/events HTTP/1.1\r\nHost: test\r\nContent-Length: 104857600\r\n\r\n");
  EXPECT_TRUE(c.ClosedByPeer());
}

TEST_F(HttpServerTest, ConnectionCloseIsHonoured) {
  Client c(server_->bound_port());
  c.Send("GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(c.ClosedByPeer());
}

TEST_F(HttpServerTest, Http10WithoutKeepAliveIsClosedAfterTheAnswer) {
  Client c(server_->bound_port());
  c.Send("GET /healthz HTTP/1.0\r\n\r\n");
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(c.ClosedByPeer());
}

TEST_F(HttpServerTest, TakenPortIsAClearError) {
  ServerOptions so;
  so.listen = "127.0.0.1:" + std::to_string(server_->bound_port());
  auto second = HttpServer::Start(so, service_.get());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), base::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(so.listen), std::string::npos)
      << second.status().ToString();
}

TEST_F(HttpServerTest, BadListenAddressesAreRejected) {
  for (const char* listen :
       {"8080", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:80a", "no.such.host:80"}) {
    ServerOptions so;
    so.listen = listen;
    auto s = HttpServer::Start(so, service_.get());
    ASSERT_FALSE(s.ok()) << listen;
    EXPECT_EQ(s.status().code(), base::StatusCode::kInvalidArgument) << listen;
  }
}

TEST_F(HttpServerTest, ConcurrentClientsAllGetTheirAnswers) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; t++) {
    threads.emplace_back([&] {
      Client c(server_->bound_port());
      for (int i = 0; i < 200; i++) {
        if (c.Get("/v1/posts/counts?ids=7,8").status == 200) ok++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8 * 200);
}

TEST_F(HttpServerTest, SlowAndIdleConnectionsAreClosedAfterTheReadTimeout) {
  ServerOptions so;
  so.read_timeout_ms = 300;
  Restart(so);
  Client idle(server_->bound_port());
  Client half(server_->bound_port());
  ASSERT_TRUE(half.Send("GET /v1/posts/7/counts HTTP/1.1\r\nHost: te"));
  Client drip(server_->bound_port());
  Client good(server_->bound_port());
  auto start = std::chrono::steady_clock::now();
  // One byte every 50 ms never finishes a request within the limit.
  bool drip_closed = false;
  for (int i = 0; i < 40 && !drip_closed; i++) {
    drip_closed = !drip.Send("X") || drip.ClosedByPeer(50);
    EXPECT_EQ(good.Get("/v1/posts/7/counts").body, kPost7);
  }
  EXPECT_TRUE(drip_closed);
  EXPECT_TRUE(idle.ClosedByPeer(3000));
  EXPECT_TRUE(half.ClosedByPeer(3000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(HttpServerTest, RateLimitAnswers429WithRetryAfterAndSparesProbes) {
  ServerOptions so;
  so.rate_limit_per_s = 1;
  so.rate_burst = 3;
  Restart(so);
  Client c(server_->bound_port());
  for (int i = 0; i < 3; i++) EXPECT_EQ(c.Get("/v1/posts/7/counts").status, 200) << i;
  HttpResponse r = c.Get("/v1/posts/7/counts");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.head.rfind("HTTP/1.1 429 Too Many Requests\r\n", 0), 0u) << r.head;
  EXPECT_EQ(r.Header("Retry-After"), "1");
  EXPECT_EQ(r.body.rfind(R"({"error":{"code":"rate_limited","message":")", 0), 0u) << r.body;
  EXPECT_EQ(r.Header("Content-Type"), "application/json");
  EXPECT_EQ(c.Get("/healthz").status, 200);
  EXPECT_EQ(c.Get("/metrics").status, 200);
  EXPECT_EQ(c.Get("/v1/users/42/counts").status, 429);
}

TEST_F(HttpServerTest, NoRateLimitByDefault) {
  Client c(server_->bound_port());
  for (int i = 0; i < 300; i++) ASSERT_EQ(c.Get("/v1/posts/7/counts").status, 200) << i;
}

TEST_F(HttpServerTest, ConnectionsBeyondTheLimitWaitUntilOneCloses) {
  ServerOptions so;
  so.max_connections = 2;
  // One I/O thread: with more, each takes its share of the limit and the
  // kernel picks the thread of a new connection.
  so.threads = 1;
  Restart(so);
  auto a = std::make_unique<Client>(server_->bound_port());
  Client b(server_->bound_port());
  EXPECT_EQ(a->Get("/healthz").status, 200);
  EXPECT_EQ(b.Get("/healthz").status, 200);
  Client c(server_->bound_port());  // in the listen backlog: connected, not served
  ASSERT_TRUE(c.Send("GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"));
  EXPECT_EQ(c.Read(500).status, 0);
  a.reset();
  EXPECT_EQ(c.Read(5000).status, 200);
}

TEST_F(HttpServerTest, BadLimitsAreRejected) {
  ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.max_connections = 0;
  EXPECT_FALSE(HttpServer::Start(so, service_.get()).ok());
  so.max_connections = 10;
  so.read_timeout_ms = 0;
  EXPECT_FALSE(HttpServer::Start(so, service_.get()).ok());
  so.read_timeout_ms = 1000;
  so.rate_limit_per_s = -1;
  EXPECT_FALSE(HttpServer::Start(so, service_.get()).ok());
}

TEST_F(HttpServerTest, StopIsIdempotentAndClosesIdleConnections) {
  Client idle(server_->bound_port());
  EXPECT_EQ(idle.Get("/healthz").status, 200);
  auto start = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(idle.ClosedByPeer());
  server_->Stop();
  Client late(server_->bound_port());
  EXPECT_FALSE(late.connected());
}

}  // namespace
}  // namespace tally::query
