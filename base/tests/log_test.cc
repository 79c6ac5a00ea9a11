#include "base/log.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::base {
namespace {

TEST(LogLimiterTest, PassesABurstPerPeriodThenCountsWhatItLeavesOut) {
  LogLimiter limiter(3, 10000);
  std::string suffix = "stale";
  EXPECT_TRUE(limiter.Allow(100, &suffix));
  EXPECT_EQ(suffix, "");
  EXPECT_TRUE(limiter.Allow(101, &suffix));
  EXPECT_EQ(suffix, "");
  // The last line of the burst says that the next ones are left out.
  EXPECT_TRUE(limiter.Allow(2100, &suffix));
  EXPECT_EQ(suffix, " (3 lines like this in 10 s: the next ones are left out for 8 s)");
  for (int i = 0; i < 5; i++) EXPECT_FALSE(limiter.Allow(3000 + i, &suffix));
  // A new period: its first line says how many the last one left out.
  EXPECT_TRUE(limiter.Allow(10100, &suffix));
  EXPECT_EQ(suffix, " (5 similar lines left out before this one)");
  EXPECT_TRUE(limiter.Allow(10101, &suffix));
  EXPECT_EQ(suffix, "");
}

TEST(LogLimiterTest, AClockThatGoesBackStartsANewPeriod) {
  LogLimiter limiter(1, 1000);
  std::string suffix;
  EXPECT_TRUE(limiter.Allow(5000, &suffix));
  EXPECT_FALSE(limiter.Allow(5001, &suffix));
  EXPECT_TRUE(limiter.Allow(10, &suffix));
  EXPECT_EQ(suffix,
            " (1 similar line left out before this one) (1 line like this in 1 s: the next ones "
            "are left out for 1 s)");
}

TEST(LogLimiterTest, TheMacroWritesTheBurstAndSaysWhenItStops) {
  LogLimiter limiter(2, 60000);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 50; i++) TALLY_LOG_WARN_LIMITED(limiter, "test", "record {} is bad", i);
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("WARN  test: record 0 is bad\n"), std::string::npos) << out;
  EXPECT_NE(out.find("WARN  test: record 1 is bad (2 lines like this in 60 s: the next ones are "
                     "left out for 60 s)\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("record 2 is bad"), std::string::npos) << out;
  size_t lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_EQ(lines, 2u) << out;
}

}  // namespace
}  // namespace tally::base
