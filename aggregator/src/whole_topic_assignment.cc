#include "whole_topic_assignment.h"

#include "base/clock.h"
#include "base/kafka_consumer.h"
#include "base/log.h"

namespace tally::aggregator {

using base::Status;

WholeTopicAssignment::WholeTopicAssignment(rd_kafka_t* consumer, std::vector<std::string> topics,
                                           std::string group, const char* log)
    : consumer_(consumer), topics_(std::move(topics)), group_(std::move(group)), log_(log) {}

Status WholeTopicAssignment::Assign(int timeout_ms) {
  last_discovery_ms_ = base::SteadyMs();
  std::map<std::string, int> counts;
  bool grew = false;
  for (const auto& t : topics_) {
    auto n = base::PartitionCount(consumer_, t, timeout_ms);
    if (!n.ok()) return n.status().WithContext("router");
    counts[t] = *n;
    if (*n > routed_partitions_[t]) grew = true;
  }
  if (!grew) return Status::Ok();
  base::KafkaPartitionList parts(rd_kafka_topic_partition_list_new(16));
  for (const auto& [t, n] : counts) {
    for (int p = 0; p < n; p++) rd_kafka_topic_partition_list_add(parts.get(), t.c_str(), p);
  }
  // Where the partitions already routed are (the next record poll returns).
  if (!routed_partitions_.empty()) rd_kafka_position(consumer_, parts.get());
  for (int i = 0; i < parts->cnt; i++) {
    auto& e = parts->elems[i];
    if (e.partition >= routed_partitions_[e.topic]) {
      e.offset = RD_KAFKA_OFFSET_INVALID;  // the committed offset
    }
  }
  for (const auto& [t, n] : counts) {
    int from = routed_partitions_[t];
    if (n > from) {
      TALLY_LOG_INFO(log_, "routing {} partitions {}..{} from the offsets committed to group {}", t,
                     from, n - 1, group_);
    }
  }
  TALLY_RETURN_IF_ERROR(base::Assign(consumer_, parts.get(), "assigning the input partitions"));
  routed_partitions_ = counts;
  return Status::Ok();
}

void WholeTopicAssignment::Refresh(int64_t now_ms) {
  if (now_ms - last_discovery_ms_ < kDiscoveryIntervalMs) return;
  if (Status st = Assign(1000); !st.ok()) TALLY_LOG_DEBUG(log_, "{}", st.message());
}

base::Result<base::KafkaPartitionList> AssignmentAt(rd_kafka_t* consumer,
                                                    const ResumeOffsets& resume,
                                                    base::KafkaPartitionList* moved) {
  rd_kafka_topic_partition_list_t* current = nullptr;
  if (auto err = rd_kafka_assignment(consumer, &current)) {
    return base::KafkaStatus(err, "reading the router's assignment");
  }
  base::KafkaPartitionList parts(current);
  rd_kafka_position(consumer, parts.get());
  moved->reset(rd_kafka_topic_partition_list_new(static_cast<int>(resume.size())));
  for (int i = 0; i < parts->cnt; i++) {
    auto& e = parts->elems[i];
    auto it = resume.find({e.topic, e.partition});
    if (it == resume.end()) continue;  // goes on from its position (or its committed offset)
    e.offset = it->second;
    rd_kafka_topic_partition_list_add(moved->get(), e.topic, e.partition)->offset = it->second;
  }
  return parts;
}

}  // namespace tally::aggregator
