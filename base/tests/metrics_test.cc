// Counters and histograms updated from many threads at once (each thread
// adds to its own stripe) read back exactly.
#include "base/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace tally::base {
namespace {

TEST(MetricsTest, ConcurrentIncrementsAreAllCounted) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; t++) {
    threads.emplace_back([&c, t] {
      for (int i = 0; i < 10000; i++) c.Inc(static_cast<uint64_t>(t + 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 10000u * (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8));
}

TEST(MetricsTest, ConcurrentObservationsLandInTheirBucketsAndTheCountIsTheirSum) {
  Histogram h({0.001, 0.01, 0.1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; t++) {
    threads.emplace_back([&h] {
      for (int i = 0; i < 5000; i++) {
        h.Observe(0.0005);  // first bucket
        h.Observe(0.05);    // third
        h.Observe(7);       // +Inf
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint64_t> buckets;
  double sum = 0;
  uint64_t count = 0;
  h.Snapshot(&buckets, &sum, &count);
  EXPECT_EQ(buckets, (std::vector<uint64_t>{30000, 0, 30000, 30000}));
  EXPECT_EQ(count, 90000u);
  EXPECT_NEAR(sum, 30000 * (0.0005 + 0.05 + 7), 1e-3);
}

TEST(MetricsTest, RegisteredMetricsRenderTheirTotals) {
  MetricsRegistry& r = MetricsRegistry::Global();
  Counter* c = r.GetCounter("metrics_test_total", "a test counter", "k=\"v\"");
  c->Inc(3);
  std::thread([c] { c->Inc(4); }).join();
  Histogram* h = r.GetHistogram("metrics_test_seconds", "a test histogram", "", {1});
  h->Observe(0.5);
  std::thread([h] { h->Observe(2); }).join();
  const std::string text = r.RenderPrometheus();
  EXPECT_NE(text.find("metrics_test_total{k=\"v\"} 7"), std::string::npos) << text;
  EXPECT_NE(text.find("metrics_test_seconds_count 2"), std::string::npos) << text;
}

}  // namespace
}  // namespace tally::base
