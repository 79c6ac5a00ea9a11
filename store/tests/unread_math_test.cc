#include "unread_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tally::store {
namespace {

using Followees = std::vector<std::pair<uint64_t, uint64_t>>;

FeedSnapshot Snapshot(Followees followees) {
  FeedSnapshot s;
  s.exists = true;
  s.taken_ts = 1;
  s.followees = std::move(followees);
  return s;
}

// ---------------------------------------------------------------- notices

TEST(UnreadMathTest, NoNoticesMeansNoUnreadNotices) {
  EXPECT_EQ(NoticesAbove({}, std::nullopt), 0);
  EXPECT_EQ(NoticesAbove({}, 0), 0);
  EXPECT_EQ(NoticesAbove({}, 100), 0);
}

TEST(UnreadMathTest, AUserWithoutALastReadIdHasNoUnreadNotices) {
  EXPECT_EQ(NoticesAbove({1, 5, 9}, std::nullopt), 0);
}

TEST(UnreadMathTest, ALastReadIdBelowEveryNoticeCountsThemAll) {
  EXPECT_EQ(NoticesAbove({10, 20, 30}, 0), 3);
  EXPECT_EQ(NoticesAbove({10, 20, 30}, 9), 3);
}

TEST(UnreadMathTest, ALastReadIdAboveEveryNoticeCountsNone) {
  EXPECT_EQ(NoticesAbove({10, 20, 30}, 31), 0);
  EXPECT_EQ(NoticesAbove({10, 20, 30}, UINT64_MAX), 0);
}

TEST(UnreadMathTest, ALastReadIdBetweenNoticesCountsThoseAbove) {
  EXPECT_EQ(NoticesAbove({10, 20, 30}, 15), 2);
  EXPECT_EQ(NoticesAbove({10, 20, 30}, 25), 1);
}

// The reset sets the last-read id to a notice's own id: that notice is read.
TEST(UnreadMathTest, ALastReadIdEqualToANoticeCountsOnlyThoseAboveIt) {
  EXPECT_EQ(NoticesAbove({10, 20, 30}, 10), 2);
  EXPECT_EQ(NoticesAbove({10, 20, 30}, 20), 1);
  EXPECT_EQ(NoticesAbove({10, 20, 30}, 30), 0);
}

// Against a count of the ids above, over random lists and last-read ids.
TEST(UnreadMathTest, MatchesACountOfTheIdsAbove) {
  const uint32_t seed = std::random_device()();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 200; round++) {
    NoticeIds ids;
    const int n = static_cast<int>(rng() % 50);
    for (int i = 0; i < n; i++) ids.push_back(rng() % 200);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    const uint64_t last_read = rng() % 210;
    const auto want =
        std::count_if(ids.begin(), ids.end(), [&](uint64_t id) { return id > last_read; });
    ASSERT_EQ(NoticesAbove(ids, last_read), want) << "last read " << last_read;
  }
}

// ---------------------------------------------------------------- red dots

TEST(UnreadMathTest, ARedDotShowsWhenTheUserHasNoClickTime) {
  EXPECT_TRUE(RedDotShown(5, std::nullopt));
}

TEST(UnreadMathTest, ARedDotShowsWhenTheUsersClickIsOlder) { EXPECT_TRUE(RedDotShown(5, 4)); }

TEST(UnreadMathTest, ARedDotHidesWhenTheUsersClickIsAtOrAfterTheGlobalTime) {
  EXPECT_FALSE(RedDotShown(5, 5));
  EXPECT_FALSE(RedDotShown(5, 6));
}

TEST(UnreadMathTest, EveryChannelWithAGlobalTimeIsListedInOrder) {
  const std::vector<std::pair<std::string, int64_t>> dots = {
      {"feed", 10}, {"games", 5}, {"news", 7}};
  const std::map<std::string, int64_t> clicks = {
      {"feed", 20},    // after the global time: hidden
      {"news", 6},     // before: shown
      {"sports", 99},  // no global time: not listed
  };
  const std::vector<std::pair<std::string, bool>> want = {
      {"feed", false}, {"games", true}, {"news", true}};
  EXPECT_EQ(RedDotsShown(dots, clicks), want);
}

TEST(UnreadMathTest, NoGlobalRedDotsListNone) {
  EXPECT_TRUE(RedDotsShown({}, {{"feed", 3}}).empty());
}

// ---------------------------------------------------------------- feed

TEST(UnreadMathTest, NoFeedSnapshotMeansNoUnreadFeed) {
  EXPECT_EQ(FeedUnread(FeedSnapshot(), Followees{{1, 5}}), 0);
}

TEST(UnreadMathTest, AnEmptySnapshotMeansNoUnreadFeed) {
  EXPECT_EQ(FeedUnread(Snapshot({}), Followees{{1, 5}}), 0);
}

TEST(UnreadMathTest, FeedSumsTheNewPostsOfFolloweesInBothSets) {
  EXPECT_EQ(FeedUnread(Snapshot({{1, 2}, {3, 10}}), Followees{{1, 5}, {3, 11}}), 4);
}

TEST(UnreadMathTest, FeedIgnoresFolloweesOnlyInTheSnapshotOrOnlyNow) {
  // 2 was unfollowed since the snapshot, 4 followed since: neither counts.
  EXPECT_EQ(FeedUnread(Snapshot({{1, 2}, {2, 0}, {5, 1}}), Followees{{1, 3}, {4, 50}, {5, 1}}), 1);
  EXPECT_EQ(FeedUnread(Snapshot({{2, 0}}), Followees{{4, 50}}), 0);
}

TEST(UnreadMathTest, AFolloweeWithFewerPostsThanInTheSnapshotCountsZero) {
  EXPECT_EQ(FeedUnread(Snapshot({{1, 10}, {2, 1}}), Followees{{1, 7}, {2, 3}}), 2);
}

TEST(UnreadMathTest, FeedWithNoCurrentFolloweesIsZero) {
  EXPECT_EQ(FeedUnread(Snapshot({{1, 1}}), Followees{}), 0);
}

}  // namespace
}  // namespace tally::store
