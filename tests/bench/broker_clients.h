// broker_clients: what the broker workloads (broker_workloads.h) are made
// of. A broker in a child process (tally's, `tally broker`, or the mock, run
// by this binary's `--broker-child --mock` mode) whose CPU is read from
// /proc, and Kafka clients set up as tally's own: a producer as the event
// publisher makes it (base::KafkaProducer: idempotent, acks=all, lz4,
// linger.ms 5, librdkafka's batch sizes, murmur2_random) and consumers as
// base::MakeConsumer makes them with the router's short fetch.wait.max.ms
// (10 ms on the mock, 100 ms on a real broker).
//
// Thread model: every class is externally synchronized; a consumer lives on
// one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/kafka.h"
#include "base/kafka_producer.h"
#include "base/status.h"
#include "bench_util.h"
#include "broker_workloads.h"

namespace tally::bench {

// The topic every broker workload uses (the mock creates it at start with
// --partitions; tally's broker child too).
inline constexpr std::string_view kBrokerBenchTopic = base::kEventsTopic;
inline constexpr int kRecordValueBytes = 200;

// The steady clock in nanoseconds: the timestamp records carry.
int64_t NowNs();

// The steady-clock nanoseconds a record's value was stamped with; -1 if it
// is not one of Producer's.
int64_t RecordTimestampNs(const void* value, size_t len);

// A broker in a child process, started on a free loopback port. Its log
// (and tally's log directory) is <dir>/broker<n>-<label>.
struct ChildBroker {
  std::string label;      // "tally" or "mock"
  int64_t flush_ms = -1;  // tally's --log-flush-ms; -1 for the mock
  Process proc;
  base::KafkaOptions kafka;  // embedded = true for the mock
  double Cpu() const { return proc.CpuSeconds(); }
};

// Starts tally's broker (mock false) with `flush_ms`, or the mock, the n-th
// broker of this run; Unavailable when it does not listen within 15 s.
base::Result<std::unique_ptr<ChildBroker>> StartChildBroker(const BrokerBenchOptions& o, int n,
                                                            bool mock, int64_t flush_ms);

// A producer of 200-byte records to kBrokerBenchTopic, counting failed
// deliveries. Init() before anything else.
class BenchProducer {
 public:
  // Creates the producer, fetches the topic's metadata and sends one record
  // to completion (the connection and the idempotent producer's id, so that
  // they are not timed).
  base::Status Init(const base::KafkaOptions& kafka);
  // Queues the next record, stamped `ts_ns`; waits while the queue is full.
  base::Status Send(int64_t ts_ns);
  // Serves delivery reports without waiting.
  void Poll() { p_->Poll(0); }
  // Waits until every record is acknowledged; Unavailable if one failed.
  base::Status Flush();
  // Produces `n` records as fast as they go, then Flush()es.
  base::Status SendAll(int64_t n);
  // Produces `rate` records a second for `seconds`, each stamped when sent,
  // every half millisecond what is due by then; `tick(elapsed_s, sent)` runs
  // between bursts and once at the end. Does not flush.
  base::Status Paced(int64_t rate, double seconds,
                     const std::function<void(double, int64_t)>& tick);

 private:
  std::atomic<int64_t> failed_{0};
  std::atomic<int> last_error_{0};
  std::unique_ptr<base::KafkaProducer> p_;
  rd_kafka_topic_t* rkt_ = nullptr;
  uint64_t seq_ = 0;
  char value_[kRecordValueBytes + 1];
  std::string key_;
};

// A consumer with tally's settings in `group`, reading from the earliest
// offset when it has none (not failing, as tally's do). Caller owns it.
base::Result<base::KafkaHandle> MakeBenchConsumer(const base::KafkaOptions& kafka,
                                                  const std::string& group);

// Assigns every partition of kBrokerBenchTopic at `offset` (a logical one).
base::Status AssignAll(rd_kafka_t* rk, int partitions, int64_t offset);

}  // namespace tally::bench
