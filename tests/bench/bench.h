// Internal to tally-bench: its flags and Bench, the driver of the
// single-process workloads (one broker, one `tally up`, one redis-server a
// run). tally_bench.cc holds the driver and main(); the workloads are in
// ingest_workloads.cc (ingest, replay, freshness), query_workloads.cc
// (query_counts, query_batch, query_unread) and storage_workload.cc.
//
// Thread model: a Bench runs on the thread that calls RunOnce.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"
#include "bench_util.h"
#include "broker_workloads.h"
#include "cluster_workloads.h"

namespace tally::bench {

struct Flags {
  std::string benchmarks = "standard";
  std::string tally;
  std::string work_dir;
  std::string redis_server = "redis-server";
  std::string redis_benchmark = "redis-benchmark";
  std::string wrk = "wrk";
  std::string wrk_script;
  int64_t events = 1000000;
  int64_t keys = 100000;
  int64_t users = 100000;
  int64_t seconds = 10;
  int64_t connections = 64;
  int64_t partitions = 16;
  int64_t unread_users = 1000;
  int64_t storage_posts = 10000000;
  int64_t storage_id_stride = 1;
  int64_t block_cache_mb = 256;
  int64_t runs = 1;
  int64_t seed = 1;
  int64_t freshness_rate = 300000;  // 0: half the measured ingest rate
  int64_t load_nice = 10;           // nice value of the freshness load generator
  bool keep = false;
  bool pin = true;                   // query workloads: server on CPU 0, clients on the others
  std::vector<std::string> up_args;  // extra flags for tally up
  // The cluster workloads' own, defaults from cluster_workloads.h.
  int64_t failover_partitions = ClusterBenchOptions().failover_partitions;
  int64_t failover_rate = ClusterBenchOptions().failover_rate;
  int64_t cluster_repeats = ClusterBenchOptions().repeats;
  int64_t restore_events = ClusterBenchOptions().restore_events;
  int64_t cluster_events = ClusterBenchOptions().ingest_events;
  int64_t cluster_rate = ClusterBenchOptions().ingest_rate;
  // The broker workloads' own (--broker-*; tally, self and dir are set by Main and RunOnce).
  BrokerBenchOptions broker;
};

// HSETs a post's four counters (v) as the hash `key` into *pipe; the field
// names, in order.
std::array<std::string, 4> AddPostHash(RedisPipe* pipe, std::string_view key, const int64_t v[4]);

int Main(int argc, char** argv);

class Bench {
 public:
  explicit Bench(Flags f) : f_(std::move(f)) {}

  // Runs the selected workloads once; appends to *results.
  base::Status RunOnce(int run, std::vector<WorkloadResult>* results);

 private:
  base::Status StartRedis();
  base::Status StartBroker();
  base::Status StartUp();
  base::Status WaitApplied(uint64_t events, double timeout_s, const std::string& what,
                           double* first_progress_s);
  base::Result<std::string> Watermarks();
  base::Status CheckTopicWhole(const std::string& topic, uint64_t* records);
  base::Result<uint64_t> TopicEnd(const std::string& topic);
  base::Result<std::vector<base::PartitionOffsets>> TopicWatermarks(const std::string& topic);
  std::vector<std::string> TallyArgs(std::initializer_list<std::string> args) const;

  base::Status Ingest(WorkloadResult* r);
  base::Status Replay(WorkloadResult* r);
  base::Status Freshness(WorkloadResult* r);
  base::Status QueryCounts(WorkloadResult* r);
  base::Status QueryBatch(WorkloadResult* r);
  base::Status QueryUnread(WorkloadResult* r);
  base::Status Storage(WorkloadResult* r);

  base::Result<std::map<std::string, double>> Wrk(int port, const std::string& mode, uint64_t n,
                                                  uint64_t first, Process* server, double* cpu_s);
  // Waits until `server` has settled after what came before (the flushes
  // and compactions a backlog leaves): its CPU over 1 s below 10 % of a
  // core, at most 60 s. Records the wait and the CPU it ended at in r.
  void WaitQuiet(Process* server, WorkloadResult* r);
  // The wrk run of a query workload, after WaitQuiet and a first, cold
  // pass of half --seconds whose CPU per request and p99 go to r's extras
  // (cold_cpu_us, cold_p99_ms): the measured pass reads what a serving
  // process holds in its read cache, as Redis holds everything.
  base::Result<std::map<std::string, double>> QueryWrk(const std::string& mode, uint64_t n,
                                                       uint64_t first, double scale,
                                                       WorkloadResult* r, double* cpu_s);
  base::Result<std::map<std::string, double>> RedisBenchmark(
      const std::vector<std::string>& command, int pipeline, double* cpu_s);
  base::Status LoadRedisQueryData();
  // With --pin and two CPUs or more: `server` (every thread) on CPU 0 for
  // one load generator's run, and `argv` (that generator) prefixed to run
  // on the other CPUs, as if the clients ran on other machines. Unpin()
  // gives `server` every CPU back.
  base::Result<std::vector<std::string>> Pin(Process* server, std::vector<std::string> argv);
  void Unpin(Process* server);
  bool PinsQueries() const { return f_.pin && std::thread::hardware_concurrency() >= 2; }
  // Threads of a query load generator (wrk, redis-benchmark): 2, but no
  // more than the CPUs Pin() gives it. Threads time-sliced on one CPU put
  // the generator's own waits for that CPU into every latency it measures
  // once it is the busier side (tests/bench/README.md).
  int LoadThreads() const;

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  bool Selected(const std::string& w) const { return selected_.count(w) > 0; }
  bool needs_redis() const {
    for (const auto& w : selected_) {
      if (!w.starts_with("cluster_") && !w.starts_with("broker_")) return true;
    }
    return false;
  }

  Flags f_;
  std::string dir_;
  std::set<std::string> selected_;
  Process redis_, broker_, up_;
  int redis_port_ = 0, broker_port_ = 0, http_port_ = 0;
  std::string brokers_;
  base::KafkaHandle watermark_client_;  // of the current broker, for TopicWatermarks
  double ingest_rate_ = NAN;            // events/s of the live ingest, for replay and freshness
  // redis-benchmark GET's report, for query_unread when query_counts ran.
  std::map<std::string, double> redis_get_;
  bool redis_query_data_ = false;

  friend int Main(int, char**);
};

}  // namespace tally::bench
