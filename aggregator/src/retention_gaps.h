// RetentionGaps: what a consumer does when its offset is not in the log.
//
// The router (input topics) and the applier (tally.deltas) consume with
// auto.offset.reset=error, so librdkafka never jumps over records by itself:
// when the offset a partition resumes from (a committed offset, the
// state's) or reads at is outside the partition's log, librdkafka stops
// fetching that partition and hands the consumer an
// RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET event with that offset. Resume()
// decides where the partition goes on and says what was lost: records that
// retention removed before they were read are logged at ERROR, one line per
// partition with the offset range, and counted; the caller then assigns the
// partition again at the offset returned.
//
// Thread model: confined to the consumer's thread.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "base/metrics.h"
#include "base/status.h"

namespace tally::aggregator {

// One partition librdkafka stopped: `offset` is where it failed to read, or
// RD_KAFKA_OFFSET_INVALID when there was no offset to start from (a group
// that never committed one).
struct OffsetReset {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = RD_KAFKA_OFFSET_INVALID;
};

// The consumer events that mean OffsetReset (auto.offset.reset=error).
inline bool IsOffsetReset(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
         err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE;
}

class RetentionGaps {
 public:
  // `log_component` names the log lines ("router", "applier"); `reader`
  // completes them ("tally read them", "the applier applied them");
  // `lost_total` (borrowed, outlives this) counts the records lost.
  // `resume_past_end`: whether an offset past the log's end resumes at the
  // log start (the router: the input log was replaced) or is an error (the
  // applier: a replaced tally.deltas needs the state's progress reset,
  // which only a start does).
  RetentionGaps(const char* log_component, std::string reader, base::Counter* lost_total,
                bool resume_past_end)
      : log_component_(log_component),
        reader_(std::move(reader)),
        lost_total_(lost_total),
        resume_past_end_(resume_past_end) {}

  // Asks the broker for the partition's log start and end (consumer `rk`,
  // up to `timeout_ms`) and returns the offset to resume at:
  // - reset.offset below the log start: the records in between were removed
  //   before they were read. One ERROR line ("tally.events/3: records
  //   1200..44999 were removed by retention before tally read them (43800
  //   lost); reading on from offset 45000") and `lost_total` += their count,
  //   once per offset (a repeated reset of the same gap reports nothing
  //   new); resumes at the log start.
  // - reset.offset past the log end (a log replaced or cut at its end): with
  //   resume_past_end a WARN line, nothing counted, and resumes at the log
  //   start; otherwise OutOfRange saying so.
  // - no offset at all: resumes at the log start, with a WARN line if the
  //   log no longer starts at 0 (nothing counted: this group never read
  //   that partition).
  // - `position` (the next offset the consumer has returned for the
  //   partition, RD_KAFKA_OFFSET_INVALID if none) inside the log: the
  //   partition went on since; resumes there.
  // Unavailable when the broker does not answer (the caller retries).
  base::Result<int64_t> Resume(rd_kafka_t* rk, const OffsetReset& reset, int64_t position,
                               int timeout_ms);

 private:
  const char* log_component_;
  std::string reader_;
  base::Counter* lost_total_;
  bool resume_past_end_;
  // Per partition, the offset below which lost records were reported.
  std::map<std::pair<std::string, int32_t>, int64_t> reported_;
};

}  // namespace tally::aggregator
