#include "broker_workloads.h"

#include <fmt/core.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "broker_clients.h"

namespace tally::bench {

using base::Result;
using base::Status;

namespace {

double PerEventUs(double cpu_s, double events) { return events > 0 ? cpu_s * 1e6 / events : NAN; }

std::string RowName(const std::string& workload, bool mock) {
  return mock ? workload + "_mock" : workload;
}

// tally's consumers wait this long for a fetch (base::ConsumerSettings::short_fetch_wait).
double FetchWaitMs(bool mock) { return mock ? 10 : 100; }

}  // namespace

void AddBrokerFlags(base::FlagSet* flags, BrokerBenchOptions* o) {
  flags->Int("broker-events", &o->events, "broker_produce, broker_fetch: records produced");
  flags->Int("broker-seconds", &o->seconds, "broker_idle, broker_latency: seconds measured");
  flags->Int("broker-rate", &o->rate, "broker_latency: events/s produced");
  flags->Int("broker-steady-rate", &o->steady_rate, "broker_steady: events/s produced");
  flags->Int("broker-minutes", &o->minutes, "broker_steady: samples taken (at least 2)");
  flags->Int("broker-sample-s", &o->sample_s, "broker_steady: seconds a sample (60: a minute)");
  flags->Int("broker-flush-ms", &o->flush_ms,
             "tally's broker: --log-flush-ms (broker_produce adds a row with 0)");
  flags->Bool("broker-mock", &o->mock,
              "run each broker workload against librdkafka's mock cluster too (`--broker-child "
              "--mock`), as the baseline");
}

Status RunBrokerWorkloads(const BrokerBenchOptions& o, const std::set<std::string>& selected,
                          const std::function<void(WorkloadResult)>& report) {
  BrokerWorkloads w(o);
  using Fn = Status (BrokerWorkloads::*)(std::vector<WorkloadResult>*);
  std::pair<const char*, Fn> steps[] = {{"broker_produce", &BrokerWorkloads::Produce},
                                        {"broker_fetch", &BrokerWorkloads::Fetch},
                                        {"broker_idle", &BrokerWorkloads::Idle},
                                        {"broker_latency", &BrokerWorkloads::Latency},
                                        {"broker_steady", &BrokerWorkloads::Steady}};
  for (auto [name, fn] : steps) {
    if (!selected.count(name)) continue;
    std::filesystem::create_directories(o.dir);
    std::vector<WorkloadResult> rows;
    TALLY_RETURN_IF_ERROR((w.*fn)(&rows));
    for (auto& r : rows) report(std::move(r));
  }
  return Status::Ok();
}

Status BrokerWorkloads::Both(const RowFn& one, const std::vector<int64_t>& flushes,
                             std::vector<WorkloadResult>* rows) {
  std::vector<WorkloadResult> tally_rows;
  for (int64_t flush : flushes) {
    auto r = one(false, flush);
    if (!r.ok()) return r.status();
    tally_rows.push_back(std::move(r).value());
  }
  std::optional<WorkloadResult> mock;
  if (o_.mock) {
    auto r = one(true, -1);
    if (!r.ok()) return r.status();
    mock = std::move(r).value();
  }
  for (auto& r : tally_rows) {
    if (mock) {
      r.baseline = "mock";
      r.baseline_value = mock->value;
      r.baseline_cpu_us = mock->cpu_us;
      r.baseline_p99_ms = mock->p99_ms;
      if (std::isnan(r.ratio)) r.ratio = r.value / mock->value;
      r.p99_ratio = r.p99_ms / mock->p99_ms;
    }
    rows->push_back(std::move(r));
  }
  if (mock) rows->push_back(std::move(*mock));
  return Status::Ok();
}

// ---- broker_produce: one producer as fast as it goes --------------------------

Status BrokerWorkloads::Produce(std::vector<WorkloadResult>* rows) {
  auto one = [&](bool mock, int64_t flush_ms) -> Result<WorkloadResult> {
    auto b = StartChildBroker(o_, ++started_, mock, flush_ms);
    if (!b.ok()) return b.status();
    ChildBroker& broker = **b;
    BenchProducer p;
    TALLY_RETURN_IF_ERROR(p.Init(broker.kafka).WithContext(broker.label));
    const double cpu0 = broker.Cpu();
    const auto t0 = Clock::now();
    TALLY_RETURN_IF_ERROR(p.SendAll(o_.events).WithContext(broker.label));
    WorkloadResult r;
    const double s = SecondsSince(t0);
    r.workload = mock ? "broker_produce_mock" : fmt::format("broker_produce_flush{}", flush_ms);
    r.unit = "events/s";
    r.value = static_cast<double>(o_.events) / s;
    r.cpu_s = broker.Cpu() - cpu0;
    r.cpu_us = PerEventUs(r.cpu_s, static_cast<double>(o_.events));
    r.extra["seconds"] = s;
    Progress(
        fmt::format("{}: {:.0f} events/s, broker {:.2f} us/event", r.workload, r.value, r.cpu_us));
    broker.proc.Stop();
    return r;
  };
  return Both(one, {o_.flush_ms, 0}, rows);
}

// ---- broker_fetch: one consumer reads a backlog -------------------------------

Status BrokerWorkloads::Fetch(std::vector<WorkloadResult>* rows) {
  auto one = [&](bool mock, int64_t flush_ms) -> Result<WorkloadResult> {
    auto b = StartChildBroker(o_, ++started_, mock, flush_ms);
    if (!b.ok()) return b.status();
    ChildBroker& broker = **b;
    {
      BenchProducer p;
      TALLY_RETURN_IF_ERROR(p.Init(broker.kafka).WithContext(broker.label));
      TALLY_RETURN_IF_ERROR(p.SendAll(o_.events).WithContext(broker.label));
    }
    auto c = MakeBenchConsumer(broker.kafka, "bench-fetch");
    if (!c.ok()) return c.status();
    rd_kafka_t* rk = c->get();
    // What the broker still holds: the mock keeps ~5 MiB a partition.
    auto wm = base::QueryWatermarks(rk, kBrokerBenchTopic, 10000);
    if (!wm.ok()) return wm.status().WithContext(broker.label);
    int64_t total = 0;
    for (const auto& p : *wm) total += p.high - p.low;
    TALLY_RETURN_IF_ERROR(AssignAll(rk, o_.partitions, RD_KAFKA_OFFSET_BEGINNING));
    const double cpu0 = broker.Cpu();
    const auto t0 = Clock::now();
    auto last = t0;
    int64_t read = 0;
    while (read < total) {
      base::KafkaMessage m(rd_kafka_consumer_poll(rk, 100));
      if (m && !m->err) {
        read++;
        last = Clock::now();
      } else if (SecondsSince(last) > 30) {
        return Status::Unavailable(fmt::format(
            "{}: fetched {} of {} records, then nothing for 30 s", broker.label, read, total));
      }
    }
    WorkloadResult r;
    const double s = SecondsSince(t0);
    r.workload = RowName("broker_fetch", mock);
    r.unit = "records/s";
    r.value = static_cast<double>(read) / s;
    r.cpu_s = broker.Cpu() - cpu0;
    r.cpu_us = PerEventUs(r.cpu_s, static_cast<double>(read));
    r.extra["records"] = static_cast<double>(read);
    r.extra["seconds"] = s;
    r.extra["fetch_wait_ms"] = FetchWaitMs(mock);
    Progress(fmt::format("{}: {} of {} records held in {:.2f} s: {:.0f}/s, broker {:.2f} us/record",
                         r.workload, read, o_.events + 1, s, r.value, r.cpu_us));
    rd_kafka_consumer_close(rk);
    c->reset();
    broker.proc.Stop();
    return r;
  };
  return Both(one, {o_.flush_ms}, rows);
}

// ---- broker_idle: three groups connected, nothing produced --------------------

Status BrokerWorkloads::Idle(std::vector<WorkloadResult>* rows) {
  auto one = [&](bool mock, int64_t flush_ms) -> Result<WorkloadResult> {
    auto b = StartChildBroker(o_, ++started_, mock, flush_ms);
    if (!b.ok()) return b.status();
    ChildBroker& broker = **b;
    constexpr int kGroups = 3;
    std::atomic<bool> stop{false};
    std::atomic<int> ready{0};  // consumers assigned or failed
    Status errors[kGroups];
    std::vector<std::thread> threads;
    // A consumer a thread (librdkafka's consumer contract), each in its group.
    for (int i = 0; i < kGroups; i++) {
      threads.emplace_back([&, i] {
        auto c = MakeBenchConsumer(broker.kafka, fmt::format("bench-idle-{}", i));
        if (!c.ok()) {
          errors[i] = c.status();
          ready++;
          return;
        }
        rd_kafka_t* rk = c->get();
        base::KafkaPartitionList topics(rd_kafka_topic_partition_list_new(1));
        rd_kafka_topic_partition_list_add(topics.get(), std::string(kBrokerBenchTopic).c_str(),
                                          RD_KAFKA_PARTITION_UA);
        if (auto err = rd_kafka_subscribe(rk, topics.get())) {
          errors[i] = base::KafkaStatus(err, "subscribing");
          ready++;
          return;
        }
        bool assigned = false;
        while (!stop) {
          base::KafkaMessage m(rd_kafka_consumer_poll(rk, 100));
          if (assigned) continue;
          rd_kafka_topic_partition_list_t* a = nullptr;
          if (!rd_kafka_assignment(rk, &a) && a && a->cnt > 0) {
            assigned = true;
            ready++;
          }
          if (a) rd_kafka_topic_partition_list_destroy(a);
        }
        rd_kafka_consumer_close(rk);
      });
    }
    const auto t0 = Clock::now();
    while (ready < kGroups && SecondsSince(t0) < 60) SleepMs(50);
    Status st = ready < kGroups ? Status::Unavailable("3 consumer groups not joined in 60 s")
                                : Status::Ok();
    for (auto& e : errors) {
      if (st.ok() && !e.ok()) st = e;
    }
    WorkloadResult r;
    if (st.ok()) {
      Progress(fmt::format("{}: 3 groups joined in {:.1f} s; measuring {} s", broker.label,
                           SecondsSince(t0), o_.seconds));
      SleepMs(1000);  // the joins' last requests
      const double cpu0 = broker.Cpu();
      const auto t1 = Clock::now();
      SleepMs(static_cast<int>(o_.seconds * 1000));
      r.workload = RowName("broker_idle", mock);
      r.unit = "% of a core";
      r.cpu_s = broker.Cpu() - cpu0;
      r.value = 100 * r.cpu_s / SecondsSince(t1);
      r.extra["fetch_wait_ms"] = FetchWaitMs(mock);
      if (!mock) {
        r.target = "< 0.5 %";
        r.met = r.value < 0.5;
      }
      Progress(fmt::format("{}: {:.3f} % of a core", r.workload, r.value));
    }
    stop = true;
    for (auto& t : threads) t.join();
    broker.proc.Stop();
    if (!st.ok()) return st.WithContext(broker.label);
    return r;
  };
  return Both(one, {o_.flush_ms}, rows);
}

// ---- broker_latency: produce to fetch at a fixed rate -------------------------

Status BrokerWorkloads::Latency(std::vector<WorkloadResult>* rows) {
  auto one = [&](bool mock, int64_t flush_ms) -> Result<WorkloadResult> {
    auto b = StartChildBroker(o_, ++started_, mock, flush_ms);
    if (!b.ok()) return b.status();
    ChildBroker& broker = **b;
    auto c = MakeBenchConsumer(broker.kafka, "bench-latency");
    if (!c.ok()) return c.status();
    rd_kafka_t* rk = c->get();
    TALLY_RETURN_IF_ERROR(AssignAll(rk, o_.partitions, RD_KAFKA_OFFSET_END));
    BenchProducer p;
    TALLY_RETURN_IF_ERROR(p.Init(broker.kafka).WithContext(broker.label));
    // Records stamped before the warm-up second ends are not counted (the
    // consumer finds the log's end meanwhile).
    std::atomic<int64_t> from_ns{INT64_MAX};
    std::atomic<int64_t> received{0};
    std::atomic<bool> stop{false};
    Samples ms;
    std::thread reader([&] {
      while (!stop) {
        base::KafkaMessage m(rd_kafka_consumer_poll(rk, 100));
        if (!m || m->err) continue;
        const int64_t ts = RecordTimestampNs(m->payload, m->len);
        if (ts < from_ns.load(std::memory_order_relaxed)) continue;
        ms.Add(static_cast<double>(NowNs() - ts) / 1e6);
        received.fetch_add(1, std::memory_order_relaxed);
      }
    });
    constexpr double kWarmS = 1;
    double cpu0 = 0, t_from = 0, t_last = 0;
    int64_t sent_from = -1, sent_end = 0;
    Status st =
        p.Paced(o_.rate, kWarmS + static_cast<double>(o_.seconds), [&](double t, int64_t sent) {
          if (sent_from < 0 && t >= kWarmS) {
            sent_from = sent;
            t_from = t;
            cpu0 = broker.Cpu();
            from_ns = NowNs();
          }
          sent_end = sent;
          t_last = t;
        });
    const double window_s = t_last - t_from;
    const double cpu_s = broker.Cpu() - cpu0;
    if (st.ok()) st = p.Flush();
    const int64_t expected = sent_end - sent_from;
    const auto t_end = Clock::now();
    while (st.ok() && received < expected && SecondsSince(t_end) < 10) SleepMs(10);
    stop = true;
    reader.join();
    rd_kafka_consumer_close(rk);
    c->reset();
    broker.proc.Stop();
    if (!st.ok()) return st.WithContext(broker.label);
    WorkloadResult r;
    r.workload = RowName("broker_latency", mock);
    r.unit = "ms p99";
    r.p50_ms = ms.Percentile(50);
    r.p99_ms = ms.Percentile(99);
    r.p999_ms = ms.Percentile(99.9);
    r.value = r.p99_ms;
    r.cpu_s = cpu_s;
    r.cpu_us = PerEventUs(cpu_s, static_cast<double>(expected));
    r.extra["carried_rate"] = static_cast<double>(expected) / window_s;
    r.extra["received_pct"] =
        expected > 0 ? 100.0 * static_cast<double>(received) / static_cast<double>(expected) : NAN;
    r.extra["fetch_wait_ms"] = FetchWaitMs(mock);
    if (!mock) {
      r.target = fmt::format("p99 <= {} ms", flush_ms + 10);
      r.met = r.p99_ms <= static_cast<double>(flush_ms + 10);
    }
    Progress(fmt::format(
        "{}: {:.0f} events/s carried, {} of {} received, p50 {:.2f} ms, p99 {:.2f} ms", r.workload,
        r.extra["carried_rate"], received.load(), expected, r.p50_ms, r.p99_ms));
    return r;
  };
  return Both(one, {o_.flush_ms}, rows);
}

// ---- broker_steady: CPU per event at a low rate, over minutes -----------------

Status BrokerWorkloads::Steady(std::vector<WorkloadResult>* rows) {
  if (o_.minutes < 2)
    return Status::InvalidArgument("broker_steady: --broker-minutes must be at least 2");
  auto one = [&](bool mock, int64_t flush_ms) -> Result<WorkloadResult> {
    auto b = StartChildBroker(o_, ++started_, mock, flush_ms);
    if (!b.ok()) return b.status();
    ChildBroker& broker = **b;
    BenchProducer p;
    TALLY_RETURN_IF_ERROR(p.Init(broker.kafka).WithContext(broker.label));
    std::vector<double> cpu = {broker.Cpu()};
    std::vector<int64_t> sent_at = {0};
    std::vector<double> us;  // per sample
    const auto sample_s = static_cast<double>(o_.sample_s);
    Status st = p.Paced(
        o_.steady_rate, sample_s * static_cast<double>(o_.minutes), [&](double t, int64_t sent) {
          if (t < sample_s * static_cast<double>(us.size() + 1)) return;
          cpu.push_back(broker.Cpu());
          sent_at.push_back(sent);
          const size_t i = us.size();
          us.push_back(
              PerEventUs(cpu[i + 1] - cpu[i], static_cast<double>(sent_at[i + 1] - sent_at[i])));
          Progress(
              fmt::format("{}: sample {}: {:.2f} us/event", broker.label, us.size(), us.back()));
        });
    if (st.ok()) st = p.Flush();
    broker.proc.Stop();
    if (!st.ok()) return st.WithContext(broker.label);
    if (us.size() < 2)
      return Status::Internal(fmt::format("broker_steady: {} samples taken", us.size()));
    WorkloadResult r;
    r.workload = RowName("broker_steady", mock);
    r.unit = "us/event last";
    r.value = us.back();
    r.cpu_us = us.back();
    r.cpu_s = cpu.back() - cpu.front();
    r.ratio = us.back() / us[1];
    r.extra["sample2_cpu_us"] = us[1];
    r.extra["last_cpu_us"] = us.back();
    r.extra["samples"] = static_cast<double>(us.size());
    r.extra["sample_s"] = sample_s;
    r.extra["cpu_pct"] = 100 * r.cpu_s / (sample_s * static_cast<double>(us.size()));
    if (!mock) {
      r.target = "last/sample 2 within 10 %";
      r.met = std::fabs(r.ratio - 1) <= 0.10;
    }
    return r;
  };
  return Both(one, {o_.flush_ms}, rows);
}

}  // namespace tally::bench
