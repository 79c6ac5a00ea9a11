#include "base/shutdown.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace tally::base {
namespace {
std::atomic<int> g_requests{0};
std::atomic<int64_t> g_requested_ms{0};  // CLOCK_MONOTONIC ms of the first request

int64_t MonotonicMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// WaitForShutdown() sleeps on g_requests itself (a futex), so a waiting
// thread costs no wakeups until a stop or its timeout. The futex syscall is
// async-signal-safe.
int* RequestsWord() {
  static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free);
  return reinterpret_cast<int*>(&g_requests);
}

void WakeWaiters() {
  syscall(SYS_futex, RequestsWord(), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

void OnSignal(int) {
  if (g_requests.fetch_add(1) >= 1) _exit(130);
  g_requested_ms.store(MonotonicMs());
  WakeWaiters();
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
  if (g_requests.compare_exchange_strong(expected, 1)) {
    g_requested_ms.store(MonotonicMs());
    WakeWaiters();
  }
}

int StopBudgetLeftMs(int cap_ms) {
  if (!ShutdownRequested()) return cap_ms;
  int64_t requested = g_requested_ms.load();
  if (requested == 0) requested = MonotonicMs();  // the handler has not stored it yet
  const int64_t left = requested + kStopBudgetMs - MonotonicMs();
  return static_cast<int>(std::clamp<int64_t>(left, 0, cap_ms));
}

bool WaitForShutdown(int timeout_ms) {
  const int64_t deadline = MonotonicMs() + timeout_ms;
  while (!ShutdownRequested()) {
    timespec wait{};
    timespec* timeout = nullptr;
    if (timeout_ms >= 0) {
      const int64_t left = deadline - MonotonicMs();
      if (left <= 0) return false;
      wait.tv_sec = static_cast<time_t>(left / 1000);
      wait.tv_nsec = static_cast<long>(left % 1000) * 1000000;
      timeout = &wait;
    }
    // Returns at a wake, at the timeout, on a signal, or at once if a stop
    // was requested since the check above (the word is no longer 0).
    syscall(SYS_futex, RequestsWord(), FUTEX_WAIT_PRIVATE, 0, timeout, nullptr, 0);
  }
  return true;
}

}  // namespace tally::base
