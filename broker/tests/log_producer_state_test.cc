#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include "log/producer_state.h"
#include "testing/temp_dir.h"

namespace tally::broker {
namespace {

constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

TEST(ProducerStateTest, NonIdempotentBatchesAreNeverChecked) {
  ProducerStateTable t;
  EXPECT_EQ(t.CheckAndRecord(-1, -1, -1, 5, 0).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(t.CheckAndRecord(-1, -1, -1, 5, 5).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(t.size(), 0u);
}

TEST(ProducerStateTest, DuplicateOfAnyOfTheLastFiveGetsItsOriginalOffsets) {
  ProducerStateTable t;
  int64_t offset = 100;
  for (int i = 0; i < 7; ++i) {
    ASSERT_EQ(t.CheckAndRecord(7, 0, i * 10, 10, offset).verdict, ProducerVerdict::kAppend);
    offset += 10;
  }
  // Batches 2..6 are remembered.
  for (int i = 2; i < 7; ++i) {
    ProducerCheck c = t.Check(7, 0, i * 10, 10);
    EXPECT_EQ(c.verdict, ProducerVerdict::kDuplicate) << i;
    EXPECT_EQ(c.base_offset, 100 + i * 10);
    EXPECT_EQ(c.last_offset, 100 + i * 10 + 9);
  }
  EXPECT_EQ(t.Check(7, 0, 10, 10).verdict, ProducerVerdict::kOutOfOrderSequence);
  EXPECT_EQ(t.Check(7, 0, 70, 3).verdict, ProducerVerdict::kAppend);
}

TEST(ProducerStateTest, GapOrOverlapIsOutOfOrder) {
  ProducerStateTable t;
  ASSERT_EQ(t.CheckAndRecord(1, 0, 0, 5, 0).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(t.Check(1, 0, 6, 1).verdict, ProducerVerdict::kOutOfOrderSequence);
  EXPECT_EQ(t.Check(1, 0, 3, 5).verdict, ProducerVerdict::kOutOfOrderSequence);
  EXPECT_EQ(t.Check(1, 0, 5, 1).verdict, ProducerVerdict::kAppend);
}

TEST(ProducerStateTest, OlderEpochIsFencedAndNewerMustStartAtZero) {
  ProducerStateTable t;
  ASSERT_EQ(t.CheckAndRecord(1, 3, 0, 5, 0).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(t.Check(1, 2, 5, 1).verdict, ProducerVerdict::kInvalidEpoch);
  EXPECT_EQ(t.Check(1, 4, 5, 1).verdict, ProducerVerdict::kOutOfOrderSequence);
  ASSERT_EQ(t.CheckAndRecord(1, 4, 0, 2, 5).verdict, ProducerVerdict::kAppend);
  // The old epoch's batches are forgotten; the old epoch is now fenced.
  EXPECT_EQ(t.Check(1, 3, 0, 5).verdict, ProducerVerdict::kInvalidEpoch);
  EXPECT_EQ(t.Check(1, 4, 2, 1).verdict, ProducerVerdict::kAppend);
}

TEST(ProducerStateTest, UnknownProducerMayStartAnywhere) {
  ProducerStateTable t;
  EXPECT_EQ(t.CheckAndRecord(9, 0, 1234, 1, 0).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(t.Check(9, 0, 1235, 1).verdict, ProducerVerdict::kAppend);
}

TEST(ProducerStateTest, SequencesWrapAtInt32Max) {
  EXPECT_EQ(IncrementSequence(kMax, 1), 0);
  EXPECT_EQ(IncrementSequence(kMax - 1, 3), 1);
  ProducerStateTable t;
  ASSERT_EQ(t.CheckAndRecord(5, 0, kMax - 2, 3, 0).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(t.Check(5, 0, 0, 2).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(t.Check(5, 0, 1, 2).verdict, ProducerVerdict::kOutOfOrderSequence);
  // A batch straddling the wrap.
  ProducerStateTable u;
  ASSERT_EQ(u.CheckAndRecord(6, 0, kMax - 1, 4, 0).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(u.Check(6, 0, kMax - 1, 4).verdict, ProducerVerdict::kDuplicate);
  EXPECT_EQ(u.Check(6, 0, 2, 1).verdict, ProducerVerdict::kAppend);
}

TEST(ProducerStateTest, SnapshotRoundTripsAndDamageIsDetected) {
  testing::TempDir dir("producer-state");
  ProducerStateTable t;
  for (int i = 0; i < 8; ++i) (void)t.CheckAndRecord(11, 2, i, 1, 50 + i);
  (void)t.CheckAndRecord(12, 0, 0, 3, 60);
  auto path = dir.path() / "00000000000000000063.snapshot";
  ASSERT_TRUE(t.WriteSnapshot(path).ok());
  ProducerStateTable u;
  ASSERT_TRUE(u.LoadSnapshot(path).ok());
  EXPECT_EQ(u.size(), 2u);
  ProducerCheck c = u.Check(11, 2, 7, 1);
  EXPECT_EQ(c.verdict, ProducerVerdict::kDuplicate);
  EXPECT_EQ(c.base_offset, 57);
  EXPECT_EQ(u.Check(11, 2, 8, 1).verdict, ProducerVerdict::kAppend);
  EXPECT_EQ(u.Check(12, 0, 0, 3).verdict, ProducerVerdict::kDuplicate);

  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('\x7f');
  }
  ProducerStateTable v;
  EXPECT_EQ(v.LoadSnapshot(path).code(), base::StatusCode::kCorruption);
}

}  // namespace
}  // namespace tally::broker
