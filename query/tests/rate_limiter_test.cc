#include "rate_limiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tally::query::internal {
namespace {

constexpr int64_t kSecond = 1000000000;
const ClientKey kA = ClientKey::FromIpv4(0x7f000001);  // 127.0.0.1
const ClientKey kB = ClientKey::FromIpv4(0x0a000001);  // 10.0.0.1

TEST(RateLimiterTest, BurstThenRefusedWithTheWaitUntilTheNextToken) {
  RateLimiter rl(10, 5);
  for (int i = 0; i < 5; i++) EXPECT_EQ(rl.Acquire(kA, kSecond), 0) << i;
  EXPECT_EQ(rl.Acquire(kA, kSecond), 100);  // 10/s: one token every 100 ms
  EXPECT_EQ(rl.Acquire(kA, kSecond + 40 * 1000000), 60);
  EXPECT_EQ(rl.Acquire(kA, kSecond + 100 * 1000000), 0);
  EXPECT_GT(rl.Acquire(kA, kSecond + 100 * 1000000), 0);
}

TEST(RateLimiterTest, RefillsAtTheRateAndNeverAboveTheBurst) {
  RateLimiter rl(2, 3);
  for (int i = 0; i < 3; i++) EXPECT_EQ(rl.Acquire(kA, 0), 0);
  EXPECT_GT(rl.Acquire(kA, 0), 0);
  // An hour later: 3 tokens, not 7200.
  int allowed = 0;
  for (int i = 0; i < 10; i++) allowed += rl.Acquire(kA, 3600 * kSecond) == 0;
  EXPECT_EQ(allowed, 3);
}

TEST(RateLimiterTest, ClientsHaveTheirOwnBuckets) {
  RateLimiter rl(1, 1);
  EXPECT_EQ(rl.Acquire(kA, 0), 0);
  EXPECT_GT(rl.Acquire(kA, 0), 0);
  EXPECT_EQ(rl.Acquire(kB, 0), 0);
}

TEST(RateLimiterTest, Ipv6ClientsAreTheirSlash64AndMappedIpv4IsIpv4) {
  std::array<uint8_t, 16> a{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1};
  std::array<uint8_t, 16> b = a;
  b[15] = 0x99;  // same /64
  std::array<uint8_t, 16> c = a;
  c[7] = 2;  // another /64
  EXPECT_EQ(ClientKey::FromIpv6(a), ClientKey::FromIpv6(b));
  EXPECT_NE(ClientKey::FromIpv6(a), ClientKey::FromIpv6(c));
  std::array<uint8_t, 16> mapped{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(ClientKey::FromIpv6(mapped), kA);
  // ::7f00:1 (not mapped) is not 127.0.0.1.
  std::array<uint8_t, 16> compat{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 127, 0, 0, 1};
  EXPECT_NE(ClientKey::FromIpv6(compat), kA);
}

TEST(RateLimiterTest, ManyDistinctClientsDoNotGrowTheTableWithoutBound) {
  RateLimiter rl(1, 1);
  for (uint32_t ip = 1; ip <= 1000000; ip++) rl.Acquire(ClientKey::FromIpv4(ip), 0);
  EXPECT_LE(rl.ClientCount(), RateLimiter::kShards * RateLimiter::kMaxClientsPerShard);
}

TEST(RateLimiterTest, ConcurrentRequestsNeverGetMoreThanTheBurst) {
  RateLimiter rl(1, 1000);
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; i++) allowed += rl.Acquire(kA, 0) == 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 1000);
}

}  // namespace
}  // namespace tally::query::internal
