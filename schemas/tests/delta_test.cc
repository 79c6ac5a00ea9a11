#include "schemas/delta.h"
#include "schemas/event.h"

#include <gtest/gtest.h>

#include <random>

namespace tally::schemas {
namespace {

TEST(DeltaBatchTest, RoundTripsEveryOp) {
  std::vector<std::pair<uint64_t, uint64_t>> snap = {{5, 10}, {7, 0}};
  DeltaBatchBuilder b;
  uint32_t s0 = b.StreamIndex("tally.events", 3);
  uint32_t s1 = b.StreamIndex("tally.deltas", 0);
  EXPECT_EQ(b.StreamIndex("tally.events", 3), s0);
  std::vector<Delta> in;
  for (uint8_t op = 1; op <= kMaxDeltaOp; op++) {
    Delta d;
    d.op = static_cast<DeltaOp>(op);
    d.entity = 1000 + op;
    d.member = op == 3 ? kMaxId : 77;
    d.field = 2;
    d.amount = op % 2 ? -3 : 5;
    d.text = "chan.nel";
    d.snapshot = snap.data();
    d.snapshot_size = 2;
    d.source = {op % 2 ? s0 : s1, 1000 + op, op, 1700000000000 + op};
    in.push_back(d);
    b.Add(d);
  }
  std::string bytes = b.Finish();
  EXPECT_TRUE(b.empty());
  DeltaBatchReader r;
  ASSERT_TRUE(r.Open(bytes).ok());
  ASSERT_EQ(r.streams().size(), 2u);
  EXPECT_EQ(r.streams()[0], (SourceStream{"tally.events", 3}));
  Delta d;
  size_t i = 0;
  while (r.Next(&d)) {
    const Delta& w = in[i++];
    EXPECT_EQ(d.op, w.op);
    EXPECT_EQ(d.entity, w.entity);
    EXPECT_EQ(d.source.offset, w.source.offset);
    EXPECT_EQ(d.source.effect, w.source.effect);
    EXPECT_EQ(d.source.ts, w.source.ts);
    EXPECT_EQ(d.source.stream, w.source.stream);
    switch (d.op) {
      case DeltaOp::kPostCounter: case DeltaOp::kUserCounter: case DeltaOp::kUnreadAdd:
        EXPECT_EQ(d.field, w.field);
        EXPECT_EQ(d.amount, w.amount);
        break;
      case DeltaOp::kRedDotPublish: case DeltaOp::kRedDotRead:
        EXPECT_EQ(d.text, "chan.nel");
        break;
      case DeltaOp::kFeedSnapshot:
        ASSERT_EQ(d.snapshot_size, 2u);
        EXPECT_EQ(d.snapshot[0], snap[0]);
        break;
      case DeltaOp::kLikeSet: case DeltaOp::kLikeUnset: case DeltaOp::kFollowSet: case DeltaOp::kFollowUnset:
      case DeltaOp::kNoticeRead: case DeltaOp::kViewMember:
        EXPECT_EQ(d.member, w.member);
        break;
      default:
        break;
    }
  }
  EXPECT_TRUE(r.status().ok()) << r.status().ToString();
  EXPECT_EQ(i, in.size());
}

// A whole batch can be decoded before any of it is used: every delta,
// snapshots included, stays valid until the next Open().
TEST(DeltaBatchTest, DecodedDeltasStayValidUntilTheNextOpen) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> snaps;
  for (uint64_t k = 0; k < 40; k++) snaps.push_back({{k, k * 10}, {k + 1, k * 10 + 1}});
  DeltaBatchBuilder b;
  uint32_t s = b.StreamIndex("tally.events", 0);
  for (uint32_t k = 0; k < snaps.size(); k++) {
    Delta d;
    d.op = DeltaOp::kFeedSnapshot;
    d.entity = k + 1;
    d.snapshot = snaps[k].data();
    d.snapshot_size = 2;
    d.source = {s, k, 0, 1};
    b.Add(d);
  }
  std::string bytes = b.Finish();
  DeltaBatchReader r;
  ASSERT_TRUE(r.Open(bytes).ok());
  std::vector<Delta> all;
  Delta d;
  while (r.Next(&d)) all.push_back(d);
  ASSERT_TRUE(r.status().ok());
  ASSERT_EQ(all.size(), snaps.size());
  for (size_t k = 0; k < all.size(); k++) {
    ASSERT_EQ(all[k].snapshot_size, 2u);
    EXPECT_EQ(all[k].snapshot[0], snaps[k][0]) << k;
    EXPECT_EQ(all[k].snapshot[1], snaps[k][1]) << k;
  }
}

// Random truncations and byte flips never crash the reader; a truncated
// batch is always reported as corrupt.
TEST(DeltaBatchTest, DamagedBatchesAreReportedNeverCrash) {
  DeltaBatchBuilder b;
  uint32_t s = b.StreamIndex("tally.events", 0);
  for (int i = 0; i < 50; i++) {
    Delta d;
    d.op = DeltaOp::kPostCounter;
    d.entity = i;
    d.amount = 1;
    d.source = {s, i, 0, 1};
    b.Add(d);
  }
  std::string good = b.Finish();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; trial++) {
    std::string bad = good;
    if (trial % 2) {
      bad.resize(rng() % good.size());
    } else {
      bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    DeltaBatchReader r;
    if (!r.Open(bad).ok()) continue;
    Delta d;
    while (r.Next(&d)) {
    }
    if (trial % 2) {
      EXPECT_FALSE(r.status().ok()) << "truncated to " << bad.size();
    }
  }
}

TEST(DeltaBatchTest, AnEventIdRoundTripsAndCostsNothingWithout) {
  DeltaBatchBuilder with, without;
  Delta d;
  d.op = DeltaOp::kPostCounter;
  d.entity = 42;
  d.field = 3;
  d.amount = 1;
  d.source.stream = with.StreamIndex("tally.events", 0);
  without.StreamIndex("tally.events", 0);
  without.Add(d);
  d.event_id = EventIdHash("order-17/retry");
  with.Add(d);
  std::string a = with.Finish(), b = without.Finish();
  EXPECT_EQ(a.size(), b.size() + 8);  // the hash, nothing else
  for (const std::string* bytes : {&a, &b}) {
    DeltaBatchReader r;
    ASSERT_TRUE(r.Open(*bytes).ok());
    Delta out;
    ASSERT_TRUE(r.Next(&out)) << r.status().ToString();
    EXPECT_EQ(out.event_id, bytes == &a ? d.event_id : 0u);
    EXPECT_EQ(out.op, DeltaOp::kPostCounter);
    EXPECT_EQ(out.entity, 42u);
    EXPECT_EQ(out.amount, 1);
  }
  // A damaged batch with the flag but no room for the hash.
  std::string cut = a.substr(0, a.size() - 12);
  DeltaBatchReader r;
  if (r.Open(cut).ok()) {
    Delta out;
    while (r.Next(&out)) {
    }
    EXPECT_FALSE(r.status().ok());
  }
}

TEST(PartitionOfTest, StableAndSpread) {
  EXPECT_EQ(PartitionOf(12345, 16), PartitionOf(12345, 16));
  std::vector<int> hist(16);
  for (uint64_t id = 1; id <= 16000; id++) hist[PartitionOf(id, 16)]++;
  for (int h : hist) EXPECT_NEAR(h, 1000, 150);
}

}  // namespace
}  // namespace tally::schemas
