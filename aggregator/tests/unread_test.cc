// The unread shapes of SPEC section 3, applied by the WindowApplier to a real
// store and read back the way the HTTP tier reads them.
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>

#include "aggregator/window_applier.h"
#include "testing/temp_dir.h"

namespace tally::aggregator {
namespace {

namespace fs = std::filesystem;
using schemas::Delta;
using schemas::DeltaOp;

// Run without and with the store's read cache (which keeps a summary of a
// user's notice-read, click and snapshot records): the answers must agree.
class UnreadTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override {
    appliers_.clear();
    store_.reset();
  }
  void Open() {
    appliers_.clear();
    store_.reset();
    store::StoreOptions o;
    o.dir = dir_.string();
    o.partitions = kParts;
    o.block_cache_bytes = 8 << 20;
    o.now_ms = [this] { return now_ms_; };
    o.read_cache_bytes = GetParam();
    auto s = store::StateStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    for (uint32_t p = 0; p < kParts; p++) {
      appliers_.push_back(std::make_unique<WindowApplier>(store_->partition(p), "tally.deltas", kParts));
      ASSERT_TRUE(appliers_.back()->Load().ok());
    }
  }
  // Routes `d` to its entity's partition as one single-delta batch, like the
  // router would, and commits it.
  void Apply(Delta d) {
    uint32_t p = schemas::PartitionOf(d.entity, kParts);
    d.source.offset = next_offset_++;
    schemas::DeltaBatchBuilder b;
    d.source.stream = b.StreamIndex("tally.events", 0);
    b.Add(d);
    std::string bytes = b.Finish();
    std::vector<schemas::DeltaBatchBuilder> derived(kParts);
    ASSERT_TRUE(appliers_[p]->ApplyBatch(bytes, deltas_offset_[p]++, &derived).ok());
    ASSERT_TRUE(appliers_[p]->Commit().ok());
    for (uint32_t t = 0; t < kParts; t++) {
      if (derived[t].empty()) continue;
      std::string db = derived[t].Finish();
      ASSERT_TRUE(appliers_[t]->ApplyBatch(db, deltas_offset_[t]++, nullptr).ok());
      ASSERT_TRUE(appliers_[t]->Commit().ok());
    }
  }
  static Delta Op(DeltaOp op, uint64_t entity, uint64_t member = 0, int64_t ts = 0) {
    Delta d;
    d.op = op;
    d.entity = entity;
    d.member = member;
    d.source.ts = ts;
    return d;
  }
  void Notice(uint64_t id) { Apply(Op(DeltaOp::kNoticeAppend, schemas::kGlobalEntity, id, 1)); }
  // One batch of notices for the global partition, as the router would
  // publish them from one input stream.
  std::string NoticeBatch(const std::vector<uint64_t>& ids) {
    schemas::DeltaBatchBuilder b;
    for (uint64_t id : ids) {
      Delta d = Op(DeltaOp::kNoticeAppend, schemas::kGlobalEntity, id, 1);
      d.source.stream = b.StreamIndex("tally.events", 0);
      d.source.offset = next_offset_++;
      b.Add(d);
    }
    return b.Finish();
  }
  int64_t NextDeltasOffset() {
    return deltas_offset_[schemas::PartitionOf(schemas::kGlobalEntity, kParts)]++;
  }
  void ReadNotice(uint64_t user, uint64_t id, int64_t ts = 1) { Apply(Op(DeltaOp::kNoticeRead, user, id, ts)); }
  void Post(uint64_t author, int64_t n) {
    Delta d = Op(DeltaOp::kUserCounter, author);
    d.field = static_cast<uint8_t>(schemas::UserField::kPosts);
    d.amount = n;
    Apply(d);
  }
  void Follow(uint64_t u, uint64_t t, bool set = true) { Apply(Op(set ? DeltaOp::kFollowSet : DeltaOp::kFollowUnset, u, t)); }
  void Snapshot(uint64_t user, std::vector<std::pair<uint64_t, uint64_t>> snap, int64_t ts = 5) {
    snaps_.push_back(std::move(snap));
    Delta d = Op(DeltaOp::kFeedSnapshot, user, 0, ts);
    d.snapshot = snaps_.back().data();
    d.snapshot_size = static_cast<uint32_t>(snaps_.back().size());
    Apply(d);
  }
  void RedDot(const std::string& ch, int64_t ts) {
    texts_.push_back(ch);
    Delta d = Op(DeltaOp::kRedDotPublish, schemas::kGlobalEntity, 0, ts);
    d.text = texts_.back();
    Apply(d);
  }
  void Click(uint64_t user, const std::string& ch, int64_t ts) {
    texts_.push_back(ch);
    Delta d = Op(DeltaOp::kRedDotRead, user, 0, ts);
    d.text = texts_.back();
    Apply(d);
  }
  // Two notices and a red dot; user 5 reads and clicks on day 10-11 and
  // is not seen again, user 6 reads on day 45 (for the inactive purge).
  void UsersLastSeenOnDays11And45(int64_t day) {
    Notice(1);
    Notice(2);
    RedDot("ch", 10 * day);
    ReadNotice(5, 1, /*ts=*/10 * day);
    Click(5, "ch", 11 * day);
    ReadNotice(6, 1, /*ts=*/45 * day);
  }
  store::UnreadView Unread(uint64_t user) {
    auto u = store_->GetUnread(user);
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    return u.ok() ? *u : store::UnreadView();
  }

  static constexpr uint32_t kParts = 4;
  testing::TempDir temp_{"unread-test"};
  const fs::path& dir_ = temp_.path();
  std::unique_ptr<store::StateStore> store_;
  std::vector<std::unique_ptr<WindowApplier>> appliers_;
  int64_t next_offset_ = 0;
  int64_t deltas_offset_[kParts] = {0, 0, 0, 0};
  int64_t now_ms_ = 0;
  std::deque<std::vector<std::pair<uint64_t, uint64_t>>> snaps_;
  std::deque<std::string> texts_;
};

TEST_P(UnreadTest, NoticesCountThoseAboveTheLastRead) {
  for (uint64_t id : {10, 20, 30, 40}) Notice(id);
  EXPECT_EQ(Unread(7).notice, 0) << "a user with no last-read id reads 0";
  ReadNotice(7, 20);
  EXPECT_EQ(Unread(7).notice, 2);
  ReadNotice(7, 25);  // between two notices
  EXPECT_EQ(Unread(7).notice, 2);
  ReadNotice(7, 5);  // below every notice: all are unread
  EXPECT_EQ(Unread(7).notice, 4);
  Notice(50);
  EXPECT_EQ(Unread(7).notice, 5);
  ReadNotice(7, 50);
  EXPECT_EQ(Unread(7).notice, 0);
  auto newest = store_->NewestNoticeId();
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(*newest, 50u);
}

// Notices reach the list in any order (published unkeyed, they come from
// every input partition): each distinct id counts once, however late, in
// one window or across windows, while a window is still being written,
// and after a restart that reads the list back.
TEST_P(UnreadTest, LateNoticesCountAndRepeatedOnesAreIgnored) {
  // user -> last-read id; user 5 has read nothing.
  const std::vector<std::pair<uint64_t, uint64_t>> reads = {{1, 0}, {2, 25}, {3, 40}, {4, 100}};
  for (const auto& [user, id] : reads) ReadNotice(user, id);
  auto expect = [&](std::vector<int64_t> want) {
    for (size_t i = 0; i < reads.size(); i++) {
      EXPECT_EQ(Unread(reads[i].first).notice, want[i])
          << "user " << reads[i].first << " read up to " << reads[i].second;
    }
    EXPECT_EQ(Unread(5).notice, 0) << "a user with no last-read id reads 0";
  };
  WindowApplier& global = *appliers_[schemas::PartitionOf(schemas::kGlobalEntity, kParts)];
  auto repeats = [&] { return global.TakeStats().repeated_notices; };

  // One window: 30, 50 and 30 again.
  ASSERT_TRUE(global.ApplyBatch(NoticeBatch({30, 50, 30}), NextDeltasOffset(), nullptr).ok());
  ASSERT_TRUE(global.Commit().ok());
  expect({2, 2, 1, 0});
  EXPECT_EQ(repeats(), 1u);

  // 10 and 40 sealed, and 40, 20 and 50 applied while they are written.
  ASSERT_TRUE(global.ApplyBatch(NoticeBatch({10, 40}), NextDeltasOffset(), nullptr).ok());
  global.Seal();
  ASSERT_TRUE(global.ApplyBatch(NoticeBatch({40, 20, 50}), NextDeltasOffset(), nullptr).ok());
  ASSERT_TRUE(global.CommitSealed().ok());
  global.FinishCommit();
  ASSERT_TRUE(global.Commit().ok());
  expect({5, 3, 1, 0});
  EXPECT_EQ(repeats(), 2u);
  EXPECT_EQ(store_->NewestNoticeId().value(), 50u);

  // A restart reads the list back: 20 is still a repeat, 5 and 45 count.
  Open();
  WindowApplier& again = *appliers_[schemas::PartitionOf(schemas::kGlobalEntity, kParts)];
  ASSERT_TRUE(again.ApplyBatch(NoticeBatch({20, 5, 45}), NextDeltasOffset(), nullptr).ok());
  ASSERT_TRUE(again.Commit().ok());
  expect({7, 4, 2, 0});
  EXPECT_EQ(again.TakeStats().repeated_notices, 1u);
  ReadNotice(4, 30);
  EXPECT_EQ(Unread(4).notice, 3);
}

TEST_P(UnreadTest, AFloodOfRepeatedNoticesIsCountedButLoggedOnlyAFewTimes) {
  // A producer whose notice ids restart at 1 (a second generator run).
  for (uint64_t id = 1; id <= 1000; id++) Notice(id);
  ::testing::internal::CaptureStderr();
  for (uint64_t id = 1; id <= 1000; id++) Notice(id);
  std::string log = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t at = 0; (at = log.find("ignored, already in the list", at)) != std::string::npos;
       at++) {
    lines++;
  }
  EXPECT_EQ(lines, 10u) << log;
  EXPECT_NE(log.find("notice 1 ignored"), std::string::npos) << log;
  uint64_t repeated = 0;
  for (auto& a : appliers_) repeated += a->TakeStats().repeated_notices;
  EXPECT_EQ(repeated, 1000u);
  Notice(1001);
  ReadNotice(1, 1);
  EXPECT_EQ(Unread(1).notice, 1000);
}

TEST_P(UnreadTest, RedDotsShowUntilClickedAfterTheirTime) {
  RedDot("discover", 100);
  RedDot("games", 50);
  auto u = Unread(3);
  ASSERT_EQ(u.red_dots.size(), 2u);
  EXPECT_EQ(u.red_dots[0], (std::pair<std::string, bool>{"discover", true}));
  EXPECT_EQ(u.red_dots[1], (std::pair<std::string, bool>{"games", true}));
  Click(3, "discover", 120);
  Click(3, "games", 10);  // clicked before the dot's time: still shows
  u = Unread(3);
  EXPECT_FALSE(u.red_dots[0].second);
  EXPECT_TRUE(u.red_dots[1].second);
  RedDot("discover", 90);  // an older publish does not move the dot back
  EXPECT_FALSE(Unread(3).red_dots[0].second);
  RedDot("discover", 130);
  EXPECT_TRUE(Unread(3).red_dots[0].second);
  Click(3, "discover", 100);  // an older click does not move the user's time back
  EXPECT_TRUE(Unread(3).red_dots[0].second);
  Click(3, "never-published", 5);  // only channels with a global time are listed
  EXPECT_EQ(Unread(3).red_dots.size(), 2u);
}

TEST_P(UnreadTest, FeedCountsNewPostsOfFolloweesInBothSnapshotAndFollowSet) {
  Follow(1, 100);
  Follow(1, 200);
  Follow(1, 300);
  Post(100, 5);
  Post(200, 2);
  EXPECT_EQ(Unread(1).feed, 0) << "no snapshot yet: 0";
  auto snap = store_->CurrentFolloweePosts(1);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(*snap, (std::vector<std::pair<uint64_t, uint64_t>>{{100, 5}, {200, 2}, {300, 0}}));
  Snapshot(1, *snap);
  EXPECT_EQ(Unread(1).feed, 0);
  Post(100, 3);
  Post(300, 1);
  EXPECT_EQ(Unread(1).feed, 4);
  Follow(1, 400);  // followed after the snapshot: not counted
  Post(400, 9);
  EXPECT_EQ(Unread(1).feed, 4);
  Follow(1, 300, false);  // unfollowed: no longer counted
  EXPECT_EQ(Unread(1).feed, 3);
  Post(200, -2);  // deleted posts: never negative
  EXPECT_EQ(Unread(1).feed, 3);
  auto stored = store_->GetFeedSnapshot(1);
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(stored->exists);
  EXPECT_EQ(stored->taken_ts, 5);
  EXPECT_EQ(stored->followees.size(), 3u);
}

TEST_P(UnreadTest, InactiveUsersNoticeAndRedDotRecordsArePurgedByCompaction) {
  const int64_t day = 86400000;
  UsersLastSeenOnDays11And45(day);
  now_ms_ = 50 * day;  // user 5 untouched for 39 days, user 6 for 5
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(Unread(5).notice, 0) << "purged: reads as a new user";
  EXPECT_TRUE(Unread(5).red_dots[0].second) << "purged: the dot shows again";
  EXPECT_EQ(Unread(6).notice, 1) << "active user kept";
}

TEST_P(UnreadTest, WhatAPurgeMayRemoveIsNotAnsweredFromBeforeIt) {
  const int64_t day = 86400000;
  UsersLastSeenOnDays11And45(day);
  now_ms_ = 12 * day;
  // Read while nothing can be purged (with a cache, these are kept).
  EXPECT_EQ(Unread(5).notice, 1);
  EXPECT_FALSE(Unread(5).red_dots[0].second);
  EXPECT_EQ(Unread(6).notice, 1);
  now_ms_ = 50 * day;
  ASSERT_TRUE(store_->CompactAll().ok());
  EXPECT_EQ(Unread(5).notice, 0) << "purged: reads as a new user";
  EXPECT_TRUE(Unread(5).red_dots[0].second) << "purged: the dot shows again";
  EXPECT_EQ(Unread(6).notice, 1) << "active user kept";
}

TEST_P(UnreadTest, EveryRecordAnUnreadReadsChangesItsAnswerAtOnce) {
  Notice(10);
  Notice(20);
  RedDot("a", 100);
  Post(300, 2);
  Follow(9, 300);
  for (int round = 0; round < 2; round++) {  // the second round reads what the first cached
    EXPECT_EQ(Unread(9).notice, 0);
    EXPECT_TRUE(Unread(9).red_dots[0].second);
    EXPECT_EQ(Unread(9).feed, 0);
  }
  ReadNotice(9, 10);
  EXPECT_EQ(Unread(9).notice, 1);
  Click(9, "a", 150);
  EXPECT_FALSE(Unread(9).red_dots[0].second);
  Snapshot(9, {{300, 2}});
  Post(300, 3);
  EXPECT_EQ(Unread(9).feed, 3);
  Snapshot(9, {});
  EXPECT_EQ(Unread(9).feed, 0) << "an empty snapshot counts nothing";
  Snapshot(9, {{300, 4}});
  EXPECT_EQ(Unread(9).feed, 1);
  ReadNotice(9, 20);
  EXPECT_EQ(Unread(9).notice, 0);
}

INSTANTIATE_TEST_SUITE_P(ReadCache, UnreadTest, ::testing::Values(uint64_t{0}, uint64_t{1} << 20),
                         [](const ::testing::TestParamInfo<uint64_t>& info) {
                           return info.param == 0 ? std::string("NoCache") : std::string("Cache");
                         });

}  // namespace
}  // namespace tally::aggregator
