// tally-bench: the query workloads, query_counts, query_batch and query_unread (bench.h), and the
// wrk and redis-benchmark runs they share with storage.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "bench.h"
#include "ingest/event_publisher.h"
#include "schemas/event.h"

namespace tally::bench {

using base::Result;
using base::Status;

constexpr uint64_t kUnreadUserBase = 1000000000000;  // bench users, apart from the generator's
constexpr int kFollowees = 200;

// ---- queries ----------------------------------------------------------------

Result<std::map<std::string, double>> Bench::Wrk(int port, const std::string& mode, uint64_t n,
                                                 uint64_t first, Process* server, double* cpu_s) {
  auto argv =
      Pin(server, {f_.wrk, fmt::format("-t{}", LoadThreads()), fmt::format("-c{}", f_.connections),
                   fmt::format("-d{}s", f_.seconds), "--timeout", "5s", "-s", f_.wrk_script,
                   fmt::format("http://127.0.0.1:{}", port), "--", mode, std::to_string(n),
                   std::to_string(first)});
  if (!argv.ok()) return argv.status();
  double cpu0 = server->CpuSeconds();
  auto out = RunCapture(*argv, Path("wrk-" + mode + ".log"), static_cast<double>(f_.seconds) + 60);
  *cpu_s = server->CpuSeconds() - cpu0;
  Unpin(server);
  if (!out.ok()) return out.status();
  size_t at = out->rfind("{\"requests\"");
  if (at == std::string::npos)
    return Status::Internal("wrk printed no report; see " + Path("wrk-" + mode + ".log"));
  std::string_view line(out->data() + at, out->size() - at);
  std::map<std::string, double> m;
  for (const char* k : {"requests", "duration_us", "errors_connect", "errors_read", "errors_write",
                        "errors_status", "errors_timeout", "p50_us", "p99_us", "p999_us"}) {
    m[k] = JsonNumber(line, k);
  }
  m["rps"] = m["requests"] / (m["duration_us"] / 1e6);
  m["cpu_us"] = m["requests"] > 0 ? *cpu_s / m["requests"] * 1e6 : NAN;
  m["errors"] = m["errors_connect"] + m["errors_read"] + m["errors_write"] + m["errors_status"] +
                m["errors_timeout"];
  return m;
}

Result<std::map<std::string, double>> Bench::RedisBenchmark(const std::vector<std::string>& command,
                                                            int pipeline, double* cpu_s) {
  // redis-benchmark counts requests, not seconds: aim at about --seconds.
  uint64_t requests = static_cast<uint64_t>(f_.seconds) * (pipeline > 1 ? 400000 : 40000);
  std::vector<std::string> argv = {f_.redis_benchmark,
                                   "-p",
                                   std::to_string(redis_port_),
                                   "-c",
                                   std::to_string(f_.connections),
                                   "--threads",
                                   std::to_string(LoadThreads()),
                                   "-n",
                                   std::to_string(requests),
                                   "-r",
                                   std::to_string(f_.keys),
                                   "-P",
                                   std::to_string(pipeline),
                                   "--csv"};
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
  return std::map<std::string, double>{{"rps", cols[0]},
                                       {"p50_ms", cols[3]},
                                       {"p99_ms", cols[5]},
                                       {"requests", n},
                                       {"cpu_us", *cpu_s / n * 1e6}};
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
              fmt::format(R"({{"post_id":{},"like":{},"repost":{},"comment":{},"view":{}}})", i,
                          s[0], s[1], s[2], s[3])});
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

int Bench::LoadThreads() const {
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  return PinsQueries() ? std::max(1, std::min(2, cpus - 1)) : 2;
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
  TALLY_RETURN_IF_ERROR(WaitApplied(static_cast<uint64_t>(applied0) + users * kFollowees, 600,
                                    "query_unread setup", nullptr));
  {
    HttpClient http(http_port_);
    int status = 0;
    std::string body;
    TALLY_RETURN_IF_ERROR(
        http.Get(fmt::format("/v1/users/{}/counts", kUnreadUserBase), &status, &body));
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

}  // namespace tally::bench
