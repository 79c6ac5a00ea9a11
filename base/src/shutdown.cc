#include "base/shutdown.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace tally::base {
namespace {
std::atomic<int> g_requests{0};
std::atomic<int64_t> g_requested_ms{0};  // CLOCK_MONOTONIC ms of the first request

int64_t MonotonicMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void OnSignal(int) {
  if (g_requests.fetch_add(1) >= 1) _exit(130);
  g_requested_ms.store(MonotonicMs());
}
}  // namespace

void InstallShutdownHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool ShutdownRequested() { return g_requests.load(std::memory_order_relaxed) > 0; }

void RequestShutdown() {
  int expected = 0;
  if (g_requests.compare_exchange_strong(expected, 1)) g_requested_ms.store(MonotonicMs());
}

int StopBudgetLeftMs(int cap_ms) {
  if (!ShutdownRequested()) return cap_ms;
  int64_t requested = g_requested_ms.load();
  if (requested == 0) requested = MonotonicMs();  // the handler has not stored it yet
  const int64_t left = requested + kStopBudgetMs - MonotonicMs();
  return static_cast<int>(std::clamp<int64_t>(left, 0, cap_ms));
}

bool WaitForShutdown(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!ShutdownRequested()) {
    if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace tally::base
