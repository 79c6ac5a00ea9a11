// The merge of the members' watermark reports (src/cluster_watermarks.h):
// pure, so every rule is checked on reports written by hand; then GET
// /v1/watermarks and ?wait=visible over real members, each with its own
// store and WatermarkSource against one broker.
#include "cluster_watermarks.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fixed_routing.h"
#include "ingest/event_publisher.h"
#include "mock_kafka.h"
#include "query/http_server.h"
#include "query/peer_client.h"
#include "query/query_service.h"
#include "query/watermarks.h"
#include "renderers.h"
#include "store/state_store.h"
#include "test_state.h"

namespace tally::query::internal {
namespace {

WatermarkRow Row(std::string topic, int32_t partition, int64_t applied, int64_t end,
                 int64_t ts = 0) {
  WatermarkRow r;
  r.topic = std::move(topic);
  r.partition = partition;
  r.applied_offset = applied;
  r.end_offset = end;
  r.lag = std::max<int64_t>(0, end - applied);
  r.event_time_ms = ts;
  return r;
}

MemberWatermarks Report(std::string member, std::vector<WatermarkRow> rows) {
  MemberWatermarks m;
  m.member = std::move(member);
  for (WatermarkRow& r : rows) {
    m.report.lag += r.lag;
    m.report.rows.push_back(std::move(r));
  }
  return m;
}

std::string NoHome(uint32_t) { return ""; }

TEST(ClusterWatermarksTest, InputRowsTakeTheLowestAppliedAndTheHighestEnd) {
  std::vector<MemberWatermarks> reports = {
      Report("a", {Row("tally.events", 0, 10, 12, 5), Row("tally.events", 1, 7, 7),
                   Row("tally.deltas", 0, 4, 4)}),
      Report("b", {Row("tally.events", 0, 8, 13, 9), Row("tally.events", 1, 7, 7),
                   Row("tally.deltas", 1, 3, 5)}),
  };
  auto merged = MergeWatermarkReports(reports, "tally.deltas", 2, NoHome);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  ASSERT_EQ(merged->rows.size(), 4u);
  EXPECT_EQ(merged->rows[0].topic, "tally.events");
  EXPECT_EQ(merged->rows[0].applied_offset, 8);
  EXPECT_EQ(merged->rows[0].end_offset, 13);
  EXPECT_EQ(merged->rows[0].lag, 5);
  EXPECT_EQ(merged->rows[0].event_time_ms, 9);
  EXPECT_EQ(merged->rows[1].lag, 0);
  EXPECT_EQ(merged->rows[2].topic, "tally.deltas");
  EXPECT_EQ(merged->rows[2].partition, 0);
  EXPECT_EQ(merged->rows[3].partition, 1);
  EXPECT_EQ(merged->rows[3].lag, 2);
  EXPECT_EQ(merged->lag, 5 + 0 + 0 + 2);
}

TEST(ClusterWatermarksTest, DeltasRowComesFromItsHomeElseTheFurthest) {
  std::vector<MemberWatermarks> reports = {
      Report("a", {Row("tally.deltas", 0, 4, 9)}),  // a restoring copy
      Report("b", {Row("tally.deltas", 0, 9, 9)}),
      Report("c", {Row("tally.deltas", 0, 6, 9)}),
  };
  auto furthest = MergeWatermarkReports(reports, "tally.deltas", 1, NoHome);
  ASSERT_TRUE(furthest.ok());
  EXPECT_EQ(furthest->rows[0].applied_offset, 9);
  auto home =
      MergeWatermarkReports(reports, "tally.deltas", 1, [](uint32_t) { return std::string("c"); });
  ASSERT_TRUE(home.ok());
  EXPECT_EQ(home->rows[0].applied_offset, 6);
  EXPECT_EQ(home->lag, 3);
}

TEST(ClusterWatermarksTest, APartitionNobodyReportsFailsTheMerge) {
  std::vector<MemberWatermarks> reports = {
      Report("a", {Row("tally.events", 0, 10, 10), Row("tally.deltas", 0, 4, 4),
                   Row("tally.deltas", 2, 4, 4)}),
  };
  auto merged = MergeWatermarkReports(reports, "tally.deltas", 4, NoHome);
  ASSERT_FALSE(merged.ok());
  EXPECT_EQ(merged.status().code(), base::StatusCode::kUnavailable);
  EXPECT_NE(merged.status().message().find("partitions 1, 3"), std::string::npos)
      << merged.status().ToString();
}

TEST(ClusterWatermarksTest, ParsesWhatRenderWatermarksWrites) {
  WatermarkReport report;
  report.rows = {Row("tally.events", 1, 5, 9, 123), Row("tally.deltas", 0, 2, 2)};
  report.lag = 4;
  auto parsed = ParseWatermarkReport(RenderWatermarks(report));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(RenderWatermarks(*parsed), RenderWatermarks(report));
  EXPECT_FALSE(ParseWatermarkReport("{\"partitions\":[{\"topic\":\"x\"}]}").ok());
  EXPECT_FALSE(ParseWatermarkReport("not json").ok());
}

}  // namespace
}  // namespace tally::query::internal

namespace tally::query {
namespace {

using testing::FixedRouting;
using testing::kTestPartitions;
using testing::TempDir;

// GET /v1/watermarks on any member covers every partition: two members'
// WatermarkSources over their own stores, against one broker, merged,
// equal one source over a store holding every partition with the same
// progress.
class ClusterWatermarksHttpTest : public ::testing::Test {
 protected:
  struct Member {
    std::string id;
    TempDir dir;
    std::unique_ptr<store::StateStore> store;
    std::unique_ptr<WatermarkSource> watermarks;
    std::unique_ptr<FixedRouting> routing;
    std::unique_ptr<QueryService> service;
    std::unique_ptr<HttpServer> server;
    std::string url;
  };

  void SetUp() override {
    kafka_.CreateTopic("tally.events", 2);
    kafka_.CreateTopic("tally.deltas", kTestPartitions);
    reference_ = Open(all_dir_, std::nullopt);
    reference_watermarks_ = Source(reference_.get());
    const char* ids[] = {"a", "b"};
    for (int i = 0; i < 2; i++) {
      Member& m = members_[i];
      m.id = ids[i];
      m.store = Open(m.dir, std::vector<uint32_t>{2u * i, 2u * i + 1});
      m.watermarks = Source(m.store.get());
      m.routing = std::make_unique<FixedRouting>(m.id);
      for (uint32_t p = 0; p < kTestPartitions; p++) m.routing->Set(p, p < 2 ? "a" : "b");
      QueryServiceOptions o;
      o.store = m.store.get();
      o.watermarks = m.watermarks.get();
      o.cluster = m.routing.get();
      o.peer_timeout_ms = 1000;
      m.service = std::make_unique<QueryService>(std::move(o));
      ServerOptions so;
      so.listen = "127.0.0.1:0";
      auto server = HttpServer::Start(so, m.service.get());
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      m.server = std::move(server).value();
      m.url = "http://127.0.0.1:" + std::to_string(m.server->bound_port());
    }
    for (Member& m : members_) {
      for (const Member& other : members_) m.routing->SetUrl(other.id, other.url);
    }
    auto client = PeerClient::Start(PeerClientOptions{});
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();
  }

  std::unique_ptr<store::StateStore> Open(const TempDir& dir,
                                          std::optional<std::vector<uint32_t>> held) {
    store::StoreOptions o = testing::TestStoreOptions(dir.path());
    o.open_partitions = std::move(held);
    auto s = store::StateStore::Open(o);
    if (!s.ok()) {
      ADD_FAILURE() << s.status().ToString();
      std::abort();
    }
    return std::move(s).value();
  }

  std::unique_ptr<WatermarkSource> Source(store::StateStore* store) {
    WatermarkOptions o;
    o.kafka.brokers = kafka_.brokers();
    o.kafka.embedded = true;
    o.kafka.overrides = {{"log_level", "0"}};
    auto w = WatermarkSource::Create(o, store);
    if (!w.ok()) {
      ADD_FAILURE() << w.status().ToString();
      std::abort();
    }
    return std::move(w).value();
  }

  // Commits `partition`'s progress to the reference and to its member.
  void SetProgress(uint32_t partition, int64_t next, int64_t max_ts,
                   std::map<schemas::SourceStream, store::SourceMark> marks) {
    store::Progress p;
    p.next_deltas_offset = next;
    p.max_event_ts = max_ts;
    p.marks = std::move(marks);
    for (store::StateStore* s : {reference_.get(), members_[partition / 2].store.get()}) {
      store::PartitionBatch b;
      b.SetProgress(p);
      ASSERT_TRUE(s->partition(partition)->Commit(&b).ok());
    }
  }

  testing::MockKafka kafka_;
  TempDir all_dir_;
  std::unique_ptr<store::StateStore> reference_;
  std::unique_ptr<WatermarkSource> reference_watermarks_;
  Member members_[2];
  std::unique_ptr<PeerClient> client_;
};

TEST_F(ClusterWatermarksHttpTest, AnyMemberReportsEveryPartitionAsOneStoreWould) {
  kafka_.Produce("tally.events", 0, 5);
  kafka_.Produce("tally.events", 1, 3);
  kafka_.Produce("tally.deltas", 0, 2);
  kafka_.Produce("tally.deltas", 1, 2);
  kafka_.Produce("tally.deltas", 2, 1);
  kafka_.Produce("tally.deltas", 3, 3);
  kafka_.Commit("tally", {{{"tally.events", 0}, 5}, {{"tally.events", 1}, 3}});
  // Partition 1 ("a") hides events/0 from offset 2, partition 3 ("b")
  // events/1 from offset 1: each member alone sees only one of them.
  SetProgress(0, 2, 111, {{{"tally.events", 0}, store::SourceMark{4, 0, 111}}});
  SetProgress(1, 1, 112, {{{"tally.events", 0}, store::SourceMark{2, 0, 112}}});
  SetProgress(2, 1, 222, {{{"tally.events", 1}, store::SourceMark{2, 0, 222}}});
  SetProgress(3, 2, 223, {{{"tally.events", 1}, store::SourceMark{1, 0, 223}}});
  auto reference = reference_watermarks_->Compute();
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  ASSERT_GT(reference->lag, 0);
  const std::string expected = internal::RenderWatermarks(*reference);
  for (const Member& m : members_) {
    PeerResponse a = client_->Get(m.url, "/v1/watermarks", {}, PeerClient::In(10000));
    ASSERT_TRUE(a.ok()) << a.error;
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.body, expected) << m.id;
    // Asked by a peer, a member reports only its own partitions.
    PeerResponse own =
        client_->Get(m.url, "/v1/watermarks", {{"X-Tally-Forwarded", "x"}}, PeerClient::In(10000));
    ASSERT_TRUE(own.ok()) << own.error;
    EXPECT_NE(own.body, expected);
    EXPECT_EQ(own.Header(kMemberHeader), m.id);
  }

  // Everything applied: lag 0 on every member.
  SetProgress(1, 2, 112, {{{"tally.events", 0}, store::SourceMark{4, 0, 112}}});
  SetProgress(3, 3, 223, {{{"tally.events", 1}, store::SourceMark{2, 0, 223}}});
  for (const Member& m : members_) {
    PeerResponse a = client_->Get(m.url, "/v1/watermarks", {}, PeerClient::In(10000));
    ASSERT_TRUE(a.ok()) << a.error;
    EXPECT_NE(a.body.find("],\"lag\":0}"), std::string::npos) << a.body;
  }

  // A member that does not answer leaves its partitions unreported: never
  // a lag without them.
  members_[1].server->Stop();
  PeerResponse a = client_->Get(members_[0].url, "/v1/watermarks", {}, PeerClient::In(10000));
  ASSERT_TRUE(a.ok()) << a.error;
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.body.find("\"code\":\"partition_moving\""), std::string::npos) << a.body;
  EXPECT_NE(a.body.find("partitions 2, 3"), std::string::npos) << a.body;
  EXPECT_EQ(a.Header("Retry-After"), "1");
}

TEST_F(ClusterWatermarksHttpTest, WaitVisibleWaitsForEveryMembersPartitions) {
  // Partition 3 ("b") has a delta it has not applied; "a" has applied all
  // of its own. The router committed past everything to come.
  kafka_.Produce("tally.deltas", 3, 1);
  kafka_.Commit("tally", {{{"tally.events", 0}, 5}, {{"tally.events", 1}, 5}});
  auto publisher = kafka_.NewPublisher();
  ASSERT_NE(publisher, nullptr);
  Member& a = members_[0];
  QueryServiceOptions o;
  o.store = a.store.get();
  o.watermarks = a.watermarks.get();
  o.cluster = a.routing.get();
  o.publisher = publisher.get();
  o.visible_timeout_ms = 1500;
  QueryService service(std::move(o));
  const std::string_view event = R"({"type":"like","ts":5,"post_id":7,"user_id":1})";
  // "a"'s own view says visible; the cluster's does not.
  auto own = a.watermarks->Compute();
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->lag, 0);
  Response r = service.Handle(Request{"POST", "/v1/events?wait=visible", event, false, {}, {}});
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_NE(r.body.find("not_yet_visible"), std::string::npos) << r.body;

  SetProgress(3, 1, 0, {});
  r = service.Handle(Request{"POST", "/v1/events?wait=visible", event, false, {}, {}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, R"({"accepted":1,"visible":true})");
}

}  // namespace
}  // namespace tally::query
