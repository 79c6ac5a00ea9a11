#include "query/query_service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "fixed_routing.h"
#include "ingest/event_publisher.h"
#include "mock_kafka.h"
#include "query/watermarks.h"
#include "schemas/event.h"
#include "store/state_store.h"
#include "test_state.h"

namespace tally::query {
namespace {

using testing::FillTestState;
using testing::TempDir;

Request Get(std::string_view target) { return Request{"GET", target, {}, false, {}}; }
Request Post(std::string_view target, std::string_view body = {}) {
  return Request{"POST", target, body, false, {}};
}

// The error code of an error body, after checking the body's exact shape.
std::string ErrorCode(const Response& r) {
  const std::string prefix = "{\"error\":{\"code\":\"";
  EXPECT_EQ(r.body.rfind(prefix, 0), 0u) << r.body;
  EXPECT_EQ(r.body.substr(r.body.size() < 2 ? 0 : r.body.size() - 2), "}}") << r.body;
  size_t end = r.body.find('"', prefix.size());
  if (end == std::string::npos) return "";
  EXPECT_EQ(r.body.compare(end, 13, "\",\"message\":\""), 0) << r.body;
  EXPECT_EQ(r.body.find('\n'), std::string::npos) << r.body;
  return r.body.substr(prefix.size(), end - prefix.size());
}

class QueryServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = testing::OpenTestStore(dir_.path());
    MakeService(nullptr);
  }

  void MakeService(ingest::EventPublisher* publisher) {
    QueryServiceOptions o;
    o.store = store_.get();
    o.publisher = publisher;
    o.info = ServiceInfo{"0.1.0",
                         "127.0.0.1:9092",
                         {"tally.events", "more\"events"},
                         "/var/lib/tally",
                         testing::kTestPartitions};
    o.ready = [this] { return ready_.load(); };
    service_ = std::make_unique<QueryService>(std::move(o));
  }

  // An answer that must be 200 JSON; returns its body.
  std::string Ok(std::string_view target) {
    Response r = service_->Handle(Get(target));
    EXPECT_EQ(r.status, 200) << target << " -> " << r.body;
    EXPECT_EQ(r.content_type, kJsonContentType) << target;
    EXPECT_TRUE(r.allow.empty());
    return r.body;
  }

  TempDir dir_;
  std::unique_ptr<store::StateStore> store_;
  std::atomic<bool> ready_{true};
  std::unique_ptr<QueryService> service_;
};

// A member's forwarded read is answered while this member is not ready (it
// serves the partition the directory says it does), but only a member's,
// proven by its key: a client that sends X-Tally-Forwarded itself gets the
// 503 any client gets.
TEST_F(QueryServiceTest, OnlyAMembersForwardedReadSkipsTheReadinessCheck) {
  class Routing : public testing::FixedRouting {
   public:
    using FixedRouting::FixedRouting;
    bool FromMember(std::string_view forwarded, std::string_view authorization) const override {
      return forwarded == "b" && authorization == "TallyMember k";
    }
  };
  Routing routing("a");
  for (uint32_t p = 0; p < testing::kTestPartitions; p++) routing.Set(p, "a");
  QueryServiceOptions o;
  o.store = store_.get();
  o.cluster = &routing;
  o.ready = [] { return false; };
  QueryService service(std::move(o));
  Request forged = Get("/v1/posts/7/counts");
  forged.forwarded = "b";
  EXPECT_EQ(service.Handle(forged).status, 503);
  Request wrong_key = forged;
  wrong_key.authorization = "TallyMember nope";
  EXPECT_EQ(service.Handle(wrong_key).status, 503);
  Request peer = forged;
  peer.authorization = "TallyMember k";
  Response r = service.Handle(peer);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10})");
}

TEST_F(QueryServiceTest, PostCountsHaveTheContractShape) {
  EXPECT_EQ(Ok("/v1/posts/7/counts"), R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10})");
  EXPECT_EQ(Ok("/v1/posts/8/counts"), R"({"post_id":8,"like":0,"repost":0,"comment":0,"view":0})");
  EXPECT_EQ(Ok("/v1/posts/9223372036854775807/counts"),
            R"({"post_id":9223372036854775807,"like":1,"repost":0,"comment":0,"view":0})");
}

TEST_F(QueryServiceTest, UnknownQueryParametersAreIgnored) {
  EXPECT_EQ(Ok("/v1/posts/7/counts?pretty=1&x"),
            R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10})");
}

TEST_F(QueryServiceTest, BatchAnswersInTheOrderAskedWithDuplicates) {
  EXPECT_EQ(Ok("/v1/posts/counts?ids=7,1,7"),
            R"({"posts":[{"post_id":7,"like":3,"repost":2,"comment":1,"view":10},)"
            R"({"post_id":1,"like":0,"repost":0,"comment":0,"view":0},)"
            R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10}]})");
  EXPECT_EQ(
      Ok("/v1/posts/counts?ids=9223372036854775807"),
      R"({"posts":[{"post_id":9223372036854775807,"like":1,"repost":0,"comment":0,"view":0}]})");
  // Percent-encoded commas, as Python's urlencode sends them; other parameters ignored.
  EXPECT_EQ(Ok("/v1/posts/counts?x=1&ids=7%2C8"),
            R"({"posts":[{"post_id":7,"like":3,"repost":2,"comment":1,"view":10},)"
            R"({"post_id":8,"like":0,"repost":0,"comment":0,"view":0}]})");
}

TEST_F(QueryServiceTest, BatchTakesUpTo200Ids) {
  std::string target = "/v1/posts/counts?ids=";
  for (int i = 1; i <= 200; i++) {
    if (i > 1) target += ',';
    target += std::to_string(i);
  }
  std::string body = Ok(target);
  EXPECT_EQ(body.rfind("{\"posts\":[{\"post_id\":1,", 0), 0u);
  EXPECT_NE(body.find("{\"post_id\":7,\"like\":3,"), std::string::npos);
  EXPECT_NE(body.find("{\"post_id\":200,\"like\":0,\"repost\":0,\"comment\":0,\"view\":0}]}"),
            std::string::npos);

  Response r = service_->Handle(Get(target + ",201"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCode(r), "bad_request");
  EXPECT_NE(r.body.find("more than 200 ids"), std::string::npos) << r.body;
}

TEST_F(QueryServiceTest, UserCountsAndUnread) {
  EXPECT_EQ(Ok("/v1/users/42/counts"), R"({"user_id":42,"posts":5,"followers":2,"following":1})");
  EXPECT_EQ(Ok("/v1/users/43/counts"), R"({"user_id":43,"posts":0,"followers":0,"following":0})");
  EXPECT_EQ(Ok("/v1/users/42/unread"),
            R"({"user_id":42,"mention":1,"comment":2,"like":3,"repost":4,"dm":5,"follower":6,)"
            R"("notice":0,"feed":0,"red_dots":{}})");
  EXPECT_EQ(Ok("/v1/users/43/unread"),
            R"({"user_id":43,"mention":0,"comment":0,"like":0,"repost":0,"dm":0,"follower":0,)"
            R"("notice":0,"feed":0,"red_dots":{}})");
}

TEST_F(QueryServiceTest, LikesAreExact) {
  EXPECT_EQ(Ok("/v1/posts/7/likes/42"), R"({"liked":true})");
  EXPECT_EQ(Ok("/v1/posts/7/likes/43"), R"({"liked":false})");
  EXPECT_EQ(Ok("/v1/posts/42/likes/7"), R"({"liked":false})");
}

TEST_F(QueryServiceTest, InfoIsEscapedJson) {
  EXPECT_EQ(
      Ok("/v1/info"),
      R"({"version":"0.1.0","brokers":"127.0.0.1:9092","input_topics":["tally.events","more\"events"],)"
      R"("state_dir":"/var/lib/tally","partitions":4})");
}

TEST_F(QueryServiceTest, HealthzFollowsReadiness) {
  EXPECT_EQ(Ok("/healthz"), R"({"ok":true})");
  ready_ = false;
  Response r = service_->Handle(Get("/healthz"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(ErrorCode(r), "unavailable");
}

TEST_F(QueryServiceTest, NotReadyAnswers503ButKeepsInfoAndMetrics) {
  ready_ = false;
  for (const char* target : {"/v1/posts/7/counts", "/v1/posts/counts?ids=1", "/v1/users/42/counts",
                             "/v1/users/42/unread", "/v1/posts/7/likes/42"}) {
    Response r = service_->Handle(Get(target));
    EXPECT_EQ(r.status, 503) << target;
    EXPECT_EQ(ErrorCode(r), "unavailable") << target;
  }
  Response r = service_->Handle(Post("/v1/events", R"({"type":"view","ts":1,"post_id":1})"));
  EXPECT_EQ(r.status, 503);
  Ok("/v1/info");
  EXPECT_EQ(service_->Handle(Get("/metrics")).status, 200);
}

TEST_F(QueryServiceTest, MetricsAreRenderedWithRequestCounters) {
  Ok("/v1/posts/7/counts");
  service_->Handle(Get("/nope"));
  Response r = service_->Handle(Get("/metrics"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4");
  EXPECT_NE(r.body.find("tally_http_requests_total{route=\"post_counts\",code=\"200\"}"),
            std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("tally_http_requests_total{route=\"unmatched\",code=\"404\"}"),
            std::string::npos);
  EXPECT_NE(r.body.find("tally_http_request_duration_seconds_bucket{route=\"post_counts\""),
            std::string::npos);
}

TEST_F(QueryServiceTest, WrongMethodIs405WithAllow) {
  struct Case {
    const char* method;
    const char* target;
    const char* allow;
  };
  for (const Case& c : std::vector<Case>{{"POST", "/v1/posts/7/counts", "GET"},
                                         {"DELETE", "/v1/users/42/unread", "GET"},
                                         {"HEAD", "/healthz", "GET"},
                                         {"PUT", "/v1/posts/counts?ids=1", "GET"},
                                         {"GET", "/v1/events", "POST"},
                                         {"GET", "/v1/users/42/unread/like/reset", "POST"},
                                         {"POST", "/metrics", "GET"},
                                         {"get", "/v1/info", "GET"}}) {
    Response r = service_->Handle(Request{c.method, c.target, {}, false, {}});
    EXPECT_EQ(r.status, 405) << c.method << " " << c.target;
    EXPECT_EQ(ErrorCode(r), "method_not_allowed");
    EXPECT_EQ(r.allow, c.allow) << c.target;
  }
}

// Notices, red dots, feed snapshots and "viewed", as the applier stores them.
void FillUnreadShapes(store::StateStore* s) {
  using store::CounterOp;
  using testing::CommitTo;
  CommitTo(s, schemas::kGlobalEntity, [](store::PartitionBatch* b) {
    b->PutNotice(10, "maintenance");
    b->PutNotice(20, "new \"terms\"");
    b->MaxRedDot("discover", 100);
    b->MaxRedDot("games", 50);
  });
  CommitTo(s, 42, [](store::PartitionBatch* b) {
    b->SetNoticeRead(42, 10, 5);
    b->MaxUserRedDot(42, "games", 60);
    b->PutFollow(42, 43);
    b->PutFollow(42, 44);
    std::pair<uint64_t, uint64_t> snap[] = {{43, 1}, {45, 2}};
    b->PutFeedSnapshot(42, 777, snap, 2);
  });
  CommitTo(s, 43, [](store::PartitionBatch* b) {
    CounterOp user[3] = {CounterOp::Add(4), {}, {}};
    b->MergeUserCounters(43, user);
  });
  CommitTo(s, 7, [s](store::PartitionBatch* b) {
    store::ViewedTables t(s->options().viewed);
    store::ViewProbe probe;
    std::vector<uint32_t> dropped;
    t.Insert(7, 42, &probe, &dropped);
    b->SetViewBits(probe.table_id, probe.chunk, std::vector<uint16_t>(probe.bits, probe.bits + probe.nbits));
    b->PutViewedTables(t);
  });
}

TEST_F(QueryServiceTest, UnreadShapesHaveTheContractShape) {
  FillUnreadShapes(store_.get());
  // notice: one newer than the last read (10); feed: followee 43 in both the
  // snapshot and the follow set, 4 posts now vs 1 then; 44 is not in the
  // snapshot and 45 is no longer followed. games was clicked after its dot.
  EXPECT_EQ(Ok("/v1/users/42/unread"),
            R"({"user_id":42,"mention":1,"comment":2,"like":3,"repost":4,"dm":5,"follower":6,)"
            R"("notice":1,"feed":3,"red_dots":{"discover":true,"games":false}})");
  // A new user: no last-read notice id (0), no snapshot (0), every dot shows.
  EXPECT_EQ(Ok("/v1/users/5/unread"),
            R"({"user_id":5,"mention":0,"comment":0,"like":0,"repost":0,"dm":0,"follower":0,)"
            R"("notice":0,"feed":0,"red_dots":{"discover":true,"games":true}})");
}

TEST_F(QueryServiceTest, FeedSnapshotAndViewsHaveTheContractShape) {
  FillUnreadShapes(store_.get());
  EXPECT_EQ(Ok("/v1/users/42/feed/snapshot"), R"({"user_id":42,"taken_ts":777,"followees":{"43":1,"45":2}})");
  EXPECT_EQ(Ok("/v1/users/5/feed/snapshot"), R"({"user_id":5,"taken_ts":0,"followees":{}})");
  EXPECT_EQ(Ok("/v1/posts/7/views/42"), R"({"viewed":true})");
  EXPECT_EQ(Ok("/v1/posts/7/views/43"), R"({"viewed":false})");
  EXPECT_EQ(Ok("/v1/posts/1000/views/42"), R"({"viewed":false})");
}

TEST_F(QueryServiceTest, WritesWithoutBrokersAre503) {
  for (const Request& req : {Post("/v1/events", R"({"type":"view","ts":1,"post_id":1})"),
                             Post("/v1/users/42/unread/like/reset")}) {
    Response r = service_->Handle(req);
    EXPECT_EQ(r.status, 503) << req.target;
    EXPECT_EQ(ErrorCode(r), "unavailable");
  }
  Response r = service_->Handle(Get("/v1/watermarks"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(ErrorCode(r), "unavailable");
}

TEST_F(QueryServiceTest, TooLargeBodyIs413) {
  Request req = Post("/v1/events");
  req.body_too_large = true;
  Response r = service_->Handle(req);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(ErrorCode(r), "payload_too_large");
}

// Every malformed request gets its status and code, in the exact error
// shape, and does not disturb the next request.
TEST_F(QueryServiceTest, MalformedRequestsGetPreciseErrors) {
  // A publisher that is never reached: bodies are rejected before publishing.
  ingest::PublisherOptions po;
  po.kafka.brokers = "127.0.0.1:1";
  po.kafka.overrides = {{"log_level", "0"}};
  auto publisher = ingest::EventPublisher::Create(po);
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  MakeService(publisher->get());

  struct Case {
    const char* method;
    std::string target;
    std::string body;
    int status;
    const char* code;
    const char* message_part = "";
  };
  std::string many_events = "[";
  for (int i = 0; i < 1001; i++) {
    if (i > 0) many_events += ',';
    many_events += R"({"type":"view","ts":1,"post_id":1})";
  }
  many_events += "]";
  const std::vector<Case> cases = {
      // Bad ids in paths.
      {"GET", "/v1/posts/abc/counts", "", 400, "bad_id", "bad post id \\\"abc\\\""},
      {"GET", "/v1/posts/0/counts", "", 400, "bad_id"},
      {"GET", "/v1/posts/-1/counts", "", 400, "bad_id"},
      {"GET", "/v1/posts/+1/counts", "", 400, "bad_id"},
      {"GET", "/v1/posts/01/counts", "", 400, "bad_id"},
      {"GET", "/v1/posts/9223372036854775808/counts", "", 400, "bad_id", "9223372036854775808"},
      {"GET", "/v1/posts/99999999999999999999999/counts", "", 400, "bad_id"},
      {"GET", "/v1/posts/1.5/counts", "", 400, "bad_id"},
      {"GET", "/v1/posts/%31/counts", "", 400, "bad_id", "%31"},
      {"GET", "/v1/posts//counts", "", 400, "bad_id"},
      {"GET", "/v1/posts/7%20/counts", "", 400, "bad_id"},
      {"GET", "/v1/users/0x2a/counts", "", 400, "bad_id", "bad user id"},
      {"GET", "/v1/users/42a/unread", "", 400, "bad_id"},
      {"GET", "/v1/posts/7/likes/0", "", 400, "bad_id", "bad user id"},
      {"GET", "/v1/posts/x/likes/42", "", 400, "bad_id", "bad post id"},
      {"GET", std::string("/v1/posts/\xff\x01/counts"), "", 400, "bad_id", "\\ufffd\\u0001"},
      // The ids list.
      {"GET", "/v1/posts/counts", "", 400, "bad_request", "missing parameter ids"},
      {"GET", "/v1/posts/counts?ids=", "", 400, "bad_request", "empty"},
      {"GET", "/v1/posts/counts?id=1", "", 400, "bad_request", "missing"},
      {"GET", "/v1/posts/counts?ids=1,,2", "", 400, "bad_id"},
      {"GET", "/v1/posts/counts?ids=1,", "", 400, "bad_id"},
      {"GET", "/v1/posts/counts?ids=1,0", "", 400, "bad_id", "\\\"0\\\""},
      {"GET", "/v1/posts/counts?ids=1%", "", 400, "bad_request", "percent-encoding"},
      {"GET", "/v1/posts/counts?ids=1&ids=2", "", 400, "bad_request", "more than once"},
      {"GET", "/v1/posts/counts?ids=1+2", "", 400, "bad_id"},
      // Unknown paths: no normalization.
      {"GET", "/status/", "", 404, "not_found"},  // the page is "/"; no file named ""
      {"GET", "/v1", "", 404, "not_found"},
      {"GET", "/v1/info/", "", 404, "not_found"},
      {"GET", "//v1/info", "", 404, "not_found"},
      {"GET", "/v1//info", "", 404, "not_found"},
      {"GET", "/V1/info", "", 404, "not_found"},
      {"GET", "/v1/posts/7", "", 404, "not_found"},
      {"GET", "/v1/posts/7/counts/", "", 404, "not_found"},
      {"GET", "/v1/posts/7/shares", "", 404, "not_found"},
      {"GET", "/v2/posts/7/counts", "", 404, "not_found"},
      {"GET", "/v1/users/42/unread/like", "", 404, "not_found"},
      {"GET", "/v1/p%6fsts/7/counts", "", 404, "not_found"},
      {"GET", "*", "", 404, "not_found"},
      {"GET", "http://example.com/v1/info", "", 404, "not_found"},
      {"GET", "/1/2/3/4/5/6/7/8/9/10", "", 404, "not_found"},
      // Unread kinds.
      {"POST", "/v1/users/42/unread/likes/reset", "", 400, "bad_kind", "bad kind \\\"likes\\\""},
      {"POST", "/v1/users/42/unread/LIKE/reset", "", 400, "bad_kind"},
      {"POST", "/v1/users/42/unread//reset", "", 400, "bad_kind"},
      {"POST", "/v1/users/0/unread/like/reset", "", 400, "bad_id"},
      // Event bodies.
      {"POST", "/v1/events", "", 400, "invalid_event"},
      {"POST", "/v1/events", "{", 400, "invalid_event"},
      {"POST", "/v1/events", "not json", 400, "invalid_event"},
      {"POST", "/v1/events", "42", 400, "invalid_event"},
      {"POST", "/v1/events", "[]", 400, "invalid_event"},
      {"POST", "/v1/events", R"({"type":"poke","ts":1})", 400, "invalid_event", "event 0"},
      {"POST", "/v1/events",
       R"([{"type":"view","ts":1,"post_id":1},{"type":"like","ts":1,"post_id":1}])", 400,
       "invalid_event", "event 1"},
      {"POST", "/v1/events", R"({"type":"view","ts":1,"post_id":0})", 400, "invalid_event"},
      {"POST", "/v1/events", many_events, 400, "invalid_event", "1000"},
  };
  ASSERT_GE(cases.size(), 25u);
  for (const Case& c : cases) {
    Response r = service_->Handle(Request{c.method, c.target, c.body, false, {}});
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.target << " -> " << r.body;
    EXPECT_EQ(r.content_type, kJsonContentType);
    EXPECT_EQ(ErrorCode(r), c.code) << c.target << " -> " << r.body;
    EXPECT_NE(r.body.find(c.message_part), std::string::npos)
        << c.target << ": \"" << c.message_part << "\" not in " << r.body;
    // A bad request never disturbs the next one.
    EXPECT_EQ(Ok("/v1/posts/7/counts"),
              R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10})");
  }
}

TEST_F(QueryServiceTest, ConcurrentReadersSeeConsistentAnswers) {
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; i++) {
        Response r =
            service_->Handle(Get(i % 2 ? "/v1/posts/7/counts" : "/v1/posts/counts?ids=7,8"));
        if (r.status != 200) bad++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// A read-only store (tally serve) follows its writer: answers catch up
// within the catch-up interval.
TEST_F(QueryServiceTest, ReadOnlyStoreFollowsItsWriter) {
  store::StoreOptions ro = testing::TestStoreOptions(dir_.path());
  ro.read_only = true;
  ro.catch_up_interval_ms = 10;
  auto reader = store::StateStore::Open(ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  QueryServiceOptions o;
  o.store = reader->get();
  QueryService service(std::move(o));

  auto counts = [&] { return service.Handle(Get("/v1/posts/7/counts")).body; };
  EXPECT_EQ(counts(), R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10})");
  testing::CommitTo(store_.get(), 7, [](store::PartitionBatch* b) {
    store::CounterOp ops[4] = {store::CounterOp::Add(1), {}, {}, {}};
    b->MergePostCounters(7, ops);
  });
  const std::string want = R"({"post_id":7,"like":4,"repost":2,"comment":1,"view":10})";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string got;
  while ((got = counts()) != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(got, want);
}

// Publishing against a broker: POST /v1/events and a reset land on the
// input topic, the reset as a `read` event keyed by the user.
class QueryServicePublishTest : public QueryServiceTest {
 protected:
  void SetUp() override {
    QueryServiceTest::SetUp();
    kafka_.CreateTopic("tally.events", 2);
    publisher_ = kafka_.NewPublisher();
    ASSERT_NE(publisher_, nullptr);
    MakeService(publisher_.get());
  }
  testing::MockKafka kafka_;
  std::unique_ptr<ingest::EventPublisher> publisher_;
};

TEST_F(QueryServicePublishTest, EventsArePublishedAndCounted) {
  Response r = service_->Handle(Post(
      "/v1/events",
      R"([{"type":"like","ts":5,"post_id":7,"user_id":1},{"type":"view","ts":6,"post_id":8}])"));
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_EQ(r.body, R"({"accepted":2})");
  r = service_->Handle(Post("/v1/events", R"({"type":"view","ts":7,"post_id":9})"));
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_EQ(r.body, R"({"accepted":1})");

  auto records = kafka_.ReadAll("tally.events", 2);
  ASSERT_EQ(records.size(), 3u);
  schemas::EventParser parser;
  int views = 0, likes = 0;
  for (const auto& rec : records) {
    schemas::Event e;
    ASSERT_TRUE(parser.Parse(rec.value, &e).ok()) << rec.value;
    if (e.type == schemas::EventType::kLike) likes++;
    if (e.type == schemas::EventType::kView) views++;
  }
  EXPECT_EQ(likes, 1);
  EXPECT_EQ(views, 2);
}

TEST_F(QueryServicePublishTest, ResetPublishesAReadEventKeyedByUser) {
  const int64_t before = base::WallMs();
  Response r = service_->Handle(Post("/v1/users/42/unread/comment/reset"));
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_EQ(r.body, R"({"accepted":true})");

  auto records = kafka_.ReadAll("tally.events", 2);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].key, "42");
  schemas::EventParser parser;
  schemas::Event e;
  ASSERT_TRUE(parser.Parse(records[0].value, &e).ok()) << records[0].value;
  EXPECT_EQ(e.type, schemas::EventType::kRead);
  EXPECT_EQ(e.user_id, 42u);
  EXPECT_EQ(e.read_kind, schemas::UnreadKind::kComment);
  EXPECT_GE(e.ts, before);
  EXPECT_LE(e.ts, base::WallMs());
}

TEST_F(QueryServicePublishTest, WriteEndpointsNeedTheBearerTokenWhenOneIsSet) {
  QueryServiceOptions o;
  o.store = store_.get();
  o.publisher = publisher_.get();
  o.ready = [] { return true; };
  o.auth_token = "s3cret-token";
  service_ = std::make_unique<QueryService>(std::move(o));
  const std::string_view body = R"({"type":"view","ts":1,"post_id":1})";
  for (std::string_view auth : {std::string_view{}, std::string_view{"Bearer wrong"},
                                std::string_view{"Bearer s3cret-toke"}, std::string_view{"Bearer s3cret-token2"},
                                std::string_view{"Basic s3cret-token"}, std::string_view{"s3cret-token"}}) {
    for (Request req : {Post("/v1/events", body), Post("/v1/users/42/unread/like/reset")}) {
      req.authorization = auth;
      Response r = service_->Handle(req);
      EXPECT_EQ(r.status, 401) << req.target << " with '" << auth << "'";
      EXPECT_EQ(ErrorCode(r), "unauthorized");
      EXPECT_TRUE(r.unauthorized);
    }
  }
  // Reads need no token.
  EXPECT_EQ(service_->Handle(Get("/v1/posts/7/counts")).status, 200);
  for (std::string_view auth : {"Bearer s3cret-token", "bearer s3cret-token"}) {
    Request req = Post("/v1/events", body);
    req.authorization = auth;
    EXPECT_EQ(service_->Handle(req).status, 202) << auth;
  }
}

TEST_F(QueryServicePublishTest, ResetsOfEveryShapeCarryWhatTheyReset) {
  FillUnreadShapes(store_.get());
  EXPECT_EQ(service_->Handle(Post("/v1/users/42/unread/notice/reset")).status, 202);
  EXPECT_EQ(service_->Handle(Post("/v1/users/42/unread/red_dot/reset?channel=games")).status, 202);
  EXPECT_EQ(service_->Handle(Post("/v1/users/42/unread/feed/reset")).status, 202);
  Response r = service_->Handle(Post("/v1/users/42/unread/red_dot/reset"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorCode(r), "bad_request");
  r = service_->Handle(Post("/v1/users/42/unread/red_dot/reset?channel=Not%20Valid"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorCode(r), "bad_request");

  auto records = kafka_.ReadAll("tally.events", 2);
  ASSERT_EQ(records.size(), 3u);
  schemas::EventParser parser;
  int seen = 0;
  for (const auto& rec : records) {
    EXPECT_EQ(rec.key, "42");
    schemas::Event e;
    ASSERT_TRUE(parser.Parse(rec.value, &e).ok()) << rec.value;
    ASSERT_EQ(e.type, schemas::EventType::kRead);
    switch (e.read_kind) {
      case schemas::UnreadKind::kNotice:
        EXPECT_EQ(e.notice_id, 20u) << "the newest notice";
        seen |= 1;
        break;
      case schemas::UnreadKind::kRedDot:
        EXPECT_EQ(e.channel, "games");
        seen |= 2;
        break;
      case schemas::UnreadKind::kFeed:
        // The current post counts of the current followees.
        EXPECT_EQ(e.snapshot, (std::vector<std::pair<uint64_t, uint64_t>>{{43, 4}, {44, 0}}));
        seen |= 4;
        break;
      default:
        ADD_FAILURE() << rec.value;
    }
  }
  EXPECT_EQ(seen, 7);
}

// ?wait=visible: the answer waits until the router has committed the
// records (nothing here is left to apply: tally.deltas is empty).
class QueryServiceWaitVisibleTest : public QueryServicePublishTest {
 protected:
  void SetUp() override {
    QueryServicePublishTest::SetUp();
    kafka_.CreateTopic("tally.deltas", testing::kTestPartitions);
    WatermarkOptions wo;
    wo.kafka.brokers = kafka_.brokers();
    wo.kafka.embedded = true;
    wo.kafka.overrides = {{"log_level", "0"}};
    auto w = WatermarkSource::Create(wo, store_.get());
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    watermarks_ = std::move(w).value();
    MakeWaitingService(300);
  }

  void MakeWaitingService(int visible_timeout_ms) {
    QueryServiceOptions o;
    o.store = store_.get();
    o.publisher = publisher_.get();
    o.watermarks = watermarks_.get();
    o.visible_timeout_ms = visible_timeout_ms;
    service_ = std::make_unique<QueryService>(std::move(o));
  }

  // Commits, for the router's group, everything now in tally.events.
  void RouteEverything() {
    std::map<std::pair<std::string, int32_t>, int64_t> ends = {{{"tally.events", 0}, 0},
                                                               {{"tally.events", 1}, 0}};
    for (const auto& rec : kafka_.ReadAll("tally.events", 2)) {
      auto& end = ends[{"tally.events", rec.partition}];
      end = std::max(end, rec.offset + 1);
    }
    kafka_.Commit("tally", ends);
  }

  // Handles `request` on a thread while the records are routed.
  Response HandleWhileRouting(Request request, size_t records_after) {
    Response r;
    std::thread t([&] { r = service_->Handle(request); });
    while (kafka_.ReadAll("tally.events", 2).size() < records_after) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling the topic
    }
    RouteEverything();
    t.join();
    return r;
  }

  // The service's visibility waiter may still be computing a view from
  // watermarks_ on its thread: it goes first (service_ belongs to the base
  // fixture, whose members outlive this one's).
  void TearDown() override {
    service_.reset();
    QueryServicePublishTest::TearDown();
  }

  std::unique_ptr<WatermarkSource> watermarks_;
};

TEST_F(QueryServiceWaitVisibleTest, AnswersOnceVisibleOr504WithTheEventsAccepted) {
  const std::string body = R"({"type":"view","ts":7,"post_id":9})";
  Response r = service_->Handle(Post("/v1/events?wait=visible", body));
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_EQ(ErrorCode(r), "not_yet_visible");
  EXPECT_EQ(kafka_.ReadAll("tally.events", 2).size(), 1u) << "accepted all the same";

  MakeWaitingService(60000);
  r = HandleWhileRouting(
      Post("/v1/events?wait=visible", R"([{"type":"view","ts":7,"post_id":9},)"
                                      R"({"type":"follow","ts":8,"user_id":1,"target_id":2}])"),
      3);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"accepted":2,"visible":true})");

  r = HandleWhileRouting(Post("/v1/users/42/unread/comment/reset?wait=visible"), 4);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"accepted":true,"visible":true})");
}

TEST_F(QueryServiceWaitVisibleTest, ABadWaitOrNoWatermarksPublishesNothing) {
  const std::string body = R"({"type":"view","ts":7,"post_id":9})";
  Response r = service_->Handle(Post("/v1/events?wait=soon", body));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorCode(r), "bad_request");
  r = service_->Handle(Post("/v1/users/42/unread/like/reset?wait=", body));
  EXPECT_EQ(r.status, 400) << r.body;
  MakeService(publisher_.get());  // no watermarks
  r = service_->Handle(Post("/v1/events?wait=visible", body));
  EXPECT_EQ(r.status, 503) << r.body;
  r = service_->Handle(Post("/v1/users/42/unread/like/reset?wait=visible"));
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_TRUE(kafka_.ReadAll("tally.events", 2).empty());
}

}  // namespace
}  // namespace tally::query
