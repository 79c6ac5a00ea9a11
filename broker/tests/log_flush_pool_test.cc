#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "log/flush_pool.h"

namespace tally::broker {
namespace {

TEST(FlushPoolTest, EveryCallRunsOnceAndRunWaitsForAll) {
  FlushPool pool(7);
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{8}, size_t{40}}) {
    std::vector<std::atomic<int>> calls(n);
    std::atomic<size_t> returned{0};
    pool.Run(n, [&](size_t i) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      calls[i]++;
      returned++;
    });
    EXPECT_EQ(returned.load(), n) << "Run returned before every call had";
    for (size_t i = 0; i < n; i++) EXPECT_EQ(calls[i].load(), 1) << "call " << i << " of " << n;
  }
}

// What the pool is for: calls that wait (fdatasync) overlap, so a round
// takes about one call's time, not the sum.
TEST(FlushPoolTest, CallsThatWaitOverlap) {
  FlushPool pool(15);
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::atomic<int> inside{0}, most{0};
  const auto t0 = std::chrono::steady_clock::now();
  pool.Run(16, [&](size_t) {
    int now = ++inside;
    for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
    }
    {
      std::lock_guard<std::mutex> l(mu);
      threads.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    inside--;
  });
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_GT(most.load(), 1);
  EXPECT_GT(threads.size(), 1u);
  EXPECT_LT(ms, 16 * 50 / 2) << "16 calls of 50 ms ran one after another";
}

TEST(FlushPoolTest, WithoutHelpersTheCallerRunsEverything) {
  FlushPool pool(0);
  std::set<std::thread::id> threads;
  pool.Run(5, [&](size_t) { threads.insert(std::this_thread::get_id()); });
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(*threads.begin(), std::this_thread::get_id());
}

TEST(FlushPoolTest, ManyRoundsInARow) {
  FlushPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 2000; r++)
    pool.Run(static_cast<size_t>(r % 6), [&](size_t i) { sum += static_cast<int64_t>(i) + 1; });
  int64_t want = 0;
  for (int r = 0; r < 2000; r++) want += (r % 6) * (r % 6 + 1) / 2;
  EXPECT_EQ(sum.load(), want);
}

}  // namespace
}  // namespace tally::broker
