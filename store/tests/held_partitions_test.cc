// The partitions a store holds at run time (store/README.md, "Partitions
// held at run time"): opening a subset, OpenPartition / ClosePartition /
// DropPartition, what reads and writes of a partition not held answer, a
// read-only follower following its writer's set, and readers and commits
// racing a control thread that closes and opens partitions.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/state_store.h"
#include "testing/temp_dir.h"

namespace tally::store {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kParts = 4;

// The smallest id >= `from` that partition `p` owns.
uint64_t IdIn(uint32_t p, uint64_t from = 1) {
  while (schemas::PartitionOf(from, kParts) != p) from++;
  return from;
}

class HeldPartitionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.dir = dir_.string();
    options_.partitions = kParts;
    options_.block_cache_bytes = 8 << 20;
  }

  std::unique_ptr<StateStore> OpenOrDie(std::optional<std::vector<uint32_t>> held = std::nullopt,
                                        bool read_only = false) {
    StoreOptions o = options_;
    o.open_partitions = std::move(held);
    o.read_only = read_only;
    auto s = StateStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // like := `like` more on post `post` (in its partition).
  static base::Status AddLikes(StateStore* s, uint64_t post, int64_t like, int64_t offset = -1) {
    PartitionBatch b;
    CounterOp ops[4] = {CounterOp::Add(like), {}, {}, {}};
    b.MergePostCounters(post, ops);
    if (offset >= 0) {
      Progress pr;
      pr.next_deltas_offset = offset;
      b.SetProgress(pr);
    }
    return s->partition(schemas::PartitionOf(post, kParts))->Commit(&b);
  }

  static int64_t Likes(StateStore* s, uint64_t post) {
    std::vector<PostCounts> out;
    base::Status st = s->GetPostCounts(std::span<const uint64_t>(&post, 1), &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return st.ok() ? out[0].like : -1;
  }

  uint32_t RecordedPartitions() const {
    std::ifstream f(dir_ / "TALLY");
    return nlohmann::json::parse(f)["partitions"].get<uint32_t>();
  }
  std::vector<uint32_t> RecordedHeld() const {
    std::ifstream f(dir_ / "HELD");
    return nlohmann::json::parse(f)["held"].get<std::vector<uint32_t>>();
  }
  fs::path PartitionDir(uint32_t p) const {
    char name[32];
    std::snprintf(name, sizeof(name), "partition-%03u", p);
    return dir_ / name;
  }

  testing::TempDir temp_{"held-test"};
  const fs::path& dir_ = temp_.path();
  StoreOptions options_;
};

TEST_F(HeldPartitionsTest, NotHeldStatusNamesThePartitions) {
  const uint32_t one[] = {5};
  base::Status st = NotHeldError(one);
  EXPECT_EQ(st.code(), base::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "partition 5 is not held here");
  EXPECT_TRUE(IsNotHeld(st));
  EXPECT_EQ(NotHeldPartitions(st), std::vector<uint32_t>{5});
  const uint32_t two[] = {3, 12};
  base::Status with_context = NotHeldError(two).WithContext("reading partition 3 things");
  EXPECT_TRUE(IsNotHeld(with_context)) << with_context.ToString();
  EXPECT_EQ(NotHeldPartitions(with_context), (std::vector<uint32_t>{3, 12}));
  EXPECT_FALSE(IsNotHeld(base::Status::Unavailable("partition 3: RocksDB resumes writing")));
  EXPECT_FALSE(IsNotHeld(base::Status::Internal("partition 5 is not held here")));
  EXPECT_TRUE(NotHeldPartitions(base::Status::Ok()).empty());
}

TEST_F(HeldPartitionsTest, OpensOnlyTheListedPartitionsAndRecordsTheFullCount) {
  auto store = OpenOrDie(std::vector<uint32_t>{0, 2});
  EXPECT_EQ(store->partitions(), kParts);
  EXPECT_EQ(store->HeldPartitions(), (std::vector<uint32_t>{0, 2}));
  EXPECT_TRUE(store->HoldsPartition(2));
  EXPECT_FALSE(store->HoldsPartition(1));
  EXPECT_FALSE(store->HoldsPartition(kParts));
  EXPECT_TRUE(fs::exists(PartitionDir(0) / "CURRENT"));
  EXPECT_FALSE(fs::exists(PartitionDir(1)));
  EXPECT_EQ(RecordedPartitions(), kParts);
  EXPECT_EQ(RecordedHeld(), (std::vector<uint32_t>{0, 2}));

  ASSERT_TRUE(AddLikes(store.get(), IdIn(0), 3).ok());
  EXPECT_EQ(Likes(store.get(), IdIn(0)), 3);
  uint64_t other = IdIn(1);
  std::vector<PostCounts> out;
  base::Status st = store->GetPostCounts(std::span<const uint64_t>(&other, 1), &out);
  EXPECT_TRUE(IsNotHeld(st)) << st.ToString();
  EXPECT_EQ(st.message(), "partition 1 is not held here");
  st = AddLikes(store.get(), other, 1);
  EXPECT_TRUE(IsNotHeld(st)) << st.ToString();

  // Reopened: the same subset, the same data.
  store.reset();
  store = OpenOrDie(std::vector<uint32_t>{0, 2});
  EXPECT_EQ(Likes(store.get(), IdIn(0)), 3);
  EXPECT_EQ(RecordedPartitions(), kParts);
}

// With none held, every read and write answers NotHeldError (HasNotice:
// false), never a crash; what spans partitions names all it missed.
TEST_F(HeldPartitionsTest, AMembersStateOpenedWholeCreatesWhatItDidNotHoldButNotWhatItDid) {
  {
    auto member = OpenOrDie(std::vector<uint32_t>{0, 2});
    ASSERT_TRUE(AddLikes(member.get(), IdIn(0), 3, 7).ok());
  }
  // One process over a member's state: what the member did not hold starts
  // empty (progress 0, applied from the deltas' start), what it held is kept.
  {
    auto whole = OpenOrDie();
    ASSERT_NE(whole, nullptr);
    EXPECT_EQ(whole->HeldPartitions(), (std::vector<uint32_t>{0, 1, 2, 3}));
    EXPECT_EQ(Likes(whole.get(), IdIn(0)), 3);
    EXPECT_EQ(Likes(whole.get(), IdIn(1)), 0);
    EXPECT_EQ(whole->partition(0)->LoadProgress()->next_deltas_offset, 7);
    EXPECT_EQ(whole->partition(1)->LoadProgress()->next_deltas_offset, 0);
  }
  EXPECT_EQ(RecordedHeld(), (std::vector<uint32_t>{0, 1, 2, 3}));
  // Now every partition is held: a missing one is damage again.
  fs::remove_all(PartitionDir(3));
  auto damaged = StateStore::Open(options_);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("partition-003"), std::string::npos)
      << damaged.status().ToString();
}

TEST_F(HeldPartitionsTest, AMembersStateMissingAPartitionItHeldIsDamageWhenOpenedWhole) {
  { auto member = OpenOrDie(std::vector<uint32_t>{0, 2}); }
  fs::remove_all(PartitionDir(2));
  auto damaged = StateStore::Open(options_);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), base::StatusCode::kCorruption) << damaged.status().ToString();
  EXPECT_NE(damaged.status().message().find("partition-002"), std::string::npos)
      << damaged.status().ToString();
  EXPECT_FALSE(fs::exists(PartitionDir(1)));  // nothing created on the way
}

TEST_F(HeldPartitionsTest, EveryReadAndWriteOfAPartitionNotHeldSaysSo) {
  auto store = OpenOrDie(std::vector<uint32_t>{});
  EXPECT_TRUE(store->HeldPartitions().empty());
  EXPECT_EQ(RecordedHeld(), std::vector<uint32_t>{});
  const uint32_t up = schemas::PartitionOf(7, kParts);
  const uint32_t gp = schemas::PartitionOf(schemas::kGlobalEntity, kParts);
  auto expect_not_held = [](const base::Status& st, std::vector<uint32_t> parts) {
    EXPECT_TRUE(IsNotHeld(st)) << st.ToString();
    EXPECT_EQ(NotHeldPartitions(st), parts) << st.ToString();
  };
  expect_not_held(store->GetUserCounts(7).status(), {up});
  expect_not_held(store->GetUnreadCounters(7).status(), {up});
  expect_not_held(store->IsLiked(7, 8).status(), {up});
  expect_not_held(store->GetFollowees(7).status(), {up});
  expect_not_held(store->GetFeedSnapshot(7).status(), {up});
  expect_not_held(store->CurrentFolloweePosts(7).status(), {up});
  expect_not_held(store->MaybeViewed(7, 8).status(), {up});
  expect_not_held(store->NewestNoticeId().status(), {gp});
  std::vector<uint32_t> both = {std::min(up, gp), std::max(up, gp)};
  if (up == gp) both = {up};
  expect_not_held(store->GetNoticeUnread(7).status(), both);
  expect_not_held(store->GetUnread(7).status(), both);
  UnreadGaps gaps;
  expect_not_held(store->GetUnread(7, &gaps).status(), both);  // the user's partition is needed
  expect_not_held(store->LoadAllProgress().status(), {0, 1, 2, 3});
  auto held_progress = store->LoadHeldProgress();
  ASSERT_TRUE(held_progress.ok());
  EXPECT_TRUE(held_progress->empty());
  EXPECT_TRUE(store->CompactAll().ok());
  EXPECT_EQ(store->WriteProblem(), "");

  Partition* p = store->partition(up);
  expect_not_held(p->LoadProgress().status(), {up});
  expect_not_held(p->LoadViewedTables(ViewedOptions()).status(), {up});
  expect_not_held(p->HasLike(7, 8).status(), {up});
  expect_not_held(p->HasFollow(7, 8).status(), {up});
  expect_not_held(p->GetEventId(99).status(), {up});
  EXPECT_FALSE(store->partition(gp)->HasNotice(10));
  expect_not_held(p->Resume(), {up});
  PartitionBatch b;
  b.PutNotice(10, "n");
  expect_not_held(store->partition(gp)->Commit(&b), {gp});
  EXPECT_EQ(p->WriteProblem(), "");
}

TEST_F(HeldPartitionsTest, ABatchFillsWhatIsHeldAndListsWhatIsNot) {
  auto store = OpenOrDie(std::vector<uint32_t>{0, 2});
  // ids: partition 0, 1, 2, 3, 1, 0
  std::vector<uint64_t> ids = {
      IdIn(0), IdIn(1), IdIn(2), IdIn(3), IdIn(1, IdIn(1) + 1), IdIn(0, IdIn(0) + 1)};
  ASSERT_TRUE(AddLikes(store.get(), ids[0], 10).ok());
  ASSERT_TRUE(AddLikes(store.get(), ids[2], 20).ok());
  ASSERT_TRUE(AddLikes(store.get(), ids[5], 50).ok());
  std::vector<PostCounts> out;
  base::Status st = store->GetPostCounts(ids, &out);
  EXPECT_TRUE(IsNotHeld(st)) << st.ToString();
  EXPECT_EQ(NotHeldPartitions(st), (std::vector<uint32_t>{1, 3}));

  MissingPartitions missing;
  ASSERT_TRUE(store->GetPostCounts(ids, &out, &missing).ok());
  EXPECT_EQ(missing.partitions, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(missing.positions, (std::vector<size_t>{1, 3, 4}));
  ASSERT_EQ(out.size(), ids.size());
  EXPECT_EQ(out[0].like, 10);
  EXPECT_EQ(out[2].like, 20);
  EXPECT_EQ(out[5].like, 50);
  EXPECT_EQ(out[1].post_id, ids[1]);
  EXPECT_EQ(out[1].like, 0);

  // Everything held: nothing missing.
  std::vector<uint64_t> held_ids = {ids[0], ids[2]};
  ASSERT_TRUE(store->GetPostCounts(held_ids, &out, &missing).ok());
  EXPECT_TRUE(missing.empty());
  EXPECT_TRUE(missing.positions.empty());
}

// GetUnread with gaps: what needs the global partition is flagged, the feed
// sums the followees read and lists the others with their snapshot counts,
// from which the caller completes it.
TEST_F(HeldPartitionsTest, UnreadSaysWhatItCouldNotCountAndTheFeedCanBeCompleted) {
  auto store = OpenOrDie();
  const uint32_t gp = schemas::PartitionOf(schemas::kGlobalEntity, kParts);
  // The user, and followees in each partition other than the user's and
  // the global one (when those differ).
  const uint32_t up = (gp + 1) % kParts;
  const uint64_t user = IdIn(up, 100);
  std::vector<uint64_t> followees;
  for (uint32_t p = 0; p < kParts; p++) followees.push_back(IdIn(p, 1000));
  auto commit = [&](uint32_t p, const std::function<void(PartitionBatch*)>& f) {
    PartitionBatch b;
    f(&b);
    ASSERT_TRUE(store->partition(p)->Commit(&b).ok());
  };
  // Followee f has 5 + i posts now and had i in the snapshot: feed = 5 each.
  std::vector<std::pair<uint64_t, uint64_t>> snap;
  for (size_t i = 0; i < followees.size(); i++) {
    uint64_t f = followees[i];
    commit(schemas::PartitionOf(f, kParts), [&](PartitionBatch* b) {
      CounterOp ops[3] = {CounterOp::Add(static_cast<int64_t>(5 + i)), {}, {}};
      b->MergeUserCounters(f, ops);
    });
    snap.emplace_back(f, i);
  }
  commit(up, [&](PartitionBatch* b) {
    for (uint64_t f : followees) b->PutFollow(user, f);
    b->PutFeedSnapshot(user, 1, snap.data(), snap.size());
    b->SetNoticeRead(user, 10, 1);
    CounterOp ops[6] = {CounterOp::Add(2), {}, {}, {}, {}, {}};
    b->MergeUnreadCounters(user, ops);
  });
  commit(gp, [](PartitionBatch* b) {
    for (uint64_t id : {10, 20, 30}) b->PutNotice(id, "n");
    b->MaxRedDot("feed", 5);
  });
  auto full = store->GetUnread(user);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->feed, 5 * static_cast<int64_t>(followees.size()));
  EXPECT_EQ(full->notice, 2);
  EXPECT_EQ(full->red_dots.size(), 1u);
  UnreadGaps gaps;
  ASSERT_TRUE(store->GetUnread(user, &gaps).ok());
  EXPECT_TRUE(gaps.empty());

  // A followee's partition goes (not the user's, not the global one).
  const uint32_t gone = (gp + 2) % kParts;
  ASSERT_TRUE(store->ClosePartition(gone).ok());
  auto strict = store->GetUnread(user);
  EXPECT_TRUE(IsNotHeld(strict.status())) << strict.status().ToString();
  EXPECT_EQ(NotHeldPartitions(strict.status()), std::vector<uint32_t>{gone});
  auto partial = store->GetUnread(user, &gaps);
  ASSERT_TRUE(partial.ok()) << partial.status().ToString();
  EXPECT_EQ(gaps.partitions, std::vector<uint32_t>{gone});
  EXPECT_FALSE(gaps.notice);
  EXPECT_FALSE(gaps.red_dots);
  EXPECT_EQ(partial->notice, 2);
  EXPECT_EQ(partial->counters.counts[0], 2);
  ASSERT_EQ(gaps.feed_followees.size(), 1u);
  const uint64_t missing_followee = followees[gone];
  EXPECT_EQ(gaps.feed_followees[0], snap[gone]);
  // The caller completes the feed with the count the owner has.
  const int64_t owner_count = static_cast<int64_t>(5 + gone);
  EXPECT_EQ(
      partial->feed + std::max<int64_t>(0, owner_count - static_cast<int64_t>(snap[gone].second)),
      full->feed);
  MissingPartitions missing;
  auto posts = store->CurrentFolloweePosts(user, &missing);
  ASSERT_TRUE(posts.ok());
  EXPECT_EQ(missing.partitions, std::vector<uint32_t>{gone});
  ASSERT_EQ(missing.positions.size(), 1u);
  EXPECT_EQ((*posts)[missing.positions[0]].first, missing_followee);
  EXPECT_TRUE(IsNotHeld(store->CurrentFolloweePosts(user).status()));

  // The global partition goes too: notices and red dots are gaps.
  ASSERT_TRUE(store->ClosePartition(gp).ok());
  partial = store->GetUnread(user, &gaps);
  ASSERT_TRUE(partial.ok()) << partial.status().ToString();
  EXPECT_TRUE(gaps.notice);
  EXPECT_TRUE(gaps.red_dots);
  EXPECT_EQ(partial->notice, 0);
  EXPECT_TRUE(partial->red_dots.empty());
  std::vector<uint32_t> both = {std::min(gp, gone), std::max(gp, gone)};
  EXPECT_EQ(gaps.partitions, both);
  EXPECT_EQ(NotHeldPartitions(store->GetUnread(user).status()), both);
  EXPECT_EQ(NotHeldPartitions(store->GetNoticeUnread(user).status()), std::vector<uint32_t>{gp});

  // The user's own partition goes: nothing can be answered.
  ASSERT_TRUE(store->ClosePartition(up).ok());
  auto none = store->GetUnread(user, &gaps);
  EXPECT_TRUE(IsNotHeld(none.status()));
  std::vector<uint32_t> user_and_global = {std::min(up, gp), std::max(up, gp)};
  EXPECT_EQ(NotHeldPartitions(none.status()), user_and_global);

  // All back: the same answer as before.
  for (uint32_t p : {up, gp, gone}) ASSERT_TRUE(store->OpenPartition(p).ok());
  auto again = store->GetUnread(user);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->feed, full->feed);
  EXPECT_EQ(again->notice, full->notice);
  EXPECT_EQ(again->red_dots, full->red_dots);
}

TEST_F(HeldPartitionsTest, OpenPartitionCreatesANewPartitionThatCommitsAndReads) {
  { auto created = OpenOrDie(std::vector<uint32_t>{0}); }
  auto store = OpenOrDie(std::vector<uint32_t>{0});
  EXPECT_FALSE(fs::exists(PartitionDir(3)));
  const uint64_t post = IdIn(3);
  EXPECT_TRUE(IsNotHeld(AddLikes(store.get(), post, 1)));
  ASSERT_TRUE(store->OpenPartition(3).ok());
  ASSERT_TRUE(store->OpenPartition(3).ok());  // held already: nothing to do
  EXPECT_TRUE(fs::exists(PartitionDir(3) / "CURRENT"));
  EXPECT_TRUE(fs::exists(PartitionDir(3) / "LOG"));
  EXPECT_EQ(store->HeldPartitions(), (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(RecordedHeld(), (std::vector<uint32_t>{0, 3}));
  auto pr = store->partition(3)->LoadProgress();
  ASSERT_TRUE(pr.ok());
  EXPECT_EQ(pr->next_deltas_offset, 0);
  ASSERT_TRUE(AddLikes(store.get(), post, 4, 17).ok());
  EXPECT_EQ(Likes(store.get(), post), 4);
  EXPECT_EQ(store->partition(3)->LoadProgress()->next_deltas_offset, 17);
  EXPECT_EQ(RecordedPartitions(), kParts);
  // Out of range.
  EXPECT_EQ(store->OpenPartition(kParts).code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->ClosePartition(kParts).code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->DropPartition(kParts).code(), base::StatusCode::kInvalidArgument);
}

TEST_F(HeldPartitionsTest, OpenPartitionsOpensSeveralAtOnceKeepingWhatIsThere) {
  const uint64_t post = IdIn(1);
  {
    auto created = OpenOrDie(std::vector<uint32_t>{1});
    ASSERT_TRUE(AddLikes(created.get(), post, 5, 9).ok());
  }
  auto store = OpenOrDie(std::vector<uint32_t>{0});
  ASSERT_TRUE(store->OpenPartitions({1, 2, 3, 0}).ok());  // 0 is held already
  EXPECT_EQ(store->HeldPartitions(), (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(RecordedHeld(), (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(Likes(store.get(), post), 5);  // an existing partition reopened, not recreated
  EXPECT_EQ(store->partition(1)->LoadProgress()->next_deltas_offset, 9);
  const uint64_t fresh = IdIn(3);
  ASSERT_TRUE(AddLikes(store.get(), fresh, 2, 4).ok());
  EXPECT_EQ(Likes(store.get(), fresh), 2);
  EXPECT_TRUE(store->OpenPartitions({}).ok());
  EXPECT_EQ(store->OpenPartitions({2, kParts}).code(), base::StatusCode::kInvalidArgument);
}

TEST_F(HeldPartitionsTest, CloseThenReopenKeepsEverything) {
  options_.read_cache_bytes = 1 << 20;
  auto store = OpenOrDie();
  const uint32_t gp = schemas::PartitionOf(schemas::kGlobalEntity, kParts);
  const uint64_t post = IdIn(gp, 50);
  ASSERT_TRUE(AddLikes(store.get(), post, 6, 33).ok());
  {
    PartitionBatch b;
    b.PutNotice(100, "n");
    b.PutNotice(200, "n");
    b.PutLike(post, 9);
    ASSERT_TRUE(store->partition(gp)->Commit(&b).ok());
  }
  EXPECT_EQ(Likes(store.get(), post), 6);  // now in the read cache
  ASSERT_TRUE(store->ClosePartition(gp).ok());
  ASSERT_TRUE(store->ClosePartition(gp).ok());  // not held: nothing to do
  EXPECT_FALSE(store->HoldsPartition(gp));
  EXPECT_EQ(store->HeldPartitions().size(), kParts - 1);
  std::vector<PostCounts> out;
  EXPECT_TRUE(IsNotHeld(store->GetPostCounts(std::span<const uint64_t>(&post, 1), &out)));
  EXPECT_TRUE(IsNotHeld(store->NewestNoticeId().status()));
  EXPECT_FALSE(store->partition(gp)->HasNotice(100));
  // Its files are released: another store may open it meanwhile.
  {
    auto other = OpenOrDie(std::vector<uint32_t>{gp});
    ASSERT_TRUE(other != nullptr);
    ASSERT_TRUE(AddLikes(other.get(), post, 1, 34).ok());
  }
  ASSERT_TRUE(store->OpenPartition(gp).ok());
  EXPECT_EQ(Likes(store.get(), post), 7) << "the cache must not serve the value from before";
  EXPECT_EQ(store->NewestNoticeId().value(), 200u);
  EXPECT_TRUE(store->partition(gp)->HasNotice(100));
  EXPECT_TRUE(store->IsLiked(post, 9).value());
  EXPECT_EQ(store->partition(gp)->LoadProgress()->next_deltas_offset, 34);
  EXPECT_EQ(RecordedPartitions(), kParts);
}

TEST_F(HeldPartitionsTest, DropDeletesThePartitionAndALaterOpenStartsEmpty) {
  auto store = OpenOrDie();
  const uint64_t post = IdIn(1);
  ASSERT_TRUE(AddLikes(store.get(), post, 5, 9).ok());
  ASSERT_TRUE(store->DropPartition(1).ok());
  EXPECT_FALSE(fs::exists(PartitionDir(1)));
  EXPECT_FALSE(store->HoldsPartition(1));
  EXPECT_EQ(RecordedHeld(), (std::vector<uint32_t>{0, 2, 3}));
  ASSERT_TRUE(store->DropPartition(1).ok());  // nothing left: nothing to do
  ASSERT_TRUE(store->OpenPartition(1).ok());
  EXPECT_EQ(Likes(store.get(), post), 0);
  EXPECT_EQ(store->partition(1)->LoadProgress()->next_deltas_offset, 0);
  ASSERT_TRUE(AddLikes(store.get(), post, 2).ok());
  ASSERT_TRUE(store->DropPartition(1).ok());
  store.reset();
  EXPECT_EQ(RecordedPartitions(), kParts);

  // Every partition by default: a missing one that was held is damage, as
  // always (the one dropped was not held: it would start empty).
  fs::remove_all(PartitionDir(2));
  auto all = StateStore::Open(options_);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("partition-002"), std::string::npos)
      << all.status().ToString();
  EXPECT_FALSE(fs::exists(PartitionDir(1)));
  // Named, it starts empty.
  store = OpenOrDie(std::vector<uint32_t>{1, 2});
  EXPECT_EQ(Likes(store.get(), post), 0);
  EXPECT_EQ(RecordedPartitions(), kParts);
}

TEST_F(HeldPartitionsTest, AReadOnlyStoreRefusesControlAndOpensWhatItsWriterHolds) {
  auto writer = OpenOrDie(std::vector<uint32_t>{1, 2});
  ASSERT_TRUE(AddLikes(writer.get(), IdIn(2), 8).ok());
  auto reader = OpenOrDie(std::nullopt, /*read_only=*/true);
  ASSERT_TRUE(reader != nullptr);
  EXPECT_EQ(reader->HeldPartitions(), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(Likes(reader.get(), IdIn(2)), 8);
  EXPECT_EQ(reader->OpenPartition(0).code(), base::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader->ClosePartition(1).code(), base::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader->DropPartition(1).code(), base::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(PartitionDir(1)));
  // A reader that wants fewer follows fewer.
  auto narrow = OpenOrDie(std::vector<uint32_t>{2, 3}, /*read_only=*/true);
  ASSERT_TRUE(narrow != nullptr);
  EXPECT_EQ(narrow->HeldPartitions(), std::vector<uint32_t>{2});
}

// A follower (tally serve) follows its writer's opens, closes and drops in
// CatchUp: it never serves a partition its writer gave away.
TEST_F(HeldPartitionsTest, AReadOnlyStoreFollowsItsWritersOpensClosesAndDrops) {
  auto writer = OpenOrDie(std::vector<uint32_t>{0, 1});
  options_.catch_up_interval_ms = 3600 * 1000;  // CatchUp by hand only
  auto reader = OpenOrDie(std::nullopt, /*read_only=*/true);
  auto narrow = OpenOrDie(std::vector<uint32_t>{2}, /*read_only=*/true);
  ASSERT_TRUE(reader != nullptr && narrow != nullptr);
  EXPECT_EQ(reader->HeldPartitions(), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(narrow->HeldPartitions().empty());

  ASSERT_TRUE(writer->OpenPartition(2).ok());
  ASSERT_TRUE(AddLikes(writer.get(), IdIn(2), 3).ok());
  ASSERT_TRUE(AddLikes(writer.get(), IdIn(0), 4).ok());
  ASSERT_TRUE(reader->CatchUp().ok());
  ASSERT_TRUE(narrow->CatchUp().ok());
  EXPECT_EQ(reader->HeldPartitions(), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(narrow->HeldPartitions(), std::vector<uint32_t>{2});
  EXPECT_EQ(Likes(reader.get(), IdIn(2)), 3);
  EXPECT_EQ(Likes(narrow.get(), IdIn(2)), 3);
  EXPECT_EQ(Likes(reader.get(), IdIn(0)), 4);

  ASSERT_TRUE(writer->ClosePartition(0).ok());
  ASSERT_TRUE(writer->DropPartition(1).ok());
  ASSERT_TRUE(reader->CatchUp().ok());
  EXPECT_EQ(reader->HeldPartitions(), std::vector<uint32_t>{2});
  std::vector<PostCounts> out;
  uint64_t p0 = IdIn(0);
  EXPECT_TRUE(IsNotHeld(reader->GetPostCounts(std::span<const uint64_t>(&p0, 1), &out)));

  // Reopened (its data kept) and followed again.
  ASSERT_TRUE(writer->OpenPartition(0).ok());
  ASSERT_TRUE(AddLikes(writer.get(), p0, 1).ok());
  ASSERT_TRUE(reader->CatchUp().ok());
  EXPECT_EQ(Likes(reader.get(), p0), 5);
  EXPECT_EQ(reader->HeldPartitions(), (std::vector<uint32_t>{0, 2}));
}

// A state attached to a new log resets every partition on disk, held or
// not (those not held are opened for the write only), and leaves the
// counts and the partitions held as they were.
TEST_F(HeldPartitionsTest, ResetProgressResetsPartitionsNotHeldToo) {
  auto store = OpenOrDie();
  for (uint32_t p = 0; p < kParts; p++) ASSERT_TRUE(AddLikes(store.get(), IdIn(p), 2, 40 + p).ok());
  ASSERT_TRUE(store->ClosePartition(1).ok());
  ASSERT_TRUE(store->DropPartition(3).ok());
  ASSERT_TRUE(store->ResetProgress().ok());
  EXPECT_EQ(store->HeldPartitions(), (std::vector<uint32_t>{0, 2}));
  EXPECT_FALSE(fs::exists(PartitionDir(3)));
  ASSERT_TRUE(store->OpenPartition(1).ok());
  for (uint32_t p : {0u, 1u, 2u}) {
    auto pr = store->partition(p)->LoadProgress();
    ASSERT_TRUE(pr.ok()) << pr.status().ToString();
    EXPECT_EQ(pr->next_deltas_offset, 0) << p;
    EXPECT_EQ(Likes(store.get(), IdIn(p)), 2) << p;
  }
}

// How many rounds the racing tests run: TALLY_HELD_STRESS_ROUNDS, or a
// number ctest affords under the sanitizers.
int StressRounds(int fallback) {
  const char* env = std::getenv("TALLY_HELD_STRESS_ROUNDS");
  return env != nullptr ? std::max(1, std::atoi(env)) : fallback;
}

// Readers on several threads and an applier committing to a partition that
// stays held, while a control thread closes and opens the others over and
// over: every read either answers the right counts or says which partitions
// are not held; no crash, no stale or foreign value.
TEST_F(HeldPartitionsTest, ReadersAndCommitsRaceAControlThreadClosingAndOpeningPartitions) {
  options_.read_cache_bytes = 1 << 20;
  options_.inactive_days = 0;  // the notice read is stamped at time 1: keep it through compactions
  auto store = OpenOrDie();
  const uint32_t gp = schemas::PartitionOf(schemas::kGlobalEntity, kParts);
  const uint32_t steady = (gp + 1) % kParts;  // never closed: the applier's
  // Posts in every partition with known likes (post id % 7 + 1); those of
  // the steady partition also get the applier's increments.
  std::vector<uint64_t> posts;
  for (uint64_t id = 1; posts.size() < 64; id++) posts.push_back(id);
  for (uint32_t p = 0; p < kParts; p++) {
    PartitionBatch b;
    for (uint64_t id : posts) {
      if (schemas::PartitionOf(id, kParts) != p) continue;
      CounterOp ops[4] = {CounterOp::Add(static_cast<int64_t>(id % 7 + 1)), {}, {}, {}};
      b.MergePostCounters(id, ops);
    }
    if (p == gp) {
      for (uint64_t n = 1; n <= 40; n++) b.PutNotice(n * 10, "n");
    }
    ASSERT_TRUE(store->partition(p)->Commit(&b).ok());
  }
  const uint64_t reader_user = IdIn(steady, 500);
  {
    PartitionBatch b;
    b.SetNoticeRead(reader_user, 200, 1);  // 20 notices above it
    ASSERT_TRUE(store->partition(steady)->Commit(&b).ok());
  }

  std::atomic<bool> stop{false};
  std::atomic<int64_t> applied{0};  // applier rounds whose commit returned
  std::atomic<int64_t> wrong{0}, ok_reads{0}, not_held_reads{0};
  std::vector<std::string> problems;
  std::mutex problems_mu;
  auto problem = [&](std::string what) {
    wrong++;
    std::lock_guard<std::mutex> l(problems_mu);
    if (problems.size() < 10) problems.push_back(std::move(what));
  };
  auto expected = [&](uint64_t id, int64_t floor) {
    return static_cast<int64_t>(id % 7 + 1) +
           (schemas::PartitionOf(id, kParts) == steady ? floor : 0);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; t++) {
    threads.emplace_back([&, t] {
      DisablePerfCounters();
      std::vector<PostCounts> out;
      MissingPartitions missing;
      for (uint64_t i = 0; !stop; i++) {
        const int64_t floor = applied.load();
        // A batch, strict or with the missing listed.
        if ((i + t) % 2 == 0) {
          base::Status st = store->GetPostCounts(posts, &out, &missing);
          if (!st.ok()) {
            problem("batch: " + st.ToString());
            continue;
          }
          std::set<uint32_t> gone(missing.partitions.begin(), missing.partitions.end());
          size_t m = 0;
          for (size_t k = 0; k < posts.size(); k++) {
            const uint32_t p = schemas::PartitionOf(posts[k], kParts);
            if (m < missing.positions.size() && missing.positions[m] == k) {
              m++;
              if (gone.count(p) == 0) problem("a missing position of a partition not listed");
              if (out[k].like != 0) problem("a missing position filled");
              continue;
            }
            // (An id of a partition that is closing may still be answered
            // from the read cache: it is not listed, and must be right.)
            const int64_t want = expected(posts[k], floor);
            // The steady partition may be ahead of `floor` (a commit that
            // has not returned yet), never behind it.
            if (p == steady ? out[k].like < want : out[k].like != want) {
              problem("post " + std::to_string(posts[k]) + ": " + std::to_string(out[k].like) +
                      " != " + std::to_string(want));
            }
          }
          (missing.empty() ? ok_reads : not_held_reads)++;
        } else {
          base::Status st = store->GetPostCounts(posts, &out);
          if (IsNotHeld(st)) {
            not_held_reads++;
            for (uint32_t p : NotHeldPartitions(st)) {
              if (p == steady) problem("the steady partition said not held");
            }
          } else if (!st.ok()) {
            problem("strict batch: " + st.ToString());
          } else {
            ok_reads++;
            for (size_t k = 0; k < posts.size(); k++) {
              const int64_t want = expected(posts[k], floor);
              const bool is_steady = schemas::PartitionOf(posts[k], kParts) == steady;
              if (is_steady ? out[k].like < want : out[k].like != want) {
                problem("strict post " + std::to_string(posts[k]));
              }
            }
          }
        }
        // Notices: the user's partition is steady, the global one comes and goes.
        auto n = store->GetNoticeUnread(reader_user);
        if (n.ok()) {
          if (*n != 20) problem("notice unread " + std::to_string(*n));
        } else if (!IsNotHeld(n.status()) || NotHeldPartitions(n.status()) != std::vector{gp}) {
          problem("notice unread: " + n.status().ToString());
        }
        UnreadGaps gaps;
        auto v = store->GetUnread(reader_user, &gaps);
        if (!v.ok()) {
          problem("unread: " + v.status().ToString());
        } else if (gaps.notice ? v->notice != 0 : v->notice != 20) {
          problem("unread notice " + std::to_string(v->notice));
        }
        auto liked = store->IsLiked(posts[i % posts.size()], 1);
        if (!liked.ok() && !IsNotHeld(liked.status()))
          problem("liked: " + liked.status().ToString());
      }
    });
  }
  // The applier: commits to the steady partition, with progress.
  int64_t commits = 0;
  threads.emplace_back([&] {
    DisablePerfCounters();
    while (!stop) {
      PartitionBatch b;
      for (uint64_t id : posts) {
        if (schemas::PartitionOf(id, kParts) != steady) continue;
        CounterOp ops[4] = {CounterOp::Add(1), {}, {}, {}};
        b.MergePostCounters(id, ops);
      }
      Progress pr;
      pr.next_deltas_offset = ++commits;
      b.SetProgress(pr);
      base::Status st = store->partition(steady)->Commit(&b);
      if (!st.ok()) {
        problem("steady commit: " + st.ToString());
        return;
      }
      applied = commits;
    }
  });
  // The control thread (this one).
  const int rounds = StressRounds(60);
  int64_t control_ok = 0;
  for (int r = 0; r < rounds; r++) {
    uint32_t p = static_cast<uint32_t>(r) % kParts;
    if (p == steady) p = gp;
    // Some reads and a commit between any two changes.
    const int64_t reads = ok_reads + not_held_reads, commits_before = applied;
    while ((ok_reads + not_held_reads < reads + 3 || applied == commits_before) && wrong == 0) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(store->ClosePartition(p).ok());
    if (r % 2 == 0) {
      const int64_t closed_reads = ok_reads + not_held_reads;
      while (ok_reads + not_held_reads < closed_reads + 3 && wrong == 0) std::this_thread::yield();
    }
    ASSERT_TRUE(store->OpenPartition(p).ok());
    control_ok++;
  }
  stop = true;
  for (auto& th : threads) th.join();
  for (const auto& w : problems) ADD_FAILURE() << w;
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(control_ok, rounds);
  EXPECT_GT(ok_reads.load(), 0);
  std::printf("%d rounds: %lld reads answered, %lld said not held, %lld commits\n", rounds,
              static_cast<long long>(ok_reads.load()),
              static_cast<long long>(not_held_reads.load()), static_cast<long long>(commits));
  EXPECT_EQ(store->HeldPartitions().size(), kParts);
  EXPECT_EQ(store->partition(steady)->LoadProgress()->next_deltas_offset, commits);
  EXPECT_EQ(RecordedPartitions(), kParts);
}

// An applier still committing to a partition the control thread closes
// and opens: each commit either lands or answers NotHeldError, and what
// landed is all there when the partition is opened again.
TEST_F(HeldPartitionsTest, CommitsRacingClosesEitherLandOrSayNotHeld) {
  options_.read_cache_bytes = 1 << 20;
  auto store = OpenOrDie();
  const uint64_t post = IdIn(2);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> landed{0}, refused{0}, other{0};
  int64_t last_offset = 0;
  std::string first_other;
  auto note_other = [&](const base::Status& st) {
    if (other++ == 0) first_other = st.ToString();
  };
  std::thread applier([&] {
    for (int64_t offset = 1; !stop; offset++) {
      base::Status st = AddLikes(store.get(), post, 1, offset);
      if (st.ok()) {
        landed++;
        last_offset = offset;
      } else if (IsNotHeld(st)) {
        refused++;
        auto pr = store->partition(2)->LoadProgress();
        if (!pr.ok() && !IsNotHeld(pr.status())) note_other(pr.status());
        if (base::Status r = store->partition(2)->Resume(); !r.ok() && !IsNotHeld(r)) {
          note_other(r);
        }
      } else {
        note_other(st);
      }
    }
  });
  const int rounds = StressRounds(60);
  for (int r = 0; r < rounds; r++) {
    // A commit lands before each close, and one is refused while closed
    // (every other round: the others race the close).
    for (int64_t before = landed; landed == before && other == 0;) std::this_thread::yield();
    ASSERT_TRUE(store->ClosePartition(2).ok());
    if (r % 2 == 0) {
      for (int64_t before = refused; refused == before && other == 0;) std::this_thread::yield();
    }
    ASSERT_TRUE(store->OpenPartition(2).ok());
  }
  stop = true;
  applier.join();
  EXPECT_EQ(other.load(), 0) << first_other;
  EXPECT_GE(landed.load(), rounds);
  EXPECT_GE(refused.load(), rounds / 2);
  EXPECT_EQ(Likes(store.get(), post), landed.load());
  EXPECT_EQ(store->partition(2)->LoadProgress()->next_deltas_offset, last_offset);
}

}  // namespace
}  // namespace tally::store
