// tally serve: the HTTP tier alone, over the state in --state-dir (written by
// a `tally aggregate` on this machine, or rebuilt by `tally replay`).
#include <fmt/core.h>

#include "base/kafka_health.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "cli.h"
#include "cluster_member.h"
#include "commands.h"
#include "ingest/event_publisher.h"
#include "pipeline.h"
#include "query/http_server.h"
#include "query/query_service.h"
#include "query/watermarks.h"

namespace tally::app {

int RunServe(int argc, char** argv) {
  const std::string command = "tally serve";
  CommonFlags f;
  HttpFlags http;
  base::FlagSet fs(command,
                   "Serves the HTTP API over the state in --state-dir, following the aggregator that writes it "
                   "(read-only). With --brokers it also answers /v1/watermarks and publishes POST /v1/events "
                   "and resets; without, those answer 503.");
  AddKafkaFlags(&fs, &f);
  AddTopicFlags(&fs, &f);
  AddAuthFlags(&fs, &f);
  fs.String("state-dir", &f.state_dir, "state directory to serve");
  fs.Int("block-cache-mb", &f.block_cache_mb, "RocksDB block cache shared by all partitions, MiB");
  AddHttpFlags(&fs, &http);
  std::string advertise;
  fs.String(
      "advertise", &advertise,
      "with --brokers: answer as the cluster member reached at http://HOST:PORT, the address the "
      "`tally aggregate --advertise` writing --state-dir was given (reads of partitions it does "
      "not hold are asked of their owners)");
  if (int rc = ParseFlagsOrExit(fs, command, argc, argv); rc >= 0) return rc;
  const bool in_cluster = !advertise.empty();
  if (in_cluster && (f.brokers.empty() || !CheckAdvertise(advertise).ok())) {
    return Fail(
        command,
        base::Status::InvalidArgument(fmt::format(
            "--advertise needs --brokers and must be http://HOST:PORT (is '{}')", advertise)),
        kExitUsage);
  }
  auto so = MakeServerOptions(http);
  if (!so.ok()) return Fail(command, so.status(), kExitUsage);
  // The HTTP port first, as tally up does: a taken port stops the start
  // at once.
  std::unique_ptr<query::HttpListener> listener = BindHttp("serve", *so);
  if (!listener) return kExitFailure;
  base::KafkaOptions kafka;
  if (auto st = ApplyCommonFlags(f, &kafka); !st.ok()) return Fail(command, st, kExitUsage);
  auto token = ResolveAuthToken(f);
  if (!token.ok()) return Fail(command, token.status(), kExitUsage);

  // A member's writer holds some partitions, which change: follow its set
  // (HELD) among all of them.
  std::optional<std::vector<uint32_t>> open_partitions;
  if (in_cluster) {
    auto probe = OpenState(f, 0, /*read_only=*/true, std::vector<uint32_t>{});
    if (!probe.ok()) return Fail(command, probe.status());
    open_partitions.emplace();
    for (uint32_t p = 0; p < (*probe)->partitions(); p++) open_partitions->push_back(p);
  }
  auto store_r = OpenState(f, 0, /*read_only=*/true, open_partitions);
  if (!store_r.ok()) return Fail(command, store_r.status());
  std::unique_ptr<store::StateStore> store = std::move(store_r).value();

  std::unique_ptr<ingest::EventPublisher> publisher;
  std::unique_ptr<query::WatermarkSource> watermarks;
  if (!f.brokers.empty()) {
    auto cluster = ConnectCluster(&kafka, f, /*create_topics=*/false, 30000);
    if (!cluster.ok()) return Fail(command, cluster.status());
    if (auto st = base::KafkaHealth::Global().StartProbe(kafka); !st.ok()) return Fail(command, st);
    auto connected = ConnectHttpTier(kafka, f, store.get());
    if (!connected.ok()) return Fail(command, connected.status());
    publisher = std::move(connected->publisher);
    watermarks = std::move(connected->watermarks);
  }

  std::unique_ptr<ClusterMember> member;
  if (in_cluster) {
    auto m = ClusterMember::Start({kafka, f.group, advertise});
    if (!m.ok()) return Fail(command, m.status());
    member = std::move(m).value();
  }

  query::QueryServiceOptions qo;
  qo.store = store.get();
  qo.publisher = publisher.get();
  qo.watermarks = watermarks.get();
  qo.info.partitions = store->partitions();
  qo.auth_token = *token;
  qo.cluster = member.get();
  qo.member = member ? member->member() : MemberIdOf(DefaultAdvertise(http.listen));
  qo.ready = [] { return true; };
  if (!f.brokers.empty()) qo.kafka_problem = [] { return base::KafkaHealth::Global().Problem(); };
  auto tier = StartHttpTier(f, http, *so, std::move(qo), std::move(listener));
  if (!tier.ok()) return Fail(command, tier.status());
  TALLY_LOG_INFO("serve", "serving {} on HTTP {}", f.state_dir, http.listen);
  base::WaitForShutdown(-1);
  TALLY_LOG_INFO("serve", "stopping");
  (*tier)->server->Stop();
  base::KafkaHealth::Global().StopProbe();
  return kExitOk;
}

}  // namespace tally::app
