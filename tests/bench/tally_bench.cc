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
//                 ids 1..N (times --storage-id-stride), written through
//                 tally's store and compacted; disk bytes per
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
// Broker workloads (not in "standard"; by name; broker_workloads.h):
// broker_produce, broker_fetch, broker_idle, broker_latency, broker_steady,
// tally's own broker (this binary's `--broker-child` mode) beside the mock.
//
// Each workload prints one JSON line ({"workload":...}) when it ends; a table
// follows at the end. With --runs N everything runs N times and the table
// holds the medians. Exit status: 0 when every workload ran (targets missed
// are reported, not failures), 1 when one could not run, 2 on bad flags.
//
//   build/tally-bench                                  # the standard set
//   build/tally-bench --benchmarks=query_counts --seconds 20
//
// This file holds the flags, the driver and the table; the workloads are
// in the files bench.h names.
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "base/flags.h"
#include "base/kafka.h"
#include "base/log.h"
#include "bench.h"
#include "bench_util.h"
#include "broker_workloads.h"
#include "cluster_workloads.h"

namespace tally::bench {

using base::Result;
using base::Status;

namespace {

constexpr const char* kStandard = "ingest,replay,freshness,query_counts,query_batch,query_unread,storage";
constexpr const char* kCluster = "cluster_failover,cluster_restore,cluster_ingest,cluster_disk";

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

}  // namespace

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
  TALLY_RETURN_IF_ERROR(
      broker_.Start(TallyArgs({"broker", "--port", std::to_string(broker_port_), "--partitions",
                               std::to_string(f_.partitions), "--log-level", "warn", "--log-dir",
                               Path("broker-data")}),
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

Result<std::vector<base::PartitionOffsets>> Bench::TopicWatermarks(const std::string& topic) {
  return bench::TopicWatermarks(brokers_, topic, &watermark_client_);
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
  BrokerBenchOptions bo = f_.broker;  // runs the broker workloads selected, if any
  bo.tally = f_.tally;
  bo.dir = Path("broker");
  bo.partitions = static_cast<int>(f_.partitions);
  TALLY_RETURN_IF_ERROR(RunBrokerWorkloads(bo, selected_, report));
  if (!f_.keep) std::filesystem::remove_all(dir_);
  return Status::Ok();
}

namespace {

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

}  // namespace

int Main(int argc, char** argv) {
  // tally's broker for the broker workloads (broker_workloads.h).
  if (argc > 1 && std::string_view(argv[1]) == "--broker-child") {
    return RunBrokerChild(argc - 2, argv + 2);
  }
  Flags f;
  std::string self = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  f.tally = self + "/tally";
  f.broker.self = std::filesystem::canonical("/proc/self/exe").string();
  f.wrk_script = std::string(TALLY_BENCH_SOURCE_DIR) + "/wrk_report.lua";
  f.work_dir = (std::filesystem::temp_directory_path() / fmt::format("tally-bench-{}", ::getpid())).string();
  base::FlagSet flags(
      "tally-bench",
      "Benchmarks tally beside Redis in one run. Workloads: ingest, replay, freshness, "
      "query_counts, query_batch, query_unread, storage (or 'standard' for all); "
      "cluster_failover, cluster_restore, cluster_ingest, cluster_disk, broker_produce, "
      "broker_fetch, broker_idle, broker_latency, broker_steady (by name only).");
  flags.String("benchmarks", &f.benchmarks,
               "comma-separated workloads; 'standard' (also first in a list) for the standard set");
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
  flags.Int("storage-id-stride", &f.storage_id_stride,
            "storage: post ids are 1..N times this (1: ids in sequence, many posts a page; "
            "4194304: a post a millisecond of snowflake-style ids, a page each)");
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
  AddBrokerFlags(&flags, &f.broker);
  bool help = false;
  if (auto st = flags.Parse(argc - 1, argv + 1, &help); !st.ok() || help) {
    std::fprintf(stderr, "%s%s", st.ok() ? "" : (st.ToString() + "\n").c_str(), flags.Usage().c_str());
    return help ? 0 : 2;
  }
  // "standard" first in a list stands for the standard set ("standard,broker_produce").
  std::string list = f.benchmarks;
  if (list == "standard" || list.starts_with("standard,")) {
    list = kStandard + list.substr(std::string_view("standard").size());
  }
  Bench bench(f);
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string w = list.substr(pos, comma - pos);
    if (w.empty() || (std::string(kStandard).find(w) == std::string::npos &&
                      std::string(kCluster).find(w) == std::string::npos &&
                      std::string(kBrokerWorkloads).find(w) == std::string::npos)) {
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

}  // namespace tally::bench

int main(int argc, char** argv) { return tally::bench::Main(argc, argv); }
