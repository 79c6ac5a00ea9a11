#include "broker_control.h"

#include <signal.h>

#include <atomic>

#include "base/clock.h"
#include "base/log.h"
#include "base/shutdown.h"

namespace tally::app {
namespace {

constexpr std::string_view kComponent = "broker";

// The last control signal not yet acted on: 0 none, else SIGUSR1/SIGUSR2.
std::atomic<int> g_pending{0};

void OnControlSignal(int signo) { g_pending.store(signo); }

}  // namespace

void InstallBrokerControlSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnControlSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
}

void ServeUntilShutdown(const BrokerControl& control, const std::function<bool()>& done,
                        int interval_ms) {
  int64_t down_since = -1;
  while (!base::WaitForShutdown(interval_ms)) {
    if (done && done()) return;
    int signo = g_pending.exchange(0);
    if (signo == 0) continue;
    bool down = signo == SIGUSR1;
    const char* name = down ? "SIGUSR1" : "SIGUSR2";
    if (!control.set_available) {
      TALLY_LOG_WARN(kComponent, "{} ignored: this process runs no embedded broker", name);
      continue;
    }
    if (down == (down_since >= 0)) {
      TALLY_LOG_INFO(kComponent, "{}: the embedded broker is already {}", name, down ? "down" : "up");
      continue;
    }
    base::Status st = control.set_available(!down);
    if (!st.ok()) {
      TALLY_LOG_ERROR(kComponent, "{}: {}", name, st.ToString());
      continue;
    }
    if (down) {
      down_since = base::SteadyMs();
      TALLY_LOG_WARN(kComponent,
                     "{}: embedded broker {} taken down: connections closed, new ones refused, "
                     "its log kept (SIGUSR2 brings it back)",
                     name, control.address);
    } else {
      TALLY_LOG_WARN(kComponent, "{}: embedded broker {} up again after {:.1f} s down", name,
                     control.address, (base::SteadyMs() - down_since) / 1000.0);
      down_since = -1;
    }
  }
}

}  // namespace tally::app
