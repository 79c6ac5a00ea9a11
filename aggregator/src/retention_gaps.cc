#include "retention_gaps.h"

#include <fmt/core.h>

#include <algorithm>

#include "base/kafka.h"
#include "base/log.h"

namespace tally::aggregator {

base::Result<int64_t> RetentionGaps::Resume(rd_kafka_t* rk, const OffsetReset& reset,
                                            int64_t position, int timeout_ms) {
  int64_t low = 0, high = 0;
  if (auto err = rd_kafka_query_watermark_offsets(rk, reset.topic.c_str(), reset.partition, &low,
                                                  &high, timeout_ms)) {
    return base::KafkaStatus(
        err, fmt::format("reading the log start of {}/{}", reset.topic, reset.partition));
  }
  const int64_t e = reset.offset;
  if (e >= 0 && e < low) {
    int64_t& reported = reported_[{reset.topic, reset.partition}];
    const int64_t from = std::max(e, reported);
    if (from < low) {
      lost_total_->Inc(low - from);
      TALLY_LOG_ERROR(log_component_,
                      "{}/{}: records {}..{} were removed by retention before {} ({} lost); "
                      "reading on from offset {}",
                      reset.topic, reset.partition, from, low - 1, reader_, low - from, low);
    }
    reported = std::max(reported, low);
  }
  if (position >= low && position <= high) return position;
  if (e >= low && e <= high) return e;  // in the log after all (it moved meanwhile)
  if (e > high && !resume_past_end_) {
    return base::Status::OutOfRange(
        fmt::format("{}/{}: offset {} is past the end of the log ({}): the log was replaced or cut "
                    "at its end",
                    reset.topic, reset.partition, e, high));
  }
  if (e > high) {
    TALLY_LOG_WARN(log_component_,
                   "{}/{}: offset {} is past the end of the log ({}): the log was replaced or cut "
                   "at its end; reading it from its start, offset {}",
                   reset.topic, reset.partition, e, high, low);
  } else if (int64_t& noted = reported_[{reset.topic, reset.partition}]; e < 0 && noted < low) {
    noted = low;  // once: offsets below it were never this group's to read
    TALLY_LOG_WARN(log_component_,
                   "{}/{}: no offset to start from; reading from the log start, offset {} (the "
                   "records before it were removed before this group read any)",
                   reset.topic, reset.partition, low);
  }
  return low;
}

}  // namespace tally::aggregator
