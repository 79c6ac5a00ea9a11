#include "pipeline.h"

#include <fmt/core.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "aggregator/cluster_check.h"
#include "base/clock.h"
#include "base/kafka_consumer.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "broker_process.h"
#include "cli.h"
#include "ingest/event_publisher.h"
#include "query/cluster_routing.h"

namespace tally::app {

using base::Status;

aggregator::OnNewCluster OnNewCluster(const CommonFlags& f) {
  if (f.own_broker) return aggregator::OnNewCluster::kOwnBroker;
  return f.reset_offsets ? aggregator::OnNewCluster::kResetOffsets
                         : aggregator::OnNewCluster::kRefuse;
}

void AddKafkaFlags(base::FlagSet* fs, CommonFlags* f) {
  fs->String("brokers", &f->brokers, "Kafka bootstrap servers host:port,...");
  fs->Repeated("kafka", &f->kafka, "librdkafka setting KEY=VALUE (security, tuning)");
  fs->String("log-level", &f->log_level, "debug, info, warn or error");
}

void AddTopicFlags(base::FlagSet* fs, CommonFlags* f) {
  fs->Repeated("input-topic", &f->input_topics, "input topic");
  fs->String("group", &f->group,
             "the cluster (SPEC section 6): with --brokers, the routers' consumer group on the "
             "input topics, and <group>-applier the appliers' (tally up without --brokers routes "
             "and applies every partition without joining)");
}

void AddStateFlags(base::FlagSet* fs, CommonFlags* f) {
  fs->String("state-dir", &f->state_dir, "state directory (RocksDB per partition)");
  fs->Int("block-cache-mb", &f->block_cache_mb, "RocksDB block cache shared by all partitions, MiB");
  fs->Int("write-buffer-mb", &f->write_buffer_mb, "RocksDB memtable size per partition on average, MiB (spread from 0.5x to 1.5x over the partitions, so they do not all flush at once)");
  fs->String("memtable", &f->memtable,
             "how a memtable keeps its entries: sorted-runs (appends a window's sorted records) or "
             "skiplist (RocksDB's default)");
  fs->Bool("sync", &f->sync, "fsync the RocksDB WAL on every window (survives power loss, slower)");
  fs->Int("viewed-mb", &f->viewed_mb, "memory budget of the \"viewed\" Bloom filter tables, MiB, all partitions");
  fs->Int("inactive-days", &f->inactive_days,
          "purge notice and red-dot records of users inactive this long (0: never)");
  fs->Int("dedup-hours", &f->dedup_hours,
          "events that carry the same \"id\" are applied once if their event times lie within "
          "this many hours; ids are remembered that long");
  fs->Int("min-free-mb", &f->min_free_mb,
          "free space the state directory's disk keeps, MiB: below it no window is written (reads "
          "go on, /healthz answers 503) until space is freed (0: none)");
}

void AddAuthFlags(base::FlagSet* fs, CommonFlags* f) {
  fs->String("auth-token", &f->auth_token,
             "require 'Authorization: Bearer TOKEN' on POST /v1/events and the resets");
  fs->String("auth-token-file", &f->auth_token_file, "read that token from the first line of a file");
}

base::Result<std::string> ResolveAuthToken(const CommonFlags& f) {
  if (!f.auth_token.empty() && !f.auth_token_file.empty()) {
    return Status::InvalidArgument("give --auth-token or --auth-token-file, not both");
  }
  if (f.auth_token_file.empty()) return f.auth_token;
  std::ifstream in(f.auth_token_file);
  std::string token;
  if (!in || !std::getline(in, token)) {
    return Status::InvalidArgument(fmt::format("--auth-token-file {}: cannot read it", f.auth_token_file));
  }
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) return Status::InvalidArgument(fmt::format("--auth-token-file {}: empty", f.auth_token_file));
  return token;
}

void AddHttpFlags(base::FlagSet* fs, HttpFlags* f) {
  fs->String("http", &f->listen,
             "HTTP listen address HOST:PORT (loopback by default; 0.0.0.0:PORT for every interface)");
  fs->Int("http-threads", &f->threads, "HTTP I/O threads");
  fs->Int("max-request-bytes", &f->max_request_bytes,
          "largest request body; larger ones are answered 413 (over 4x this, or 4 MiB, the connection is closed)");
  fs->Int("max-header-bytes", &f->max_header_bytes,
          "largest value of one request header; a request line over 16 KiB or a longer header closes the connection");
  fs->Int("max-headers", &f->max_headers, "most header fields in one request; more closes the connection");
  fs->Int("idle-timeout-ms", &f->idle_timeout_ms,
          "a connection must send each whole request (headers and body) within this many ms, idle keep-alive "
          "time included, or it is closed");
  fs->Int("request-timeout-ms", &f->request_timeout_ms,
          "longest time to answer one request (publishes wait for the broker); then the connection is closed");
  fs->Int("write-timeout-ms", &f->write_timeout_ms,
          "a client must take each answer within this many ms, or its connection is closed");
  fs->Int("max-connections", &f->max_connections,
          "most open HTTP connections, split evenly over the HTTP threads; further ones wait in the listen "
          "backlog (lowered to fit the open-file limit)");
  fs->Int("rate-limit", &f->rate_limit,
          "requests per second per client address (IPv6: per /64), reads and writes alike, answered 429 with "
          "Retry-After beyond it; GET /healthz and /metrics are exempt; 0: no limit");
  fs->Int("rate-burst", &f->rate_burst, "requests a client may send at once under --rate-limit (0: one second's worth)");
  fs->Int("visible-timeout-ms", &f->visible_timeout_ms,
          "POST /v1/events?wait=visible and the resets' ?wait=visible answer 504 not_yet_visible "
          "after this many ms (the events stay accepted)");
  fs->Int("status-sample-ms", &f->status_sample_ms,
          "the status page (GET /) plots a sample of the pipeline taken every this many ms, 15 "
          "minutes of them kept in memory; 0: no samples (the plots stay empty)");
}

base::Result<query::ServerOptions> MakeServerOptions(const HttpFlags& f) {
  auto positive = [](int64_t v, const char* flag, int64_t max) -> Status {
    if (v < 1 || v > max) return Status::InvalidArgument(fmt::format("--{} must be 1..{}, got {}", flag, max, v));
    return Status::Ok();
  };
  constexpr int64_t kDay = 86400000;
  TALLY_RETURN_IF_ERROR(positive(f.threads, "http-threads", 256));
  TALLY_RETURN_IF_ERROR(positive(f.max_request_bytes, "max-request-bytes", int64_t{1} << 30));
  TALLY_RETURN_IF_ERROR(positive(f.max_header_bytes, "max-header-bytes", int64_t{1} << 20));
  TALLY_RETURN_IF_ERROR(positive(f.max_headers, "max-headers", 10000));
  TALLY_RETURN_IF_ERROR(positive(f.idle_timeout_ms, "idle-timeout-ms", kDay));
  TALLY_RETURN_IF_ERROR(positive(f.request_timeout_ms, "request-timeout-ms", kDay));
  TALLY_RETURN_IF_ERROR(positive(f.write_timeout_ms, "write-timeout-ms", kDay));
  TALLY_RETURN_IF_ERROR(positive(f.max_connections, "max-connections", 1000000));
  TALLY_RETURN_IF_ERROR(positive(f.visible_timeout_ms, "visible-timeout-ms", kDay));
  if (f.visible_timeout_ms >= f.request_timeout_ms) {
    // The connection would be closed before the 504 could be written.
    return Status::InvalidArgument(
        fmt::format("--visible-timeout-ms {} must be below --request-timeout-ms {}",
                    f.visible_timeout_ms, f.request_timeout_ms));
  }
  if (f.status_sample_ms < 0 || f.status_sample_ms > 60000) {
    return Status::InvalidArgument(
        fmt::format("--status-sample-ms must be 0..60000, got {}", f.status_sample_ms));
  }
  if (f.rate_limit < 0 || f.rate_burst < 0) {
    return Status::InvalidArgument("--rate-limit and --rate-burst must not be negative");
  }
  query::ServerOptions so;
  so.listen = f.listen;
  so.threads = static_cast<int>(f.threads);
  so.max_body_bytes = static_cast<size_t>(f.max_request_bytes);
  so.max_readable_body_bytes = std::max<size_t>(size_t{4} << 20, so.max_body_bytes * 4);
  so.max_header_bytes = static_cast<size_t>(f.max_header_bytes);
  so.max_header_count = static_cast<size_t>(f.max_headers);
  so.read_timeout_ms = static_cast<int>(f.idle_timeout_ms);
  so.handle_timeout_ms = static_cast<int>(f.request_timeout_ms);
  so.write_timeout_ms = static_cast<int>(f.write_timeout_ms);
  so.rate_limit_per_s = static_cast<double>(f.rate_limit);
  so.rate_burst = static_cast<double>(f.rate_burst);

  // Every connection is a file descriptor; RocksDB, Kafka and the listener
  // need some too. Accepting past the limit would fail with EMFILE.
  constexpr rlim_t kReserve = 512;
  rlim_t want = static_cast<rlim_t>(f.max_connections) + kReserve;
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
      struct rlimit raised = rl;
      raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
      int64_t fit = rl.rlim_cur > 2 * kReserve ? static_cast<int64_t>(rl.rlim_cur - kReserve)
                                               : static_cast<int64_t>(rl.rlim_cur / 2);
      TALLY_LOG_WARN("http", "--max-connections {} lowered to {}: the open-file limit is {} (ulimit -n)",
                     f.max_connections, fit, static_cast<uint64_t>(rl.rlim_cur));
      so.max_connections = static_cast<size_t>(std::max<int64_t>(1, fit));
      return so;
    }
  }
  so.max_connections = static_cast<size_t>(f.max_connections);
  return so;
}

base::Result<HttpTierKafka> ConnectHttpTier(const base::KafkaOptions& kafka, const CommonFlags& f,
                                            store::StateStore* store) {
  HttpTierKafka out;
  ingest::PublisherOptions pub;
  pub.kafka = kafka;
  pub.topic = f.input_topics.front();
  auto p = ingest::EventPublisher::Create(pub);
  if (!p.ok()) return p.status();
  out.publisher = std::move(p).value();
  query::WatermarkOptions wo;
  wo.kafka = kafka;
  wo.input_topics = f.input_topics;
  wo.group_id = f.group;
  auto w = query::WatermarkSource::Create(wo, store);
  if (!w.ok()) return w.status();
  out.watermarks = std::move(w).value();
  return out;
}

base::Result<std::unique_ptr<HttpTier>> StartHttpTier(
    const CommonFlags& f, const HttpFlags& http, query::ServerOptions server,
    query::QueryServiceOptions service, std::unique_ptr<query::HttpListener> listener) {
  service.info.version = TALLY_VERSION;
  service.info.brokers = f.brokers;
  service.info.input_topics = f.input_topics;
  service.info.state_dir = f.state_dir;
  service.info.group = f.group;  // GET /v1/cluster of a single process
  service.visible_timeout_ms = static_cast<int>(http.visible_timeout_ms);
  service.status_sample_ms = static_cast<int>(http.status_sample_ms);
  if (ingest::EventPublisher* p = service.publisher; p != nullptr) {
    server.abort_waits = [p] { p->Abort(); };
  }
  // A read another member forwards was limited where its client reached
  // the cluster; only a member's own key lets it past the limit here.
  if (const query::ClusterRouting* c = service.cluster; c != nullptr) {
    server.from_member = [c](std::string_view forwarded, std::string_view authorization) {
      return c->FromMember(forwarded, authorization);
    };
  }
  auto tier = std::make_unique<HttpTier>();
  tier->service = std::make_unique<query::QueryService>(std::move(service));
  auto started = query::HttpServer::Start(server, tier->service.get(), std::move(listener));
  if (!started.ok()) return started.status();
  tier->server = std::move(started).value();
  return tier;
}

std::unique_ptr<query::HttpListener> BindHttp(const char* component,
                                              const query::ServerOptions& server) {
  auto listener = query::HttpListener::Bind(server);
  if (!listener.ok()) {
    TALLY_LOG_ERROR(component, "{} (is another tally or server using the port? see --http)",
                    listener.status().message());
    return nullptr;
  }
  return std::move(listener).value();
}

Status ApplyCommonFlags(const CommonFlags& f, base::KafkaOptions* out) {
  TALLY_RETURN_IF_ERROR(ApplyLogLevel(f.log_level));
  out->brokers = f.brokers;
  out->overrides.clear();
  return ParseKafkaOverrides(f.kafka, out);
}

base::Result<ClusterInfo> ConnectCluster(base::KafkaOptions* kafka, const CommonFlags& f, bool create_topics,
                                         int wait_ms) {
  ClusterInfo info;
  int64_t deadline = base::SteadyMs() + wait_ms;
  bool said = false;
  for (;;) {
    auto id = base::FetchClusterIdentity(*kafka, 3000);
    if (id.ok()) {
      info.identity = std::move(id).value();
      break;
    }
    if (base::SteadyMs() >= deadline || base::ShutdownRequested()) return id.status();
    if (!said) {
      TALLY_LOG_WARN("cluster", "waiting for Kafka at {}: {}", kafka->brokers, id.status().message());
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  kafka->embedded = info.identity.embedded;
  // A producer's metadata request for a missing topic asks the broker to
  // create it (librdkafka's producer default, allow.auto.create.topics=true),
  // with the broker's defaults: EnsureTopics' look-up must not, or
  // tally.deltas could get the broker's partition count before
  // CreateTopics runs.
  auto conf =
      base::MakeKafkaConf(RD_KAFKA_PRODUCER, *kafka,
                          {{"client.id", "tally-admin"}, {"allow.auto.create.topics", "false"}});
  if (!conf.ok()) return conf.status();
  auto admin = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
  if (!admin.ok()) return admin.status();
  if (create_topics && !info.identity.embedded) {
    std::vector<std::string> topics = f.input_topics;
    for (auto t : {base::kDeltasTopic, base::kDlqTopic}) topics.emplace_back(t);
    TALLY_RETURN_IF_ERROR(base::EnsureTopics(admin->get(), topics, static_cast<int>(f.partitions), -1, 15000));
  }
  auto n = base::PartitionCount(admin->get(), base::kDeltasTopic, 10000);
  if (!n.ok()) {
    return n.status().WithContext(fmt::format("{} on {}", base::kDeltasTopic, kafka->brokers));
  }
  info.deltas_partitions = static_cast<uint32_t>(*n);
  TALLY_LOG_INFO("cluster", "connected to {} (cluster {}{}), {} has {} partitions", kafka->brokers,
                 info.identity.ToString(), info.identity.embedded ? ", embedded broker" : "",
                 base::kDeltasTopic, info.deltas_partitions);
  return info;
}

namespace {

// Commits, for the router's group, the start of every input partition's
// log. After the log was replaced under a running process the old router
// may have committed its old offsets to the new log (the same address
// answers): its stop commits what it routed, and a commit that found no
// coordinator during the swap is retried by librdkafka, possibly from a
// consumer still being destroyed in the background. Those offsets would
// make the next router skip the new log's first records. Called with the
// stages stopped and those destroys awaited. A group with members (other
// routers of a cluster) refuses the commit: it is logged, and their own
// commits are then what the group knows.
void CommitLogStarts(const base::KafkaOptions& kafka, const CommonFlags& f) {
  if (int left = base::AwaitBackgroundDestroys(10000); left > 0) {
    TALLY_LOG_WARN("pipeline", "{} Kafka client(s) of the old log still closing", left);
  }
  base::ConsumerSettings cs;
  cs.group = f.group;
  cs.client_id = "tally-reattach";
  auto consumer = base::MakeConsumer(kafka, cs);
  if (!consumer.ok()) {
    TALLY_LOG_WARN("pipeline", "resetting the input offsets: {}", consumer.status().ToString());
    return;
  }
  base::KafkaPartitionList starts(rd_kafka_topic_partition_list_new(16));
  for (const auto& t : f.input_topics) {
    auto n = base::PartitionCount(consumer->get(), t, 10000);
    if (!n.ok()) continue;  // not there yet: nothing was committed for it either
    for (int32_t p = 0; p < *n; p++) {
      int64_t low = 0, high = 0;
      if (rd_kafka_query_watermark_offsets(consumer->get(), t.c_str(), p, &low, &high, 5000) !=
          RD_KAFKA_RESP_ERR_NO_ERROR) {
        low = 0;
      }
      rd_kafka_topic_partition_list_add(starts.get(), t.c_str(), p)->offset = low;
    }
  }
  if (starts->cnt > 0) {
    if (auto err = rd_kafka_commit(consumer->get(), starts.get(), /*async=*/0)) {
      TALLY_LOG_WARN("pipeline",
                     "resetting the input offsets of group {} to the new log's start: {}", f.group,
                     rd_kafka_err2str(err));
    } else {
      TALLY_LOG_INFO("pipeline",
                     "input offsets of group {} set to the new log's start ({} partitions)",
                     f.group, starts->cnt);
    }
  }
  rd_kafka_consumer_close(consumer->get());
}

}  // namespace

base::Result<bool> ReattachIfReplaced(base::KafkaOptions* kafka, const CommonFlags& f,
                                      store::StateStore* store, int wait_ms) {
  auto cluster = ConnectCluster(kafka, f, /*create_topics=*/false, wait_ms);
  if (!cluster.ok()) return cluster.status();
  if (cluster->identity.ToString() == store->recorded_cluster()) return false;
  if (cluster->deltas_partitions != store->partitions()) {
    return Status::FailedPrecondition(fmt::format(
        "{} now has {} partitions, the state in {} has {}: restart tally with a matching "
        "--partitions",
        base::kDeltasTopic, cluster->deltas_partitions, store->dir(), store->partitions()));
  }
  TALLY_RETURN_IF_ERROR(aggregator::AttachToCluster(store, cluster->identity, OnNewCluster(f)));
  CommitLogStarts(*kafka, f);
  return true;
}

bool RestartPipeline(PipelineRunner* runner, base::KafkaOptions* kafka, const CommonFlags& f,
                     store::StateStore* store, int64_t* backoff_ms, int64_t* started_ms) {
  runner->Stop();
  if (base::SteadyMs() - *started_ms > 60000) *backoff_ms = 1000;
  for (;;) {
    if (base::ShutdownRequested()) return false;
    base::Result<bool> reattached = false;
    if (store != nullptr) reattached = ReattachIfReplaced(kafka, f, store, 10000);
    if (!reattached.ok()) {
      if (reattached.status().code() == base::StatusCode::kFailedPrecondition) {
        TALLY_LOG_ERROR("pipeline", "{}", reattached.status().ToString());
        return false;
      }
      continue;  // the cluster is unreachable: ConnectCluster said so, and waits again
    }
    if (!*reattached) {
      TALLY_LOG_WARN("pipeline",
                     "the pipeline stopped after an error (above); starting it again in {:.1f} s",
                     *backoff_ms / 1000.0);
      if (base::WaitForShutdown(static_cast<int>(*backoff_ms))) return false;
      *backoff_ms = std::min<int64_t>(*backoff_ms * 2, 30000);
    }
    *started_ms = base::SteadyMs();
    runner->Start();
    return true;
  }
}

base::Result<std::unique_ptr<store::StateDirLock>> LockStateDir(const CommonFlags& f) {
  return store::StateDirLock::Acquire(f.state_dir);
}

base::Result<std::unique_ptr<store::StateStore>> OpenState(
    const CommonFlags& f, uint32_t partitions, bool read_only,
    std::optional<std::vector<uint32_t>> open_partitions) {
  store::StoreOptions o;
  o.dir = f.state_dir;
  o.partitions = partitions;
  o.block_cache_bytes = static_cast<uint64_t>(std::max<int64_t>(f.block_cache_mb, 1)) << 20;
  o.write_buffer_bytes = static_cast<uint64_t>(std::max<int64_t>(f.write_buffer_mb, 1)) << 20;
  if (f.memtable == "sorted-runs") {
    o.memtable = store::StoreOptions::Memtable::kSortedRuns;
  } else if (f.memtable == "skiplist") {
    o.memtable = store::StoreOptions::Memtable::kSkipList;
  } else {
    return Status::InvalidArgument(
        fmt::format("--memtable {}: expected sorted-runs or skiplist", f.memtable));
  }
  o.read_only = read_only;
  o.open_partitions = std::move(open_partitions);
  o.side_files = BrokerSideFiles();
  o.read_cache_bytes =
      read_only ? 0 : static_cast<uint64_t>(std::max<int64_t>(f.read_cache_mb, 0)) << 20;
  o.sync_writes = f.sync;
  o.inactive_days = f.inactive_days;
  o.dedup_hours = f.dedup_hours;
  o.min_free_bytes = static_cast<uint64_t>(std::max<int64_t>(f.min_free_mb, 0)) << 20;
  // Fault drills and tests (not a flag: nobody should arm it by accident).
  if (const char* fault = std::getenv("TALLY_STORE_FAULT_FILE"); fault && *fault && !read_only) {
    o.fault_file = fault;
  }
  uint32_t parts = partitions ? partitions : 1;
  o.viewed.budget_bytes = (static_cast<uint64_t>(std::max<int64_t>(f.viewed_mb, 1)) << 20) / parts;
  return store::StateStore::Open(o);
}

}  // namespace tally::app
