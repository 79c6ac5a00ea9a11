#include "fetcher_wakeup.h"

#include "base/clock.h"

namespace tally::aggregator {

void FetcherWakeup::AfterMessage(const rd_kafka_message_t* m) {
  constexpr size_t kNearBound = 50000;  // half of queued.min.messages
  constexpr size_t kLowQueue = 20000;   // messages left to take
  if (++since_check_ < 1024) return;
  since_check_ = 0;
  const size_t queued = rd_kafka_queue_length(queue_);
  if (queued >= kNearBound) may_sleep_ = true;
  if (!may_sleep_ || queued > kLowQueue) return;
  const int64_t now = base::SteadyMs();
  if (now - last_poke_ms_ < 20) return;
  last_poke_ms_ = now;
  may_sleep_ = false;
  int64_t low = 0, high = 0;
  rd_kafka_query_watermark_offsets(consumer_, rd_kafka_topic_name(m->rkt), m->partition, &low,
                                   &high, 100);
}

}  // namespace tally::aggregator
