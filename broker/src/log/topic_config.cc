#include "log/topic_config.h"

#include <fmt/core.h>

#include <charconv>
#include <limits>

namespace tally::broker {

using base::Result;
using base::Status;

namespace {

bool ParseInt(std::string_view text, int64_t* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace

Status SetTopicConfig(TopicConfig* config, std::string_view key, std::string_view value) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("invalid value \"{}\" for config {}: {}", std::string(value), key, why));
  };
  if (key == "cleanup.policy") {
    bool del = false, compact = false;
    size_t start = 0;
    while (start <= value.size()) {
      size_t comma = value.find(',', start);
      std::string_view part = value.substr(
          start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
      while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
      if (part == "delete") {
        del = true;
      } else if (part == "compact") {
        compact = true;
      } else {
        return bad("expected delete, compact or both");
      }
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    config->cleanup_delete = del;
    config->cleanup_compact = compact;
    return Status::Ok();
  }
  int64_t v;
  if (key == "retention.ms" || key == "retention.bytes" || key == "segment.bytes" ||
      key == "segment.ms" || key == "max.message.bytes") {
    if (!ParseInt(value, &v)) return bad("not an integer");
  } else {
    return Status::InvalidArgument(fmt::format("unknown topic config {}", key));
  }
  if (key == "retention.ms") {
    if (v < -1) return bad("must be >= -1");
    config->retention_ms = v;
  } else if (key == "retention.bytes") {
    if (v < -1) return bad("must be >= -1");
    config->retention_bytes = v;
  } else if (key == "segment.bytes") {
    if (v < 14 || v > std::numeric_limits<int32_t>::max()) return bad("must be in [14, 2^31-1]");
    config->segment_bytes = v;
  } else if (key == "segment.ms") {
    if (v < 1) return bad("must be >= 1");
    config->segment_ms = v;
  } else {
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) return bad("must be in [0, 2^31-1]");
    config->max_message_bytes = static_cast<int32_t>(v);
  }
  return Status::Ok();
}

Result<TopicConfig> ParseTopicConfig(const std::map<std::string, std::string>& entries,
                                     const TopicConfig& defaults) {
  TopicConfig config = defaults;
  for (const auto& [key, value] : entries)
    TALLY_RETURN_IF_ERROR(SetTopicConfig(&config, key, value));
  return config;
}

std::map<std::string, std::string> ToProperties(const TopicConfig& config) {
  std::string policy = config.cleanup_compact && config.cleanup_delete ? "compact,delete"
                       : config.cleanup_compact                        ? "compact"
                                                                       : "delete";
  return {{"cleanup.policy", policy},
          {"max.message.bytes", std::to_string(config.max_message_bytes)},
          {"retention.bytes", std::to_string(config.retention_bytes)},
          {"retention.ms", std::to_string(config.retention_ms)},
          {"segment.bytes", std::to_string(config.segment_bytes)},
          {"segment.ms", std::to_string(config.segment_ms)}};
}

Status ValidateTopicName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("topic name is empty");
  if (name.size() > 249) {
    return Status::InvalidArgument(
        fmt::format("topic name has {} characters; at most 249", name.size()));
  }
  if (name == "." || name == "..") {
    return Status::InvalidArgument(
        fmt::format("topic name \"{}\" is not allowed", std::string(name)));
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument(fmt::format(
          "topic name \"{}\" holds a character other than [a-zA-Z0-9._-]", std::string(name)));
    }
  }
  return Status::Ok();
}

}  // namespace tally::broker
