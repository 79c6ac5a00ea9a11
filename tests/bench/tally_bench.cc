// tally-bench: benchmarks of tally, each beside the baseline its users would
// otherwise pick (a Redis counter farm), in the same run on the same machine.
// It starts what it needs itself: the embedded broker (`tally broker`),
// `tally up`, `tally replay`, `tally serve`, a `redis-server` on a free
// loopback port, wrk and redis-benchmark.
//
// Workloads (--benchmarks=a,b,...; "standard" runs all, in this order):
//
//   ingest        --events N synthetic events (the realistic mix of `tally
//                 produce --gen`: Zipf posts, power-law follows, all 14
//                 types) in the input topic, then `tally up` started; time
//                 until every event is applied (lag 0). Baseline: the same
//                 events' effects (tally's own router decides them) applied
//                 to Redis as pipelined HINCRBY/HSET on one connection, timed
//                 from the first byte sent to the last reply. Target: >= 2.0x
//                 events/s.
//   replay        `tally replay` of that backlog (from tally.deltas) into an
//                 empty state directory, time to exit. Baseline: live ingest.
//                 Target: >= 1.5x events/s.
//   freshness     steady load of 300k events/s (`tally produce --rate`
//                 under `nice -n 10`, as producers on other machines:
//                 --freshness-rate, --load-nice) plus a probe every 10 ms: a
//                 view of a new post, timed from publish to visible over
//                 HTTP. The value is the load the probe window really had
//                 (the input topic's end offsets before and after it).
//                 Target: p99 <= 100 ms with that load within 3 % of the
//                 rate asked for.
//   query_counts  wrk (keep-alive, --connections, 2 threads) on GET
//                 /v1/posts/{id}/counts, ids uniform in 1..--keys. Baseline:
//                 redis-benchmark HGETALL of a 4-field hash per post (GET of
//                 the same as a JSON string is reported beside it) with the
//                 same connections and threads. Targets: CPU per request of
//                 the tally process <= 1.0x redis-server's per HGETALL, and
//                 p99 <= 1.2x Redis's.
//   query_batch   GET /v1/posts/counts?ids= with 20 ids. Baseline:
//                 redis-benchmark HGETALL pipelined 20 deep. Target: CPU per
//                 post <= 1.0x redis-server's per HGETALL.
//   query_unread  GET /v1/users/{id}/unread for --unread-users users who each
//                 follow 200 accounts. Baseline: redis-benchmark GET.
//                 Target: CPU per request <= 2.0x redis-server's per GET.
//
// CPU per request is utime+stime of every thread of the serving process
// (/proc/PID/stat) over the load generator's run, divided by the requests
// it answered: tally's over wrk's run, redis-server's over redis-benchmark's.
// With --pin (the default on two CPUs or more) each run has its server
// alone on CPU 0 (tally with one I/O thread, as Redis serves on one) and
// its load generator on the other CPUs, as clients on other machines.
// Throughput and latency are reported beside it. Before wrk starts, tally
// is given up to 60 s to settle after what came before (the flushes and
// compactions of the ingest backlog or the follows just published): until
// its CPU over a second falls below 10 % of a core, as an idle Redis is
// before its run (settle_s and settled_cpu_pct in the JSON line). Then a
// first wrk pass of half --seconds fills tally's read cache (the ingest
// leaves it empty; Redis has all in memory), reported as cold_cpu_us,
// cold_p99_ms and cold_rps, and the second pass is the row.
//   storage       --storage-posts posts (10M) with 4 non-zero counters,
//                 written through tally's store and compacted; disk bytes per
//                 post, then RSS of `tally serve` over it under wrk. Baseline:
//                 Redis used_memory for the same posts as hashes. Targets:
//                 disk <= 8 B/post and <= 1/8 of Redis; RSS <= block cache +
//                 150 MB.
//
// Cluster workloads (not in "standard"; selected by name; see
// cluster_workloads.h): cluster_failover, cluster_restore, cluster_ingest,
// cluster_disk. Each starts its own `tally broker` and `tally up --brokers`
// members and prints a table of its own besides its rows.
//
// Each workload prints one JSON line ({"workload":...}) when it ends; a table
// follows at the end. With --runs N everything runs N times and the table
// holds the medians. Exit status: 0 when every workload ran (targets missed
// are reported, not failures), 1 when one could not run, 2 on bad flags.
//
//   build/tally-bench                                  # the standard set
//   build/tally-bench --benchmarks=query_counts --seconds 20
#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "aggregator/event_router.h"
#include "base/flags.h"
#include "base/kafka.h"
#include "base/log.h"
#include "bench_util.h"
#include "cluster_workloads.h"
#include "ingest/event_publisher.h"
#include "ingest/workload_generator.h"
#include "schemas/delta.h"
#include "schemas/event.h"
#include "store/state_store.h"

namespace tally::bench {
namespace {

using base::Result;
using base::Status;

constexpr const char* kStandard = "ingest,replay,freshness,query_counts,query_batch,query_unread,storage";
constexpr const char* kCluster = "cluster_failover,cluster_restore,cluster_ingest,cluster_disk";
constexpr uint64_t kUnreadUserBase = 1000000000000;  // bench users, apart from the generator's
constexpr uint64_t kProbePostBase = 1ULL << 40;      // freshness probes: posts never used before
constexpr int kFollowees = 200;

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
};

double Mb(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string Num(double v, int prec = 1) {
  if (std::isnan(v)) return "-";
  if (std::fabs(v) >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (std::fabs(v) >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.{}f}", v, prec);
}

std::string JsonDouble(double v) { return std::isnan(v) ? "null" : fmt::format("{:.4g}", v); }

std::string ToJson(const WorkloadResult& r, const std::string& run) {
  std::string out = fmt::format(
      "{{\"workload\":\"{}\",\"run\":\"{}\",\"unit\":\"{}\",\"value\":{},\"p50_ms\":{},"
      "\"p99_ms\":{},\"p999_ms\":{},\"cpu_s\":{},\"cpu_us\":{},\"rss_mb\":{},\"disk_mb\":{},"
      "\"baseline\":\"{}\",\"baseline_value\":{},\"baseline_p99_ms\":{},\"baseline_cpu_us\":{},"
      "\"ratio\":{},\"p99_ratio\":{},"
      "\"target\":\"{}\",\"met\":{}",
      r.workload, run, r.unit, JsonDouble(r.value), JsonDouble(r.p50_ms), JsonDouble(r.p99_ms),
      JsonDouble(r.p999_ms), JsonDouble(r.cpu_s), JsonDouble(r.cpu_us), JsonDouble(r.rss_mb),
      JsonDouble(r.disk_mb), r.baseline, JsonDouble(r.baseline_value),
      JsonDouble(r.baseline_p99_ms), JsonDouble(r.baseline_cpu_us), JsonDouble(r.ratio),
      JsonDouble(r.p99_ratio), r.target, r.met.has_value() ? (*r.met ? "true" : "false") : "null");
  for (const auto& [k, v] : r.extra) out += fmt::format(",\"{}\":{}", k, JsonDouble(v));
  return out + "}";
}

// Sums "key":N over every object of a JSON text (the watermarks answer).
double SumField(std::string_view json, std::string_view key) {
  std::string needle = fmt::format("\"{}\":", key);
  double sum = 0;
  for (size_t at = json.find(needle); at != std::string_view::npos; at = json.find(needle, at + 1)) {
    sum += std::strtod(std::string(json.substr(at + needle.size(), 24)).c_str(), nullptr);
  }
  return sum;
}

class Bench {
 public:
  explicit Bench(Flags f) : f_(std::move(f)) {}

  // Runs the selected workloads once; appends to *results.
  Status RunOnce(int run, std::vector<WorkloadResult>* results);

 private:
  Status StartRedis();
  Status StartBroker();
  Status StartUp();
  Status WaitApplied(uint64_t events, double timeout_s, const std::string& what, double* first_progress_s);
  Result<std::string> Watermarks();
  Status CheckTopicWhole(const std::string& topic, uint64_t* records);
  Result<uint64_t> TopicEnd(const std::string& topic);
  Result<std::vector<base::PartitionOffsets>> TopicWatermarks(const std::string& topic);
  std::vector<std::string> TallyArgs(std::initializer_list<std::string> args) const;

  Status Ingest(WorkloadResult* r);
  Status Replay(WorkloadResult* r);
  Status Freshness(WorkloadResult* r);
  Status QueryCounts(WorkloadResult* r);
  Status QueryBatch(WorkloadResult* r);
  Status QueryUnread(WorkloadResult* r);
  Status Storage(WorkloadResult* r);

  Result<std::map<std::string, double>> Wrk(int port, const std::string& mode, uint64_t n, uint64_t first,
                                            Process* server, double* cpu_s);
  // Waits until `server` has settled after what came before (the flushes
  // and compactions a backlog leaves): its CPU over 1 s below 10 % of a
  // core, at most 60 s. Records the wait and the CPU it ended at in r.
  void WaitQuiet(Process* server, WorkloadResult* r);
  // The wrk run of a query workload, after WaitQuiet and a first, cold
  // pass of half --seconds whose CPU per request and p99 go to r's extras
  // (cold_cpu_us, cold_p99_ms): the measured pass reads what a serving
  // process holds in its read cache, as Redis holds everything.
  Result<std::map<std::string, double>> QueryWrk(const std::string& mode, uint64_t n,
                                                 uint64_t first, double scale, WorkloadResult* r,
                                                 double* cpu_s);
  Result<std::map<std::string, double>> RedisBenchmark(const std::vector<std::string>& command, int pipeline,
                                                       double* cpu_s);
  Status LoadRedisQueryData();
  // With --pin and two CPUs or more: `server` (every thread) on CPU 0 for
  // one load generator's run, and `argv` (that generator) prefixed to run
  // on the other CPUs, as if the clients ran on other machines. Unpin()
  // gives `server` every CPU back.
  Result<std::vector<std::string>> Pin(Process* server, std::vector<std::string> argv);
  void Unpin(Process* server);
  bool PinsQueries() const { return f_.pin && std::thread::hardware_concurrency() >= 2; }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  bool Selected(const std::string& w) const { return selected_.count(w) > 0; }
  bool needs_redis() const {
    for (const auto& w : selected_) {
      if (!w.starts_with("cluster_")) return true;
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
  double ingest_rate_ = NAN;   // events/s of the live ingest, for replay and freshness
  // redis-benchmark GET's report, for query_unread when query_counts ran.
  std::map<std::string, double> redis_get_;
  bool redis_query_data_ = false;

  friend int Main(int, char**);
};

std::vector<std::string> Bench::TallyArgs(std::initializer_list<std::string> args) const {
  std::vector<std::string> v = {f_.tally};
  v.insert(v.end(), args);
  return v;
}

Status Bench::StartRedis() {
  redis_port_ = FreePort();
  TALLY_RETURN_IF_ERROR(redis_.Start({f_.redis_server, "--port", std::to_string(redis_port_), "--bind",
                                      "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"},
                                     Path("redis.log")));
  if (!WaitForPort(redis_port_, 10)) return Status::Unavailable("redis-server did not start; see " + Path("redis.log"));
  return Status::Ok();
}

Status Bench::StartBroker() {
  watermark_client_.reset();
  broker_port_ = FreePort();
  brokers_ = fmt::format("127.0.0.1:{}", broker_port_);
  TALLY_RETURN_IF_ERROR(broker_.Start(TallyArgs({"broker", "--port", std::to_string(broker_port_), "--partitions",
                                                 std::to_string(f_.partitions), "--log-level", "warn"}),
                                      Path("broker.log")));
  if (!WaitForPort(broker_port_, 15)) return Status::Unavailable("tally broker did not start; see " + Path("broker.log"));
  return Status::Ok();
}

Status Bench::StartUp() {
  http_port_ = FreePort();
  auto argv = TallyArgs({"up", "--brokers", brokers_, "--state-dir", Path("state"), "--http",
                              fmt::format("127.0.0.1:{}", http_port_), "--partitions", std::to_string(f_.partitions),
                              "--block-cache-mb", std::to_string(f_.block_cache_mb), "--log-level", "info"});
  // Pinned, the query workloads give tally one CPU, as Redis has: one I/O
  // thread for it (two would only take turns on it). --up-arg may say
  // otherwise; the last --http-threads wins.
  if (PinsQueries()) argv.push_back("--http-threads=1");
  argv.insert(argv.end(), f_.up_args.begin(), f_.up_args.end());
  return up_.Start(argv, Path("up.log"));
}

Result<std::string> Bench::Watermarks() {
  HttpClient http(http_port_);
  int status = 0;
  std::string body;
  TALLY_RETURN_IF_ERROR(http.Get("/v1/watermarks", &status, &body));
  if (status != 200) return Status::Unavailable(fmt::format("watermarks: HTTP {}", status));
  return body;
}

// Waits until the input topic's applied offsets sum to `events` with lag 0.
Status Bench::WaitApplied(uint64_t events, double timeout_s, const std::string& what, double* first_progress_s) {
  auto t0 = Clock::now();
  auto last_print = t0;
  double applied = 0;
  if (first_progress_s) *first_progress_s = NAN;
  while (true) {
    if (!up_.running()) return Status::Internal("tally up exited; see " + Path("up.log"));
    auto wm = Watermarks();
    if (wm.ok()) {
      applied = SumField(*wm, "applied_offset");
      double lag = SumField(*wm, "lag");
      if (first_progress_s && std::isnan(*first_progress_s) && applied > 0) *first_progress_s = SecondsSince(t0);
      if (applied >= static_cast<double>(events) && lag == 0) return Status::Ok();
    }
    if (SecondsSince(t0) > timeout_s) {
      return Status::Unavailable(fmt::format("{}: {} of {} events applied after {:.0f} s", what, applied, events,
                                             timeout_s));
    }
    if (SecondsSince(last_print) >= 2) {
      last_print = Clock::now();
      Progress(fmt::format("{}: {:.0f}/{} applied ({:.0f}%), {:.1f} s", what, applied, events,
                           100.0 * applied / static_cast<double>(events), SecondsSince(t0)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Every partition's low and high watermarks, from the broker. One client
// serves every query of a run: a new one would first connect, inside the
// time a caller measures.
Result<std::vector<base::PartitionOffsets>> Bench::TopicWatermarks(const std::string& topic) {
  if (!watermark_client_) {
    base::KafkaOptions ko;
    ko.brokers = brokers_;
    auto conf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, ko, {});
    if (!conf.ok()) return conf.status();
    auto rk = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
    if (!rk.ok()) return rk.status();
    watermark_client_ = std::move(rk).value();
  }
  return base::QueryWatermarks(watermark_client_.get(), topic, 10000);
}

// The broker keeps a bounded log per partition: a backlog that does not fit
// would be measured short. Fails unless every partition still starts at 0.
Status Bench::CheckTopicWhole(const std::string& topic, uint64_t* records) {
  auto wm = TopicWatermarks(topic);
  if (!wm.ok()) return wm.status();
  *records = 0;
  for (const auto& p : *wm) {
    if (p.low != 0) {
      return Status::ResourceExhausted(fmt::format(
          "{}/{} starts at offset {}: the embedded broker dropped records (it keeps ~5 MiB per partition); "
          "use fewer --events or more --partitions",
          topic, p.partition, p.low));
    }
    *records += static_cast<uint64_t>(p.high);
  }
  return Status::Ok();
}

// The sum of `topic`'s end offsets: how many records it ever received.
Result<uint64_t> Bench::TopicEnd(const std::string& topic) {
  auto wm = TopicWatermarks(topic);
  if (!wm.ok()) return wm.status();
  uint64_t end = 0;
  for (const auto& p : *wm) end += static_cast<uint64_t>(p.high);
  return end;
}

// ---- ingest -----------------------------------------------------------------

// The Redis commands a counter farm would send for `event`'s effects, as
// tally's router decides them.
void AddRedisCommands(const schemas::Event& event, aggregator::EventRouter* router,
                      std::vector<schemas::DeltaBatchBuilder>* builders, schemas::DeltaBatchReader* reader,
                      RedisPipe* pipe) {
  static const char* kPostField[] = {"like", "repost", "comment", "view"};
  static const char* kUserField[] = {"posts", "followers", "following"};
  static const char* kUnread[] = {"mention", "comment", "like", "repost", "dm", "follower", "notice", "red_dot", "feed"};
  router->Route(event, "tally.events", 0, 0, builders);
  std::string bytes = (*builders)[0].Finish();
  if (!reader->Open(bytes).ok()) return;
  schemas::Delta d;
  char key[48], member[32], amount[24];
  while (reader->Next(&d)) {
    std::snprintf(amount, sizeof(amount), "%lld", static_cast<long long>(d.amount));
    std::snprintf(member, sizeof(member), "%llu", static_cast<unsigned long long>(d.member));
    switch (d.op) {
      case schemas::DeltaOp::kPostCounter:
        std::snprintf(key, sizeof(key), "p:%llu", static_cast<unsigned long long>(d.entity));
        pipe->Add({"HINCRBY", key, kPostField[d.field & 3], amount});
        break;
      case schemas::DeltaOp::kUserCounter:
        std::snprintf(key, sizeof(key), "u:%llu", static_cast<unsigned long long>(d.entity));
        pipe->Add({"HINCRBY", key, kUserField[d.field % 3], amount});
        break;
      case schemas::DeltaOp::kUnreadAdd:
      case schemas::DeltaOp::kUnreadReset:
        std::snprintf(key, sizeof(key), "n:%llu", static_cast<unsigned long long>(d.entity));
        if (d.op == schemas::DeltaOp::kUnreadAdd) pipe->Add({"HINCRBY", key, kUnread[d.field % 9], amount});
        else pipe->Add({"HSET", key, kUnread[d.field % 9], "0"});
        break;
      case schemas::DeltaOp::kLikeSet:
      case schemas::DeltaOp::kLikeUnset: {
        // The edge and the count; a plain farm does not make them exact.
        bool set = d.op == schemas::DeltaOp::kLikeSet;
        std::snprintf(key, sizeof(key), "l:%llu", static_cast<unsigned long long>(d.entity));
        if (set) pipe->Add({"HSET", key, member, "1"});
        else pipe->Add({"HDEL", key, member});
        std::snprintf(key, sizeof(key), "p:%llu", static_cast<unsigned long long>(d.entity));
        pipe->Add({"HINCRBY", key, "like", set ? "1" : "-1"});
        break;
      }
      case schemas::DeltaOp::kFollowSet:
      case schemas::DeltaOp::kFollowUnset: {
        bool set = d.op == schemas::DeltaOp::kFollowSet;
        const char* one = set ? "1" : "-1";
        char target[48];
        std::snprintf(key, sizeof(key), "f:%llu", static_cast<unsigned long long>(d.entity));
        if (set) pipe->Add({"HSET", key, member, "1"});
        else pipe->Add({"HDEL", key, member});
        std::snprintf(key, sizeof(key), "u:%llu", static_cast<unsigned long long>(d.entity));
        pipe->Add({"HINCRBY", key, "following", one});
        std::snprintf(target, sizeof(target), "u:%llu", static_cast<unsigned long long>(d.member));
        pipe->Add({"HINCRBY", target, "followers", one});
        if (set) {
          std::snprintf(target, sizeof(target), "n:%llu", static_cast<unsigned long long>(d.member));
          pipe->Add({"HINCRBY", target, "follower", "1"});
        }
        break;
      }
      case schemas::DeltaOp::kNoticeAppend:
        pipe->Add({"HSET", "notices", member, d.text});
        break;
      case schemas::DeltaOp::kNoticeRead:
        std::snprintf(key, sizeof(key), "nr:%llu", static_cast<unsigned long long>(d.entity));
        pipe->Add({"HSET", key, "notice_id", member});
        break;
      case schemas::DeltaOp::kRedDotPublish:
        std::snprintf(amount, sizeof(amount), "%lld", static_cast<long long>(d.source.ts));
        pipe->Add({"HSET", "red_dots", d.text, amount});
        break;
      case schemas::DeltaOp::kRedDotRead:
        std::snprintf(key, sizeof(key), "rd:%llu", static_cast<unsigned long long>(d.entity));
        std::snprintf(amount, sizeof(amount), "%lld", static_cast<long long>(d.source.ts));
        pipe->Add({"HSET", key, d.text, amount});
        break;
      case schemas::DeltaOp::kFeedSnapshot:
        std::snprintf(key, sizeof(key), "fs:%llu", static_cast<unsigned long long>(d.entity));
        std::snprintf(amount, sizeof(amount), "%lld", static_cast<long long>(d.source.ts));
        pipe->Add({"HSET", key, "ts", amount});
        break;
      case schemas::DeltaOp::kViewMember:
        std::snprintf(key, sizeof(key), "v:%llu", static_cast<unsigned long long>(d.entity));
        pipe->Add({"HSET", key, member, "1"});
        break;
    }
  }
}

Status Bench::Ingest(WorkloadResult* r) {
  r->workload = "ingest";
  r->unit = "events/s";
  r->baseline = "redis pipelined HINCRBY/HSET";
  r->target = ">= 2.0x";
  const uint64_t n = static_cast<uint64_t>(f_.events);

  Progress(fmt::format("ingest: publishing {} events with tally produce", n));
  auto t0 = Clock::now();
  auto produced = RunCapture(TallyArgs({"produce", "--brokers", brokers_, "--gen", std::to_string(n), "--seed",
                                        std::to_string(f_.seed), "--users", std::to_string(f_.users), "--posts",
                                        std::to_string(f_.keys), "--log-level", "warn"}),
                             Path("produce.log"), 600);
  if (!produced.ok()) return produced.status();
  r->extra["produce_events_s"] = static_cast<double>(n) / SecondsSince(t0);
  uint64_t records = 0;
  TALLY_RETURN_IF_ERROR(CheckTopicWhole("tally.events", &records));
  if (records != n) return Status::Internal(fmt::format("tally.events holds {} records, expected {}", records, n));

  Progress("ingest: starting tally up on the backlog");
  const double broker_cpu0 = broker_.CpuSeconds();
  auto start = Clock::now();
  TALLY_RETURN_IF_ERROR(StartUp());
  if (!WaitForPort(http_port_, 30)) return Status::Unavailable("tally up did not listen; see " + Path("up.log"));
  double first_progress = NAN;
  TALLY_RETURN_IF_ERROR(WaitApplied(n, 900, "ingest", &first_progress));
  double secs = SecondsSince(start);
  r->value = static_cast<double>(n) / secs;
  ingest_rate_ = r->value;
  r->cpu_s = up_.CpuSeconds();
  r->rss_mb = Mb(up_.PeakRssBytes());
  r->disk_mb = Mb(DirBytes(Path("state")));
  r->extra["seconds"] = secs;
  r->extra["first_applied_s"] = first_progress;
  r->extra["events_s_after_first"] = static_cast<double>(n) / (secs - first_progress);
  r->extra["broker_cpu_s"] = broker_.CpuSeconds();
  // CPU per event: tally up's (every thread, from its start) and the
  // embedded broker's over the same span, to lag 0 and again once tally
  // has settled (the flushes and compactions the backlog left: WaitQuiet).
  // Redis does nothing after its last reply.
  const double nd = static_cast<double>(n);
  const double broker_cpu = broker_.CpuSeconds() - broker_cpu0;
  r->extra["cpu_us_per_event"] = (r->cpu_s + broker_cpu) / nd * 1e6;
  r->extra["broker_cpu_us_per_event"] = broker_cpu / nd * 1e6;
  WaitQuiet(&up_, r);
  r->extra["cpu_us_per_event_settled"] =
      (up_.CpuSeconds() + broker_.CpuSeconds() - broker_cpu0) / nd * 1e6;

  // The baseline: the same events, the same effects, straight into Redis.
  Progress("ingest: the same events' effects into redis");
  ingest::WorkloadOptions wo;
  wo.users = static_cast<uint64_t>(f_.users);
  wo.posts = static_cast<uint64_t>(f_.keys);
  wo.seed = static_cast<uint64_t>(f_.seed);
  ingest::WorkloadGenerator gen(wo);
  aggregator::EventRouter router(1);
  std::vector<schemas::DeltaBatchBuilder> builders(1);
  schemas::DeltaBatchReader reader;
  RedisPipe pipe;
  schemas::Event e;
  for (uint64_t i = 0; i < n; i++) {
    gen.Next(&e);
    AddRedisCommands(e, &router, &builders, &reader, &pipe);
  }
  TALLY_RETURN_IF_ERROR(RedisCommand(redis_port_, {"FLUSHALL", "ASYNC"}).status());
  double redis_cpu0 = redis_.CpuSeconds();
  uint64_t errors = 0;
  auto redis_secs = pipe.Send(redis_port_, &errors);
  if (!redis_secs.ok()) return redis_secs.status();
  if (errors > 0) return Status::Internal(fmt::format("redis answered {} errors to the ingest pipeline", errors));
  r->baseline_value = static_cast<double>(n) / *redis_secs;
  r->extra["redis_commands"] = static_cast<double>(pipe.commands());
  r->extra["redis_cpu_s"] = redis_.CpuSeconds() - redis_cpu0;
  r->extra["redis_cpu_us_per_event"] = r->extra["redis_cpu_s"] / nd * 1e6;
  r->cpu_us = r->extra["cpu_us_per_event"];
  r->baseline_cpu_us = r->extra["redis_cpu_us_per_event"];
  r->extra["cpu_ratio"] = r->cpu_us / r->baseline_cpu_us;
  r->extra["cpu_ratio_settled"] =
      r->extra["cpu_us_per_event_settled"] / r->extra["redis_cpu_us_per_event"];
  Progress(fmt::format(
      "ingest: CPU per event {:.2f} us (tally up and the broker; {:.2f} us once settled) against "
      "{:.2f} us in redis-server: {:.2f}x (target <= 1.0x)",
      r->extra["cpu_us_per_event"], r->extra["cpu_us_per_event_settled"],
      r->extra["redis_cpu_us_per_event"], r->extra["cpu_ratio"]));
  r->ratio = r->value / r->baseline_value;
  r->met = r->ratio >= 2.0;
  return Status::Ok();
}

// ---- replay -----------------------------------------------------------------

Status Bench::Replay(WorkloadResult* r) {
  r->workload = "replay";
  r->unit = "events/s";
  r->baseline = "live ingest";
  r->target = ">= 1.5x";
  uint64_t deltas = 0;
  TALLY_RETURN_IF_ERROR(CheckTopicWhole("tally.deltas", &deltas));
  r->extra["delta_batches"] = static_cast<double>(deltas);
  Progress(fmt::format("replay: tally replay of {} delta batches", deltas));
  std::filesystem::remove_all(Path("replay"));
  Process p;
  auto t0 = Clock::now();
  TALLY_RETURN_IF_ERROR(p.Start(TallyArgs({"replay", "--brokers", brokers_, "--state-dir", Path("replay"),
                                           "--block-cache-mb", std::to_string(f_.block_cache_mb), "--log-level", "info"}),
                                Path("replay.log")));
  uint64_t peak = 0;
  double cpu = 0;
  while (p.running()) {
    peak = std::max(peak, p.PeakRssBytes());
    cpu = std::max(cpu, p.CpuSeconds());
    if (SecondsSince(t0) > 900) {
      p.Stop(1);
      return Status::Unavailable("tally replay did not finish in 900 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  double secs = SecondsSince(t0);
  int st = p.Wait(1);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return Status::Internal("tally replay failed; see " + Path("replay.log"));
  r->value = static_cast<double>(f_.events) / secs;
  r->cpu_s = cpu;
  r->rss_mb = Mb(peak);
  r->disk_mb = Mb(DirBytes(Path("replay")));
  r->extra["seconds"] = secs;
  r->baseline_value = ingest_rate_;
  r->ratio = r->value / r->baseline_value;
  r->met = r->ratio >= 1.5;
  return Status::Ok();
}

// ---- freshness --------------------------------------------------------------

Status Bench::Freshness(WorkloadResult* r) {
  r->workload = "freshness";
  r->unit = "events/s";
  r->target = "p99 <= 100 ms, load >= 0.97x";
  double rate = f_.freshness_rate > 0 ? static_cast<double>(f_.freshness_rate)
                                      : std::max(1000.0, std::floor(ingest_rate_ / 2));
  uint64_t total = static_cast<uint64_t>(rate * static_cast<double>(f_.seconds + 2));
  Progress(fmt::format("freshness: {:.0f} events/s for {} s, a probe every 10 ms", rate, f_.seconds));

  Process load;
  auto largs = TallyArgs({"produce", "--brokers", brokers_, "--gen", std::to_string(total),
                          "--rate", fmt::format("{:.0f}", rate), "--seed",
                          std::to_string(f_.seed + 1), "--users", std::to_string(f_.users),
                          "--posts", std::to_string(f_.keys), "--log-level", "warn"});
  // Producers run elsewhere in a deployment; here the generator shares the
  // cores with tally, at tally's priority unless --load-nice says otherwise.
  if (f_.load_nice != 0) largs.insert(largs.begin(), {"nice", "-n", std::to_string(f_.load_nice)});
  TALLY_RETURN_IF_ERROR(load.Start(largs, Path("freshness-produce.log")));
  ingest::PublisherOptions po;
  po.kafka.brokers = brokers_;
  po.kafka.overrides = {{"linger.ms", "0"}};
  auto publisher = ingest::EventPublisher::Create(po);
  if (!publisher.ok()) return publisher.status();

  struct Probe {
    uint64_t post;
    Clock::time_point sent;
  };
  std::mutex mu;
  std::vector<Probe> outstanding;
  Samples latency_ms;
  uint64_t sent = 0, lost = 0;
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};

  std::thread poller([&] {
    HttpClient http(http_port_);
    std::string body;
    while (!stop || !outstanding.empty()) {
      std::vector<Probe> now;
      {
        std::lock_guard<std::mutex> l(mu);
        now = outstanding;
      }
      // One poll every 2 ms at most: the poller must not be the load.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (now.empty()) {
        if (stop) break;
        continue;
      }
      if (now.size() > 200) now.resize(200);
      std::string target = "/v1/posts/counts?ids=";
      for (size_t i = 0; i < now.size(); i++) target += (i ? "," : "") + std::to_string(now[i].post);
      int status = 0;
      if (!http.Get(target, &status, &body).ok() || status != 200) {
        failed = true;
        break;
      }
      auto seen = Clock::now();
      std::vector<uint64_t> visible;
      size_t at = 0;
      for (size_t i = 0; i < now.size(); i++) {
        at = body.find("\"view\":", at);
        if (at == std::string::npos) break;
        at += 7;
        if (body[at] != '0') visible.push_back(now[i].post);
      }
      std::lock_guard<std::mutex> l(mu);
      for (auto it = outstanding.begin(); it != outstanding.end();) {
        bool v = std::find(visible.begin(), visible.end(), it->post) != visible.end();
        if (v) {
          latency_ms.Add(std::chrono::duration<double, std::milli>(seen - it->sent).count());
          it = outstanding.erase(it);
        } else if (seen - it->sent > std::chrono::seconds(10)) {
          lost++;
          it = outstanding.erase(it);
        } else {
          ++it;
        }
      }
    }
  });

  std::this_thread::sleep_for(std::chrono::seconds(1));  // the load settles
  // The load the window really had, from the input topic's end offsets: a
  // generator that fell behind its --rate would flatter the latencies. Each
  // end of the window is timed as its query returns, so both carry the same
  // round trip.
  auto input0 = TopicEnd("tally.events");
  if (!input0.ok()) return input0.status();
  auto window0 = Clock::now();
  double cpu0 = up_.CpuSeconds();
  auto t0 = Clock::now();
  auto last_print = t0;
  schemas::Event e;
  std::string json;
  while (SecondsSince(t0) < static_cast<double>(f_.seconds) && !failed) {
    e.Clear();
    e.type = schemas::EventType::kView;
    e.post_id = kProbePostBase + sent;
    e.ts = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch()).count();
    json.clear();
    schemas::AppendEventJson(e, &json);
    ingest::PublishRecord rec{ingest::DefaultKey(e), json};
    {
      std::lock_guard<std::mutex> l(mu);
      outstanding.push_back({e.post_id, Clock::now()});
    }
    if (auto st = (*publisher)->PublishAsync(rec); !st.ok()) {
      failed = true;
      break;
    }
    sent++;
    if (SecondsSince(last_print) >= 2) {
      last_print = Clock::now();
      std::lock_guard<std::mutex> l(mu);
      Progress(fmt::format("freshness: {} probes, {} seen, p99 so far {:.1f} ms", sent, latency_ms.size(),
                           latency_ms.Percentile(99)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto input1 = TopicEnd("tally.events");
  if (!input1.ok()) return input1.status();
  double achieved = static_cast<double>(*input1 - *input0 - sent) / SecondsSince(window0);
  stop = true;
  poller.join();
  load.Stop(5);
  if (failed) return Status::Internal("freshness: a probe could not be published or read");
  // What the load left in flight is applied before the next workload, so
  // the query workloads do not measure the tail of this one.
  auto wm = Watermarks();
  if (!wm.ok()) return wm.status();
  TALLY_RETURN_IF_ERROR(WaitApplied(static_cast<uint64_t>(SumField(*wm, "end_offset")), 300, "freshness tail",
                                    nullptr));
  r->value = achieved;
  r->extra["requested_rate"] = rate;
  r->p50_ms = latency_ms.Percentile(50);
  r->p99_ms = latency_ms.Percentile(99);
  r->p999_ms = latency_ms.Percentile(99.9);
  r->cpu_s = up_.CpuSeconds() - cpu0;
  r->rss_mb = Mb(up_.RssBytes());
  r->extra["probes"] = static_cast<double>(sent);
  r->extra["probes_lost"] = static_cast<double>(lost);
  // The generator paces in 2 ms steps and catches up after a stall; a
  // window more than 3 % short of the rate did not carry the load.
  r->met = lost == 0 && r->p99_ms <= 100 && achieved >= 0.97 * rate;
  if (achieved < 0.97 * rate) {
    Progress(fmt::format("freshness: the load reached {:.0f} events/s of the {:.0f} asked for",
                         achieved, rate));
  }
  return Status::Ok();
}

// ---- queries ----------------------------------------------------------------

Result<std::map<std::string, double>> Bench::Wrk(int port, const std::string& mode, uint64_t n, uint64_t first,
                                                 Process* server, double* cpu_s) {
  auto argv = Pin(
      server, {f_.wrk, "-t2", fmt::format("-c{}", f_.connections), fmt::format("-d{}s", f_.seconds),
               "--timeout", "5s", "-s", f_.wrk_script, fmt::format("http://127.0.0.1:{}", port),
               "--", mode, std::to_string(n), std::to_string(first)});
  if (!argv.ok()) return argv.status();
  double cpu0 = server->CpuSeconds();
  auto out = RunCapture(*argv, Path("wrk-" + mode + ".log"), static_cast<double>(f_.seconds) + 60);
  *cpu_s = server->CpuSeconds() - cpu0;
  Unpin(server);
  if (!out.ok()) return out.status();
  size_t at = out->rfind("{\"requests\"");
  if (at == std::string::npos) return Status::Internal("wrk printed no report; see " + Path("wrk-" + mode + ".log"));
  std::string_view line(out->data() + at, out->size() - at);
  std::map<std::string, double> m;
  for (const char* k : {"requests", "duration_us", "errors_connect", "errors_read", "errors_write", "errors_status",
                        "errors_timeout", "p50_us", "p99_us", "p999_us"}) {
    m[k] = JsonNumber(line, k);
  }
  m["rps"] = m["requests"] / (m["duration_us"] / 1e6);
  m["cpu_us"] = m["requests"] > 0 ? *cpu_s / m["requests"] * 1e6 : NAN;
  m["errors"] = m["errors_connect"] + m["errors_read"] + m["errors_write"] + m["errors_status"] + m["errors_timeout"];
  return m;
}

Result<std::map<std::string, double>> Bench::RedisBenchmark(const std::vector<std::string>& command, int pipeline,
                                                            double* cpu_s) {
  // redis-benchmark counts requests, not seconds: aim at about --seconds.
  uint64_t requests = static_cast<uint64_t>(f_.seconds) * (pipeline > 1 ? 400000 : 40000);
  std::vector<std::string> argv = {f_.redis_benchmark, "-p", std::to_string(redis_port_), "-c",
                                   std::to_string(f_.connections), "--threads", "2", "-n", std::to_string(requests),
                                   "-r", std::to_string(f_.keys), "-P", std::to_string(pipeline), "--csv"};
  argv.insert(argv.end(), command.begin(), command.end());
  auto pinned = Pin(&redis_, std::move(argv));
  if (!pinned.ok()) return pinned.status();
  double cpu0 = redis_.CpuSeconds();
  auto out =
      RunCapture(*pinned, Path("redis-benchmark.log"), static_cast<double>(f_.seconds) * 10 + 60);
  *cpu_s = redis_.CpuSeconds() - cpu0;
  Unpin(&redis_);
  if (!out.ok()) return out.status();
  // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  size_t nl = out->find('\n');
  if (nl == std::string::npos) return Status::Internal("redis-benchmark printed no result");
  std::string row = out->substr(nl + 1);
  std::vector<double> cols;
  size_t pos = row.find("\",\"");
  while (pos != std::string::npos && pos < row.size()) {
    pos += 3;
    cols.push_back(std::strtod(row.c_str() + pos, nullptr));
    pos = row.find("\",\"", pos);
  }
  if (cols.size() < 7) return Status::Internal("redis-benchmark: cannot read " + row);
  const double n = static_cast<double>(requests);
  return std::map<std::string, double>{
      {"rps", cols[0]}, {"p50_ms", cols[3]}, {"p99_ms", cols[5]}, {"requests", n}, {"cpu_us", *cpu_s / n * 1e6}};
}

// Posts 0..keys-1 as redis-benchmark names them (-r pads to 12 digits): a
// hash of 4 counters (HGETALL) and the same as one JSON string (GET).
// One post as a Redis counter farm keeps it: a hash of its 4 counters.
// Returns the counters rendered, for callers that also want them elsewhere.
std::array<std::string, 4> AddPostHash(RedisPipe* pipe, std::string_view key, const int64_t v[4]) {
  std::array<std::string, 4> s = {std::to_string(v[0]), std::to_string(v[1]), std::to_string(v[2]),
                                  std::to_string(v[3])};
  pipe->Add({"HSET", key, "like", s[0], "repost", s[1], "comment", s[2], "view", s[3]});
  return s;
}

Status Bench::LoadRedisQueryData() {
  if (redis_query_data_) return Status::Ok();
  RedisPipe pipe;
  for (int64_t i = 0; i < f_.keys; i++) {
    const int64_t v[4] = {i % 1000, i % 100, i % 10, i * 7};
    auto s = AddPostHash(&pipe, fmt::format("p:{:012}", i), v);
    pipe.Add({"SET", fmt::format("c:{:012}", i),
              fmt::format(R"({{"post_id":{},"like":{},"repost":{},"comment":{},"view":{}}})", i, s[0], s[1], s[2],
                          s[3])});
  }
  uint64_t errors = 0;
  auto secs = pipe.Send(redis_port_, &errors);
  if (!secs.ok()) return secs.status();
  if (errors) return Status::Internal("redis refused the query data");
  redis_query_data_ = true;
  return Status::Ok();
}

Result<std::vector<std::string>> Bench::Pin(Process* server, std::vector<std::string> argv) {
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (!PinsQueries()) return argv;
  TALLY_RETURN_IF_ERROR(PinProcess(server->pid(), 0, 0));
  argv.insert(argv.begin(), {"taskset", "-c", fmt::format("1-{}", cpus - 1)});
  return argv;
}

void Bench::Unpin(Process* server) {
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (!PinsQueries()) return;
  (void)PinProcess(server->pid(), 0, cpus - 1);
}

void Bench::WaitQuiet(Process* server, WorkloadResult* r) {
  auto t0 = Clock::now();
  double busy = NAN;
  while (SecondsSince(t0) < 60) {
    const double c0 = server->CpuSeconds();
    const auto s0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    busy = (server->CpuSeconds() - c0) / SecondsSince(s0);
    if (busy < 0.1) break;
  }
  r->extra["settle_s"] = SecondsSince(t0);
  r->extra["settled_cpu_pct"] = busy * 100;
}

Result<std::map<std::string, double>> Bench::QueryWrk(const std::string& mode, uint64_t n,
                                                      uint64_t first, double scale,
                                                      WorkloadResult* r, double* cpu_s) {
  WaitQuiet(&up_, r);
  const int64_t seconds = f_.seconds;
  f_.seconds = std::max<int64_t>(1, seconds / 2);
  Progress(
      fmt::format("{}: a cold pass of wrk -c{} for {} s", r->workload, f_.connections, f_.seconds));
  double cold_cpu = 0;
  auto cold = Wrk(http_port_, mode, n, first, &up_, &cold_cpu);
  f_.seconds = seconds;
  if (!cold.ok()) return cold.status();
  r->extra["cold_cpu_us"] = cold->at("cpu_us") / scale;
  r->extra["cold_p99_ms"] = cold->at("p99_us") / 1000;
  r->extra["cold_rps"] = cold->at("rps");
  Progress(fmt::format("{}: wrk -c{} for {} s", r->workload, f_.connections, f_.seconds));
  return Wrk(http_port_, mode, n, first, &up_, cpu_s);
}

// The tally side of a query workload from wrk's report; `scale` answers
// per request (20 posts a batch request).
void FillWrk(WorkloadResult* r, const std::map<std::string, double>& m, double scale) {
  r->value = m.at("rps") * scale;
  r->cpu_us = m.at("cpu_us") / scale;
  r->p50_ms = m.at("p50_us") / 1000;
  r->p99_ms = m.at("p99_us") / 1000;
  r->p999_ms = m.at("p999_us") / 1000;
  r->extra["errors"] = m.at("errors");
}

// The baseline of a query workload: Redis's throughput, p99 and CPU per
// command beside tally's, and the ratio of the CPUs.
void FillBaseline(WorkloadResult* r, const std::map<std::string, double>& redis) {
  r->baseline_value = redis.at("rps");
  r->baseline_p99_ms = redis.at("p99_ms");
  r->baseline_cpu_us = redis.at("cpu_us");
  r->ratio = r->cpu_us / r->baseline_cpu_us;
  r->extra["redis_cpu_s"] = redis.at("cpu_us") * redis.at("requests") / 1e6;
}

Status Bench::QueryCounts(WorkloadResult* r) {
  r->workload = "query_counts";
  r->unit = "requests/s";
  r->baseline = "redis-benchmark HGETALL";
  r->target = "cpu/req <= 1.0x redis, p99 <= 1.2x";
  double cpu = 0;
  auto m = QueryWrk("post", static_cast<uint64_t>(f_.keys), 1, 1, r, &cpu);
  if (!m.ok()) return m.status();
  FillWrk(r, *m, 1);
  r->cpu_s = cpu;
  r->rss_mb = Mb(up_.RssBytes());
  TALLY_RETURN_IF_ERROR(LoadRedisQueryData());
  Progress("query_counts: redis-benchmark HGETALL and GET");
  double rcpu = 0;
  auto hgetall = RedisBenchmark({"HGETALL", "p:__rand_int__"}, 1, &rcpu);
  if (!hgetall.ok()) return hgetall.status();
  auto get = RedisBenchmark({"GET", "c:__rand_int__"}, 1, &rcpu);
  if (!get.ok()) return get.status();
  redis_get_ = *get;
  FillBaseline(r, *hgetall);
  r->p99_ratio = r->p99_ms / r->baseline_p99_ms;
  r->extra["redis_get_rps"] = get->at("rps");
  r->extra["redis_get_p99_ms"] = get->at("p99_ms");
  r->extra["redis_get_cpu_us"] = get->at("cpu_us");
  r->met = r->ratio <= 1.0 && r->p99_ratio <= 1.2 && m->at("errors") == 0;
  return Status::Ok();
}

Status Bench::QueryBatch(WorkloadResult* r) {
  r->workload = "query_batch";
  r->unit = "posts/s";
  r->baseline = "redis HGETALL pipelined x20";
  r->target = "cpu/post <= 1.0x redis";
  double cpu = 0;
  auto m = QueryWrk("batch", static_cast<uint64_t>(f_.keys), 1, 20, r, &cpu);
  if (!m.ok()) return m.status();
  FillWrk(r, *m, 20);
  r->cpu_s = cpu;
  r->rss_mb = Mb(up_.RssBytes());
  TALLY_RETURN_IF_ERROR(LoadRedisQueryData());
  Progress("query_batch: redis-benchmark HGETALL -P 20");
  double rcpu = 0;
  auto hg = RedisBenchmark({"HGETALL", "p:__rand_int__"}, 20, &rcpu);
  if (!hg.ok()) return hg.status();
  FillBaseline(r, *hg);
  r->met = r->ratio <= 1.0 && m->at("errors") == 0;
  return Status::Ok();
}

Status Bench::QueryUnread(WorkloadResult* r) {
  r->workload = "query_unread";
  r->unit = "requests/s";
  r->baseline = "redis-benchmark GET";
  r->target = "cpu/req <= 2.0x redis";
  const uint64_t users = static_cast<uint64_t>(f_.unread_users);
  Progress(fmt::format("query_unread: {} users follow {} accounts each", users, kFollowees));
  ingest::PublisherOptions po;
  po.kafka.brokers = brokers_;
  auto publisher = ingest::EventPublisher::Create(po);
  if (!publisher.ok()) return publisher.status();
  auto before = Watermarks();
  if (!before.ok()) return before.status();
  double applied0 = SumField(*before, "end_offset");
  schemas::Event e;
  std::string json;
  uint64_t rng = 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(f_.seed);
  for (uint64_t u = 0; u < users; u++) {
    std::vector<uint64_t> chosen;
    while (chosen.size() < kFollowees) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      uint64_t t = 1 + rng % static_cast<uint64_t>(f_.users);
      if (std::find(chosen.begin(), chosen.end(), t) == chosen.end()) chosen.push_back(t);
    }
    for (uint64_t t : chosen) {
      e.Clear();
      e.type = schemas::EventType::kFollow;
      e.user_id = kUnreadUserBase + u;
      e.target_id = t;
      e.ts = 1700000000000;
      json.clear();
      schemas::AppendEventJson(e, &json);
      if (auto st = (*publisher)->PublishAsync({ingest::DefaultKey(e), json}); !st.ok()) return st;
    }
  }
  TALLY_RETURN_IF_ERROR((*publisher)->Flush(60000));
  TALLY_RETURN_IF_ERROR(WaitApplied(static_cast<uint64_t>(applied0) + users * kFollowees, 600, "query_unread setup",
                                    nullptr));
  {
    HttpClient http(http_port_);
    int status = 0;
    std::string body;
    TALLY_RETURN_IF_ERROR(http.Get(fmt::format("/v1/users/{}/counts", kUnreadUserBase), &status, &body));
    if (JsonNumber(body, "following") != kFollowees) {
      return Status::Internal("query_unread setup: the first user follows " + body);
    }
  }
  double cpu = 0;
  auto m = QueryWrk("unread", users, kUnreadUserBase, 1, r, &cpu);
  if (!m.ok()) return m.status();
  FillWrk(r, *m, 1);
  r->cpu_s = cpu;
  r->rss_mb = Mb(up_.RssBytes());
  if (redis_get_.empty()) {
    TALLY_RETURN_IF_ERROR(LoadRedisQueryData());
    double rcpu = 0;
    auto get = RedisBenchmark({"GET", "c:__rand_int__"}, 1, &rcpu);
    if (!get.ok()) return get.status();
    redis_get_ = *get;
  }
  FillBaseline(r, redis_get_);
  r->met = r->ratio <= 2.0 && m->at("errors") == 0;
  return Status::Ok();
}

// ---- storage ----------------------------------------------------------------

Status Bench::Storage(WorkloadResult* r) {
  r->workload = "storage";
  r->unit = "B/post disk";
  r->baseline = "redis used_memory B/post";
  r->target = "<= 8 B/post, <= 1/8 redis, RSS <= cache+150MB";
  const uint64_t n = static_cast<uint64_t>(f_.storage_posts);
  const std::string dir = Path("storage");
  std::filesystem::remove_all(dir);
  auto counters = [](uint64_t id, int64_t out[4]) {
    uint64_t h = id * 0x9E3779B97F4A7C15ULL;
    out[0] = 1 + static_cast<int64_t>((h >> 8) % 1000);    // like
    out[1] = 1 + static_cast<int64_t>((h >> 20) % 100);    // repost
    out[2] = 1 + static_cast<int64_t>((h >> 32) % 50);     // comment
    out[3] = 1 + static_cast<int64_t>((h >> 40) % 20000);  // view
  };
  {
    store::StoreOptions so;
    so.dir = dir;
    so.partitions = static_cast<uint32_t>(f_.partitions);
    so.block_cache_bytes = static_cast<size_t>(f_.block_cache_mb) << 20;
    auto st = store::StateStore::Open(so);
    if (!st.ok()) return st.status();
    std::vector<std::unique_ptr<store::PartitionBatch>> batches(so.partitions);
    for (auto& b : batches) b = std::make_unique<store::PartitionBatch>();
    auto t0 = Clock::now();
    auto last = t0;
    for (uint64_t id = 1; id <= n; id++) {
      int64_t v[4];
      counters(id, v);
      store::CounterOp ops[4] = {store::CounterOp::Add(v[0]), store::CounterOp::Add(v[1]),
                                 store::CounterOp::Add(v[2]), store::CounterOp::Add(v[3])};
      uint32_t p = schemas::PartitionOf(id, so.partitions);
      batches[p]->MergePostCounters(id, ops);
      if (batches[p]->Count() >= 10000 || id == n) {
        TALLY_RETURN_IF_ERROR((*st)->partition(p)->Commit(batches[p].get()));
        batches[p]->Clear();
      }
      if (SecondsSince(last) >= 2) {
        last = Clock::now();
        Progress(fmt::format("storage: {}/{} posts written", id, n));
      }
    }
    for (uint32_t p = 0; p < so.partitions; p++) {
      if (batches[p]->Count() == 0) continue;
      TALLY_RETURN_IF_ERROR((*st)->partition(p)->Commit(batches[p].get()));
    }
    r->extra["write_s"] = SecondsSince(t0);
    Progress("storage: compacting");
    auto t1 = Clock::now();
    TALLY_RETURN_IF_ERROR((*st)->CompactAll());
    r->extra["compact_s"] = SecondsSince(t1);
  }
  uint64_t disk = DirBytes(dir);
  uint64_t sst = DirBytes(dir, ".sst");
  r->value = static_cast<double>(disk) / static_cast<double>(n);
  r->disk_mb = Mb(disk);
  r->extra["sst_bytes_per_post"] = static_cast<double>(sst) / static_cast<double>(n);

  Progress(fmt::format("storage: the same {} posts into redis as hashes", n));
  TALLY_RETURN_IF_ERROR(RedisCommand(redis_port_, {"FLUSHALL", "ASYNC"}).status());
  redis_query_data_ = false;
  auto used = [&]() -> Result<double> {
    auto info = RedisCommand(redis_port_, {"INFO", "memory"});
    if (!info.ok()) return info.status();
    size_t at = info->find("used_memory:");
    if (at == std::string::npos) return Status::Internal("INFO memory without used_memory");
    return std::strtod(info->c_str() + at + 12, nullptr);
  };
  auto used0 = used();
  if (!used0.ok()) return used0.status();
  constexpr uint64_t kChunk = 1000000;
  for (uint64_t lo = 1; lo <= n; lo += kChunk) {
    RedisPipe pipe;
    for (uint64_t id = lo; id < lo + kChunk && id <= n; id++) {
      int64_t v[4];
      counters(id, v);
      AddPostHash(&pipe, fmt::format("p:{}", id), v);
    }
    uint64_t errors = 0;
    auto secs = pipe.Send(redis_port_, &errors);
    if (!secs.ok()) return secs.status();
    if (errors) return Status::Internal("redis refused the storage data");
    Progress(fmt::format("storage: {}/{} posts in redis", std::min(n, lo + kChunk - 1), n));
  }
  auto used1 = used();
  if (!used1.ok()) return used1.status();
  r->baseline_value = (*used1 - *used0) / static_cast<double>(n);
  r->ratio = r->value / r->baseline_value;
  TALLY_RETURN_IF_ERROR(RedisCommand(redis_port_, {"FLUSHALL", "ASYNC"}).status());

  // RSS of the server over that state, under load on random posts.
  Progress("storage: tally serve over it, under wrk");
  Process serve;
  int port = FreePort();
  TALLY_RETURN_IF_ERROR(serve.Start(
      TallyArgs({"serve", "--state-dir", dir, "--http", fmt::format("127.0.0.1:{}", port),
                 "--block-cache-mb", std::to_string(f_.block_cache_mb), "--log-level", "warn",
                 PinsQueries() ? "--http-threads=1" : "--http-threads=2"}),
      Path("serve-storage.log")));
  if (!WaitForPort(port, 30)) return Status::Unavailable("tally serve did not listen; see " + Path("serve-storage.log"));
  double cpu = 0;
  auto m = Wrk(port, "post", n, 1, &serve, &cpu);
  if (!m.ok()) return m.status();
  r->rss_mb = Mb(serve.RssBytes());
  r->extra["serve_peak_rss_mb"] = Mb(serve.PeakRssBytes());
  r->extra["serve_rps"] = m->at("rps");
  r->extra["rss_budget_mb"] = static_cast<double>(f_.block_cache_mb + 150);
  serve.Stop();
  r->met = r->value <= 8 && r->ratio <= 0.125 &&
           r->extra["serve_peak_rss_mb"] <= r->extra["rss_budget_mb"];
  return Status::Ok();
}

// ---- driver -----------------------------------------------------------------

Status Bench::RunOnce(int run, std::vector<WorkloadResult>* results) {
  dir_ = fmt::format("{}/run{}", f_.work_dir, run);
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  if (needs_redis()) TALLY_RETURN_IF_ERROR(StartRedis());
  ingest_rate_ = NAN;
  redis_get_.clear();
  redis_query_data_ = false;

  bool needs_pipeline = false;
  for (const char* w : {"ingest", "replay", "freshness", "query_counts", "query_batch", "query_unread"}) {
    needs_pipeline |= Selected(w);
  }
  auto report = [&](WorkloadResult r) {
    std::printf("%s\n", ToJson(r, std::to_string(run)).c_str());
    std::fflush(stdout);
    results->push_back(std::move(r));
  };
  if (needs_pipeline) {
    TALLY_RETURN_IF_ERROR(StartBroker());
    WorkloadResult r;
    TALLY_RETURN_IF_ERROR(Ingest(&r));
    if (Selected("ingest")) report(r);
    using Fn = Status (Bench::*)(WorkloadResult*);
    std::pair<const char*, Fn> steps[] = {{"replay", &Bench::Replay},
                                          {"freshness", &Bench::Freshness},
                                          {"query_counts", &Bench::QueryCounts},
                                          {"query_batch", &Bench::QueryBatch},
                                          {"query_unread", &Bench::QueryUnread}};
    for (auto [name, fn] : steps) {
      if (!Selected(name)) continue;
      WorkloadResult s;
      TALLY_RETURN_IF_ERROR((this->*fn)(&s));
      report(s);
    }
    up_.Stop();
    watermark_client_.reset();
    broker_.Stop();
  }
  if (Selected("storage")) {
    WorkloadResult r;
    TALLY_RETURN_IF_ERROR(Storage(&r));
    report(r);
  }
  if (needs_redis()) redis_.Stop();
  if (Selected("cluster_failover") || Selected("cluster_restore") || Selected("cluster_ingest") ||
      Selected("cluster_disk")) {
    ClusterBenchOptions co;
    co.tally = f_.tally;
    co.dir = Path("cluster");
    co.partitions = static_cast<int>(f_.partitions);
    co.failover_partitions = static_cast<int>(f_.failover_partitions);
    co.failover_rate = f_.failover_rate;
    co.repeats = static_cast<int>(f_.cluster_repeats);
    co.restore_events = f_.restore_events;
    co.ingest_events = f_.cluster_events;
    co.ingest_rate = f_.cluster_rate;
    co.users = f_.users;
    co.posts = f_.keys;
    co.seed = f_.seed;
    co.block_cache_mb = f_.block_cache_mb;
    co.up_args = f_.up_args;
    ClusterWorkloads cluster(co);
    using Fn = Status (ClusterWorkloads::*)(std::vector<WorkloadResult>*);
    std::pair<const char*, Fn> steps[] = {{"cluster_failover", &ClusterWorkloads::Failover},
                                          {"cluster_restore", &ClusterWorkloads::Restore},
                                          {"cluster_ingest", &ClusterWorkloads::Ingest},
                                          {"cluster_disk", &ClusterWorkloads::Disk}};
    for (auto [name, fn] : steps) {
      if (!Selected(name)) continue;
      std::vector<WorkloadResult> rows;
      TALLY_RETURN_IF_ERROR((cluster.*fn)(&rows));
      for (auto& r : rows) report(std::move(r));
    }
  }
  if (!f_.keep) std::filesystem::remove_all(dir_);
  return Status::Ok();
}

double Median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The per-workload medians of `all` (one WorkloadResult per workload and run).
std::vector<WorkloadResult> Medians(const std::vector<WorkloadResult>& all, int runs) {
  std::vector<WorkloadResult> out;
  std::vector<std::string> order;
  for (const auto& r : all) {
    if (std::find(order.begin(), order.end(), r.workload) == order.end()) order.push_back(r.workload);
  }
  for (const auto& w : order) {
    std::vector<const WorkloadResult*> rs;
    for (const auto& r : all) if (r.workload == w) rs.push_back(&r);
    WorkloadResult m = *rs[0];
    auto med = [&](auto field) {
      std::vector<double> v;
      for (auto* r : rs) v.push_back(field(*r));
      return Median(v);
    };
    m.value = med([](const WorkloadResult& r) { return r.value; });
    m.p50_ms = med([](const WorkloadResult& r) { return r.p50_ms; });
    m.p99_ms = med([](const WorkloadResult& r) { return r.p99_ms; });
    m.p999_ms = med([](const WorkloadResult& r) { return r.p999_ms; });
    m.cpu_s = med([](const WorkloadResult& r) { return r.cpu_s; });
    m.cpu_us = med([](const WorkloadResult& r) { return r.cpu_us; });
    m.baseline_cpu_us = med([](const WorkloadResult& r) { return r.baseline_cpu_us; });
    m.baseline_p99_ms = med([](const WorkloadResult& r) { return r.baseline_p99_ms; });
    m.p99_ratio = med([](const WorkloadResult& r) { return r.p99_ratio; });
    m.rss_mb = med([](const WorkloadResult& r) { return r.rss_mb; });
    m.disk_mb = med([](const WorkloadResult& r) { return r.disk_mb; });
    m.baseline_value = med([](const WorkloadResult& r) { return r.baseline_value; });
    m.ratio = med([](const WorkloadResult& r) { return r.ratio; });
    for (auto& [k, v] : m.extra) {
      std::string key = k;
      v = med([&](const WorkloadResult& r) { return r.extra.count(key) ? r.extra.at(key) : NAN; });
    }
    int met = 0;
    for (auto* r : rs) met += r->met.value_or(false);
    if (rs[0]->met.has_value()) m.met = met * 2 > static_cast<int>(rs.size());
    m.extra["runs"] = static_cast<double>(rs.size());
    (void)runs;
    out.push_back(m);
  }
  return out;
}

// One row per workload. For the query workloads "cpu us" and "base us" are
// CPU microseconds per request (per post for query_batch) of tally and of
// redis-server, "ratio" their ratio and "p99 x" tally's p99 over Redis's;
// elsewhere "ratio" compares the headline value with the baseline's.
void PrintTable(const std::vector<WorkloadResult>& rs, const std::string& title) {
  std::printf("\n%s\n", title.c_str());
  const char* fmt_row = "%-20s %12s %-12s %8s %8s %8s %7s %7s %7s %8s %12s %8s %7s %7s %6s %-5s %s\n";
  std::printf(fmt_row, "workload", "value", "unit", "p50 ms", "p99 ms", "p99.9ms", "cpu s", "cpu us",
              "rss MB", "disk MB", "baseline", "base p99", "base us", "ratio", "p99 x", "met", "target");
  for (const auto& r : rs) {
    std::printf(fmt_row, r.workload.c_str(), Num(r.value).c_str(), r.unit.c_str(),
                Num(r.p50_ms, 2).c_str(), Num(r.p99_ms, 2).c_str(), Num(r.p999_ms, 2).c_str(),
                Num(r.cpu_s).c_str(), Num(r.cpu_us, 2).c_str(), Num(r.rss_mb, 0).c_str(),
                Num(r.disk_mb).c_str(), Num(r.baseline_value).c_str(),
                Num(r.baseline_p99_ms, 2).c_str(), Num(r.baseline_cpu_us, 2).c_str(),
                Num(r.ratio, 3).c_str(), Num(r.p99_ratio, 2).c_str(),
                r.met.has_value() ? (*r.met ? "yes" : "NO") : "-", r.target.c_str());
  }
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  Flags f;
  std::string self = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  f.tally = self + "/tally";
  f.wrk_script = std::string(TALLY_BENCH_SOURCE_DIR) + "/wrk_report.lua";
  f.work_dir = (std::filesystem::temp_directory_path() / fmt::format("tally-bench-{}", ::getpid())).string();
  base::FlagSet flags(
      "tally-bench",
      "Benchmarks tally beside Redis in one run. Workloads: ingest, replay, freshness, "
      "query_counts, query_batch, query_unread, storage (or 'standard' for all); "
      "cluster_failover, cluster_restore, cluster_ingest, cluster_disk (by name only).");
  flags.String("benchmarks", &f.benchmarks, "comma-separated workloads, or 'standard'");
  flags.String("tally", &f.tally, "the tally binary");
  flags.String("work-dir", &f.work_dir, "scratch directory (state, logs); removed afterwards unless --keep");
  flags.String("redis-server", &f.redis_server, "redis-server binary");
  flags.String("redis-benchmark", &f.redis_benchmark, "redis-benchmark binary");
  flags.String("wrk", &f.wrk, "wrk binary");
  flags.String("wrk-script", &f.wrk_script, "the wrk Lua script (wrk_report.lua)");
  flags.Int("events", &f.events, "ingest: synthetic events in the backlog");
  flags.Int("keys", &f.keys, "posts that exist before the backlog; queries pick ids in 1..keys");
  flags.Int("users", &f.users, "users of the synthetic workload");
  flags.Int("seconds", &f.seconds, "length of each query and freshness workload");
  flags.Int("connections", &f.connections, "HTTP / Redis connections of the query workloads");
  flags.Int("partitions", &f.partitions, "partitions of tally's topics and state");
  flags.Int("unread-users", &f.unread_users, "query_unread: users, each following 200 accounts");
  flags.Int("storage-posts", &f.storage_posts, "storage: posts with 4 counters");
  flags.Int("block-cache-mb", &f.block_cache_mb, "RocksDB block cache of tally up/serve/replay, MiB");
  flags.Int("runs", &f.runs, "run everything this many times and report the medians");
  flags.Int("seed", &f.seed, "seed of the synthetic workload");
  flags.Int("freshness-rate", &f.freshness_rate,
            "freshness: events/s of the steady load (0: half the measured ingest rate)");
  flags.Int("load-nice", &f.load_nice,
            "freshness: nice value of the load generator (0: tally's priority; the default 10 "
            "lets tally's threads run first, as with producers on other machines)");
  flags.Bool("keep", &f.keep, "keep the work directory");
  flags.Bool(
      "pin", &f.pin,
      "query workloads and storage's reads: the server (tally up, tally serve, redis-server; every "
      "thread) on CPU 0 and the load generator (wrk, redis-benchmark) on the other CPUs for each "
      "run, "
      "as if the clients ran on other machines (--pin=false: both anywhere)");
  flags.Repeated("up-arg", &f.up_args, "an extra flag for tally up (e.g. --up-arg=--flush-ms=20)");
  flags.Int("failover-partitions", &f.failover_partitions,
            "cluster_failover: partitions of tally's topics");
  flags.Int("failover-rate", &f.failover_rate, "cluster_failover: events/s published throughout");
  flags.Int("cluster-repeats", &f.cluster_repeats,
            "cluster_failover: kills per --standbys value; cluster_restore: restores");
  flags.Int("restore-events", &f.restore_events,
            "cluster_restore: events whose deltas fill tally.deltas");
  flags.Int("cluster-events", &f.cluster_events, "cluster_ingest, cluster_disk: events published");
  flags.Int("cluster-rate", &f.cluster_rate,
            "cluster_ingest, cluster_disk: events/s they are published at (0: at once)");
  bool help = false;
  if (auto st = flags.Parse(argc - 1, argv + 1, &help); !st.ok() || help) {
    std::fprintf(stderr, "%s%s", st.ok() ? "" : (st.ToString() + "\n").c_str(), flags.Usage().c_str());
    return help ? 0 : 2;
  }
  std::string list = f.benchmarks == "standard" ? kStandard : f.benchmarks;
  Bench bench(f);
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string w = list.substr(pos, comma - pos);
    if (w.empty() || (std::string(kStandard).find(w) == std::string::npos &&
                      std::string(kCluster).find(w) == std::string::npos)) {
      std::fprintf(stderr, "tally-bench: unknown workload '%s'\n", w.c_str());
      return 2;
    }
    bench.selected_.insert(w);
    pos = comma + 1;
  }
  base::SetLogLevel(base::LogLevel::kWarn);
  std::fprintf(stderr, "tally-bench: %s; %lld run(s); %u cores; work dir %s\n", list.c_str(),
               static_cast<long long>(f.runs), std::thread::hardware_concurrency(), f.work_dir.c_str());
  std::vector<WorkloadResult> all;
  for (int run = 1; run <= f.runs; run++) {
    std::fprintf(stderr, "tally-bench: run %d of %lld\n", run, static_cast<long long>(f.runs));
    std::vector<WorkloadResult> rs;
    if (auto st = bench.RunOnce(run, &rs); !st.ok()) {
      std::fprintf(stderr, "tally-bench: %s\n", st.ToString().c_str());
      f.keep = true;
      std::fprintf(stderr, "tally-bench: logs kept in %s\n", bench.dir_.c_str());
      return 1;
    }
    PrintTable(rs, fmt::format("run {}", run));
    all.insert(all.end(), rs.begin(), rs.end());
  }
  if (f.runs > 1) {
    auto med = Medians(all, static_cast<int>(f.runs));
    for (const auto& m : med) std::printf("%s\n", ToJson(m, "median").c_str());
    PrintTable(med, fmt::format("medians of {} runs", f.runs));
  }
  if (!f.keep) std::filesystem::remove_all(f.work_dir);
  return 0;
}

}  // namespace
}  // namespace tally::bench

int main(int argc, char** argv) { return tally::bench::Main(argc, argv); }
