#include "store/counter_op.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tally::store {
namespace {

// Applying a sequence one op at a time equals applying its composition,
// wherever the sequence is cut: the property the applier's windows and the
// merge operator rely on.
TEST(CounterOpTest, CompositionEqualsSequentialApplication) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 2000; trial++) {
    std::vector<CounterOp> ops;
    int n = 1 + rng() % 12;
    for (int i = 0; i < n; i++) {
      int r = rng() % 10;
      if (r == 0) ops.push_back(CounterOp::Reset());
      else if (r < 4) ops.push_back(CounterOp::Add(-static_cast<int64_t>(rng() % 3)));
      else ops.push_back(CounterOp::Add(rng() % 5));
    }
    int64_t start = rng() % 6;
    int64_t seq = start;
    for (const auto& op : ops) seq = op.Apply(seq);
    // Compose in two windows cut at a random point, then compose the windows.
    size_t cut = rng() % (ops.size() + 1);
    CounterOp a, b;
    for (size_t i = 0; i < cut; i++) a.Then(ops[i]);
    for (size_t i = cut; i < ops.size(); i++) b.Then(ops[i]);
    CounterOp ab = a;
    ab.Then(b);
    ASSERT_EQ(ab.Apply(start), seq) << "trial " << trial;
    ASSERT_EQ(b.Apply(a.Apply(start)), seq) << "trial " << trial;
  }
}

TEST(CounterOpTest, NeverBelowZero) {
  CounterOp op = CounterOp::Add(-1);
  EXPECT_EQ(op.Apply(0), 0);
  op.Then(CounterOp::Add(1));
  EXPECT_EQ(op.Apply(0), 1);  // delete on an empty counter, then +1: 1, not 0
}

TEST(CounterOpTest, ResetBetweenIncrementsKeepsOnlyTheLaterOnes) {
  CounterOp op = CounterOp::Add(3);
  op.Then(CounterOp::Reset());
  op.Then(CounterOp::Add(2));
  EXPECT_EQ(op.Apply(100), 2);
}

}  // namespace
}  // namespace tally::store
