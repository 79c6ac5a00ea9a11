// HotKeys against an exact model: a key heavier than total/capacity in a
// second is always held, counts never under-estimate, and seconds leave
// the window when it has passed them.
#include "base/hot_keys.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>

#include "base/metrics.h"

namespace tally::base {
namespace {

TEST(HotKeysTest, ExactWhileTheKeysFitInTheSketch) {
  HotKeys h(64, 60);
  {
    auto w = h.Lock(1000);
    w.Add(7, 5);
    w.Add(9, 2);
    w.Add(7, 1);
    w.Add(11, 0);  // no weight: not a key
  }
  { h.Lock(2500).Add(9, 10); }
  auto top = h.Top(20, 2600);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].key, 9u);
  EXPECT_EQ(top[0].weight, 12u);
  EXPECT_EQ(top[1].key, 7u);
  EXPECT_EQ(top[1].weight, 6u);
  EXPECT_EQ(h.Top(1, 2600).size(), 1u);
}

TEST(HotKeysTest, HeavyKeysSurviveALongTailAndAreNeverUnderCounted) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  HotKeys h(64, 60);
  std::map<uint64_t, uint64_t> truth;
  uint64_t total = 0;
  for (int second = 0; second < 5; second++) {
    auto w = h.Lock(second * 1000 + 1);
    for (int i = 0; i < 20000; i++) {
      // Keys 1..5 are hot; a tail of a million others.
      uint64_t key = rng() % 4 == 0 ? 1 + rng() % 5 : 100 + rng() % 1000000;
      uint64_t weight = 1 + rng() % 3;
      w.Add(key, weight);
      truth[key] += weight;
      total += weight;
    }
  }
  auto top = h.Top(5, 4999);
  ASSERT_EQ(top.size(), 5u);
  for (const HotKey& k : top) {
    EXPECT_GE(k.key, 1u);
    EXPECT_LE(k.key, 5u);
    EXPECT_GE(k.weight, truth[k.key]);  // space-saving over-estimates only
    EXPECT_LE(k.weight, total);
  }
  EXPECT_GE(top[0].weight, top[4].weight);
}

TEST(HotKeysTest, SecondsOlderThanTheWindowAreForgotten) {
  HotKeys h(16, 60);
  { h.Lock(10'000).Add(1, 100); }
  { h.Lock(30'000).Add(2, 50); }
  EXPECT_EQ(h.Top(10, 69'999).size(), 2u);  // the window: seconds 10..69
  auto later = h.Top(10, 70'000);           // seconds 11..70
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].key, 2u);
  EXPECT_TRUE(h.Top(10, 200'000).empty());
}

TEST(MetricsTotalsTest, CountersAndHistogramsAreSummedOverLabelsLeavingOutSkipped) {
  MetricsRegistry r;
  r.GetCounter("t_total", "h", "route=\"a\"")->Inc(3);
  r.GetCounter("t_total", "h", "route=\"b\"")->Inc(4);
  r.GetCounter("t_total", "h", "route=\"status_page\"")->Inc(100);
  r.GetCounter("u_total", "h")->Inc(1000);
  EXPECT_EQ(r.CounterTotal("t_total"), 107u);
  EXPECT_EQ(r.CounterTotal("t_total", "route=\"status"), 7u);
  EXPECT_EQ(r.CounterTotal("missing"), 0u);
  r.GetHistogram("d_seconds", "h", "route=\"a\"", {0.1, 1})->Observe(0.05);
  r.GetHistogram("d_seconds", "h", "route=\"b\"", {0.1, 1})->Observe(0.5);
  r.GetHistogram("d_seconds", "h", "route=\"status_page\"", {0.1, 1})->Observe(5);
  std::vector<double> bounds;
  std::vector<uint64_t> buckets;
  uint64_t count = 0;
  r.HistogramTotal("d_seconds", "route=\"status", &bounds, &buckets, &count);
  EXPECT_EQ(bounds, (std::vector<double>{0.1, 1}));
  EXPECT_EQ(buckets, (std::vector<uint64_t>{1, 1, 0}));
  EXPECT_EQ(count, 2u);
}

}  // namespace
}  // namespace tally::base
