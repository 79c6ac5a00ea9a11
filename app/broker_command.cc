// `tally broker`: only the embedded Kafka-protocol broker (SPEC section 5).
//
// Prints exactly one line to stdout, "bootstrap: HOST:PORT", once the broker
// accepts clients (scripts wait for it), then serves until SIGINT/SIGTERM.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "base/flags.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "broker_control.h"
#include "broker_process.h"
#include "cli.h"
#include "commands.h"
#include "embedded_broker.h"

namespace tally::app {

int RunBroker(int argc, char** argv) {
  const std::string command = "tally broker";
  int64_t port = 9092;
  int64_t partitions = 16;
  std::string log_level = "info";
  std::string state_dir;
  base::FlagSet flags(
      command,
      "Runs only the embedded Kafka-protocol broker (librdkafka's mock cluster) on\n"
      "127.0.0.1:--port, with tally's topics created, and prints its bootstrap address.\n"
      "The log lives in memory, keeps the newest ~5 MiB per partition and is gone when\n"
      "the broker stops. Consumer groups against it should use session.timeout.ms=6000\n"
      "and heartbeat.interval.ms=500.\n"
      "\n"
      "Outage drills: SIGUSR1 takes the broker down (open connections are closed, new\n"
      "ones refused, the log is kept), SIGUSR2 brings it back, e.g.\n"
      "  kill -USR1 $(pidof tally); sleep 10; kill -USR2 $(pidof tally)");
  flags.Int("port", &port, "TCP port clients bootstrap from (0: a random port)");
  flags.Int("partitions", &partitions,
            "partitions of tally.events, tally.deltas and tally.dlq (tally.meta has 1)");
  flags.String("log-level", &log_level, "debug, info, warn, error or off");
  flags.String("state-dir", &state_dir,
               "serve the state directory DIR: record this broker in DIR/BROKER, where `tally up "
               "--state-dir DIR` finds it again after a crash, and stop when DIR is removed "
               "(tally up runs its embedded broker this way)");
  if (int rc = ParseFlagsOrExit(flags, command, argc, argv); rc >= 0) return rc;
  InstallBrokerControlSignals();
  if (auto st = ApplyLogLevel(log_level); !st.ok()) return Fail(command, st, kExitUsage);
  if (port < 0 || port > 65535) {
    return Fail(command, base::Status::InvalidArgument("--port must be in 0..65535"), kExitUsage);
  }
  if (partitions < 1 || partitions > 10000) {
    return Fail(command, base::Status::InvalidArgument("--partitions must be in 1..10000"),
                kExitUsage);
  }

  EmbeddedBrokerOptions options;
  options.port = static_cast<int>(port);
  options.partitions = static_cast<int>(partitions);
  auto broker = EmbeddedBroker::Start(options);
  if (!broker.ok()) return Fail(command, broker.status());

  EmbeddedBroker* b = broker->get();
  struct stat dir_stat {};
  if (!state_dir.empty()) {
    state_dir = std::filesystem::absolute(state_dir).lexically_normal().string();
    BrokerRecord record{getpid(), b->bootstrap(), b->incarnation()};
    if (auto st = WriteBrokerRecord(state_dir, record); !st.ok()) return Fail(command, st);
    stat(state_dir.c_str(), &dir_stat);
  }
  std::printf("bootstrap: %s\n", b->bootstrap().c_str());
  std::fflush(stdout);
  if (state_dir.empty()) {
    TALLY_LOG_INFO("broker",
                   "consumer groups against the embedded broker should set session.timeout.ms=6000 "
                   "and heartbeat.interval.ms=500 (it completes a rebalance only after "
                   "session.timeout.ms - 1000)");
  }
  // With a state directory, the broker serves only while that directory is
  // there: a test's or a demo's removed directory leaves no broker behind.
  auto dir_removed = [&] {
    if (state_dir.empty()) return false;
    struct stat now {};
    if (stat(state_dir.c_str(), &now) == 0 && now.st_ino == dir_stat.st_ino &&
        now.st_dev == dir_stat.st_dev) {
      return false;
    }
    TALLY_LOG_WARN("broker", "{} was removed: stopping, its log is gone with it", state_dir);
    return true;
  };
  ServeUntilShutdown(BrokerControl{[b](bool up) { return b->SetAvailable(up); }, b->bootstrap()},
                     dir_removed);
  TALLY_LOG_INFO("broker", "stop requested");
  if (!state_dir.empty()) RemoveBrokerRecord(state_dir, getpid());
  b->Stop();
  return kExitOk;
}

}  // namespace tally::app
