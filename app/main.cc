// tally: Kafka events -> exact counters in RocksDB, served over HTTP.
//
// `tally <command> [flags]`; see Usage() and SPEC.md section 5.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "base/kafka.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "commands.h"

#ifndef TALLY_VERSION
#error "TALLY_VERSION must be defined by the build (app/CMakeLists.txt)"
#endif

namespace {

struct Command {
  std::string_view name;
  int (*run)(int, char**);
  std::string_view summary;
};

constexpr Command kCommands[] = {
    {"up", tally::app::RunUp,
     "embedded broker (unless --brokers), aggregator and HTTP tier in one process"},
    {"broker", tally::app::RunBroker, "only the embedded Kafka-protocol broker"},
    {"produce", tally::app::RunProduce,
     "publish JSON lines (stdin or --file) or --gen N synthetic events"},
    {"aggregate", tally::app::RunAggregate, "only the aggregator (consumer group member)"},
    {"serve", tally::app::RunServe, "only the HTTP tier, over --state-dir"},
    {"replay", tally::app::RunReplay, "rebuild the state from tally.deltas (or --from-input)"},
};

void PrintUsage(std::FILE* out) {
  std::fprintf(out,
               "usage: tally <command> [flags]\n"
               "\n"
               "tally turns social events on Kafka into exact counters and unread counts,\n"
               "kept in RocksDB and served over HTTP JSON.\n"
               "\n"
               "commands:\n");
  for (const auto& c : kCommands) {
    std::fprintf(out, "  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.summary.size()), c.summary.data());
  }
  std::fprintf(out,
               "\n"
               "Run 'tally <command> --help' for its flags. 'tally --version' prints the "
               "version.\n");
}

}  // namespace

int main(int argc, char** argv) {
  tally::base::InstallShutdownHandlers();
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  std::string_view command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    PrintUsage(stdout);
    return 0;
  }
  if (command == "--version" || command == "version") {
    std::printf("tally %s\n", TALLY_VERSION);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (c.name != command) continue;
    const int rc = c.run(argc - 2, argv + 2);
    // A consumer that gave up on an unreachable broker at stop is destroyed
    // in the background; librdkafka waits up to a minute for its answers.
    // Nothing it holds is needed (what it did not commit is redone on
    // restart), so the process does not wait that long for it.
    if (int left = tally::base::AwaitBackgroundDestroys(1000); left > 0) {
      TALLY_LOG_WARN("kafka",
                     "exiting without waiting for {} Kafka client(s) still waiting for the broker",
                     left);
      std::fflush(nullptr);
      std::_Exit(rc);
    }
    return rc;
  }
  std::fprintf(stderr, "tally: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
