// StretchedByShare: the router's linger and the applier's window of a
// member given a share of the partitions.
#include "aggregator/cadence.h"

#include <gtest/gtest.h>

namespace tally::aggregator {
namespace {

TEST(StretchedByShareTest, OneProcessOrEveryPartitionKeepsTheBase) {
  EXPECT_EQ(StretchedByShare(20, 60, 16, 16), 20);
  EXPECT_EQ(StretchedByShare(20, 60, 16, 0), 20);   // nothing given yet
  EXPECT_EQ(StretchedByShare(20, 60, 16, 20), 20);  // more than all reads as all
}

TEST(StretchedByShareTest, AShareOfKWaitsKTimesAsLongUpToTheMaximum) {
  EXPECT_EQ(StretchedByShare(20, 60, 16, 8), 40);  // 2 members
  EXPECT_EQ(StretchedByShare(20, 60, 16, 6), 53);  // 3 members, the larger share
  EXPECT_EQ(StretchedByShare(20, 60, 16, 5), 60);  // 64 ms, held to the maximum
  EXPECT_EQ(StretchedByShare(20, 60, 16, 1), 60);
  EXPECT_EQ(StretchedByShare(1, 60, 1024, 1), 60);  // 1024 ms, held to the maximum
}

TEST(StretchedByShareTest, ABaseAboveTheMaximumIsKept) {
  // --flush-ms 100: the operator asked for long windows already.
  EXPECT_EQ(StretchedByShare(100, 60, 16, 4), 100);
  EXPECT_EQ(StretchedByShare(100, 60, 16, 16), 100);
}

}  // namespace
}  // namespace tally::aggregator
