// tally up: the main job on one machine — the embedded broker (unless
// --brokers is given), the aggregator and the HTTP tier in one process.
#include <fmt/core.h>

#include <string>

#include "aggregator/cluster_check.h"
#include "base/kafka_health.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "broker_control.h"
#include "cli.h"
#include "commands.h"
#include "embedded_broker.h"
#include "ingest/event_publisher.h"
#include "pipeline.h"
#include "pipeline_runner.h"
#include "query/http_server.h"
#include "query/query_service.h"
#include "query/watermarks.h"

namespace tally::app {

int RunUp(int argc, char** argv) {
  const std::string command = "tally up";
  CommonFlags f;
  HttpFlags http;
  int64_t port = 9092, flush_ms = 20, key_budget = 200000;
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
  fs.Int("flush-ms", &flush_ms, "applier window once caught up, milliseconds (a backlog stretches windows to 10x)");
  fs.Int("key-budget", &key_budget, "an applier window is cut early when it touches this many keys");
  fs.Bool("reset-offsets", &f.reset_offsets,
          "attach the state to a different cluster, keeping the counts and reading its logs from the start");
  if (int rc = ParseFlagsOrExit(fs, command, argc, argv); rc >= 0) return rc;
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

  PipelineOptions po;
  if (auto st = ApplyCommonFlags(f, &po.kafka); !st.ok()) return Fail(command, st, kExitUsage);
  auto token = ResolveAuthToken(f);
  if (!token.ok()) return Fail(command, token.status(), kExitUsage);

  std::unique_ptr<EmbeddedBroker> broker;
  if (f.brokers.empty()) {
    EmbeddedBrokerOptions bo;
    bo.port = static_cast<int>(port);
    bo.partitions = static_cast<int>(f.partitions);
    auto b = EmbeddedBroker::Start(bo);
    if (!b.ok()) return Fail(command, b.status());
    broker = std::move(b).value();
    po.kafka.brokers = broker->bootstrap();
    f.brokers = broker->bootstrap();
  }
  auto cluster = ConnectCluster(&po.kafka, f, /*create_topics=*/true, 60000);
  if (!cluster.ok()) return Fail(command, cluster.status());
  if (auto st = base::KafkaHealth::Global().StartProbe(po.kafka); !st.ok()) return Fail(command, st);

  po.input_topics = f.input_topics;
  po.group = f.group;
  po.whole_topics = true;  // one machine routes everything: no group rebalance to wait for
  po.deltas_partitions = cluster->deltas_partitions;
  po.flush_ms = static_cast<int>(flush_ms);
  po.key_budget = static_cast<size_t>(key_budget);
  PipelineRunner runner(po, nullptr);
  // The router needs no state. When the cluster check below cannot refuse
  // the state, routing starts while the partitions open (40-80 ms of every
  // start); otherwise only after the check.
  const bool routing_early =
      aggregator::AttachCannotRefuse(f.state_dir, cluster->identity, f.reset_offsets);
  if (routing_early) runner.StartRouter();
  auto store_r = OpenState(f, cluster->deltas_partitions, false);
  if (!store_r.ok()) return Fail(command, store_r.status());
  std::unique_ptr<store::StateStore> store = std::move(store_r).value();
  if (auto st = aggregator::AttachToCluster(store.get(), cluster->identity, f.reset_offsets); !st.ok()) {
    return Fail(command, st);
  }

  ingest::PublisherOptions pub;
  pub.kafka = po.kafka;
  pub.topic = f.input_topics.front();
  auto publisher = ingest::EventPublisher::Create(pub);
  if (!publisher.ok()) return Fail(command, publisher.status());
  query::WatermarkOptions wo;
  wo.kafka = po.kafka;
  wo.input_topics = f.input_topics;
  wo.group_id = f.group;
  auto watermarks = query::WatermarkSource::Create(wo, store.get());
  if (!watermarks.ok()) return Fail(command, watermarks.status());

  if (!routing_early) runner.StartRouter();
  runner.StartApplier(store.get());

  query::QueryServiceOptions qo;
  qo.store = store.get();
  qo.publisher = publisher->get();
  qo.watermarks = watermarks->get();
  qo.info = {TALLY_VERSION, f.brokers, f.input_topics, f.state_dir, cluster->deltas_partitions};
  qo.auth_token = *token;
  qo.ready = [&runner] { return runner.running(); };
  qo.kafka_problem = [] { return base::KafkaHealth::Global().Problem(); };
  query::QueryService service(qo);
  auto server = query::HttpServer::Start(*so, &service);
  if (!server.ok()) {
    runner.Stop();
    return Fail(command, server.status());
  }
  TALLY_LOG_INFO("up", "serving HTTP on {} (try /v1/watermarks); Kafka at {}", http.listen, f.brokers);

  ServeUntilShutdown(broker.get());
  // Shutdown order: stop accepting, stop consuming, apply the last window, close.
  TALLY_LOG_INFO("up", "stopping");
  (*server)->Stop();
  runner.Stop();
  server->reset();
  watermarks->reset();
  publisher->reset();
  store.reset();
  base::KafkaHealth::Global().StopProbe();
  if (broker) broker->Stop();
  TALLY_LOG_INFO("up", "stopped{}", runner.failed() ? " after an error" : "");
  return runner.failed() ? kExitFailure : kExitOk;
}

}  // namespace tally::app
