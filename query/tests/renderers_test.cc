// The JSON bodies of SPEC section 4, rendered from store values alone.
#include "renderers.h"

#include <gtest/gtest.h>

#include <vector>

namespace tally::query::internal {
namespace {

TEST(QueryRenderersTest, CountsHaveTheContractShape) {
  store::PostCounts p{7, 3, 2, 1, 10};
  EXPECT_EQ(RenderPostCounts(p), R"({"post_id":7,"like":3,"repost":2,"comment":1,"view":10})");
  std::vector<store::PostCounts> batch = {p, store::PostCounts{8, 0, 0, 0, 0}};
  EXPECT_EQ(RenderPostCountsBatch(batch),
            R"({"posts":[{"post_id":7,"like":3,"repost":2,"comment":1,"view":10},)"
            R"({"post_id":8,"like":0,"repost":0,"comment":0,"view":0}]})");
  EXPECT_EQ(RenderPostCountsBatch({}), R"({"posts":[]})");
  EXPECT_EQ(RenderUserCounts(42, store::UserCounts{0, 5, 2, 1}),
            R"({"user_id":42,"posts":5,"followers":2,"following":1})");
}

TEST(QueryRenderersTest, UnreadIsKeyedByTheKindNamesWithRedDotsLast) {
  store::UnreadView u;
  for (int i = 0; i < schemas::kUnreadCounterKinds; i++) u.counters.counts[i] = i + 1;
  u.notice = 7;
  u.feed = 8;
  u.red_dots = {{"discover", true}, {"g\"ames", false}};
  EXPECT_EQ(RenderUnread(42, u),
            R"({"user_id":42,"mention":1,"comment":2,"like":3,"repost":4,"dm":5,"follower":6,)"
            R"("notice":7,"feed":8,"red_dots":{"discover":true,"g\"ames":false}})");
  EXPECT_EQ(RenderUnread(5, store::UnreadView{}),
            R"({"user_id":5,"mention":0,"comment":0,"like":0,"repost":0,"dm":0,"follower":0,)"
            R"("notice":0,"feed":0,"red_dots":{}})");
}

TEST(QueryRenderersTest, FeedSnapshotAndWatermarks) {
  store::FeedSnapshot s;
  s.exists = true;
  s.taken_ts = 777;
  s.followees = {{43, 1}, {45, 2}};
  EXPECT_EQ(RenderFeedSnapshot(42, s),
            R"({"user_id":42,"taken_ts":777,"followees":{"43":1,"45":2}})");
  WatermarkReport r;
  r.rows.push_back({"tally.events", 0, 10, 12, 2, 1000});
  r.lag = 2;
  EXPECT_EQ(RenderWatermarks(r),
            R"({"partitions":[{"topic":"tally.events","partition":0,"applied_offset":10,)"
            R"("end_offset":12,"lag":2,"event_time_ms":1000}],"lag":2})");
}

TEST(QueryRenderersTest, KindListNamesEveryUnreadKind) {
  EXPECT_EQ(UnreadKindList(),
            "mention, comment, like, repost, dm, follower, notice, red_dot, feed");
}

}  // namespace
}  // namespace tally::query::internal
