// The status page and its JSON: the embedded files with their types and
// ETags, /v1/status's alerts, the history's samples and rates, the hottest
// posts; and the history's pure rules (quantiles, freshness, lag growth).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "base/clock.h"
#include "base/hot_keys.h"
#include "base/metrics.h"
#include "fixed_routing.h"
#include "query/query_service.h"
#include "query/status_history.h"
#include "query/watermarks.h"
#include "test_state.h"

namespace tally::query {
namespace {

using testing::TempDir;

Request Get(std::string_view target) { return Request{"GET", target, {}, false, {}}; }

class StatusPageTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = testing::OpenTestStore(dir_.path()); }

  void MakeService(int sample_ms, ClusterRouting* cluster = nullptr) {
    QueryServiceOptions o;
    o.cluster = cluster;
    o.store = store_.get();
    o.info = ServiceInfo{
        "0.1.0", "127.0.0.1:9092", {"tally.events"}, "/var/lib/tally", testing::kTestPartitions};
    o.member = "127.0.0.1:8080";
    o.ready = [this] { return ready_.load(); };
    o.kafka_problem = [this] {
      return kafka_ ? std::string("lost the Kafka cluster") : std::string();
    };
    o.status_sample_ms = sample_ms;
    o.hot_posts = &hot_;
    service_ = std::make_unique<QueryService>(std::move(o));
  }

  nlohmann::json Json(std::string_view target) {
    Response r = service_->Handle(Get(target));
    EXPECT_EQ(r.status, 200) << target << " -> " << r.body;
    EXPECT_EQ(r.content_type, kJsonContentType) << target;
    return nlohmann::json::parse(r.body);
  }

  TempDir dir_;
  std::unique_ptr<store::StateStore> store_;
  std::atomic<bool> ready_{true};
  std::atomic<bool> kafka_{false};
  base::HotKeys hot_{64, 60};
  std::unique_ptr<QueryService> service_;
};

TEST_F(StatusPageTest, ThePageAndItsFilesAreServedWithTypesAndETags) {
  MakeService(0);
  for (std::string_view target : {"/", "/status"}) {
    Response r = service_->Handle(Get(target));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
    EXPECT_NE(r.body.find("<script src=\"/status/dygraph.min.js\">"), std::string::npos);
    EXPECT_EQ(r.cache_control, "no-cache");
    ASSERT_EQ(r.etag.size(), 18u) << r.etag;
  }
  Response js = service_->Handle(Get("/status/dygraph.min.js"));
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_GT(js.body.size(), 100000u);  // Debian's dygraphs, whole
  EXPECT_NE(js.body.find("Dygraph"), std::string::npos);
  EXPECT_EQ(service_->Handle(Get("/status/status.css")).content_type, "text/css; charset=utf-8");

  Request again = Get("/status/dygraph.min.js");
  again.if_none_match = js.etag;
  Response cached = service_->Handle(again);
  EXPECT_EQ(cached.status, 304);
  EXPECT_TRUE(cached.body.empty());
  EXPECT_EQ(cached.etag, js.etag);

  EXPECT_EQ(service_->Handle(Get("/status/../CMakeLists.txt")).status, 404);
  EXPECT_EQ(service_->Handle(Get("/status/nothing.js")).status, 404);
}

TEST_F(StatusPageTest, StatusSaysWhatRunsAndRaisesAlerts) {
  MakeService(0);
  nlohmann::json s = Json("/v1/status");
  EXPECT_EQ(s["version"], "0.1.0");
  EXPECT_EQ(s["brokers"], "127.0.0.1:9092");
  EXPECT_EQ(s["partitions"], testing::kTestPartitions);
  EXPECT_EQ(s["member"], "127.0.0.1:8080");
  EXPECT_GE(s["uptime_s"].get<int64_t>(), 0);
  EXPECT_TRUE(s["ready"].get<bool>());
  EXPECT_TRUE(s["alerts"].empty());

  kafka_ = true;
  ready_ = false;  // answered all the same: the page is for bad times
  s = Json("/v1/status");
  ASSERT_EQ(s["alerts"].size(), 2u) << s.dump();
  EXPECT_EQ(s["alerts"][0]["code"], "kafka_lost");
  EXPECT_EQ(s["alerts"][0]["message"], "lost the Kafka cluster");
  EXPECT_EQ(s["alerts"][1]["code"], "not_ready");
  EXPECT_FALSE(s["ready"].get<bool>());
}

// A cluster whose members directory says member b restores partition 3.
class RestoringRouting : public testing::FixedRouting {
 public:
  using FixedRouting::FixedRouting;
  bool restoring = false;
  std::string ClusterJson() const override {
    return restoring
               ? R"({"group":"g","generation":7,"members":[{"member":"a","http":"","owns":[0,1,2],"standby":[],"restoring":[]},{"member":"b","http":"","owns":[],"standby":[],"restoring":[{"partition":3,"offset":10,"end_offset":40}]}]})"
               : FixedRouting::ClusterJson();
  }
};

TEST_F(StatusPageTest, APartitionWithoutACurrentOwnerOrARestoreIsAMove) {
  RestoringRouting routing("a");
  for (uint32_t p = 0; p < testing::kTestPartitions; p++) {
    if (p != 2) routing.Set(p, "a");
  }
  MakeService(0, &routing);
  nlohmann::json s = Json("/v1/status");
  ASSERT_EQ(s["alerts"].size(), 1u) << s.dump();
  EXPECT_EQ(s["alerts"][0]["code"], "partition_moving");
  EXPECT_EQ(s["alerts"][0]["message"], "1 partition(s) have no current owner (partition 2 first)");
  EXPECT_EQ(s["member"], "a");

  routing.Set(2, "a");
  EXPECT_TRUE(Json("/v1/status")["alerts"].empty());
  routing.restoring = true;
  s = Json("/v1/status");
  ASSERT_EQ(s["alerts"].size(), 1u) << s.dump();
  EXPECT_EQ(s["alerts"][0]["message"], "b restores 1 partition(s) (partition 3 at 10 of 40)");
}

TEST_F(StatusPageTest, HistorySamplesTheMetricsEverySecondOrSo) {
  MakeService(20);
  base::Counter* routed = base::MetricsRegistry::Global().GetCounter(
      "tally_router_events_total", "Input records routed (valid and invalid)");
  // Rates appear once two samples have seen the counter move.
  nlohmann::json h;
  const int64_t deadline = base::SteadyMs() + 10000;
  bool moved = false;
  while (!moved && base::SteadyMs() < deadline) {
    routed->Inc(1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    h = Json("/v1/status/history");
    for (const auto& v : h["routed"]) moved = moved || (v.is_number() && v.get<double>() > 0);
  }
  EXPECT_TRUE(moved) << h.dump();
  EXPECT_EQ(h["interval_ms"], 20);
  const size_t n = h["t"].size();
  ASSERT_GE(n, 2u);
  for (const char* col : {"routed", "applied", "dead_letters", "lag", "freshness_ms", "http",
                          "http_p99_ms", "commit_p99_ms"}) {
    EXPECT_EQ(h[col].size(), n) << col;
  }
  EXPECT_TRUE(h["lag"][0].is_null());  // no watermarks here: unknown, not 0
  EXPECT_TRUE(h["partitions"].empty());
  // ?since= gives only what came after.
  const int64_t last = h["t"][n - 1];
  nlohmann::json later = Json("/v1/status/history?since=" + std::to_string(last));
  for (const auto& t : later["t"]) EXPECT_GT(t.get<int64_t>(), last);
  EXPECT_EQ(service_->Handle(Get("/v1/status/history?since=soon")).status, 400);
}

TEST_F(StatusPageTest, WithoutASamplerTheHistoryIsEmpty) {
  MakeService(0);
  nlohmann::json h = Json("/v1/status/history");
  EXPECT_TRUE(h["t"].empty());
  EXPECT_TRUE(h["routed"].empty());
}

TEST_F(StatusPageTest, HotPostsAreTheHeaviestOfTheLastMinute) {
  MakeService(0);
  {
    auto w = hot_.Lock(base::SteadyMs());
    w.Add(7, 40);
    w.Add(8, 2);
    w.Add(9, 900);
  }
  nlohmann::json h = Json("/v1/status/hot-posts");
  EXPECT_EQ(h["window_s"], 60);
  ASSERT_EQ(h["posts"].size(), 3u);
  EXPECT_EQ(h["posts"][0]["post_id"], 9);
  EXPECT_EQ(h["posts"][0]["increments"], 900);
  EXPECT_EQ(h["posts"][2]["post_id"], 8);
}

TEST(StatusHistoryRulesTest, QuantilesInterpolateWithinTheirBucket) {
  const std::vector<double> bounds = {0.001, 0.01, 0.1};
  EXPECT_EQ(BucketQuantile(bounds, std::vector<uint64_t>{0, 0, 0, 0}, 0.99), -1);
  // 100 in (0.001, 0.01]: p99 is 99 % of the way through that bucket.
  EXPECT_NEAR(BucketQuantile(bounds, std::vector<uint64_t>{0, 100, 0, 0}, 0.99),
              0.001 + 0.009 * 0.99, 1e-9);
  // One slow outlier in 100 is the p99's bucket only past 99.
  EXPECT_LE(BucketQuantile(bounds, std::vector<uint64_t>{99, 0, 0, 1}, 0.99), 0.001);
  EXPECT_EQ(BucketQuantile(bounds, std::vector<uint64_t>{0, 0, 0, 5}, 0.99), 0.1);
}

TEST(StatusHistoryRulesTest, FreshnessIsWhenTheNewestVisibleRecordWasPublished) {
  // Two partitions sampled at 1, 2 and 3 s; partition 0 took 100 records a
  // second, partition 1 stopped at 50.
  const std::vector<int64_t> times = {1000, 2000, 3000};
  const std::vector<int64_t> ends = {100, 50, 200, 50, 300, 50};
  // Everything visible: 0.
  std::vector<PartitionOffsetsNow> now = {{400, 400}, {50, 50}};
  EXPECT_EQ(FreshnessMs(now, times, ends, 4000), 0);
  // Partition 0 has made visible what was published until 2.5 s.
  now = {{250, 400}, {50, 50}};
  EXPECT_EQ(FreshnessMs(now, times, ends, 4000), 1500);
  // ... and since the last sample, at 3.5 s.
  now = {{350, 400}, {50, 50}};
  EXPECT_EQ(FreshnessMs(now, times, ends, 4000), 500);
  // Older than every sample: as old as the oldest, at least.
  now = {{40, 400}, {50, 50}};
  EXPECT_EQ(FreshnessMs(now, times, ends, 4000), 3000);
  // The worst partition counts: partition 1 hides records published after 3 s.
  now = {{400, 400}, {50, 60}};
  EXPECT_EQ(FreshnessMs(now, times, ends, 4000), 1000);
  // No sample before: unknown with lag, 0 without.
  EXPECT_EQ(FreshnessMs(now, {}, {}, 4000), -1);
  now = {{400, 400}, {50, 50}};
  EXPECT_EQ(FreshnessMs(now, {}, {}, 4000), 0);
}

TEST(StatusHistoryRulesTest, LagGrowsOnlyWhenItRoseThroughTheLast30Seconds) {
  auto series = [](auto lag_at) {
    std::vector<StatusSample> s;
    for (int i = 0; i <= 40; i++) {
      StatusSample x;
      x.t_ms = i * 1000;
      x.lag = lag_at(i);
      s.push_back(x);
    }
    return s;
  };
  std::string why;
  EXPECT_TRUE(LagGrowing(series([](int i) { return int64_t{100} * i; }), 40000, &why));
  EXPECT_NE(why.find("lag has grown for 30 s"), std::string::npos) << why;
  // High but flat, or falling, or growing by a few records: no alert.
  EXPECT_FALSE(LagGrowing(series([](int) { return int64_t{5000}; }), 40000, nullptr));
  EXPECT_FALSE(LagGrowing(series([](int i) { return int64_t{8000} - 100 * i; }), 40000, nullptr));
  EXPECT_FALSE(LagGrowing(series([](int i) { return int64_t{i}; }), 40000, nullptr));
  // The noise of a steady load at a few thousand events/s: 300 -> 800.
  EXPECT_FALSE(LagGrowing(series([](int i) { return int64_t{300} + 12 * i; }), 40000, nullptr));
  // Grew only in the last 10 s.
  EXPECT_FALSE(LagGrowing(series([](int i) { return i < 30 ? int64_t{0} : int64_t{1000} * i; }),
                          40000, nullptr));
  // Unknown lag (a lost broker) is no growth.
  EXPECT_FALSE(LagGrowing(series([](int) { return int64_t{-1}; }), 40000, nullptr));
}

}  // namespace
}  // namespace tally::query
