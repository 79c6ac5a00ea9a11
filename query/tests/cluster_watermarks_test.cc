// The merge of the members' watermark reports (src/cluster_watermarks.h):
// pure, so every rule is checked on reports written by hand.
#include "cluster_watermarks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "renderers.h"

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
