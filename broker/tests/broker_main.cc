// A broker in a process of its own, for the server tests that SIGKILL it:
//   broker_test_main LOG_DIR PORT [LOG_FLUSH_MS]
// prints "BOOTSTRAP host:port" on stdout once it listens, then serves until
// SIGTERM or SIGINT, and stops cleanly.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "broker/broker.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LOG_DIR PORT [LOG_FLUSH_MS]\n", argv[0]);
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  // Blocked before the broker's threads start, so they inherit the mask
  // and sigwait below receives the signal.
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  tally::broker::BrokerOptions options;
  options.log_dir = argv[1];
  options.port = std::atoi(argv[2]);
  if (argc > 3) options.log_flush_ms = std::atoi(argv[3]);
  options.default_partitions = 4;
  auto broker = tally::broker::Broker::Start(options);
  if (!broker.ok()) {
    std::fprintf(stderr, "broker: %s\n", broker.status().ToString().c_str());
    return 1;
  }
  std::printf("BOOTSTRAP %s\n", (*broker)->bootstrap().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  tally::base::Status st = (*broker)->Stop();
  return st.ok() ? 0 : 1;
}
