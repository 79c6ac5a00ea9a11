// TopicConfig: the per-topic settings of the broker's log, named and parsed
// as Kafka's topic configs (the keys clients send in CreateTopics and see in
// DescribeConfigs), with Kafka's defaults. Unknown keys and bad values are
// refused (the server answers INVALID_CONFIG).
// Thread model: value types and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tally::broker {

// A topic's configs with Kafka's defaults.
struct TopicConfig {
  int64_t retention_ms = 7LL * 24 * 3600 * 1000;  // -1: keep forever
  int64_t retention_bytes = -1;                   // -1: no size limit
  bool cleanup_delete = true;                     // cleanup.policy contains "delete"
  bool cleanup_compact = false;                   // cleanup.policy contains "compact"
  int64_t segment_bytes = 1LL << 30;
  int64_t segment_ms = 7LL * 24 * 3600 * 1000;
  int32_t max_message_bytes = 1048588;

  bool operator==(const TopicConfig&) const = default;
};

// The keys accepted, in the order ToProperties lists them.
inline constexpr std::string_view kTopicConfigKeys[] = {"cleanup.policy",  "max.message.bytes",
                                                        "retention.bytes", "retention.ms",
                                                        "segment.bytes",   "segment.ms"};

// Applies `key`=`value` to *config. kInvalidArgument for an unknown key or a
// value out of Kafka's range ("cleanup.policy" is delete, compact or both
// comma-separated; segment.bytes in [14, 2^31-1], so file positions fit the
// index's 32 bits; retention.* >= -1; segment.ms >= 1).
base::Status SetTopicConfig(TopicConfig* config, std::string_view key, std::string_view value);

// Starts from `defaults` and applies every entry; the first bad one is the
// error, naming its key.
base::Result<TopicConfig> ParseTopicConfig(const std::map<std::string, std::string>& entries,
                                           const TopicConfig& defaults = TopicConfig());

// Every key with its value as Kafka spells it ("cleanup.policy" -> "delete").
std::map<std::string, std::string> ToProperties(const TopicConfig& config);

// Kafka's topic name rule: 1..249 characters of [a-zA-Z0-9._-], not "." or
// "..". kInvalidArgument (INVALID_TOPIC_EXCEPTION) saying why.
base::Status ValidateTopicName(std::string_view name);

}  // namespace tally::broker
