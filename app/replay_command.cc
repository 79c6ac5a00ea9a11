// tally replay: rebuild the state from tally.deltas (or the input topics).
#include <fmt/core.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "aggregator/replay.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "cli.h"
#include "commands.h"
#include "pipeline.h"

namespace tally::app {

int RunReplay(int argc, char** argv) {
  const std::string command = "tally replay";
  CommonFlags f;
  f.brokers = "127.0.0.1:9092";
  bool from_input = false, allow_partial = false;
  base::FlagSet fs(command,
                   "Rebuilds the state into an empty --state-dir from the beginning of tally.deltas (or, with "
                   "--from-input, by re-deriving every effect from the input topics), showing progress, and "
                   "exits 0 when caught up. Writes to no topic and no consumer group.");
  AddKafkaFlags(&fs, &f);
  AddStateFlags(&fs, &f);
  fs.Repeated("input-topic", &f.input_topics, "input topic (with --from-input)");
  fs.Bool("from-input", &from_input, "re-derive from the input topics instead of tally.deltas");
  fs.Bool("allow-partial", &allow_partial, "rebuild even if a log no longer starts at offset 0");
  if (int rc = ParseFlagsOrExit(fs, command, argc, argv); rc >= 0) return rc;
  auto dir_lock = LockStateDir(f);  // held until the state is closed
  if (!dir_lock.ok()) return Fail(command, dir_lock.status());

  aggregator::ReplayOptions o;
  if (auto st = ApplyCommonFlags(f, &o.kafka); !st.ok()) return Fail(command, st, kExitUsage);
  auto cluster = ConnectCluster(&o.kafka, f, /*create_topics=*/false, 30000);
  if (!cluster.ok()) return Fail(command, cluster.status());
  auto store = OpenState(f, cluster->deltas_partitions, false);
  if (!store.ok()) return Fail(command, store.status());
  o.input_topics = f.input_topics;
  o.from_input = from_input;
  o.allow_partial = allow_partial;
  const bool tty = ::isatty(2);
  o.on_progress = [tty](const aggregator::ReplayProgress& p) {
    double pct = p.records_total ? 100.0 * p.records_done / p.records_total : 100.0;
    std::string line = fmt::format("replay: {}/{} records ({:.1f}%), {:.0f} rec/s, ETA {:.0f}s", p.records_done,
                                   p.records_total, pct, p.rate, p.eta_seconds);
    if (tty) {
      std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), p.finished ? "\n" : "");
    } else {
      TALLY_LOG_INFO("replay", "{}", line);
    }
  };
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      // Short slices: the join below waits for the current one, and a
      // replay of a million events takes well under a second.
      if (base::WaitForShutdown(5)) stop.store(true);
    }
  });
  base::Status st = aggregator::Replay(o, store->get(), &stop);
  if (st.ok()) st = (*store)->RecordCluster(cluster->identity.ToString());
  done.store(true);
  watcher.join();
  if (!st.ok()) return Fail(command, st, st.code() == base::StatusCode::kAborted ? 130 : kExitFailure);
  return kExitOk;
}

}  // namespace tally::app
