// FetcherWakeup: keeps librdkafka 2.0.2's fetcher from stalling under a
// consumer that drains its queue fast (the router through a backlog).
//
// That fetcher stops once queued.min.messages (100,000) are queued for the
// consumer and looks again only when its broker thread next wakes, up to a
// second later (rd_kafka_toppar_fetch_decide, then
// rd_kafka_broker_consumer_serve). Through a backlog the router drained
// that queue in a fifth of a second and then starved for the rest,
// including at the very end of a backlog. So once the queue has been near
// that bound, the fetcher is woken as soon as the queue runs low, with a
// watermark query (a request served by the partition leader's broker
// thread). A consumer that never gets near the bound (caught up) never
// asks. Later librdkafka releases fix this (fetch.queue.backoff.ms).
//
// Thread model: confined to the consumer's thread.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstdint>

namespace tally::aggregator {

class FetcherWakeup {
 public:
  // `consumer` and its consumer queue `queue` must outlive this object.
  FetcherWakeup(rd_kafka_t* consumer, rd_kafka_queue_t* queue)
      : consumer_(consumer), queue_(queue) {}

  // Called after each message `m` taken from `queue`: every 1024 messages
  // looks at the queue's length and, if it has been near the bound and is
  // now low, wakes the fetcher of m's partition (at most every 20 ms; the
  // query waits up to 100 ms for its answer).
  void AfterMessage(const rd_kafka_message_t* m);

 private:
  rd_kafka_t* const consumer_;
  rd_kafka_queue_t* const queue_;
  uint32_t since_check_ = 0;
  bool may_sleep_ = false;
  int64_t last_poke_ms_ = 0;
};

}  // namespace tally::aggregator
