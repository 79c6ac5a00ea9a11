#include "store/state_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "testing/temp_dir.h"

namespace tally::store {
namespace {

namespace fs = std::filesystem;

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.dir = dir_.string();
    options_.partitions = 4;
    options_.block_cache_bytes = 8 << 20;
  }

  std::unique_ptr<StateStore> OpenOrDie() {
    auto s = StateStore::Open(options_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  testing::TempDir temp_{"store-test"};
  const fs::path& dir_ = temp_.path();
  StoreOptions options_;
};

TEST_F(StateStoreTest, UnknownIdsReadZero) {
  auto store = OpenOrDie();
  std::vector<uint64_t> ids = {1, 2, 3};
  std::vector<PostCounts> out;
  ASSERT_TRUE(store->GetPostCounts(ids, &out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].post_id, 3u);
  EXPECT_EQ(out[2].like, 0);
  auto uc = store->GetUserCounts(9);
  ASSERT_TRUE(uc.ok());
  EXPECT_EQ(uc->followers, 0);
}

TEST_F(StateStoreTest, MergedCountersAndProgressSurviveReopen) {
  {
    auto store = OpenOrDie();
    uint32_t p = schemas::PartitionOf(7, 4);
    for (int round = 0; round < 3; round++) {
      PartitionBatch b;
      CounterOp ops[4] = {CounterOp::Add(2), CounterOp::Add(1), {}, CounterOp::Add(-5)};
      b.MergePostCounters(7, ops);
      b.PutLike(7, 100);
      Progress pr;
      pr.next_deltas_offset = 10 + round;
      pr.max_event_ts = 1000;
      pr.marks[{"tally.events", 3}] = SourceMark{42 + round, 1, 999};
      b.SetProgress(pr);
      ASSERT_TRUE(store->partition(p)->Commit(&b).ok());
    }
    auto pr = store->partition(p)->LoadProgress();
    ASSERT_TRUE(pr.ok());
    EXPECT_EQ(pr->next_deltas_offset, 12);
  }
  auto store = OpenOrDie();
  std::vector<uint64_t> ids = {7};
  std::vector<PostCounts> out;
  ASSERT_TRUE(store->GetPostCounts(ids, &out).ok());
  EXPECT_EQ(out[0].like, 6);
  EXPECT_EQ(out[0].repost, 3);
  EXPECT_EQ(out[0].view, 0);  // floored at zero
  auto liked = store->IsLiked(7, 100);
  ASSERT_TRUE(liked.ok());
  EXPECT_TRUE(*liked);
  auto pr = store->partition(schemas::PartitionOf(7, 4))->LoadProgress();
  ASSERT_TRUE(pr.ok());
  EXPECT_EQ(pr->next_deltas_offset, 12);
  auto m = pr->marks.at({"tally.events", 3});
  EXPECT_EQ(m.offset, 44);
  EXPECT_TRUE(m.Covers(44, 1));
  EXPECT_FALSE(m.Covers(44, 2));
}

// Below the free-space reserve a commit writes nothing and says why, the
// store's WriteProblem() names the disk, reads go on, and once space is
// back the same batch commits.
TEST_F(StateStoreTest, BelowTheFreeSpaceReserveNothingIsWrittenUntilSpaceIsBack) {
  std::atomic<uint64_t> free_bytes{1ull << 30};
  options_.min_free_bytes = 64 << 20;
  options_.free_bytes = [&free_bytes] { return free_bytes.load(); };
  auto store = OpenOrDie();
  const uint32_t p = schemas::PartitionOf(7, 4);
  auto batch = [](int64_t offset) {
    auto b = std::make_unique<PartitionBatch>();
    CounterOp ops[4] = {CounterOp::Add(1), {}, {}, {}};
    b->MergePostCounters(7, ops);
    Progress pr;
    pr.next_deltas_offset = offset;
    b->SetProgress(pr);
    return b;
  };
  ASSERT_TRUE(store->partition(p)->Commit(batch(1).get()).ok());
  EXPECT_EQ(store->WriteProblem(), "");

  free_bytes = 10 << 20;
  auto held = batch(2);
  base::Status st = store->partition(p)->Commit(held.get());
  EXPECT_EQ(st.code(), base::StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("10.0 MiB free, below the 64.0 MiB"), std::string::npos)
      << st.message();
  EXPECT_NE(store->WriteProblem().find("is full"), std::string::npos) << store->WriteProblem();
  EXPECT_TRUE(store->partition(p)->Resume().ok());  // RocksDB itself is fine
  auto pr = store->partition(p)->LoadProgress();
  ASSERT_TRUE(pr.ok());
  EXPECT_EQ(pr->next_deltas_offset, 1);
  std::vector<uint64_t> ids = {7};
  std::vector<PostCounts> out;
  ASSERT_TRUE(store->GetPostCounts(ids, &out).ok());
  EXPECT_EQ(out[0].like, 1);

  free_bytes = 1ull << 30;
  ASSERT_TRUE(store->partition(p)->Commit(held.get()).ok());
  EXPECT_EQ(store->WriteProblem(), "");
  ASSERT_TRUE(store->GetPostCounts(ids, &out).ok());
  EXPECT_EQ(out[0].like, 2);
}

// RocksDB's info log is tally's own (info_log.h): every writable partition
// has its LOG, and it holds RocksDB's lines.
TEST_F(StateStoreTest, EachPartitionKeepsRocksDbsInfoLog) {
  { auto store = OpenOrDie(); }
  for (int i = 0; i < 4; i++) {
    fs::path log = dir_ / ("partition-00" + std::to_string(i)) / "LOG";
    ASSERT_TRUE(fs::exists(log)) << log;
    EXPECT_GT(fs::file_size(log), 0u) << log;
  }
}

TEST_F(StateStoreTest, FolloweesListedInIdOrder) {
  auto store = OpenOrDie();
  PartitionBatch b;
  for (uint64_t t : {300ull, 5ull, 70000ull}) b.PutFollow(11, t);
  b.PutFollow(12, 1);
  ASSERT_TRUE(store->partition(schemas::PartitionOf(11, 4))->Commit(&b).ok());
  auto f = store->GetFollowees(11);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, (std::vector<uint64_t>{5, 300, 70000}));
}

TEST_F(StateStoreTest, RejectsOtherPartitionCount) {
  { auto store = OpenOrDie(); }
  options_.partitions = 8;
  auto s = StateStore::Open(options_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), base::StatusCode::kInvalidArgument);
}

TEST_F(StateStoreTest, RejectsForeignDirectory) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "something") << "not tally";
  auto s = StateStore::Open(options_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), base::StatusCode::kFailedPrecondition);
}

TEST_F(StateStoreTest, TallyFileIsWrittenOnceEveryPartitionExists) {
  // A creation that stopped before TALLY left partition directories only:
  // the next open takes the directory as new and completes it.
  fs::create_directories(dir_ / "partition-000");
  fs::create_directories(dir_ / "partition-002");
  {
    auto store = OpenOrDie();
    EXPECT_TRUE(fs::exists(dir_ / "TALLY"));
  }
  for (int i = 0; i < 4; i++) {
    EXPECT_TRUE(fs::exists(dir_ / ("partition-00" + std::to_string(i)) / "CURRENT")) << i;
  }
  StoreOptions ro = options_;
  ro.read_only = true;
  auto reader = StateStore::Open(ro);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
}

TEST_F(StateStoreTest, CorruptMetaFileIsReported) {
  { auto store = OpenOrDie(); }
  std::ofstream(dir_ / "TALLY", std::ios::trunc) << "{garbage";
  auto s = StateStore::Open(options_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), base::StatusCode::kCorruption);
}

TEST_F(StateStoreTest, ReadOnlyStoreFollowsWriterAfterCatchUp) {
  auto writer = OpenOrDie();
  StoreOptions ro = options_;
  ro.read_only = true;
  auto reader_r = StateStore::Open(ro);
  ASSERT_TRUE(reader_r.ok()) << reader_r.status().ToString();
  auto reader = std::move(reader_r).value();
  PartitionBatch b;
  CounterOp ops[3] = {CounterOp::Add(4), {}, {}};
  b.MergeUserCounters(5, ops);
  ASSERT_TRUE(writer->partition(schemas::PartitionOf(5, 4))->Commit(&b).ok());
  ASSERT_TRUE(reader->CatchUp().ok());
  auto uc = reader->GetUserCounts(5);
  ASSERT_TRUE(uc.ok());
  EXPECT_EQ(uc->posts, 4);
}

// A reader following a writer that closes and reopens (as after a crash:
// the WAL is recovered and flushed) must not count the recovered merges
// twice.
TEST_F(StateStoreTest, ReadOnlyStoreSurvivesItsWriterReopening) {
  auto writer = OpenOrDie();
  StoreOptions ro = options_;
  ro.read_only = true;
  auto reader_r = StateStore::Open(ro);
  ASSERT_TRUE(reader_r.ok()) << reader_r.status().ToString();
  auto reader = std::move(reader_r).value();
  const uint32_t p = schemas::PartitionOf(5, 4);
  for (int i = 0; i < 3; i++) {
    PartitionBatch b;
    CounterOp ops[3] = {CounterOp::Add(1), {}, {}};
    b.MergeUserCounters(5, ops);
    ASSERT_TRUE(writer->partition(p)->Commit(&b).ok());
  }
  ASSERT_TRUE(reader->CatchUp().ok());
  EXPECT_EQ(reader->GetUserCounts(5)->posts, 3);
  writer.reset();
  writer = OpenOrDie();
  PartitionBatch b;
  CounterOp ops[3] = {CounterOp::Add(1), {}, {}};
  b.MergeUserCounters(5, ops);
  ASSERT_TRUE(writer->partition(p)->Commit(&b).ok());
  for (int i = 0; i < 3; i++) ASSERT_TRUE(reader->CatchUp().ok());
  EXPECT_EQ(reader->GetUserCounts(5)->posts, 4);
  EXPECT_EQ(writer->GetUserCounts(5)->posts, 4);
}

// tally serve calls CatchUp() nowhere: the store's own thread follows the
// writer every catch_up_interval_ms, and stops when the store is destroyed.
TEST_F(StateStoreTest, ReadOnlyStoreFollowsItsWriterByItself) {
  auto writer = OpenOrDie();
  StoreOptions ro = options_;
  ro.read_only = true;
  ro.catch_up_interval_ms = 10;
  auto reader_r = StateStore::Open(ro);
  ASSERT_TRUE(reader_r.ok()) << reader_r.status().ToString();
  auto reader = std::move(reader_r).value();
  const uint32_t global = schemas::PartitionOf(schemas::kGlobalEntity, 4);
  {
    PartitionBatch b;
    CounterOp ops[3] = {CounterOp::Add(4), {}, {}};
    b.MergeUserCounters(5, ops);
    ASSERT_TRUE(writer->partition(schemas::PartitionOf(5, 4))->Commit(&b).ok());
    PartitionBatch n;
    n.PutNotice(300, "n");
    ASSERT_TRUE(writer->partition(global)->Commit(&n).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((reader->GetUserCounts(5)->posts != 4 || reader->NewestNoticeId().value() != 300) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(reader->GetUserCounts(5)->posts, 4);
  EXPECT_EQ(reader->NewestNoticeId().value(), 300u);
  reader.reset();  // joins the thread
}

TEST_F(StateStoreTest, RecordsClusterIdentity) {
  {
    auto store = OpenOrDie();
    EXPECT_EQ(store->recorded_cluster(), "");
    ASSERT_TRUE(store->RecordCluster("abc/123").ok());
  }
  auto store = OpenOrDie();
  EXPECT_EQ(store->recorded_cluster(), "abc/123");
}

// With the read cache: every read after a commit returned sees that commit,
// for single reads and batched ones, while readers race the writer.
TEST_F(StateStoreTest, ReadCacheNeverServesAValueFromBeforeACommit) {
  options_.read_cache_bytes = 1 << 20;
  auto store = OpenOrDie();
  constexpr uint64_t kPosts = 8;
  std::atomic<int64_t> committed{0};  // rounds whose commits all returned
  std::atomic<bool> stop{false};
  std::atomic<int64_t> violations{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; r++) {
    readers.emplace_back([&] {
      std::vector<uint64_t> ids;
      for (uint64_t id = 1; id <= kPosts; id++) ids.push_back(id);
      std::vector<PostCounts> out;
      while (!stop) {
        int64_t floor = committed.load();
        if (!store->GetPostCounts(ids, &out).ok()) violations++;
        for (const PostCounts& pc : out) {
          if (pc.like < floor) violations++;
        }
        auto uc = store->GetUserCounts(3);
        if (!uc.ok() || uc->posts < floor) violations++;
        auto un = store->GetUnreadCounters(3);
        if (!un.ok() || un->counts[0] < floor) violations++;
      }
    });
  }
  for (int round = 1; round <= 300; round++) {
    for (uint32_t p = 0; p < 4; p++) {
      PartitionBatch b;
      for (uint64_t id = 1; id <= kPosts; id++) {
        if (schemas::PartitionOf(id, 4) != p) continue;
        CounterOp ops[4] = {CounterOp::Add(1), {}, {}, {}};
        b.MergePostCounters(id, ops);
      }
      if (schemas::PartitionOf(3, 4) == p) {
        CounterOp uops[3] = {CounterOp::Add(1), {}, {}};
        b.MergeUserCounters(3, uops);
        CounterOp nops[6] = {CounterOp::Add(1), {}, {}, {}, {}, {}};
        b.MergeUnreadCounters(3, nops);
      }
      ASSERT_TRUE(store->partition(p)->Commit(&b).ok());
    }
    committed = round;
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(violations.load(), 0);
  std::vector<uint64_t> ids = {1, kPosts};
  std::vector<PostCounts> out;
  ASSERT_TRUE(store->GetPostCounts(ids, &out).ok());
  EXPECT_EQ(out[0].like, 300);
  EXPECT_EQ(out[1].like, 300);
  EXPECT_EQ(store->GetUserCounts(3)->posts, 300);
}

// The global red-dot table is cached too: a dot published after a read is
// seen by the next read.
TEST_F(StateStoreTest, ReadCacheFollowsRedDotCommits) {
  options_.read_cache_bytes = 1 << 20;
  auto store = OpenOrDie();
  const uint32_t global = schemas::PartitionOf(schemas::kGlobalEntity, 4);
  const uint64_t user = 42;
  auto dots = [&] {
    auto view = store->GetUnread(user);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    return view.ok() ? view->red_dots : std::vector<std::pair<std::string, bool>>{};
  };
  auto commit = [&](uint32_t p, const std::function<void(PartitionBatch*)>& f) {
    PartitionBatch b;
    f(&b);
    ASSERT_TRUE(store->partition(p)->Commit(&b).ok());
  };
  EXPECT_TRUE(dots().empty());
  commit(global, [](PartitionBatch* b) { b->MaxRedDot("feed", 10); });
  EXPECT_EQ(dots(), (std::vector<std::pair<std::string, bool>>{{"feed", true}}));
  commit(schemas::PartitionOf(user, 4),
         [&](PartitionBatch* b) { b->MaxUserRedDot(user, "feed", 20); });
  EXPECT_EQ(dots(), (std::vector<std::pair<std::string, bool>>{{"feed", false}}));
  commit(global, [](PartitionBatch* b) {
    b->MaxRedDot("feed", 30);
    b->MaxRedDot("games", 5);
  });
  EXPECT_EQ(dots(), (std::vector<std::pair<std::string, bool>>{{"feed", true}, {"games", true}}));
}

// The notice list is a set of ids: a user's unread notices are those with an
// id above their last-read id, in whatever order the notices were
// committed, and the list is read back from RocksDB on open.
TEST_F(StateStoreTest, UnreadNoticesAreTheIdsAboveTheLastReadWhateverTheirOrder) {
  const uint32_t global = schemas::PartitionOf(schemas::kGlobalEntity, 4);
  // user -> last-read id; user 9 has read nothing.
  const std::vector<std::pair<uint64_t, uint64_t>> reads = {{1, 0},  {2, 10}, {3, 15},
                                                            {4, 30}, {5, 50}, {6, 60}};
  auto expect = [&](StateStore* store, const std::vector<int64_t>& want, uint64_t newest) {
    for (size_t i = 0; i < reads.size(); i++) {
      auto n = store->GetNoticeUnread(reads[i].first);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      EXPECT_EQ(*n, want[i]) << "user " << reads[i].first << " read up to " << reads[i].second;
      auto view = store->GetUnread(reads[i].first);
      ASSERT_TRUE(view.ok()) << view.status().ToString();
      EXPECT_EQ(view->notice, want[i]);
    }
    EXPECT_EQ(store->GetNoticeUnread(9).value(), 0) << "no last-read id: 0";
    EXPECT_EQ(store->NewestNoticeId().value(), newest);
  };
  {
    auto store = OpenOrDie();
    for (const auto& [user, id] : reads) {
      PartitionBatch b;
      b.SetNoticeRead(user, id, 1);
      ASSERT_TRUE(store->partition(schemas::PartitionOf(user, 4))->Commit(&b).ok());
    }
    expect(store.get(), {0, 0, 0, 0, 0, 0}, 0);
    // 30 and 50 first, then 10 and 20 late, one window each; 40 last with
    // 10 again in its window.
    for (uint64_t id : {50, 30, 10, 20}) {
      PartitionBatch b;
      b.PutNotice(id, "n");
      ASSERT_TRUE(store->partition(global)->Commit(&b).ok());
    }
    expect(store.get(), {4, 3, 3, 1, 0, 0}, 50);
    EXPECT_TRUE(store->partition(global)->HasNotice(20));
    EXPECT_FALSE(store->partition(global)->HasNotice(40));
    PartitionBatch b;
    b.PutNotice(40, "n");
    b.PutNotice(10, "n");
    ASSERT_TRUE(store->partition(global)->Commit(&b).ok());
    expect(store.get(), {5, 4, 4, 2, 0, 0}, 50);
  }
  auto store = OpenOrDie();
  expect(store.get(), {5, 4, 4, 2, 0, 0}, 50);
  EXPECT_TRUE(store->partition(global)->HasNotice(40));
}

// `tally serve` follows the notice list too: a late notice committed by the
// writer is counted once the reader catches up, also after the writer
// reopened its database.
TEST_F(StateStoreTest, ReadOnlyStoreFollowsLateNotices) {
  auto writer = OpenOrDie();
  const uint32_t global = schemas::PartitionOf(schemas::kGlobalEntity, 4);
  auto commit = [&](uint32_t p, const std::function<void(PartitionBatch*)>& f) {
    PartitionBatch b;
    f(&b);
    ASSERT_TRUE(writer->partition(p)->Commit(&b).ok());
  };
  commit(schemas::PartitionOf(7, 4), [](PartitionBatch* b) { b->SetNoticeRead(7, 100, 1); });
  commit(global, [](PartitionBatch* b) { b->PutNotice(200, "n"); });
  StoreOptions ro = options_;
  ro.read_only = true;
  auto reader_r = StateStore::Open(ro);
  ASSERT_TRUE(reader_r.ok()) << reader_r.status().ToString();
  auto reader = std::move(reader_r).value();
  EXPECT_EQ(reader->GetNoticeUnread(7).value(), 1);
  commit(global, [](PartitionBatch* b) { b->PutNotice(150, "n"); });
  ASSERT_TRUE(reader->CatchUp().ok());
  EXPECT_EQ(reader->GetNoticeUnread(7).value(), 2);
  // Commits without notices leave the list as it is.
  commit(global, [](PartitionBatch* b) { b->MaxRedDot("feed", 5); });
  ASSERT_TRUE(reader->CatchUp().ok());
  EXPECT_EQ(reader->GetNoticeUnread(7).value(), 2);
  EXPECT_EQ(reader->NewestNoticeId().value(), 200u);
  writer.reset();
  writer = OpenOrDie();
  commit(global, [](PartitionBatch* b) { b->PutNotice(101, "n"); });
  for (int i = 0; i < 3; i++) ASSERT_TRUE(reader->CatchUp().ok());
  EXPECT_EQ(reader->GetNoticeUnread(7).value(), 3);
  EXPECT_EQ(writer->GetNoticeUnread(7).value(), 3);
}

// A read that starts after a commit returned counts that commit's notices,
// while readers race the writer adding ever older ones.
TEST_F(StateStoreTest, AReadAfterACommitCountsItsLateNotices) {
  options_.read_cache_bytes = 1 << 20;
  auto store = OpenOrDie();
  const uint32_t global = schemas::PartitionOf(schemas::kGlobalEntity, 4);
  {
    PartitionBatch b;
    b.SetNoticeRead(3, 0, 1);
    ASSERT_TRUE(store->partition(schemas::PartitionOf(3, 4))->Commit(&b).ok());
  }
  std::atomic<int64_t> committed{0};
  std::atomic<bool> stop{false};
  std::atomic<int64_t> violations{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; r++) {
    readers.emplace_back([&] {
      while (!stop) {
        int64_t floor = committed.load();
        auto n = store->GetNoticeUnread(3);
        if (!n.ok() || *n < floor) violations++;
      }
    });
  }
  for (uint64_t id = 500; id >= 1; id--) {
    PartitionBatch b;
    b.PutNotice(id, "n");
    ASSERT_TRUE(store->partition(global)->Commit(&b).ok());
    committed = static_cast<int64_t>(501 - id);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(store->GetNoticeUnread(3).value(), 500);
}

}  // namespace
}  // namespace tally::store
