#include "base/log.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::base {
namespace {

TEST(LogLimiterTest, PassesABurstPerPeriodThenCountsWhatItLeavesOut) {
  LogLimiter limiter(3, 1000);
  uint64_t dropped = 99;
  for (int i = 0; i < 3; i++) {
    EXPECT_TRUE(limiter.Allow(100 + i, &dropped));
    EXPECT_EQ(dropped, 0u);
  }
  for (int i = 0; i < 5; i++) EXPECT_FALSE(limiter.Allow(200 + i, &dropped));
  // A new period: the first line says how many the last one left out.
  EXPECT_TRUE(limiter.Allow(1100, &dropped));
  EXPECT_EQ(dropped, 5u);
  EXPECT_TRUE(limiter.Allow(1101, &dropped));
  EXPECT_EQ(dropped, 0u);
}

TEST(LogLimiterTest, AClockThatGoesBackStartsANewPeriod) {
  LogLimiter limiter(1, 1000);
  uint64_t dropped = 0;
  EXPECT_TRUE(limiter.Allow(5000, &dropped));
  EXPECT_FALSE(limiter.Allow(5001, &dropped));
  EXPECT_TRUE(limiter.Allow(10, &dropped));
  EXPECT_EQ(dropped, 1u);
}

TEST(LogLimiterTest, TheMacroWritesTheBurstAndThenTheCountOfWhatWasLeftOut) {
  LogLimiter limiter(2, 60000);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 50; i++) TALLY_LOG_WARN_LIMITED(limiter, "test", "record {} is bad", i);
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("WARN  test: record 0 is bad\n"), std::string::npos) << out;
  EXPECT_NE(out.find("WARN  test: record 1 is bad\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("record 2 is bad"), std::string::npos) << out;
  size_t lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 2u) << out;
}

}  // namespace
}  // namespace tally::base
