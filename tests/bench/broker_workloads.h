// broker_workloads: tally-bench's workloads of a Kafka broker alone, run
// against tally's own broker (broker/, tally::broker) and, beside it in the
// same run, against librdkafka's mock cluster, what tally stood on before,
// as the baseline. Each broker is a child process on a free loopback port:
// tally's is `tally broker` on a fresh log directory, as a user runs it; the
// mock is this binary's `--broker-child --mock` (RunBrokerChild). Broker CPU
// is utime+stime of that child (/proc/PID/stat), so the clients (librdkafka,
// in tally-bench) are not counted. Clients are set up as tally's own: producers by
// base::KafkaProducer (idempotent, acks=all, lz4, linger.ms 5, librdkafka's
// batch sizes), consumers by base::MakeConsumer with tally's short
// fetch.wait.max.ms (10 ms on the mock, 100 ms on a real broker).
//
//   broker_produce  --broker-events records of 200 bytes to a 16-partition
//                   topic as fast as one producer goes: events/s and broker
//                   CPU us per event; tally's broker with --log-flush-ms 2
//                   and 0 (rows broker_produce_flush2, _flush0).
//   broker_fetch    the same records produced first (untimed), then one
//                   consumer reads them all from the beginning: records/s,
//                   broker CPU us per record.
//   broker_idle     three consumers in three groups subscribed to the
//                   topic, nothing produced: broker CPU % of a core over
//                   --broker-seconds. Target < 0.5 %.
//   broker_latency  --broker-rate events/s with a timestamp in each value,
//                   one consumer; produce-to-fetch p50/p99 over
//                   --broker-seconds. Target p99 <= flush interval + 10 ms.
//   broker_steady   --broker-steady-rate events/s for --broker-minutes
//                   samples of --broker-sample-s; broker CPU us per event of
//                   sample 2 and of the last, their ratio. Target within 10 %.
//
// Each tally row carries the mock's figure as its baseline; the mock's own
// rows are named <workload>_mock (none when --broker-mock=false).
//
// Thread model: externally synchronized; one workload at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/status.h"
#include "bench_util.h"

namespace tally::bench {

// The broker workloads, in the order they run; selected by name only.
inline constexpr const char* kBrokerWorkloads =
    "broker_produce,broker_fetch,broker_idle,broker_latency,broker_steady";

struct BrokerBenchOptions {
  std::string tally;           // the tally binary (its `broker` command)
  std::string self;            // this binary, for `--broker-child --mock`
  std::string dir;             // scratch directory of this run; created if missing
  int partitions = 16;         // of the topic every workload uses
  int64_t events = 1000000;    // broker_produce, broker_fetch
  int64_t seconds = 20;        // broker_idle, broker_latency
  int64_t rate = 300000;       // broker_latency, events/s
  int64_t steady_rate = 1500;  // broker_steady, events/s
  int64_t minutes = 2;         // broker_steady: samples (at least 2)
  int64_t sample_s = 60;       // broker_steady: seconds a sample
  int64_t flush_ms = 2;        // tally's broker, but for broker_produce's flush0 row
  bool mock = true;            // also run each workload against the mock
};

// Registers the broker workloads' flags (--broker-*) on *flags, writing
// into *o, which must outlive flags->Parse().
void AddBrokerFlags(base::FlagSet* flags, BrokerBenchOptions* o);

// Runs the broker workloads named in `selected`, in kBrokerWorkloads'
// order, calling report(row) for each row as it comes. Stops at the first
// error.
base::Status RunBrokerWorkloads(const BrokerBenchOptions& o, const std::set<std::string>& selected,
                                const std::function<void(WorkloadResult)>& report);

class BrokerWorkloads {
 public:
  explicit BrokerWorkloads(BrokerBenchOptions options) : o_(std::move(options)) {}

  // Each runs one workload against each broker, printing progress to
  // stderr, and appends its rows to *rows. An error when a broker did not
  // start or a client failed; the brokers' logs are in options.dir.
  base::Status Produce(std::vector<WorkloadResult>* rows);
  base::Status Fetch(std::vector<WorkloadResult>* rows);
  base::Status Idle(std::vector<WorkloadResult>* rows);
  base::Status Latency(std::vector<WorkloadResult>* rows);
  base::Status Steady(std::vector<WorkloadResult>* rows);

 private:
  using RowFn = std::function<base::Result<WorkloadResult>(bool mock, int64_t flush_ms)>;
  // Runs `one` on tally's broker with each of `flushes`, then, with
  // options.mock, on the mock, whose row becomes each tally row's baseline.
  base::Status Both(const RowFn& one, const std::vector<int64_t>& flushes,
                    std::vector<WorkloadResult>* rows);

  const BrokerBenchOptions o_;
  int started_ = 0;  // brokers started, for their directory and log names
};

// `tally-bench --broker-child --mock [--partitions N]`: runs librdkafka's
// mock cluster with the topic tally.events of N partitions, prints
// "bootstrap: HOST:PORT" once it serves, and stops at SIGTERM or SIGINT.
// argv holds the flags after --broker-child. Returns the exit status. In
// broker_clients.cc.
int RunBrokerChild(int argc, char** argv);

}  // namespace tally::bench
