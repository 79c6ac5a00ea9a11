#include "aggregator/window_applier.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "testing/temp_dir.h"

namespace tally::aggregator {
namespace {

namespace fs = std::filesystem;
using schemas::Delta;
using schemas::DeltaOp;

class WindowApplierTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }
  void TearDown() override { store_.reset(); }
  void Reopen() {
    store_.reset();
    store::StoreOptions o;
    o.dir = dir_.string();
    o.partitions = 1;
    o.block_cache_bytes = 8 << 20;
    auto s = store::StateStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  std::unique_ptr<WindowApplier> NewApplier() {
    auto wa = std::make_unique<WindowApplier>(store_->partition(0), "tally.deltas", 1);
    EXPECT_TRUE(wa->Load().ok());
    return wa;
  }
  // A batch from input stream (tally.events, 0).
  std::string Batch(std::vector<Delta> ds) {
    schemas::DeltaBatchBuilder b;
    uint32_t s = b.StreamIndex("tally.events", 0);
    for (auto& d : ds) {
      d.source.stream = s;
      b.Add(d);
    }
    return b.Finish();
  }
  static Delta Like(bool set, uint64_t post, uint64_t user, int64_t off) {
    Delta d;
    d.op = set ? DeltaOp::kLikeSet : DeltaOp::kLikeUnset;
    d.entity = post;
    d.member = user;
    d.source.offset = off;
    return d;
  }
  static Delta Counter(DeltaOp op, uint64_t id, uint8_t field, int64_t amount, int64_t off, uint32_t eff = 0) {
    Delta d;
    d.op = op;
    d.entity = id;
    d.field = field;
    d.amount = amount;
    d.source.offset = off;
    d.source.effect = eff;
    return d;
  }
  int64_t Likes(uint64_t post) {
    std::vector<uint64_t> ids = {post};
    std::vector<store::PostCounts> out;
    EXPECT_TRUE(store_->GetPostCounts(ids, &out).ok());
    return out[0].like;
  }

  testing::TempDir temp_{"wa-test"};
  const fs::path& dir_ = temp_.path();
  std::unique_ptr<store::StateStore> store_;
};

TEST_F(WindowApplierTest, DuplicateLikesCountOnceWithinAndAcrossWindows) {
  auto wa = NewApplier();
  std::string b1 = Batch({Like(true, 1, 10, 0), Like(true, 1, 10, 1), Like(true, 1, 11, 2)});
  ASSERT_TRUE(wa->ApplyBatch(b1, 0, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  EXPECT_EQ(Likes(1), 2);
  std::string b2 = Batch({Like(true, 1, 10, 3), Like(false, 1, 11, 4), Like(false, 1, 11, 5)});
  ASSERT_TRUE(wa->ApplyBatch(b2, 1, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  EXPECT_EQ(Likes(1), 1);
  auto liked = store_->IsLiked(1, 11);
  ASSERT_TRUE(liked.ok());
  EXPECT_FALSE(*liked);
}

TEST_F(WindowApplierTest, RedeliveredDeltasAreSkippedByMark) {
  auto wa = NewApplier();
  std::string b = Batch({Counter(DeltaOp::kPostCounter, 5, 3, 1, 100), Counter(DeltaOp::kPostCounter, 5, 3, 1, 101)});
  ASSERT_TRUE(wa->ApplyBatch(b, 0, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  // A restarted router re-sends offsets 100..102; only 102 is new.
  Reopen();
  wa = NewApplier();
  EXPECT_EQ(wa->progress().next_deltas_offset, 1);
  std::string again = Batch({Counter(DeltaOp::kPostCounter, 5, 3, 1, 100), Counter(DeltaOp::kPostCounter, 5, 3, 1, 101),
                             Counter(DeltaOp::kPostCounter, 5, 3, 1, 102)});
  ASSERT_TRUE(wa->ApplyBatch(again, 1, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  std::vector<uint64_t> ids = {5};
  std::vector<store::PostCounts> out;
  ASSERT_TRUE(store_->GetPostCounts(ids, &out).ok());
  EXPECT_EQ(out[0].view, 3);
}

TEST_F(WindowApplierTest, UncommittedWindowIsRedoneAfterRestart) {
  {
    auto wa = NewApplier();
    std::string b = Batch({Counter(DeltaOp::kUserCounter, 9, 0, 1, 0)});
    ASSERT_TRUE(wa->ApplyBatch(b, 0, nullptr).ok());
    // crash: no Commit
  }
  Reopen();
  auto wa = NewApplier();
  EXPECT_EQ(wa->progress().next_deltas_offset, 0);
  std::string b = Batch({Counter(DeltaOp::kUserCounter, 9, 0, 1, 0)});
  ASSERT_TRUE(wa->ApplyBatch(b, 0, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  auto uc = store_->GetUserCounts(9);
  ASSERT_TRUE(uc.ok());
  EXPECT_EQ(uc->posts, 1);
}

TEST_F(WindowApplierTest, SealedWindowDecidesEdgesWhileAnotherThreadWritesIt) {
  auto wa = NewApplier();
  ASSERT_TRUE(wa->ApplyBatch(Batch({Like(true, 1, 10, 0), Like(true, 1, 11, 1)}), 0, nullptr).ok());
  wa->Seal();
  EXPECT_TRUE(wa->sealed());
  EXPECT_FALSE(wa->window_dirty());
  EXPECT_EQ(Likes(1), 0);  // sealed is not written
  // The next window, applied before the sealed one reaches the store: a
  // repeated like is a duplicate, an unlike removes a sealed like.
  ASSERT_TRUE(
      wa->ApplyBatch(Batch({Like(true, 1, 10, 2), Like(false, 1, 11, 3), Like(true, 1, 12, 4)}), 1,
                     nullptr)
          .ok());
  base::Status written;
  std::thread writer([&] { written = wa->CommitSealed(); });
  writer.join();
  ASSERT_TRUE(written.ok()) << written.ToString();
  EXPECT_EQ(Likes(1), 2);  // 10 and 11
  EXPECT_EQ(wa->committed_offset(), 0);
  wa->FinishCommit();
  EXPECT_EQ(wa->committed_offset(), 1);
  ASSERT_TRUE(wa->Commit().ok());
  EXPECT_EQ(Likes(1), 2);  // 10 and 12
  EXPECT_EQ(wa->committed_offset(), 2);
  EXPECT_FALSE(wa->dirty());
  auto liked = store_->IsLiked(1, 11);
  ASSERT_TRUE(liked.ok());
  EXPECT_FALSE(*liked);
}

TEST_F(WindowApplierTest, CrashWithASealedWindowRedoesBothWindows) {
  {
    auto wa = NewApplier();
    ASSERT_TRUE(wa->ApplyBatch(Batch({Like(true, 1, 10, 0)}), 0, nullptr).ok());
    wa->Seal();
    ASSERT_TRUE(wa->ApplyBatch(Batch({Like(true, 1, 11, 1)}), 1, nullptr).ok());
    // crash: the sealed window was never written
  }
  Reopen();
  auto wa = NewApplier();
  EXPECT_EQ(wa->progress().next_deltas_offset, 0);
  ASSERT_TRUE(wa->ApplyBatch(Batch({Like(true, 1, 10, 0)}), 0, nullptr).ok());
  ASSERT_TRUE(wa->ApplyBatch(Batch({Like(true, 1, 11, 1)}), 1, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  EXPECT_EQ(Likes(1), 2);
}

TEST_F(WindowApplierTest, ResetBetweenIncrementsInOneWindow) {
  auto wa = NewApplier();
  uint8_t dm = static_cast<uint8_t>(schemas::UnreadKind::kDm);
  std::string b = Batch({Counter(DeltaOp::kUnreadAdd, 3, dm, 1, 0), Counter(DeltaOp::kUnreadAdd, 3, dm, 1, 1),
                         Counter(DeltaOp::kUnreadReset, 3, dm, 0, 2), Counter(DeltaOp::kUnreadAdd, 3, dm, 1, 3)});
  ASSERT_TRUE(wa->ApplyBatch(b, 0, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  auto u = store_->GetUnreadCounters(3);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->counts[static_cast<int>(schemas::UnreadKind::kDm)], 1);
}

TEST_F(WindowApplierTest, FollowDerivesTargetDeltasOnlyWhenTheEdgeChanges) {
  auto wa = NewApplier();
  Delta f;
  f.op = DeltaOp::kFollowSet;
  f.entity = 1;
  f.member = 2;
  Delta f2 = f;
  f2.source.offset = 1;
  std::vector<schemas::DeltaBatchBuilder> derived(1);
  ASSERT_TRUE(wa->ApplyBatch(Batch({f, f2}), 0, &derived).ok());
  ASSERT_EQ(derived[0].delta_count(), 2u);  // followers +1, unread follower +1; the repeat derives nothing
  std::string bytes = derived[0].Finish();
  schemas::DeltaBatchReader r;
  ASSERT_TRUE(r.Open(bytes).ok());
  EXPECT_EQ(r.streams()[0].topic, "tally.deltas");
  ASSERT_TRUE(wa->Commit().ok());
  auto uc = store_->GetUserCounts(1);
  ASSERT_TRUE(uc.ok());
  EXPECT_EQ(uc->following, 1);
  // Applying the derived batch counts the target's follower once, and again is a no-op.
  ASSERT_TRUE(wa->ApplyBatch(bytes, 1, nullptr).ok());
  ASSERT_TRUE(wa->ApplyBatch(bytes, 2, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  auto t = store_->GetUserCounts(2);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->followers, 1);
}

TEST_F(WindowApplierTest, CorruptBatchIsRejectedWholeButConsumed) {
  auto wa = NewApplier();
  std::string good = Batch({Counter(DeltaOp::kPostCounter, 5, 1, 1, 0)});
  std::string bad = good.substr(0, good.size() - 1);
  auto st = wa->ApplyBatch(bad, 0, nullptr);
  EXPECT_EQ(st.code(), base::StatusCode::kCorruption);
  ASSERT_TRUE(wa->Commit().ok());
  EXPECT_EQ(wa->progress().next_deltas_offset, 1);
  EXPECT_TRUE(wa->progress().marks.empty());
}

// "Viewed" tables roll by post id within a budget; when one is dropped in
// the middle of a window, the views of the live tables all still read true
// and the dropped table's posts read false (as the oldest views are
// forgotten).
TEST_F(WindowApplierTest, ATableDroppedInsideAWindowLeavesNothingBehind) {
  store::ViewedOptions vo;
  vo.budget_bytes = 4 * store::kViewChunkBytes;  // four one-chunk tables
  auto wa = std::make_unique<WindowApplier>(store_->partition(0), "tally.deltas", 1, vo);
  ASSERT_TRUE(wa->Load().ok());
  std::vector<Delta> views;
  for (uint64_t post = 1; post <= 20000; post++) {
    Delta d;
    d.op = DeltaOp::kViewMember;
    d.entity = post;
    d.member = 7;
    d.source.offset = static_cast<int64_t>(post);
    views.push_back(d);
  }
  ASSERT_TRUE(wa->ApplyBatch(Batch(views), 0, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  // Post 1's table was dropped.
  auto first = store_->MaybeViewed(1, 7);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(*first);
  int seen = 0;
  for (uint64_t post = 19000; post <= 20000; post++) {
    auto v = store_->MaybeViewed(post, 7);
    ASSERT_TRUE(v.ok());
    seen += *v ? 1 : 0;
  }
  EXPECT_EQ(seen, 1001) << "a view of a live table must never read false";
}

}  // namespace
}  // namespace tally::aggregator

namespace tally::aggregator {
namespace {

// Records of events that carry the same id are one event (SPEC section 1):
// another record's copy is dropped in the window, while the window is being
// written, after it is written and after a restart; the effects of one
// record all apply; a reuse of the id far apart in event time is an event
// of its own.
TEST_F(WindowApplierTest, CopiesOfAnEventWithAnIdApplyOnce) {
  const uint64_t id = schemas::EventIdHash("retry-me");
  auto views = [&](uint64_t post) {
    std::vector<uint64_t> ids = {post};
    std::vector<store::PostCounts> out;
    EXPECT_TRUE(store_->GetPostCounts(ids, &out).ok());
    return out[0].view;
  };
  // A batch of one record of input partition `p` at `off`: a view of post
  // 7 and, as its second effect, a view of post 8.
  auto record = [&](int32_t p, int64_t off, int64_t ts, uint64_t event_id) {
    schemas::DeltaBatchBuilder b;
    uint32_t s = b.StreamIndex("tally.events", p);
    for (uint32_t e = 0; e < 2; e++) {
      Delta d = Counter(DeltaOp::kPostCounter, 7 + e, 3, 1, off, e);
      d.source.stream = s;
      d.source.ts = ts;
      d.event_id = event_id;
      b.Add(d);
    }
    return b.Finish();
  };
  const int64_t t0 = 1700000000000;
  auto wa = NewApplier();
  ASSERT_TRUE(wa->ApplyBatch(record(0, 5, t0, id), 0, nullptr).ok());
  ASSERT_TRUE(
      wa->ApplyBatch(record(1, 9, t0, id), 1, nullptr).ok());  // same window, another partition
  wa->Seal();
  ASSERT_TRUE(wa->ApplyBatch(record(2, 3, t0, id), 2, nullptr).ok());  // while the first is written
  ASSERT_TRUE(wa->CommitSealed().ok());
  wa->FinishCommit();
  ASSERT_TRUE(wa->Commit().ok());
  EXPECT_EQ(views(7), 1);
  EXPECT_EQ(views(8), 1);
  EXPECT_EQ(wa->TakeStats().duplicate_event_ids, 4u);

  // After a restart the stored id is found.
  wa.reset();
  Reopen();
  wa = NewApplier();
  ASSERT_TRUE(wa->ApplyBatch(record(3, 1, t0 + 1000, id), 3, nullptr).ok());
  // Events without an id are never compared; another id is another event.
  ASSERT_TRUE(wa->ApplyBatch(record(3, 2, t0, 0), 4, nullptr).ok());
  ASSERT_TRUE(wa->ApplyBatch(record(3, 3, t0, schemas::EventIdHash("another")), 5, nullptr).ok());
  // The id used again two days later: a new event.
  ASSERT_TRUE(wa->ApplyBatch(record(3, 4, t0 + 48 * 3600 * 1000LL, id), 6, nullptr).ok());
  ASSERT_TRUE(wa->Commit().ok());
  EXPECT_EQ(views(7), 4);
  EXPECT_EQ(views(8), 4);
  EXPECT_EQ(wa->TakeStats().duplicate_event_ids, 2u);
}

TEST(EventIdHashTest, IsFixedAndNeverZero) {
  // Stored in the state and in tally.deltas: must never change.
  EXPECT_EQ(schemas::EventIdHash("retry-me"), schemas::EventIdHash(std::string("retry-") + "me"));
  EXPECT_NE(schemas::EventIdHash("a"), schemas::EventIdHash("b"));
  EXPECT_NE(schemas::EventIdHash(""), 0u);
}

}  // namespace
}  // namespace tally::aggregator
