// EventPublisher: puts validated events on the input topic.
//
// Used by `tally produce`, `POST /v1/events` and the HTTP unread resets. An
// idempotent librdkafka producer (enable.idempotence, lz4, acks=all,
// partitioner=murmur2_random as in the Java client): within one partition,
// records land once and in the order given, and a record with a key lands in
// the partition a Java producer would pick for that key.
//
// Thread model: safe for concurrent use. Each publisher owns one librdkafka
// producer and one poll thread that serves its delivery reports; Publish()
// blocks only its caller. The publisher must outlive every call into it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/kafka.h"
#include "base/status.h"
#include "schemas/event.h"

namespace tally::ingest {

struct PublishRecord {
  std::string key;    // may be empty: then the partition is chosen at random
  std::string value;  // the event's JSON bytes, already validated
  // The entity whose deltas partition the event's derived effects go to
  // (a follow's or unfollow's target), 0 if none. Not published.
  uint64_t derived_entity = 0;
};

// Where the broker put a published record.
struct RecordPosition {
  int32_t partition = -1;
  int64_t offset = -1;
};

struct PublisherOptions {
  base::KafkaOptions kafka;
  std::string topic = std::string(base::kEventsTopic);
  // Upper bound on the time from queueing a record to its delivery report
  // (librdkafka message.timeout.ms), and on how long a full local queue may
  // block PublishAsync()/Publish().
  int delivery_timeout_ms = 15000;
};

// Counts since the publisher was created. Thread model: a value.
struct PublisherStats {
  uint64_t delivered = 0;  // acknowledged by the broker
  uint64_t failed = 0;     // delivery reports with an error (timeouts included)
};

class EventPublisher {
 public:
  // Creates the producer with tally's defaults (enable.idempotence=true,
  // acks=all, compression.type=lz4, linger.ms=5, partitioner=murmur2_random,
  // message.timeout.ms=delivery_timeout_ms), then options.kafka.overrides.
  // InvalidArgument for bad Kafka settings or an empty topic. Does not wait
  // for the cluster. The caller owns the result.
  static base::Result<std::unique_ptr<EventPublisher>> Create(const PublisherOptions& options);

  // Waits up to 5 s for records still queued (call Flush() first to know
  // their fate), logs how many are dropped, and destroys the producer.
  ~EventPublisher();

  EventPublisher(const EventPublisher&) = delete;
  EventPublisher& operator=(const EventPublisher&) = delete;

  // Publishes `records` in order and waits until every one is acknowledged
  // or has failed. OK when all were acknowledged (also for an empty span);
  // otherwise Unavailable (broker unreachable, timed out, queue full) or
  // another code naming the first failure by index and key. Records queued
  // before a failure may have been published: the caller says so. Records
  // after a local produce failure are not queued.
  // With `positions`, it is replaced by each record's (partition, offset),
  // in order, once all were acknowledged.
  base::Status Publish(std::span<const PublishRecord> records,
                       std::vector<RecordPosition>* positions = nullptr);

  // Queues one record without waiting (for bulk producers such as
  // `tally produce`). Unavailable when the local queue stays full past the
  // delivery timeout; another code when librdkafka refuses the record
  // (fatal producer error, record too large). Delivery failures are counted
  // and reported by Flush().
  base::Status PublishAsync(const PublishRecord& record);

  // Waits up to `timeout_ms` for everything queued by PublishAsync(). Returns
  // the first delivery failure since the last Flush() if there was one (and
  // forgets it), else Unavailable if records are still undelivered at the
  // deadline, else OK.
  base::Status Flush(int timeout_ms);

  // Drops every record queued or in flight (librdkafka's purge): the
  // Publish() calls waiting for them return an error now, and the broker
  // may or may not have them. For a stop that cannot wait for a broker that
  // does not answer. Safe for concurrent use.
  void Abort();

  // Records queued by PublishAsync() whose delivery report has not arrived.
  uint64_t pending() const;
  PublisherStats stats() const;
  const std::string& topic() const;

 private:
  struct Rep;
  explicit EventPublisher(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// The key tally recommends for an event (SPEC section 2, "Order"), as a
// decimal string: the post id for like/unlike/repost/comment/view, the user
// id for follow/unfollow/read/mention, from_user_id for dm, author_id for
// post/post_delete, "notice" for notice and the channel for red_dot.
// Thread model: pure function.
std::string DefaultKey(const schemas::Event& event);

}  // namespace tally::ingest
