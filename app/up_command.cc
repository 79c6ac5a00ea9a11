// tally up: the main job on one machine — the embedded broker (unless
// --brokers is given), the aggregator and the HTTP tier in one process.
#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "aggregator/cluster_check.h"
#include "base/clock.h"
#include "base/hot_keys.h"
#include "base/kafka_health.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "broker_control.h"
#include "broker_process.h"
#include "cli.h"
#include "cluster_member.h"
#include "commands.h"
#include "ingest/event_publisher.h"
#include "pipeline.h"
#include "pipeline_runner.h"
#include "query/http_server.h"
#include "query/query_service.h"
#include "query/watermarks.h"

namespace tally::app {

namespace {

// How long a clean stop gives its own broker to flush and close its log
// before a SIGKILL (which loses nothing acknowledged either: SPEC section 7).
constexpr int kBrokerStopMs = 3000;

}  // namespace

int RunUp(int argc, char** argv) {
  const std::string command = "tally up";
  CommonFlags f;
  HttpFlags http;
  int64_t port = 9092, flush_ms = aggregator::kDefaultFlushMs,
          key_budget = aggregator::kDefaultKeyBudget, standbys = 0;
  std::string advertise;
  base::FlagSet fs(command,
                   "Runs tally on one machine: an embedded Kafka-protocol broker (unless --brokers is given), "
                   "the aggregator (router and applier) and the HTTP tier, in one process. Stops cleanly on "
                   "SIGINT/SIGTERM. With the embedded broker, SIGUSR1 takes it down and SIGUSR2 brings it back "
                   "(outage drills; see tally broker --help).");
  AddKafkaFlags(&fs, &f);
  AddTopicFlags(&fs, &f);
  AddAuthFlags(&fs, &f);
  AddStateFlags(&fs, &f);
  f.read_cache_mb = 64;
  fs.Int("read-cache-mb", &f.read_cache_mb,
         "memory for post, user and unread counters read recently, in front of RocksDB, MiB (0: "
         "none)");
  fs.Int("port", &port, "port of the embedded broker (without --brokers)");
  fs.Int("partitions", &f.partitions, "partitions of each of tally's topics when tally creates them");
  AddHttpFlags(&fs, &http);
  fs.Int("flush-ms", &flush_ms,
         fmt::format("applier window once caught up, milliseconds (a backlog stretches windows to "
                     "10x; a cluster member applying 1/k of the partitions, k times, at most {})",
                     aggregator::kDefaultMaxStretchedMs));
  fs.Int("key-budget", &key_budget, "an applier window is cut early when it touches this many keys");
  fs.Bool("reset-offsets", &f.reset_offsets,
          "attach the state to a different cluster, keeping the counts and reading its logs from the start");
  fs.String(
      "advertise", &advertise,
      "with --brokers: where the other members of the cluster reach this one, http://HOST:PORT "
      "(default: the --http address, with this machine's host name for 0.0.0.0)");
  fs.Int(
      "standbys", &standbys,
      "with --brokers: hot copies of each partition kept by other members, for fail-over without a "
      "restore");
  if (int rc = ParseFlagsOrExit(fs, command, argc, argv); rc >= 0) return rc;
  // With --brokers this process is a member of the cluster of every process
  // with the same --brokers and --group (SPEC section 6); without, a
  // cluster of one on its embedded broker.
  const bool in_cluster = !f.brokers.empty();
  if (in_cluster && advertise.empty()) advertise = DefaultAdvertise(http.listen);
  if (standbys < 0 || (in_cluster && !CheckAdvertise(advertise).ok())) {
    return Fail(
        command,
        base::Status::InvalidArgument(fmt::format(
            "--standbys must not be negative; --advertise must be http://HOST:PORT (is '{}')",
            advertise)),
        kExitUsage);
  }
  auto dir_lock = LockStateDir(f);  // first: held until the state is closed
  if (!dir_lock.ok()) return Fail(command, dir_lock.status());
  InstallBrokerControlSignals();
  if (f.partitions < 1 || f.partitions > 1024 || flush_ms < 1 || key_budget < 1 ||
      f.read_cache_mb < 0) {
    return Fail(command,
                base::Status::InvalidArgument(
                    "--partitions must be 1..1024; --flush-ms, --key-budget positive; "
                    "--read-cache-mb not negative"),
                kExitUsage);
  }
  auto so = MakeServerOptions(http);
  if (!so.ok()) return Fail(command, so.status(), kExitUsage);
  // The HTTP port before the broker starts and anything joins a group: a
  // member whose port is taken must never be seen by the groups (it would
  // take partitions and give them back, two rebalances for nothing).
  std::unique_ptr<query::HttpListener> listener = BindHttp("up", *so);
  if (!listener) return kExitFailure;

  PipelineOptions po;
  if (auto st = ApplyCommonFlags(f, &po.kafka); !st.ok()) return Fail(command, st, kExitUsage);
  auto token = ResolveAuthToken(f);
  if (!token.ok()) return Fail(command, token.status(), kExitUsage);

  // The embedded broker runs as a process of its own (broker_process.h), so
  // that what it acknowledged outlives a crash of this one.
  std::unique_ptr<BrokerProcess> broker;
  BrokerProcessOptions bo;
  if (f.brokers.empty()) {
    bo.state_dir = std::filesystem::absolute(f.state_dir).lexically_normal().string();
    bo.port = static_cast<int>(port);
    bo.partitions = static_cast<int>(f.partitions);
    bo.log_level = f.log_level;
    auto b = BrokerProcess::FindOrStart(bo);
    if (!b.ok()) return Fail(command, b.status());
    broker = std::move(b).value();
    po.kafka.brokers = broker->bootstrap();
    f.brokers = broker->bootstrap();
    // Its own broker's log lives in the state directory: a new one (the log
    // removed, a state copied without it) is read from its start with the
    // counts kept (SPEC section 2).
    f.own_broker = true;
  }
  // A broker started here and given nothing yet stops again if tally up
  // cannot start; one found running may hold records and is left as it is.
  struct StopUnusedBroker {
    BrokerProcess* broker;
    ~StopUnusedBroker() {
      if (broker != nullptr && !broker->found()) (void)broker->Stop(10000);
    }
  } stop_unused{broker.get()};
  auto cluster = ConnectCluster(&po.kafka, f, /*create_topics=*/true, 60000);
  if (!cluster.ok()) return Fail(command, cluster.status());
  if (auto st = base::KafkaHealth::Global().StartProbe(po.kafka); !st.ok()) return Fail(command, st);

  po.input_topics = f.input_topics;
  po.group = f.group;
  // One machine routes everything: no group rebalance to wait for. Members
  // of a cluster divide the input partitions through the router group.
  po.whole_topics = !in_cluster;
  po.deltas_partitions = cluster->deltas_partitions;
  po.flush_ms = static_cast<int>(flush_ms);
  po.key_budget = static_cast<size_t>(key_budget);
  // A stage that fails is looked into below (the log may have been
  // replaced) rather than ending the process at once.
  std::atomic<bool> stage_failed{false};
  po.on_failure = [&stage_failed] { stage_failed.store(true); };
  // A member reads the members directory first: its router routes at once
  // when it finds no other member there (RouterOptions::directory).
  auto started = StartMember(in_cluster, {po.kafka, f.group, advertise, cluster->deltas_partitions},
                             standbys, &po.cluster);
  if (!started.ok()) return Fail(command, started.status());
  std::unique_ptr<ClusterMember> member = std::move(started).value();
  // The hottest posts of the last minute, tallied by the applier for the
  // status page.
  base::HotKeys hot_posts;
  po.hot_posts = &hot_posts;
  PipelineRunner runner(po, nullptr);
  // The router needs no state. When the cluster check below cannot refuse
  // the state, routing starts while the partitions open (40-80 ms of every
  // start); otherwise only after the check.
  const bool routing_early =
      aggregator::AttachCannotRefuse(f.state_dir, cluster->identity, OnNewCluster(f));
  if (routing_early) runner.StartRouter();
  // A member opens its partitions as the group gives them (and drops those
  // it gives away); one process alone holds them all. At start a member
  // opens what it held when it stopped, which checks them for damage, and
  // resumes them if it is given them again (the others are dropped once
  // the group has settled).
  auto held_before = store::StateStore::PeekHeldPartitions(f.state_dir);
  if (!held_before.ok()) return Fail(command, held_before.status());
  auto store_r =
      OpenState(f, cluster->deltas_partitions, false,
                in_cluster ? std::optional<std::vector<uint32_t>>(*held_before) : std::nullopt);
  if (!store_r.ok()) return Fail(command, store_r.status());
  std::unique_ptr<store::StateStore> store = std::move(store_r).value();
  if (auto st = aggregator::AttachToCluster(store.get(), cluster->identity, OnNewCluster(f));
      !st.ok()) {
    return Fail(command, st);
  }

  auto connected = ConnectHttpTier(po.kafka, f, store.get());
  if (!connected.ok()) return Fail(command, connected.status());
  std::unique_ptr<ingest::EventPublisher> publisher = std::move(connected->publisher);
  std::unique_ptr<query::WatermarkSource> watermarks = std::move(connected->watermarks);

  if (!routing_early) runner.StartRouter();
  runner.StartApplier(store.get());

  query::QueryServiceOptions qo;
  qo.store = store.get();
  qo.publisher = publisher.get();
  qo.watermarks = watermarks.get();
  qo.info.partitions = cluster->deltas_partitions;
  qo.auth_token = *token;
  qo.hot_posts = &hot_posts;
  if (broker) {
    // Its broker is another process: it writes its figures beside the state.
    qo.extra_metrics = [dir = bo.state_dir] { return ReadBrokerMetrics(dir, 5000); };
  }
  // Any member answers everything; one process alone answers as itself.
  qo.cluster = member.get();
  qo.member = member ? member->member() : MemberIdOf(DefaultAdvertise(http.listen));
  // Reads go on while the stages are started again on a replaced log; lag
  // and /healthz say why they are not to be trusted meanwhile.
  qo.ready = [&runner, &stage_failed, &member] {
    return (runner.running() || stage_failed.load()) && (!member || member->Ready());
  };
  qo.kafka_problem = [&stage_failed]() -> std::string {
    if (stage_failed.load())
      return "the pipeline stopped after an error and is being started again (see the log)";
    return base::KafkaHealth::Global().Problem();
  };
  auto tier = StartHttpTier(f, http, *so, std::move(qo), std::move(listener));
  if (!tier.ok()) {
    runner.Stop();
    return Fail(command, tier.status());
  }
  TALLY_LOG_INFO("up", "serving HTTP on {} (try /v1/watermarks); Kafka at {}", http.listen, f.brokers);

  stop_unused.broker = nullptr;  // from here on, the stop below decides
  BrokerControl control;
  if (broker) {
    control.set_available = [&broker](bool up) { return broker->SetAvailable(up); };
    control.address = broker->bootstrap();
  }
  // Serve until told to stop. A stage that fails is started again
  // (RestartPipeline); a broker whose log was replaced under the running
  // process (a restarted `tally broker`, or the embedded broker's process
  // gone and started again here) is handled as at start: the counts stay,
  // the new logs are read from their start.
  bool broker_lost = false, failed = false;
  int64_t backoff_ms = 1000, started_ms = base::SteadyMs();
  for (;;) {
    ServeUntilShutdown(control, [&] {
      broker_lost = broker && !broker->Alive();
      return broker_lost || stage_failed.load();
    });
    if (base::ShutdownRequested()) break;
    if (broker_lost) {
      stage_failed.store(true);  // for /healthz, until the stages run again
      TALLY_LOG_ERROR("up",
                      "the embedded broker (pid {}) {}: starting it again on {} with its log in "
                      "{}/log",
                      broker->pid(), broker->exit_description(), broker->bootstrap(), bo.state_dir);
      bo.port = std::stoi(broker->bootstrap().substr(broker->bootstrap().rfind(':') + 1));
      auto b = BrokerProcess::FindOrStart(bo);
      if (!b.ok()) {
        TALLY_LOG_ERROR("up", "{}", b.status().ToString());
        failed = true;
        break;
      }
      broker = std::move(b).value();
      broker_lost = false;
    }
    if (!RestartPipeline(&runner, &po.kafka, f, store.get(), &backoff_ms, &started_ms)) {
      failed = !base::ShutdownRequested();
      break;
    }
    stage_failed.store(false);
  }
  // Shutdown order: stop accepting, stop consuming, apply the last window, close.
  TALLY_LOG_INFO("up", "stopping");
  (*tier)->server->Stop();
  runner.Stop();
  if (member) member->Leave();  // after the applier left the group
  tier->reset();
  watermarks.reset();
  publisher.reset();
  member.reset();
  store.reset();
  base::KafkaHealth::Global().StopProbe();
  // Its own broker stops with it: what the broker acknowledged is on disk
  // and the committed offsets say what was applied, so the next `tally up`
  // goes on from there whatever is still unapplied now.
  if (broker && broker->Alive()) {
    if (auto st = broker->Stop(kBrokerStopMs); !st.ok()) TALLY_LOG_WARN("up", "{}", st.ToString());
  }
  failed = failed || runner.failed();
  TALLY_LOG_INFO("up", "stopped{}", failed ? " after an error" : "");
  return failed ? kExitFailure : kExitOk;
}

}  // namespace tally::app
