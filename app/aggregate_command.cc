// tally aggregate: the aggregator alone (router, applier or both).
#include <fmt/core.h>

#include <atomic>

#include "aggregator/cluster_check.h"
#include "aggregator/defaults.h"
#include "base/kafka_health.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "cli.h"
#include "cluster_member.h"
#include "commands.h"
#include "pipeline.h"
#include "pipeline_runner.h"

namespace tally::app {

int RunAggregate(int argc, char** argv) {
  const std::string command = "tally aggregate";
  CommonFlags f;
  f.brokers = "127.0.0.1:9092";
  std::string role = "both";
  int64_t flush_ms = aggregator::kDefaultFlushMs, key_budget = aggregator::kDefaultKeyBudget,
          standbys = 0;
  std::string advertise;
  base::FlagSet fs(command,
                   "Runs the aggregator against --brokers: the router (input topics -> tally.deltas, invalid "
                   "records -> tally.dlq) and/or the applier (tally.deltas -> the state in --state-dir).");
  AddKafkaFlags(&fs, &f);
  AddTopicFlags(&fs, &f);
  AddStateFlags(&fs, &f);
  fs.String("role", &role, "router, applier or both");
  fs.Int("flush-ms", &flush_ms,
         fmt::format("applier window once caught up, milliseconds (a backlog stretches windows to "
                     "10x; a cluster member applying 1/k of the partitions, k times, at most {})",
                     aggregator::kDefaultMaxStretchedMs));
  fs.Int("key-budget", &key_budget, "an applier window is cut early when it touches this many keys");
  fs.Int("partitions", &f.partitions, "partitions of tally's topics when creating them on a real cluster");
  fs.Bool("reset-offsets", &f.reset_offsets,
          "attach the state to a different cluster, keeping the counts and reading its logs from the start");
  fs.String("advertise", &advertise,
            "join the cluster of --group as a member reached at http://HOST:PORT (the `tally serve "
            "--advertise` beside this process); without it the applier applies every partition");
  fs.Int("standbys", &standbys,
         "with --advertise: hot copies of each partition kept by other members, for fail-over "
         "without a restore");
  if (int rc = ParseFlagsOrExit(fs, command, argc, argv); rc >= 0) return rc;
  // With --advertise the applier is a member of the cluster (SPEC section
  // 6); its `tally serve` answers for it.
  const bool in_cluster = !advertise.empty() && role != "router";
  if (standbys < 0 || (!advertise.empty() && !CheckAdvertise(advertise).ok())) {
    return Fail(
        command,
        base::Status::InvalidArgument(fmt::format(
            "--standbys must not be negative; --advertise must be http://HOST:PORT (is '{}')",
            advertise)),
        kExitUsage);
  }
  if (role != "router" && role != "applier" && role != "both") {
    return Fail(command, base::Status::InvalidArgument("--role must be router, applier or both"), kExitUsage);
  }
  if (flush_ms < 1 || key_budget < 1) {
    return Fail(command, base::Status::InvalidArgument("--flush-ms and --key-budget must be positive"), kExitUsage);
  }
  std::unique_ptr<store::StateDirLock> dir_lock;  // the applier writes the state
  if (role != "router") {
    auto lock = LockStateDir(f);
    if (!lock.ok()) return Fail(command, lock.status());
    dir_lock = std::move(lock).value();
  }
  PipelineOptions po;
  if (auto st = ApplyCommonFlags(f, &po.kafka); !st.ok()) return Fail(command, st, kExitUsage);
  auto cluster = ConnectCluster(&po.kafka, f, /*create_topics=*/true, 60000);
  if (!cluster.ok()) return Fail(command, cluster.status());
  if (auto st = base::KafkaHealth::Global().StartProbe(po.kafka); !st.ok()) return Fail(command, st);
  std::unique_ptr<store::StateStore> store;
  if (role != "router") {
    // What it held when it stopped: checked for damage now, resumed if
    // given again (see tally up).
    auto held_before = store::StateStore::PeekHeldPartitions(f.state_dir);
    if (!held_before.ok()) return Fail(command, held_before.status());
    auto s =
        OpenState(f, cluster->deltas_partitions, false,
                  in_cluster ? std::optional<std::vector<uint32_t>>(*held_before) : std::nullopt);
    if (!s.ok()) return Fail(command, s.status());
    store = std::move(s).value();
    if (auto st = aggregator::AttachToCluster(store.get(), cluster->identity, OnNewCluster(f));
        !st.ok()) {
      return Fail(command, st);
    }
  }
  po.input_topics = f.input_topics;
  po.group = f.group;
  po.deltas_partitions = cluster->deltas_partitions;
  po.run_router = role != "applier";
  po.run_applier = role != "router";
  po.flush_ms = static_cast<int>(flush_ms);
  po.key_budget = static_cast<size_t>(key_budget);
  std::atomic<bool> stage_failed{false};
  po.on_failure = [&stage_failed] { stage_failed.store(true); };
  auto started = StartMember(in_cluster, {po.kafka, f.group, advertise, cluster->deltas_partitions},
                             standbys, &po.cluster);
  if (!started.ok()) return Fail(command, started.status());
  std::unique_ptr<ClusterMember> member = std::move(started).value();
  PipelineRunner runner(po, store.get());
  runner.Start();
  // A stage that fails is started again (RestartPipeline): on a replaced
  // log, attached to it as at start.
  bool failed = false;
  int64_t backoff_ms = 1000, started_ms = base::SteadyMs();
  while (!base::WaitForShutdown(50)) {
    if (!stage_failed.load()) continue;
    if (!RestartPipeline(&runner, &po.kafka, f, store.get(), &backoff_ms, &started_ms)) {
      failed = !base::ShutdownRequested();
      break;
    }
    stage_failed.store(false);
  }
  TALLY_LOG_INFO("aggregate", "stopping");
  runner.Stop();
  if (member) member->Leave();  // after the applier left the group
  failed = failed || runner.failed();
  store.reset();
  base::KafkaHealth::Global().StopProbe();
  TALLY_LOG_INFO("aggregate", "stopped{}", failed ? " after an error" : "");
  return failed ? kExitFailure : kExitOk;
}

}  // namespace tally::app
