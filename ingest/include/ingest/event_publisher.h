// EventPublisher: puts validated events on the input topic.
//
// Used by `tally produce`, `POST /v1/events` and the HTTP unread resets. An
// idempotent librdkafka producer (enable.idempotence, lz4, acks=all): within
// one partition, records land once and in the order given.
// Thread model: safe for concurrent use; Publish() blocks its caller only.
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
};

struct PublisherOptions {
  base::KafkaOptions kafka;
  std::string topic = "tally.events";
  int delivery_timeout_ms = 15000;
};

class EventPublisher {
 public:
  // Creates the producer. InvalidArgument for bad Kafka settings. Does not
  // wait for the cluster.
  static base::Result<std::unique_ptr<EventPublisher>> Create(const PublisherOptions& options);
  ~EventPublisher();

  // Publishes `records` in order and waits until every one is acknowledged.
  // OK when all were; otherwise Unavailable/Internal naming the first
  // failure (some records may have been published: the caller says so).
  base::Status Publish(std::span<const PublishRecord> records);

  // Queues one record without waiting (for bulk producers such as
  // `tally produce`). Unavailable when the local queue stays full past the
  // delivery timeout. Delivery failures are counted and returned by Flush().
  base::Status PublishAsync(const PublishRecord& record);
  // Waits for everything queued by PublishAsync(); reports the first
  // delivery failure since the last Flush().
  base::Status Flush(int timeout_ms);

  const std::string& topic() const;

 private:
  struct Rep;
  explicit EventPublisher(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// The key tally recommends for an event (SPEC section 2, "Order"): the post
// id for like/unlike, the user id for follow/unfollow/read, and the entity
// the event is mostly about otherwise. Decimal string.
std::string DefaultKey(const schemas::Event& event);

}  // namespace tally::ingest
