// WholeTopicAssignment: the router's partitions when it routes every
// partition of its input topics itself (RouterOptions::whole_topics, tally
// up) instead of taking what its consumer group assigns; and the
// re-assignment of a consumer's partitions at new offsets.
//
// Every partition of every input topic is assigned, and assigned again
// when a topic gains partitions. A partition already routed goes on from
// its position; a new one starts at the group's committed offset (or as
// auto.offset.reset says).
//
// Thread model: confined to the consumer's thread.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"

namespace tally::aggregator {

class WholeTopicAssignment {
 public:
  // How often Refresh() looks for new partitions.
  static constexpr int64_t kDiscoveryIntervalMs = 30000;

  // `consumer` must outlive this object. `group` only names the group in
  // log lines; `log` is the component of log lines.
  WholeTopicAssignment(rd_kafka_t* consumer, std::vector<std::string> topics, std::string group,
                       const char* log);

  // Assigns every partition of every topic, adding any that appeared since
  // the last call (nothing changes when none did). An error when a topic
  // cannot be described within `timeout_ms` (NotFound: it does not exist)
  // or the assignment is refused.
  base::Status Assign(int timeout_ms);

  // Every kDiscoveryIntervalMs: Assign(), briefly (routing waits meanwhile).
  // A topic that cannot be described now (an outage, reported by
  // KafkaHealth) is asked again later; the reason is logged at debug level.
  void Refresh(int64_t now_ms);

 private:
  rd_kafka_t* const consumer_;
  const std::vector<std::string> topics_;
  const std::string group_;
  const char* const log_;
  std::map<std::string, int> routed_partitions_;  // partitions of each topic assigned
  int64_t last_discovery_ms_ = 0;
};

// Where to take a consumer's partitions up again: (topic, partition) ->
// offset.
using ResumeOffsets = std::map<std::pair<std::string, int32_t>, int64_t>;

// The assignment of `consumer` with every partition at its position (or,
// without one, at its committed offset), the partitions in `resume` at the
// offset given there, to be assigned again. `*moved` is set to the
// partitions of `resume` that are assigned, with their offsets (for the
// caller to commit before it assigns).
base::Result<base::KafkaPartitionList> AssignmentAt(rd_kafka_t* consumer,
                                                    const ResumeOffsets& resume,
                                                    base::KafkaPartitionList* moved);

}  // namespace tally::aggregator
