// tally-bench: the ingest, replay and freshness workloads (bench.h).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "aggregator/event_router.h"
#include "base/log.h"
#include "bench.h"
#include "ingest/event_publisher.h"
#include "ingest/workload_generator.h"
#include "schemas/delta.h"
#include "schemas/event.h"

namespace tally::bench {

using base::Result;
using base::Status;

constexpr uint64_t kProbePostBase = 1ULL << 40;  // freshness probes: posts never used before

// ---- ingest -----------------------------------------------------------------

// The Redis commands a counter farm would send for `event`'s effects, as
// tally's router decides them.
void AddRedisCommands(const schemas::Event& event, aggregator::EventRouter* router,
                      std::vector<schemas::DeltaBatchBuilder>* builders,
                      schemas::DeltaBatchReader* reader, RedisPipe* pipe) {
  static const char* kPostField[] = {"like", "repost", "comment", "view"};
  static const char* kUserField[] = {"posts", "followers", "following"};
  static const char* kUnread[] = {"mention",  "comment", "like",    "repost", "dm",
                                  "follower", "notice",  "red_dot", "feed"};
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
        if (d.op == schemas::DeltaOp::kUnreadAdd)
          pipe->Add({"HINCRBY", key, kUnread[d.field % 9], amount});
        else
          pipe->Add({"HSET", key, kUnread[d.field % 9], "0"});
        break;
      case schemas::DeltaOp::kLikeSet:
      case schemas::DeltaOp::kLikeUnset: {
        // The edge and the count; a plain farm does not make them exact.
        bool set = d.op == schemas::DeltaOp::kLikeSet;
        std::snprintf(key, sizeof(key), "l:%llu", static_cast<unsigned long long>(d.entity));
        if (set)
          pipe->Add({"HSET", key, member, "1"});
        else
          pipe->Add({"HDEL", key, member});
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
        if (set)
          pipe->Add({"HSET", key, member, "1"});
        else
          pipe->Add({"HDEL", key, member});
        std::snprintf(key, sizeof(key), "u:%llu", static_cast<unsigned long long>(d.entity));
        pipe->Add({"HINCRBY", key, "following", one});
        std::snprintf(target, sizeof(target), "u:%llu", static_cast<unsigned long long>(d.member));
        pipe->Add({"HINCRBY", target, "followers", one});
        if (set) {
          std::snprintf(target, sizeof(target), "n:%llu",
                        static_cast<unsigned long long>(d.member));
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
  auto produced =
      RunCapture(TallyArgs({"produce", "--brokers", brokers_, "--gen", std::to_string(n), "--seed",
                            std::to_string(f_.seed), "--users", std::to_string(f_.users), "--posts",
                            std::to_string(f_.keys), "--log-level", "warn"}),
                 Path("produce.log"), 600);
  if (!produced.ok()) return produced.status();
  r->extra["produce_events_s"] = static_cast<double>(n) / SecondsSince(t0);
  uint64_t records = 0;
  TALLY_RETURN_IF_ERROR(CheckTopicWhole("tally.events", &records));
  if (records != n)
    return Status::Internal(fmt::format("tally.events holds {} records, expected {}", records, n));

  Progress("ingest: starting tally up on the backlog");
  const double broker_cpu0 = broker_.CpuSeconds();
  auto start = Clock::now();
  TALLY_RETURN_IF_ERROR(StartUp());
  if (!WaitForPort(http_port_, 30))
    return Status::Unavailable("tally up did not listen; see " + Path("up.log"));
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
  if (errors > 0)
    return Status::Internal(fmt::format("redis answered {} errors to the ingest pipeline", errors));
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
  TALLY_RETURN_IF_ERROR(p.Start(
      TallyArgs({"replay", "--brokers", brokers_, "--state-dir", Path("replay"), "--block-cache-mb",
                 std::to_string(f_.block_cache_mb), "--log-level", "info"}),
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
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return Status::Internal("tally replay failed; see " + Path("replay.log"));
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
  Progress(
      fmt::format("freshness: {:.0f} events/s for {} s, a probe every 10 ms", rate, f_.seconds));

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
      for (size_t i = 0; i < now.size(); i++)
        target += (i ? "," : "") + std::to_string(now[i].post);
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
               std::chrono::system_clock::now().time_since_epoch())
               .count();
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
      Progress(fmt::format("freshness: {} probes, {} seen, p99 so far {:.1f} ms", sent,
                           latency_ms.size(), latency_ms.Percentile(99)));
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
  TALLY_RETURN_IF_ERROR(WaitApplied(static_cast<uint64_t>(SumField(*wm, "end_offset")), 300,
                                    "freshness tail", nullptr));
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

}  // namespace tally::bench
