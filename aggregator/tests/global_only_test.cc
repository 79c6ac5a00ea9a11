// A cluster member that neither owns nor stands by for the partition of
// kGlobalEntity applies it for its global entity only (WindowApplier::
// set_global_only; aggregator/README.md, "The global entity in a cluster"). Its
// notices and red dots must be a full copy's, whatever the input does:
// copies of an event under one id (of any type, near and far apart in
// event time), re-routed records a stream's mark covers, notices listed
// again with another title. A full copy made global-only midway must agree
// too, and a global-only copy made whole again and applied from offset 0
// must equal the full copy in everything.
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <string>
#include <vector>

#include "aggregator/window_applier.h"
#include "testing/temp_dir.h"

namespace tally::aggregator {
namespace {

using schemas::Delta;
using schemas::DeltaOp;

constexpr int64_t kDedupMs = 1000;
constexpr uint64_t kPosts = 20, kUsers = 10, kNotices = 30;
const char* const kChannels[] = {"x", "y", "z"};
constexpr int64_t kMaxDotTs = 50;
constexpr uint64_t kProbeUser = 1000;  // users kProbeUser + v clicked every channel at v

// One input record: its stream, its offset there, and its deltas.
struct Record {
  int32_t stream = 0;
  int64_t offset = 0;
  std::vector<Delta> deltas;
};

class GlobalOnlyTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  struct Copy {
    testing::TempDir dir{"global-only"};
    std::unique_ptr<store::StateStore> store;
    std::unique_ptr<WindowApplier> wa;
    store::Partition* partition() { return store->partition(0); }
  };

  static void Open(Copy* c) {
    store::StoreOptions o;
    o.dir = c->dir.path().string();
    o.partitions = 1;  // every entity in the partition of kGlobalEntity
    o.block_cache_bytes = 8 << 20;
    o.read_cache_bytes = 1 << 20;
    auto s = store::StateStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    c->store = std::move(s).value();
  }
  static void NewApplier(Copy* c, bool global_only) {
    c->wa = std::make_unique<WindowApplier>(c->partition(), "tally.deltas", 1,
                                            store::ViewedOptions(), kDedupMs);
    ASSERT_TRUE(c->wa->Load().ok());
    c->wa->set_global_only(global_only);
  }
  static void Commit(Copy* c, store::PartitionBatch* b) {
    ASSERT_TRUE(c->partition()->Commit(b).ok());
  }

  // A random input: records on two streams, some events under shared ids,
  // some records routed again (a restarted router), packed into messages.
  void Generate(uint32_t seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&rng](uint64_t n) { return rng() % n; };
    int64_t next[2] = {0, 0};
    std::vector<Record> by_stream[2];
    std::vector<Record> sequence;
    for (int i = 0; i < 600; i++) {
      const int32_t s = static_cast<int32_t>(pick(2));
      if (!by_stream[s].empty() && pick(100) < 5) {
        // Routed again from a few records back.
        const size_t k = std::min<size_t>(by_stream[s].size(), 1 + pick(8));
        for (size_t j = by_stream[s].size() - k; j < by_stream[s].size(); j++) {
          sequence.push_back(by_stream[s][j]);
        }
        continue;
      }
      Record r;
      r.stream = s;
      r.offset = next[s]++;
      Delta d;
      d.source.offset = r.offset;
      d.source.ts = static_cast<int64_t>(pick(3000));
      if (pick(100) < 40) d.event_id = 1 + pick(12);  // few ids: copies and reuses of every type
      switch (pick(6)) {
        case 0:
          d.op = DeltaOp::kPostCounter;
          d.entity = 1 + pick(kPosts);
          d.field = static_cast<uint8_t>(pick(4));
          d.amount = 1;
          break;
        case 1:
          d.op = pick(3) == 0 ? DeltaOp::kLikeUnset : DeltaOp::kLikeSet;
          d.entity = 1 + pick(kPosts);
          d.member = 1 + pick(kUsers);
          break;
        case 2:
          d.op = DeltaOp::kUserCounter;
          d.entity = 1 + pick(kUsers);
          d.field = static_cast<uint8_t>(schemas::UserField::kPosts);
          d.amount = 1;
          break;
        case 3:
        case 4:
          d.op = DeltaOp::kNoticeAppend;
          d.entity = schemas::kGlobalEntity;
          d.member = 1 + pick(kNotices);
          texts_.push_back(fmt::format("title {}", pick(3)));
          d.text = texts_.back();
          break;
        default:
          d.op = DeltaOp::kRedDotPublish;
          d.entity = schemas::kGlobalEntity;
          d.text = kChannels[pick(3)];
          d.source.ts = 1 + static_cast<int64_t>(pick(kMaxDotTs - 1));
          break;
      }
      r.deltas.push_back(d);
      by_stream[s].push_back(r);
      sequence.push_back(r);
    }
    for (size_t i = 0; i < sequence.size();) {
      schemas::DeltaBatchBuilder b;
      const size_t n = std::min<size_t>(sequence.size() - i, 1 + pick(6));
      for (size_t j = i; j < i + n; j++) {
        for (Delta d : sequence[j].deltas) {
          d.source.stream = b.StreamIndex("tally.events", sequence[j].stream);
          b.Add(d);
        }
      }
      messages_.push_back(b.Finish());
      commit_after_.push_back(pick(100) < 30);
      i += n;
    }
  }

  // Applies messages [from, to) at their offsets, committing where the
  // input says and at the end.
  void Apply(Copy* c, size_t from, size_t to) {
    for (size_t m = from; m < to; m++) {
      ASSERT_TRUE(c->wa->ApplyBatch(messages_[m], static_cast<int64_t>(m), nullptr).ok());
      if (commit_after_[m]) {
        ASSERT_TRUE(c->wa->Commit().ok());
      }
    }
    if (c->wa->dirty()) {
      ASSERT_TRUE(c->wa->Commit().ok());
    }
  }

  // What a reader sees of the global entity: each notice id listed or not,
  // the number listed, and each channel's dot time (probed by users who
  // clicked at every time: a dot shows while their click is older).
  static std::string GlobalView(Copy* c) {
    store::PartitionBatch b;
    for (int64_t v = 0; v <= kMaxDotTs; v++) {
      for (const char* ch : kChannels)
        b.MaxUserRedDot(kProbeUser + static_cast<uint64_t>(v), ch, v);
    }
    Commit(c, &b);
    std::string out;
    for (uint64_t id = 1; id <= kNotices; id++) out += c->partition()->HasNotice(id) ? '1' : '0';
    auto unread = c->store->GetNoticeUnread(kProbeUser + kMaxDotTs + 1);
    EXPECT_TRUE(unread.ok());
    out += fmt::format(" {} notices;", unread.ok() ? *unread : -1);
    for (int64_t v = 0; v <= kMaxDotTs; v++) {
      auto u = c->store->GetUnread(kProbeUser + static_cast<uint64_t>(v));
      EXPECT_TRUE(u.ok());
      if (!u.ok()) continue;
      for (const auto& [ch, shown] : u->red_dots) out += fmt::format(" {}@{}:{}", ch, v, shown);
    }
    return out;
  }

  // Everything but the global entity, and the progress.
  static std::string EntityView(Copy* c) {
    std::string out;
    std::vector<uint64_t> ids;
    for (uint64_t p = 1; p <= kPosts; p++) ids.push_back(p);
    std::vector<store::PostCounts> counts;
    EXPECT_TRUE(c->store->GetPostCounts(ids, &counts).ok());
    for (const auto& pc : counts) {
      out += fmt::format("{}/{}/{}/{} ", pc.like, pc.repost, pc.comment, pc.view);
    }
    for (uint64_t p = 1; p <= kPosts; p++) {
      for (uint64_t u = 1; u <= kUsers; u++) out += *c->store->IsLiked(p, u) ? 'L' : '.';
    }
    for (uint64_t u = 1; u <= kUsers; u++)
      out += fmt::format(" {}", c->store->GetUserCounts(u)->posts);
    auto progress = c->partition()->LoadProgress();
    EXPECT_TRUE(progress.ok());
    out += fmt::format(" next {} max ts {};", progress->next_deltas_offset, progress->max_event_ts);
    for (const auto& [stream, mark] : progress->marks) {
      out += fmt::format(" {}/{}@{}.{}", stream.topic, stream.partition, mark.offset, mark.effect);
    }
    for (uint64_t id = 1; id <= 12; id++) {
      auto claim = c->partition()->GetEventId(id);
      EXPECT_TRUE(claim.ok());
      if (claim.ok() && claim->has_value()) out += fmt::format(" id{}:{}", id, (*claim)->copy);
    }
    return out;
  }

  std::deque<std::string> texts_;
  std::vector<std::string> messages_;
  std::vector<bool> commit_after_;
};

TEST_P(GlobalOnlyTest, AGlobalOnlyCopyReadsAsTheFullCopyAndBecomesItAgain) {
  const uint32_t seed = GetParam();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  Generate(seed);
  const size_t n = messages_.size();

  Copy full, only, down;
  for (Copy* c : {&full, &only, &down}) ASSERT_NO_FATAL_FAILURE(Open(c));
  ASSERT_NO_FATAL_FAILURE(NewApplier(&full, false));
  ASSERT_NO_FATAL_FAILURE(Apply(&full, 0, n));

  // Global-only from the start, as a member that joins.
  {
    store::PartitionBatch b;
    b.SetGlobalOnly(true);
    ASSERT_NO_FATAL_FAILURE(Commit(&only, &b));
  }
  ASSERT_NO_FATAL_FAILURE(NewApplier(&only, true));
  ASSERT_NO_FATAL_FAILURE(Apply(&only, 0, n));
  EXPECT_TRUE(*only.partition()->LoadGlobalOnly());

  // Full for the first half, then given up: made global-only where it is.
  ASSERT_NO_FATAL_FAILURE(NewApplier(&down, false));
  ASSERT_NO_FATAL_FAILURE(Apply(&down, 0, n / 2));
  {
    store::PartitionBatch b;
    b.DropAllButGlobal();
    b.SetGlobalOnly(true);
    ASSERT_NO_FATAL_FAILURE(Commit(&down, &b));
  }
  std::vector<uint64_t> posts;
  for (uint64_t p = 1; p <= kPosts; p++) posts.push_back(p);
  std::vector<store::PostCounts> counts;
  ASSERT_TRUE(down.store->GetPostCounts(posts, &counts).ok());
  for (const auto& pc : counts) EXPECT_EQ(pc.like + pc.repost + pc.comment + pc.view, 0);
  ASSERT_NO_FATAL_FAILURE(NewApplier(&down, true));
  ASSERT_NO_FATAL_FAILURE(Apply(&down, n / 2, n));

  const std::string want = GlobalView(&full);
  EXPECT_EQ(GlobalView(&only), want);
  EXPECT_EQ(GlobalView(&down), want);
  ASSERT_TRUE(only.store->GetPostCounts(posts, &counts).ok());
  for (const auto& pc : counts) EXPECT_EQ(pc.like + pc.repost + pc.comment + pc.view, 0);

  // Owned again: made whole (as Applier's RestoreInFullIfGlobalOnly does)
  // and applied from offset 0 over the global entity it kept. The notices
  // it listed again are expected there, not repeats.
  for (Copy* c : {&only, &down}) {
    auto kept = c->partition()->LoadProgress();
    ASSERT_TRUE(kept.ok());
    store::PartitionBatch b;
    b.DropAllButGlobal();
    b.DropEventIds();
    b.SetProgress(store::Progress());
    b.SetGlobalOnly(false);
    ASSERT_NO_FATAL_FAILURE(Commit(c, &b));
    ASSERT_NO_FATAL_FAILURE(NewApplier(c, false));
    c->wa->set_relisting_until(kept->next_deltas_offset);
    (void)c->wa->TakeStats();
    ASSERT_NO_FATAL_FAILURE(Apply(c, 0, n));
    EXPECT_EQ(c->wa->TakeStats().repeated_notices, 0u);
    EXPECT_FALSE(*c->partition()->LoadGlobalOnly());
    EXPECT_EQ(EntityView(c), EntityView(&full));
    EXPECT_EQ(GlobalView(c), GlobalView(&full));
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, GlobalOnlyTest, ::testing::Values(1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u));

}  // namespace
}  // namespace tally::aggregator
