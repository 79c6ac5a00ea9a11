// Wiring shared by the long-running subcommands (up, aggregate, serve,
// replay): common flags, connecting to the cluster, opening the state.
// Only wiring lives here; the logic is in the libraries.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/cluster_check.h"
#include "aggregator/defaults.h"
#include "base/flags.h"
#include "base/kafka.h"
#include "base/status.h"
#include "ingest/event_publisher.h"
#include "pipeline_runner.h"
#include "query/http_server.h"
#include "query/query_service.h"
#include "query/watermarks.h"
#include "store/state_dir_lock.h"
#include "store/state_store.h"

namespace tally::app {

struct CommonFlags {
  std::string brokers;
  std::vector<std::string> kafka;  // KEY=VALUE
  std::string log_level = "info";
  std::string state_dir = "./data";
  std::string group = std::string(base::kDefaultGroup);
  std::vector<std::string> input_topics = {std::string(base::kEventsTopic)};
  int64_t partitions = 16;
  int64_t block_cache_mb = 256;
  int64_t write_buffer_mb = 8;
  std::string memtable = "sorted-runs";
  int64_t read_cache_mb = 0;  // counter read cache (tally up only: it serves HTTP from the writer)
  bool reset_offsets = false;
  // Not a flag: tally up sets it when it runs its own broker, whose log
  // lives in the state directory (aggregator::OnNewCluster::kOwnBroker).
  bool own_broker = false;
  bool sync = false;
  int64_t viewed_mb = 64;     // "viewed" filter budget over all partitions
  int64_t inactive_days = 30;
  int64_t dedup_hours = 24;  // event ids (SPEC section 1)
  int64_t min_free_mb = 256;  // free space the state's disk keeps; below it nothing is applied
  std::string auth_token;
  std::string auth_token_file;
};

// What attaching the state to another cluster does: --reset-offsets, tally
// up's own broker, or a refusal.
aggregator::OnNewCluster OnNewCluster(const CommonFlags& f);

// Registers --brokers, --kafka, --log-level on `fs`.
void AddKafkaFlags(base::FlagSet* fs, CommonFlags* f);
// Registers --input-topic and --group.
void AddTopicFlags(base::FlagSet* fs, CommonFlags* f);
// Registers --state-dir, --block-cache-mb, --write-buffer-mb, --memtable,
// --sync, --viewed-mb, --inactive-days, --min-free-mb.
void AddStateFlags(base::FlagSet* fs, CommonFlags* f);

// Registers --auth-token and --auth-token-file (HTTP write endpoints).
void AddAuthFlags(base::FlagSet* fs, CommonFlags* f);
// The token the write endpoints require ("" = none): --auth-token, or the
// first line of --auth-token-file. InvalidArgument if both are given or the
// file cannot be read or is empty.
base::Result<std::string> ResolveAuthToken(const CommonFlags& f);

// The HTTP tier's flags (tally up, tally serve): listen address, threads,
// limits, timeouts, rate limit.
struct HttpFlags {
  std::string listen = "127.0.0.1:8080";
  int64_t threads = 2;
  int64_t max_request_bytes = 1 << 20;
  int64_t max_header_bytes = 8 << 10;
  int64_t max_headers = 100;
  int64_t idle_timeout_ms = 30000;
  int64_t request_timeout_ms = 30000;
  int64_t write_timeout_ms = 10000;
  int64_t max_connections = 10000;
  int64_t rate_limit = 0;  // requests/s per client address; 0 = none
  int64_t rate_burst = 0;  // 0 = rate_limit
  int64_t visible_timeout_ms = 5000;  // ?wait=visible (QueryServiceOptions::visible_timeout_ms)
  int64_t status_sample_ms =
      1000;  // the status page's history (QueryServiceOptions::status_sample_ms)
};

// Registers --http, --http-threads, --max-request-bytes, --max-header-bytes,
// --max-headers, --idle-timeout-ms, --request-timeout-ms,
// --write-timeout-ms, --max-connections, --rate-limit, --rate-burst,
// --visible-timeout-ms, --status-sample-ms.
void AddHttpFlags(base::FlagSet* fs, HttpFlags* f);
// Checks `f` and turns it into server options. InvalidArgument naming the
// flag for a value out of range. Raises the process's open-file limit
// (RLIMIT_NOFILE) to its hard limit when --max-connections needs it, and
// lowers max_connections (with a warning) when even that is too small.
base::Result<query::ServerOptions> MakeServerOptions(const HttpFlags& f);

// What the HTTP tier needs of Kafka: a publisher to the first input topic
// (POST /v1/events, the resets) and the watermark view of the router's
// group over `store` (borrowed; must outlive it). The errors of
// ingest::EventPublisher::Create and query::WatermarkSource::Create.
struct HttpTierKafka {
  std::unique_ptr<ingest::EventPublisher> publisher;
  std::unique_ptr<query::WatermarkSource> watermarks;
};
base::Result<HttpTierKafka> ConnectHttpTier(const base::KafkaOptions& kafka, const CommonFlags& f,
                                            store::StateStore* store);

// The HTTP tier of `tally up` and `tally serve`: the query service and the
// server answering it. Destroying it stops the server, then the service.
struct HttpTier {
  std::unique_ptr<query::QueryService> service;
  std::unique_ptr<query::HttpServer> server;  // after `service`: destroyed first
};

// Starts the HTTP tier: a query::QueryService with `service` (the caller
// sets store, publisher, watermarks, auth_token, ready, kafka_problem and
// info.partitions; /v1/info's version, brokers, input topics and state
// directory come from `f`, the visibility timeout from `http`), then an
// HttpServer answering it with `server` (MakeServerOptions(http), made when
// the flags were checked) on `listener` (BindHttp's, taken at start), whose
// stop aborts the publisher's waits. The errors of HttpServer::Start.
// Everything `service` borrows must outlive the tier.
base::Result<std::unique_ptr<HttpTier>> StartHttpTier(
    const CommonFlags& f, const HttpFlags& http, query::ServerOptions server,
    query::QueryServiceOptions service, std::unique_ptr<query::HttpListener> listener);

// Binds the HTTP port of `server` (query::HttpListener::Bind), which a
// command (tally up, tally serve) does before it connects to Kafka or joins
// any group: a taken port then stops the start before the groups see the
// process. On failure, logs one ERROR line naming the address (as
// `component`) and returns null.
std::unique_ptr<query::HttpListener> BindHttp(const char* component,
                                              const query::ServerOptions& server);

// Applies --log-level and parses --kafka into `out` (brokers too).
base::Status ApplyCommonFlags(const CommonFlags& f, base::KafkaOptions* out);

// What a process learns about the cluster before it starts.
struct ClusterInfo {
  base::ClusterIdentity identity;
  uint32_t deltas_partitions = 0;
};

// Waits (up to `wait_ms`) for the cluster, detects the embedded broker
// (sets kafka->embedded), creates tally's topics on a real cluster when
// `create_topics` (with `partitions` each), and reads the partition count of
// tally.deltas.
base::Result<ClusterInfo> ConnectCluster(base::KafkaOptions* kafka, const CommonFlags& f, bool create_topics,
                                         int wait_ms);

// After a stage of a running process failed: connects to the cluster again
// (up to `wait_ms`) and, if it is not the one the state was built from (a
// restarted embedded broker, whose log is new), attaches the state to it by
// the rules of a start (aggregator::AttachToCluster: counts kept, offsets
// from the new logs' start, and the router group's input offsets committed
// as those starts: the old router may have committed its old offsets to the
// new log). True when it re-attached and the stages may
// start again; false when the cluster is the one the state knows (the
// failure stands); an error when the cluster cannot be reached, its
// tally.deltas has another partition count than the state, or the rules
// refuse it. Call with the stages stopped.
base::Result<bool> ReattachIfReplaced(base::KafkaOptions* kafka, const CommonFlags& f,
                                      store::StateStore* store, int wait_ms);

// Takes the state directory for this process's writes (store::StateDirLock),
// to be held until the state is closed. Called by the commands that write
// the state first of all, before the embedded broker starts or the router
// routes: a second writer stops at once, saying which process holds the
// directory. A null lock when the directory is unusable (OpenState says why).
base::Result<std::unique_ptr<store::StateDirLock>> LockStateDir(const CommonFlags& f);

// A stage of `runner` stopped with an error: stops the others and starts
// them again, so that tally resumes by itself once the fault clears (SPEC
// section 4). First it attaches the state to a replaced log
// (ReattachIfReplaced), waiting for an unreachable cluster; the same
// cluster waits `*backoff_ms` first (1 s, doubling to 30 s while failures
// follow each other within a minute; `*started_ms` is when the stages last
// started). False, with the stages stopped, when a shutdown was requested
// meanwhile or the cluster rules refuse the state (logged at ERROR): the
// command stops then. `store` may be null (a router alone).
bool RestartPipeline(PipelineRunner* runner, base::KafkaOptions* kafka, const CommonFlags& f,
                     store::StateStore* store, int64_t* backoff_ms, int64_t* started_ms);

// Opens the state directory with `partitions` (0: as recorded). A writable
// store honours TALLY_STORE_FAULT_FILE=PATH (fault drills and tests): every
// RocksDB write fails while PATH exists.
// `open_partitions`: StoreOptions::open_partitions (a cluster member opens
// none at start: the applier opens what it is given).
base::Result<std::unique_ptr<store::StateStore>> OpenState(
    const CommonFlags& f, uint32_t partitions, bool read_only,
    std::optional<std::vector<uint32_t>> open_partitions = std::nullopt);

}  // namespace tally::app
