// BrokerServer's handlers of topics and metadata: Metadata, CreateTopics,
// DeleteTopics, DescribeConfigs, AlterConfigs. On the network thread.
#include <fmt/format.h>

#include <set>
#include <variant>

#include "base/clock.h"
#include "log/record_batch.h"
#include "log/topic_config.h"
#include "server/server.h"

namespace tally::broker {

namespace {

constexpr const char* kLog = "broker";

}  // namespace

// ---------------------------------------------------------------------------
// Topics and metadata.

ErrorCode BrokerServer::CreateTopicChecked(const std::string& name, int32_t partitions,
                                           const std::map<std::string, std::string>& configs,
                                           bool validate_only, std::string* message) {
  base::Status st = ValidateTopicName(name);
  if (!st.ok()) {
    *message = st.message();
    return ErrorCode::kInvalidTopicException;
  }
  if (logs_->FindTopic(name) != nullptr) {
    *message = fmt::format("Topic '{}' already exists.", name);
    return ErrorCode::kTopicAlreadyExists;
  }
  if (partitions < 1) {
    *message = "Number of partitions must be larger than 0.";
    return ErrorCode::kInvalidPartitions;
  }
  const TopicConfig defaults = DefaultTopicConfig();
  auto config = ParseTopicConfig(configs, defaults);
  if (!config.ok()) {
    *message = config.status().message();
    return ErrorCode::kInvalidConfig;
  }
  if (validate_only) return ErrorCode::kNone;
  st = logs_->CreateTopic(name, partitions, *config);
  if (st.ok()) {
    TALLY_LOG_INFO(kLog, "created topic {} with {} partitions", name, partitions);
    return ErrorCode::kNone;
  }
  *message = st.message();
  switch (st.code()) {
    case base::StatusCode::kFailedPrecondition:
      return ErrorCode::kTopicAlreadyExists;
    case base::StatusCode::kInvalidArgument:
      return ErrorCode::kInvalidRequest;
    default:
      TALLY_LOG_ERROR(kLog, "cannot create topic {}: {}", name, st.ToString());
      return ErrorCode::kKafkaStorageError;
  }
}

ResponseBody BrokerServer::HandleMetadata(const MetadataRequest& r, int16_t version) {
  MetadataResponse resp;
  resp.brokers.push_back({options_.node_id, advertised_host_, port_, std::nullopt});
  resp.cluster_id = cluster_id_;
  resp.controller_id = options_.node_id;
  auto describe = [&](const TopicInfo& info) {
    auto& t = resp.topics.emplace_back();
    t.name = info.name;
    for (int32_t p = 0; p < info.partitions; p++) {
      auto& rp = t.partitions.emplace_back();
      rp.partition_index = p;
      rp.leader_id = options_.node_id;
      rp.leader_epoch = 0;
      rp.replica_nodes = {options_.node_id};
      rp.isr_nodes = {options_.node_id};
    }
  };
  if (!r.topics.has_value()) {
    for (const TopicInfo& info : logs_->Topics()) describe(info);
    return resp;
  }
  const bool may_create =
      options_.auto_create_topics && (version < 4 || r.allow_auto_topic_creation);
  for (const std::string& name : *r.topics) {
    const TopicInfo* info = logs_->FindTopic(name);
    if (info == nullptr && may_create) {
      std::string message;
      const ErrorCode e =
          CreateTopicChecked(name, options_.default_partitions, {}, false, &message);
      if (e != ErrorCode::kNone && e != ErrorCode::kTopicAlreadyExists) {
        auto& t = resp.topics.emplace_back();
        t.name = name;
        t.error_code = e;
        continue;
      }
      info = logs_->FindTopic(name);
    }
    if (info == nullptr) {
      auto& t = resp.topics.emplace_back();
      t.name = name;
      t.error_code = ErrorCode::kUnknownTopicOrPartition;
      continue;
    }
    describe(*info);
  }
  return resp;
}

TopicConfig BrokerServer::DefaultTopicConfig() const {
  TopicConfig c;
  c.segment_bytes = options_.segment_bytes;
  c.retention_ms = options_.retention_ms;
  c.retention_bytes = options_.retention_bytes;
  c.max_message_bytes = options_.max_message_bytes;
  return c;
}

ResponseBody BrokerServer::HandleCreateTopics(const CreateTopicsRequest& r, int16_t version) {
  CreateTopicsResponse resp;
  std::map<std::string, int> count;
  for (const auto& t : r.topics) count[t.name]++;
  for (const auto& t : r.topics) {
    std::string message;
    ErrorCode e = ErrorCode::kNone;
    std::map<std::string, std::string> configs;
    int32_t partitions = t.num_partitions;
    if (partitions == -1) {
      partitions = t.assignments.empty() ? options_.default_partitions
                                         : static_cast<int32_t>(t.assignments.size());
    }
    if (count[t.name] > 1) {
      e = ErrorCode::kInvalidRequest;
      message =
          fmt::format("Create topics request from client contains a duplicate topic '{}'", t.name);
    } else if (t.replication_factor != -1 && t.replication_factor != 1) {
      e = ErrorCode::kInvalidReplicationFactor;
      message = fmt::format("Replication factor: {} larger than available brokers: 1.",
                            t.replication_factor);
    }
    for (const auto& cfg : t.configs) {
      if (e != ErrorCode::kNone) break;
      if (!cfg.value.has_value()) {
        e = ErrorCode::kInvalidConfig;
        message = fmt::format("Null value not supported for topic config {}", cfg.name);
      }
      configs[cfg.name] = cfg.value.value_or("");
    }
    if (e == ErrorCode::kNone) {
      e = CreateTopicChecked(t.name, partitions, configs, r.validate_only, &message);
    }
    auto& rt = resp.topics.emplace_back();
    rt.name = t.name;
    rt.error_code = e;
    if (e != ErrorCode::kNone && version >= 1) rt.error_message = message;
  }
  return resp;
}

ResponseBody BrokerServer::HandleDeleteTopics(const DeleteTopicsRequest& r) {
  DeleteTopicsResponse resp;
  for (const std::string& name : r.topic_names) {
    base::Status st = logs_->DeleteTopic(name);
    ErrorCode e = ErrorCode::kNone;
    if (st.code() == base::StatusCode::kNotFound) {
      e = ErrorCode::kUnknownTopicOrPartition;
    } else if (!st.ok()) {
      TALLY_LOG_ERROR(kLog, "cannot delete topic {}: {}", name, st.ToString());
      e = ErrorCode::kKafkaStorageError;
    } else {
      TALLY_LOG_INFO(kLog, "deleted topic {}", name);
    }
    resp.responses.push_back({name, e});
  }
  recheck_ = true;  // produce requests waiting on a deleted partition
  return resp;
}

ResponseBody BrokerServer::HandleDescribeConfigs(const DescribeConfigsRequest& r, int16_t version) {
  DescribeConfigsResponse resp;
  const TopicConfig defaults = DefaultTopicConfig();
  const std::map<std::string, std::string> default_props = ToProperties(defaults);
  for (const auto& res : r.resources) {
    auto& rr = resp.results.emplace_back();
    rr.resource_type = res.resource_type;
    rr.resource_name = res.resource_name;
    std::map<std::string, std::string> props;
    std::set<std::string> read_only;
    std::map<std::string, bool> is_default;
    int8_t changed_source = 1;  // DYNAMIC_TOPIC_CONFIG
    if (res.resource_type == kResourceTypeTopic) {
      const TopicInfo* info = logs_->FindTopic(res.resource_name);
      if (info == nullptr) {
        rr.error_code = ErrorCode::kUnknownTopicOrPartition;
        rr.error_message = fmt::format("Topic {} does not exist", res.resource_name);
        continue;
      }
      props = ToProperties(info->config);
      for (const auto& [k, v] : props) {
        auto d = default_props.find(k);
        is_default[k] = d != default_props.end() && d->second == v;
      }
    } else if (res.resource_type == kResourceTypeBroker) {
      if (!res.resource_name.empty() && res.resource_name != std::to_string(options_.node_id)) {
        rr.error_code = ErrorCode::kInvalidRequest;
        rr.error_message = fmt::format("Unexpected broker id {}", res.resource_name);
        continue;
      }
      changed_source = 4;  // STATIC_BROKER_CONFIG
      props = {
          {"broker.id", std::to_string(options_.node_id)},
          {"num.partitions", std::to_string(options_.default_partitions)},
          {"auto.create.topics.enable", options_.auto_create_topics ? "true" : "false"},
          {"log.flush.interval.ms", std::to_string(options_.log_flush_ms)},
          {"log.segment.bytes", std::to_string(options_.segment_bytes)},
          {"log.retention.ms", std::to_string(options_.retention_ms)},
          {"log.retention.bytes", std::to_string(options_.retention_bytes)},
          {"message.max.bytes", std::to_string(options_.max_message_bytes)},
          {"socket.request.max.bytes", std::to_string(options_.max_frame_bytes)},
      };
      for (const auto& [k, v] : props) {
        read_only.insert(k);
        is_default[k] = false;
      }
    } else {
      rr.error_code = ErrorCode::kInvalidRequest;
      rr.error_message = fmt::format("Unsupported resource type {}", res.resource_type);
      continue;
    }
    for (const auto& [k, v] : props) {
      if (res.configuration_keys.has_value() &&
          std::find(res.configuration_keys->begin(), res.configuration_keys->end(), k) ==
              res.configuration_keys->end()) {
        continue;
      }
      auto& cfg = rr.configs.emplace_back();
      cfg.name = k;
      cfg.value = v;
      cfg.read_only = read_only.count(k) > 0;
      cfg.is_default = is_default[k];
      cfg.config_source = is_default[k] ? 5 : changed_source;  // 5: DEFAULT_CONFIG
      if (version >= 1 && r.include_synonyms) {
        cfg.synonyms.push_back({k, v, cfg.config_source});
      }
    }
  }
  return resp;
}

ResponseBody BrokerServer::HandleAlterConfigs(const AlterConfigsRequest& r) {
  AlterConfigsResponse resp;
  const TopicConfig defaults = DefaultTopicConfig();
  for (const auto& res : r.resources) {
    auto& rr = resp.responses.emplace_back();
    rr.resource_type = res.resource_type;
    rr.resource_name = res.resource_name;
    if (res.resource_type != kResourceTypeTopic) {
      rr.error_code = ErrorCode::kInvalidRequest;
      rr.error_message = "only topic configs can be altered";
      continue;
    }
    if (logs_->FindTopic(res.resource_name) == nullptr) {
      rr.error_code = ErrorCode::kUnknownTopicOrPartition;
      continue;
    }
    // AlterConfigs replaces the whole set: what is not named is reset.
    std::map<std::string, std::string> entries;
    for (const auto& cfg : res.configs) {
      if (cfg.value.has_value()) entries[cfg.name] = *cfg.value;
    }
    auto config = ParseTopicConfig(entries, defaults);
    if (!config.ok()) {
      rr.error_code = ErrorCode::kInvalidConfig;
      rr.error_message = config.status().message();
      continue;
    }
    if (r.validate_only) continue;
    base::Status st = logs_->AlterTopicConfig(res.resource_name, *config);
    if (!st.ok()) {
      rr.error_code = ErrorCode::kKafkaStorageError;
      rr.error_message = st.message();
    }
  }
  return resp;
}

}  // namespace tally::broker
