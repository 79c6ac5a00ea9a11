#include "base/shutdown.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace tally::base {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// A stop is process-wide and for good: each case runs in a child of its own
// (EXPECT_EXIT), which exits 0 only if every check held.

TEST(ShutdownTest, WaitReturnsFalseAtItsTimeout) {
  EXPECT_EXIT(
      {
        const auto t0 = Clock::now();
        const bool stopped = WaitForShutdown(120);
        const int64_t ms = MsSince(t0);
        std::exit(!stopped && ms >= 115 && ms < 1000 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(ShutdownTest, AStopWakesAWaiterAtOnce) {
  EXPECT_EXIT(
      {
        std::thread stopper([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          RequestShutdown();
        });
        const auto t0 = Clock::now();
        const bool stopped = WaitForShutdown(-1);
        const int64_t ms = MsSince(t0);
        stopper.join();
        std::exit(stopped && ms < 1000 && WaitForShutdown(5000) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(ShutdownTest, SigtermWakesAWaiterAndStartsTheBudget) {
  EXPECT_EXIT(
      {
        InstallShutdownHandlers();
        std::thread signaller([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          ::kill(::getpid(), SIGTERM);
        });
        const auto t0 = Clock::now();
        const bool stopped = WaitForShutdown(10000);
        const int64_t ms = MsSince(t0);
        signaller.join();
        const int left = StopBudgetLeftMs(kStopBudgetMs);
        std::exit(stopped && ms < 2000 && left > 0 && left <= kStopBudgetMs ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tally::base
