#include "query/watermarks.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "mock_kafka.h"
#include "query/query_service.h"
#include "store/state_store.h"
#include "test_state.h"
#include "watermark_fixture.h"

namespace tally::query {
namespace {

using base::PartitionOffsets;
using schemas::DeltasPosition;
using schemas::SourceStream;
using store::Progress;
using store::SourceMark;

std::string Row(const WatermarkRow& r) {
  return r.topic + "/" + std::to_string(r.partition) +
         " applied=" + std::to_string(r.applied_offset) + " end=" + std::to_string(r.end_offset) +
         " lag=" + std::to_string(r.lag) + " ts=" + std::to_string(r.event_time_ms);
}

std::vector<std::string> Rows(const WatermarkReport& report) {
  std::vector<std::string> out;
  for (const auto& r : report.rows) out.push_back(Row(r));
  return out;
}

// Two input partitions (low 0/1, high 5/3) and two deltas partitions.
class BuildWatermarkReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    input_ = {{PartitionOffsets{0, 0, 5}, PartitionOffsets{1, 1, 3}}};
    deltas_ = {PartitionOffsets{0, 0, 4}, PartitionOffsets{1, 0, 6}};
    progress_.resize(2);
    progress_[0].next_deltas_offset = 4;
    progress_[0].max_event_ts = 100;
    progress_[0].marks[{"tally.events", 0}] = SourceMark{4, 0, 90};
    progress_[1].next_deltas_offset = 6;
    progress_[1].max_event_ts = 200;
    progress_[1].marks[{"tally.events", 0}] = SourceMark{3, 1, 80};
    progress_[1].marks[{"tally.events", 1}] = SourceMark{2, 0, 200};
    committed_[{"tally.events", 0}].offset = 5;
    committed_[{"tally.events", 1}].offset = 3;
  }

  WatermarkReport Build() {
    auto r = BuildWatermarkReport({"tally.events"}, committed_, progress_, input_, "tally.deltas",
                                  deltas_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : WatermarkReport{};
  }

  std::map<SourceStream, CommittedOffset> committed_;
  std::vector<Progress> progress_;
  std::vector<std::vector<PartitionOffsets>> input_;
  std::vector<PartitionOffsets> deltas_;
};

TEST_F(BuildWatermarkReportTest, CaughtUpPipelineHasLagZero) {
  WatermarkReport r = Build();
  EXPECT_EQ(Rows(r), (std::vector<std::string>{
                         "tally.events/0 applied=5 end=5 lag=0 ts=90",
                         "tally.events/1 applied=3 end=3 lag=0 ts=200",
                         "tally.deltas/0 applied=4 end=4 lag=0 ts=100",
                         "tally.deltas/1 applied=6 end=6 lag=0 ts=200",
                     }));
  EXPECT_EQ(r.lag, 0);
}

TEST_F(BuildWatermarkReportTest, RouterBehindShowsInputLag) {
  committed_[{"tally.events", 0}].offset = 2;
  WatermarkReport r = Build();
  EXPECT_EQ(Row(r.rows[0]), "tally.events/0 applied=2 end=5 lag=3 ts=90");
  EXPECT_EQ(r.lag, 3);
}

TEST_F(BuildWatermarkReportTest, NothingCommittedStartsAtTheLowWatermark) {
  committed_.clear();
  WatermarkReport r = Build();
  EXPECT_EQ(Row(r.rows[0]), "tally.events/0 applied=0 end=5 lag=5 ts=90");
  EXPECT_EQ(Row(r.rows[1]), "tally.events/1 applied=1 end=3 lag=2 ts=200");
  committed_[{"tally.events", 0}].offset = RD_KAFKA_OFFSET_INVALID;
  EXPECT_EQ(Row(Build().rows[0]), "tally.events/0 applied=0 end=5 lag=5 ts=90");
}

TEST_F(BuildWatermarkReportTest, LaggingDeltasLowerInputRowsToTheirMarks) {
  progress_[1].next_deltas_offset = 5;  // one delta of partition 1 not applied
  WatermarkReport r = Build();
  EXPECT_EQ(Rows(r), (std::vector<std::string>{
                         "tally.events/0 applied=3 end=5 lag=2 ts=90",
                         "tally.events/1 applied=2 end=3 lag=1 ts=200",
                         "tally.deltas/0 applied=4 end=4 lag=0 ts=100",
                         "tally.deltas/1 applied=5 end=6 lag=1 ts=200",
                     }));
  EXPECT_EQ(r.lag, 4);
}

TEST_F(BuildWatermarkReportTest, LaggingDeltasWithoutAMarkFallBackToTheLowWatermark) {
  progress_[0].next_deltas_offset = 3;  // partition 0 has no mark for tally.events/1
  WatermarkReport r = Build();
  EXPECT_EQ(Row(r.rows[0]), "tally.events/0 applied=4 end=5 lag=1 ts=90");
  EXPECT_EQ(Row(r.rows[1]), "tally.events/1 applied=1 end=3 lag=2 ts=200");
  EXPECT_EQ(r.lag, 1 + 2 + 1);
}

// The router's commit of tally.events/0 (offset 5) says where the deltas of
// the records below it lie: in deltas partition 0 up to its message at 3, in
// partition 1 up to its message at 5, whose smallest record of the stream
// is 4 and before which the stream's last message there is at 2. Its mark
// in partition 1 is old (record 1), as for a stream that rarely writes there.
class DeltasPositionRuleTest : public BuildWatermarkReportTest {
 protected:
  void SetUp() override {
    BuildWatermarkReportTest::SetUp();
    progress_[1].marks[{"tally.events", 0}] = SourceMark{1, 0, 80};
    committed_[{"tally.events", 0}].deltas = {DeltasPosition{0, 3, 3, 1},
                                              DeltasPosition{1, 5, 4, 2}};
  }
  // The held report of `held` into *out (fails the test if it cannot be built).
  void BuildHeld(const std::map<uint32_t, Progress>& held, WatermarkReport* out) {
    auto r = BuildHeldWatermarkReport({"tally.events"}, committed_, held, input_, "tally.deltas",
                                      deltas_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    *out = *std::move(r);
  }
};

TEST_F(DeltasPositionRuleTest, AnUnappliedLastMessageHidesOnlyTheRecordsFromItsFirst) {
  progress_[1].next_deltas_offset = 5;  // message 5 waits; message 2 is applied
  WatermarkReport r = Build();
  EXPECT_EQ(Rows(r), (std::vector<std::string>{
                         // The marks alone would say 1 (lag 4): 3 records too many.
                         "tally.events/0 applied=4 end=5 lag=1 ts=90",
                         "tally.events/1 applied=2 end=3 lag=1 ts=200",
                         "tally.deltas/0 applied=4 end=4 lag=0 ts=100",
                         "tally.deltas/1 applied=5 end=6 lag=1 ts=200",
                     }));
  EXPECT_EQ(r.lag, 3);
}

TEST_F(DeltasPositionRuleTest, TheStreamsFirstMessageInAPartitionHidesOnlyItsRecords) {
  // previous -1: no delta of the stream's records below 4 lies in partition 1.
  committed_[{"tally.events", 0}].deltas[1].previous = -1;
  progress_[1].marks.erase({"tally.events", 0});
  progress_[1].next_deltas_offset = 0;
  EXPECT_EQ(Row(Build().rows[0]), "tally.events/0 applied=4 end=5 lag=1 ts=90");
}

TEST_F(DeltasPositionRuleTest, PositionsAppliedMakeTheCommitVisibleWhereverTheMarksAre) {
  deltas_[0].high = 6;  // partition 0 lags, past the stream's position there
  WatermarkReport r = Build();
  EXPECT_EQ(Row(r.rows[0]), "tally.events/0 applied=5 end=5 lag=0 ts=90");
  // No position for tally.events/1 and no mark in partition 0: its low watermark.
  EXPECT_EQ(Row(r.rows[1]), "tally.events/1 applied=1 end=3 lag=2 ts=200");
  EXPECT_EQ(r.lag, 0 + 2 + 2);
}

TEST_F(DeltasPositionRuleTest, TwoUnappliedMessagesFallBackToTheMark) {
  progress_[1].next_deltas_offset = 2;  // messages 2 and 5 both wait
  EXPECT_EQ(Row(Build().rows[0]), "tally.events/0 applied=1 end=5 lag=4 ts=90");
}

// The case that would break "applied_offset is the next offset not yet
// visible" (and so ?wait=visible): the router's first message in partition
// 1 is at 5, and an earlier router put record 3's deltas at offset 4, not yet
// applied. The router says so with previous = 4 (its first message there,
// less one), not -1, and then only the mark vouches for what is below 4.
TEST_F(DeltasPositionRuleTest, AnEarlierRoutersMessageKeepsTheMarkRule) {
  committed_[{"tally.events", 0}].deltas[1].previous = 4;
  progress_[1].next_deltas_offset = 4;
  EXPECT_EQ(Row(Build().rows[0]), "tally.events/0 applied=1 end=5 lag=4 ts=90");
  progress_[1].next_deltas_offset = 5;  // only the router's own message waits
  EXPECT_EQ(Row(Build().rows[0]), "tally.events/0 applied=4 end=5 lag=1 ts=90");
}

TEST_F(DeltasPositionRuleTest, APartitionTheStreamHasNoDeltasInNeverLowersIt) {
  committed_[{"tally.events", 0}].deltas[1] = DeltasPosition{1, -1, 0, -1};
  progress_[1].next_deltas_offset = 2;  // partition 1 lags far behind
  EXPECT_EQ(Row(Build().rows[0]), "tally.events/0 applied=5 end=5 lag=0 ts=90");
}

TEST_F(DeltasPositionRuleTest, APartitionWithoutAPositionStillLowersByItsMark) {
  committed_[{"tally.events", 0}].deltas.pop_back();  // nothing said of partition 1
  progress_[1].next_deltas_offset = 5;
  EXPECT_EQ(Row(Build().rows[0]), "tally.events/0 applied=1 end=5 lag=4 ts=90");
}

TEST_F(DeltasPositionRuleTest, PositionsBeyondTheLogEndAreIgnoredSoLagReachesZero) {
  // Metadata left by a router of an older log of tally.deltas.
  committed_[{"tally.events", 0}].deltas[1] = DeltasPosition{1, 9, 4, 7};
  WatermarkReport r = Build();
  EXPECT_EQ(Row(r.rows[0]), "tally.events/0 applied=5 end=5 lag=0 ts=90");
  EXPECT_EQ(r.lag, 0);
}

// A deltas partition stalls while the router commits on (a store fault):
// the rules first vouch for records below the one waiting message's first,
// then, with a second message waiting, only for the older mark. Nothing
// became invisible in between, so the row keeps the higher claim.
TEST_F(DeltasPositionRuleTest, AStalledPartitionNeverMovesARowBack) {
  AppliedFloors floors;
  std::map<uint32_t, Progress> held = {{0, progress_[0]}, {1, progress_[1]}};
  held[1].next_deltas_offset = 5;
  WatermarkReport first;
  ASSERT_NO_FATAL_FAILURE(BuildHeld(held, &first));
  floors.Hold(held, "tally.deltas", &first);
  EXPECT_EQ(Row(first.rows[0]), "tally.events/0 applied=4 end=5 lag=1 ts=90");

  // The router routed record 5 into partition 1 at offset 6 and committed.
  input_[0][0].high = 6;
  deltas_[1].high = 7;
  committed_[{"tally.events", 0}] = {6, {DeltasPosition{0, 3, 3, 1}, DeltasPosition{1, 6, 5, 5}}};
  WatermarkReport second;
  ASSERT_NO_FATAL_FAILURE(BuildHeld(held, &second));
  EXPECT_EQ(Row(second.rows[0]), "tally.events/0 applied=1 end=6 lag=5 ts=90");  // the mark
  floors.Hold(held, "tally.deltas", &second);
  EXPECT_EQ(Row(second.rows[0]), "tally.events/0 applied=4 end=6 lag=2 ts=90");
  EXPECT_EQ(second.lag, 2 + 1 + 0 + 2);

  // A partition that went back (another state) voids every claim.
  held[1].next_deltas_offset = 4;
  WatermarkReport third;
  ASSERT_NO_FATAL_FAILURE(BuildHeld(held, &third));
  floors.Hold(held, "tally.deltas", &third);
  EXPECT_EQ(Row(third.rows[0]), "tally.events/0 applied=1 end=6 lag=5 ts=90");

  // So does a change of the partitions held, and a claim beyond a row's
  // end (a recreated topic) is dropped.
  floors.Hold(held, "tally.deltas", &second);  // claims 4 again
  held.erase(0);
  WatermarkReport fourth;
  ASSERT_NO_FATAL_FAILURE(BuildHeld(held, &fourth));
  floors.Hold(held, "tally.deltas", &fourth);
  EXPECT_EQ(Row(fourth.rows[0]), "tally.events/0 applied=1 end=6 lag=5 ts=80");
  WatermarkReport recreated = fourth;
  recreated.rows[0].applied_offset = 0;
  recreated.rows[0].end_offset = 0;
  recreated.rows[0].lag = 0;
  floors.Hold(held, "tally.deltas", &recreated);
  EXPECT_EQ(Row(recreated.rows[0]), "tally.events/0 applied=0 end=0 lag=0 ts=80");
}

TEST_F(BuildWatermarkReportTest, MismatchedPartitionCountsAreRejected) {
  deltas_.pop_back();
  auto r = BuildWatermarkReport({"tally.events"}, committed_, progress_, input_, "tally.deltas",
                                deltas_);
  EXPECT_EQ(r.status().code(), base::StatusCode::kInvalidArgument);
}

// Against a broker: the router's committed offsets and the topics' ends come
// from Kafka, progress from a real store.
class WatermarkSourceTest : public testing::WatermarkFixture {};

TEST_F(WatermarkSourceTest, ReportsLagUntilEverythingIsAppliedAndServesExactJson) {
  kafka_.Produce("tally.events", 0, 5);
  kafka_.Produce("tally.events", 1, 3);
  kafka_.Produce("tally.deltas", 0, 2);
  kafka_.Produce("tally.deltas", 2, 1);

  // Nothing routed or applied yet.
  auto r = source_->Compute();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lag, 5 + 3 + 2 + 1);

  // Routed and applied.
  kafka_.Commit("tally", {{{"tally.events", 0}, 5}, {{"tally.events", 1}, 3}});
  SetProgress(0, 2, 111, {{{"tally.events", 0}, SourceMark{4, 0, 111}}});
  SetProgress(2, 1, 222, {{{"tally.events", 1}, SourceMark{2, 0, 222}}});
  r = source_->Compute();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lag, 0);

  QueryServiceOptions so;
  so.store = store_.get();
  so.watermarks = source_.get();
  QueryService service(std::move(so));
  Response resp = service.Handle(Request{"GET", "/v1/watermarks", {}, false, {}});
  EXPECT_EQ(resp.status, 200);
  EXPECT_EQ(
      resp.body,
      R"({"partitions":[)"
      R"({"topic":"tally.events","partition":0,"applied_offset":5,"end_offset":5,"lag":0,"event_time_ms":111},)"
      R"({"topic":"tally.events","partition":1,"applied_offset":3,"end_offset":3,"lag":0,"event_time_ms":222},)"
      R"({"topic":"tally.deltas","partition":0,"applied_offset":2,"end_offset":2,"lag":0,"event_time_ms":111},)"
      R"({"topic":"tally.deltas","partition":1,"applied_offset":0,"end_offset":0,"lag":0,"event_time_ms":0},)"
      R"({"topic":"tally.deltas","partition":2,"applied_offset":1,"end_offset":1,"lag":0,"event_time_ms":222},)"
      R"({"topic":"tally.deltas","partition":3,"applied_offset":0,"end_offset":0,"lag":0,"event_time_ms":0}],)"
      R"("lag":0})");

  // A delta routed but not applied: every input row without a mark in that
  // deltas partition falls back to its low watermark, for a source that
  // claimed nothing before. This one claimed both rows whole, and nothing
  // applied went back since: it keeps them.
  kafka_.Produce("tally.deltas", 3, 1);
  auto fresh = NewSource();
  ASSERT_NE(fresh, nullptr);
  r = fresh->Compute();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Row(r->rows[0]), "tally.events/0 applied=0 end=5 lag=5 ts=111");
  EXPECT_EQ(Row(r->rows[1]), "tally.events/1 applied=0 end=3 lag=3 ts=222");
  EXPECT_EQ(Row(r->rows[5]), "tally.deltas/3 applied=0 end=1 lag=1 ts=0");
  EXPECT_EQ(r->lag, 9);
  r = source_->Compute();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Row(r->rows[0]), "tally.events/0 applied=5 end=5 lag=0 ts=111");
  EXPECT_EQ(Row(r->rows[1]), "tally.events/1 applied=3 end=3 lag=0 ts=222");
  EXPECT_EQ(r->lag, 1);
}

TEST_F(WatermarkSourceTest, ReadsTheDeltasPositionsFromTheCommitMetadata) {
  kafka_.Produce("tally.events", 0, 5);
  kafka_.Produce("tally.deltas", 0, 2);
  kafka_.Produce("tally.deltas", 1, 1);
  // Partition 1 applied everything; partition 0 only its first message, of
  // which the stream's last one (offset 1) starts at record 3. Partition 0
  // has no mark of the stream: the marks alone would say nothing is visible.
  SetProgress(0, 1, 0, {});
  SetProgress(1, 1, 0, {});
  std::string metadata;
  schemas::EncodeDeltasPositions({DeltasPosition{0, 1, 3, 0}, DeltasPosition{1, 0, 0, -1}},
                                 &metadata);
  kafka_.Commit("tally", {{{"tally.events", 0}, 5}}, {{{"tally.events", 0}, metadata}});
  auto r = source_->Compute();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Row(r->rows[0]), "tally.events/0 applied=3 end=5 lag=2 ts=0");

  // Metadata tally did not write: the marks alone.
  kafka_.Commit("tally", {{{"tally.events", 0}, 5}}, {{{"tally.events", 0}, "checkpoint 7"}});
  auto fresh = NewSource();
  ASSERT_NE(fresh, nullptr);
  r = fresh->Compute();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Row(r->rows[0]), "tally.events/0 applied=0 end=5 lag=5 ts=0");
}

TEST_F(WatermarkSourceTest, UnreachableBrokerIsUnavailable) {
  WatermarkOptions o;
  o.kafka.brokers = "127.0.0.1:1";  // nothing listens there
  o.kafka.overrides = {{"log_level", "0"}};
  o.timeout_ms = 500;
  auto w = WatermarkSource::Create(o, store_.get());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto r = (*w)->Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), base::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("tally.events"), std::string::npos) << r.status().ToString();

  QueryServiceOptions so;
  so.store = store_.get();
  so.watermarks = w->get();
  QueryService service(std::move(so));
  Response resp = service.Handle(Request{"GET", "/v1/watermarks", {}, false, {}});
  EXPECT_EQ(resp.status, 503);
  EXPECT_EQ(resp.body.rfind(R"({"error":{"code":"unavailable","message":"watermarks: )", 0), 0u)
      << resp.body;
}

TEST(WatermarkSourceCreateTest, RejectsBadSettings) {
  WatermarkOptions o;
  o.kafka.brokers = "127.0.0.1:1";
  o.kafka.overrides = {{"no.such.setting", "1"}};
  testing::TempDir dir;
  auto s = store::StateStore::Open(testing::TestStoreOptions(dir.path()));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(WatermarkSource::Create(o, s->get()).status().code(),
            base::StatusCode::kInvalidArgument);
  o.kafka.overrides.clear();
  EXPECT_EQ(WatermarkSource::Create(o, nullptr).status().code(),
            base::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tally::query
