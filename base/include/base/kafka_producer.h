// KafkaProducer: the one producer set-up of tally and its one produce loop.
//
// Every record tally writes to Kafka goes through one of these: the event
// publisher's input records (ingest), the router's deltas and dead letters
// and the applier's derived deltas (aggregator). Each is idempotent
// (enable.idempotence=true, acks=all, compression.type=lz4 and a linger.ms
// of its own): within one partition a record lands once and in the order
// produced, which the applier's marks rely on. The user's --kafka settings
// still win (MakeKafkaConf).
//
// A delivery report goes to the owner's callback with the record's own
// opaque (rd_kafka_message_t::_private), so one callback serves records of
// different kinds (the router's generations, the publisher's waiting
// requests).
//
// Thread model: Produce(), Poll() and Flush() are safe for concurrent use
// (librdkafka's producer is); delivery reports and the error callback run on
// whichever thread polls: Poll(), Flush(), or a Produce() that polls while
// the queue is full. The producer must outlive every call into it.
#pragma once

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"

namespace tally::base {

struct ProducerSettings {
  std::string client_id;  // client.id; empty: librdkafka's
  int linger_ms = 5;      // linger.ms: how long a record waits for others to share its request
  // Further settings over the idempotent defaults (the publisher's
  // partitioner and message.timeout.ms); --kafka overrides still win.
  std::map<std::string, std::string> extra;
  // Every record's delivery report, with its opaque in `m._private`. Runs on
  // the polling thread, returns quickly and never throws. May be empty.
  std::function<void(const rd_kafka_message_t& m)> on_delivery;
  // librdkafka's error callback; empty: KafkaHealth::OnClientError. One that
  // is set should forward connectivity errors there.
  std::function<void(rd_kafka_t* rk, int err, const char* reason)> on_error;
};

// How Produce() waits while librdkafka's local queue is full (QUEUE_FULL:
// queue.buffering.max.messages or .kbytes reached, as in an outage).
//
// - The router and the applier wait with no deadline, polling 50 ms a try:
//   they are their producer's only poller (the reports that make room are
//   served by that poll), and a delta they cannot queue cannot be dropped
//   (nothing after it may be committed). The queue empties as the broker
//   acknowledges or as message.timeout.ms fails records, which stops their
//   commits.
// - The event publisher waits up to its delivery timeout, sleeping 500 us a
//   try: its own poll thread serves the reports, and the caller (an HTTP
//   request) must be answered within that time.
struct QueueFullWait {
  static constexpr int64_t kNoDeadline = -1;
  // Longest wait from the first QUEUE_FULL, ms; kNoDeadline: until there is room.
  int64_t deadline_ms = kNoDeadline;
  // true: each try polls the producer for 50 ms (serving delivery reports on
  // the caller's thread); false: each try sleeps 500 us.
  bool poll = true;
};

// One record for Produce(). The bytes are copied (RD_KAFKA_MSG_F_COPY).
struct ProducerRecord {
  rd_kafka_topic_t* rkt = nullptr;  // the topic's handle, or null: by `topic`
  const char* topic = nullptr;      // NUL-terminated; used when `rkt` is null
  int32_t partition = RD_KAFKA_PARTITION_UA;
  std::string_view key;  // empty: no key
  std::string_view value;
  // Taken over by the producer (destroyed by Produce() when it fails). May be null.
  rd_kafka_headers_t* headers = nullptr;
  void* opaque = nullptr;  // handed back in the delivery report (`_private`)
};

// Once a stop is requested, Flush() waits this long for the broker, then
// gives up.
inline constexpr int kFlushAtStopSeconds = 5;

class KafkaProducer {
 public:
  // Creates a producer of `kafka` with the idempotent defaults, `settings`
  // over them and the user's overrides over those. InvalidArgument naming
  // the setting librdkafka refused. Does not wait for the cluster. The
  // caller owns the result.
  static Result<std::unique_ptr<KafkaProducer>> Create(const KafkaOptions& kafka,
                                                       ProducerSettings settings);

  // Destroys the topic handles, then the producer (rd_kafka_destroy: what
  // is still queued is dropped without a report; Flush() first).
  ~KafkaProducer();
  KafkaProducer(const KafkaProducer&) = delete;
  KafkaProducer& operator=(const KafkaProducer&) = delete;

  // A handle for `topic`, owned by the producer. With `metadata_timeout_ms`
  // > 0 the topic's metadata is fetched now, so the first produce does not
  // wait for librdkafka's next metadata refresh (up to a second);
  // Unavailable or NotFound when it cannot be had in that time. 0: the
  // handle alone.
  Result<rd_kafka_topic_t*> Topic(std::string_view topic, int metadata_timeout_ms);

  // Queues `r`. While the local queue is full it waits as `wait` says (see
  // QueueFullWait, which caller uses which). OK: queued, and its delivery
  // report will come. Unavailable when the queue stayed full past the
  // deadline; for any other refusal KafkaStatus(err, context()). `context`
  // is called only on such a failure ("producing to tally.deltas/3").
  Status Produce(const ProducerRecord& r, const QueueFullWait& wait,
                 const std::function<std::string()>& context);

  // Serves delivery reports, waiting up to `timeout_ms` for one; returns how
  // many were served (rd_kafka_poll).
  int Poll(int timeout_ms);

  // Waits until the broker has acknowledged every queued record
  // (rd_kafka_flush in 1 s slices; delivery reports are served on this
  // thread). While it waits, `on_wait(seconds_waited)` runs after the first
  // second and then every 30 s (an outage itself is reported by
  // KafkaHealth). Once `*stop` is set it waits kFlushAtStopSeconds more (or
  // what is left of the stop budget, base/shutdown.h), then purges what is
  // left (serving the purged records' reports) and returns Aborted saying
  // how many records and seconds: the caller leaves their effects
  // uncommitted for a restart to redo. OK when all is acknowledged. `stop`
  // may be null (wait until acknowledged).
  Status Flush(const std::atomic<bool>* stop, const std::function<void(int)>& on_wait);

  // Records queued or in flight, not yet reported (rd_kafka_outq_len).
  int OutQueueLength();

  // The value of librdkafka setting `key` as the producer was made with it,
  // or `fallback` if it has none.
  std::string Setting(const char* key, std::string fallback) const;

  // The librdkafka handle, for what this class does not wrap (rd_kafka_purge,
  // rd_kafka_flush with a timeout). Owned by the producer.
  rd_kafka_t* get() const { return rk_.get(); }

 private:
  explicit KafkaProducer(ProducerSettings settings);
  static void DeliveryReport(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque);
  static void ErrorReport(rd_kafka_t* rk, int err, const char* reason, void* opaque);

  ProducerSettings settings_;
  std::string brokers_;  // for the queue-full message
  KafkaHandle rk_;
  std::vector<KafkaTopic> topics_;  // destroyed before rk_ (~KafkaProducer)
};

}  // namespace tally::base
