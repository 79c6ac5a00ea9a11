#include "base/shutdown.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace tally::base {
namespace {
std::atomic<int> g_requests{0};

void OnSignal(int) {
  if (g_requests.fetch_add(1) >= 1) _exit(130);
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
  g_requests.compare_exchange_strong(expected, 1);
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
