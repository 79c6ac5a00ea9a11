// The request handlers of BrokerServer: one per API of the wire area's
// ApiVersions table, translating between the wire structs and the log and
// group areas. All run on the network thread.
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

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

ErrorCode AppendError(const base::Status& st) {
  switch (st.code()) {
    case base::StatusCode::kCorruption:
      return ErrorCode::kCorruptMessage;
    case base::StatusCode::kResourceExhausted:
      return ErrorCode::kMessageTooLarge;
    case base::StatusCode::kInvalidArgument:
      return ErrorCode::kInvalidRecord;
    default:
      return ErrorCode::kKafkaStorageError;
  }
}

// Records in whole batches of a fetch answer (headers only).
int64_t CountRecords(const std::string& bytes) {
  int64_t n = 0;
  size_t pos = 0;
  while (pos + kBatchHeaderSize <= bytes.size()) {
    auto be32 = [&](size_t at) {
      const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + at;
      return static_cast<int32_t>((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
                                  (uint32_t{p[2]} << 8) | uint32_t{p[3]});
    };
    const int32_t length = be32(pos + 8);
    if (length <= 0) break;
    n += be32(pos + 23) + 1;  // lastOffsetDelta
    pos += kBatchLogOverhead + static_cast<size_t>(length);
  }
  return n;
}

std::optional<std::string> NonEmpty(const std::string& s) {
  if (s.empty()) return std::nullopt;
  return s;
}

}  // namespace

void BrokerServer::Dispatch(Conn* c, Request& request) {
  const RequestHeader& h = request.header;
  const uint64_t conn_id = c->id;
  auto answer = [&](const ResponseBody& body) {
    const uint64_t slot = NewSlot(c);
    Fill(conn_id, slot, h.correlation_id, body, h.api_version);
  };
  if (std::holds_alternative<UnsupportedRequest>(request.body)) {
    if (h.api_key == static_cast<int16_t>(ApiKey::kApiVersions)) {
      const uint64_t slot = NewSlot(c);
      Fill(conn_id, slot, h.correlation_id, MakeUnsupportedApiVersionsResponse(), 0);
      return;
    }
    // As Kafka: a request the broker cannot parse has no answer it could
    // encode, so the connection is closed.
    TALLY_LOG_WARN_LIMITED(conn_log_, kLog, "closing {}: unsupported request {} ({}) v{}", c->peer,
                           ApiKeyName(h.api_key), h.api_key, h.api_version);
    CloseConn(c, "");
    return;
  }
  auto injected = injected_errors_.find(h.api_key);
  if (injected != injected_errors_.end() && !injected->second.empty()) {
    const auto code = static_cast<ErrorCode>(injected->second.front());
    injected->second.pop_front();
    const auto* produce = std::get_if<ProduceRequest>(&request.body);
    if (produce != nullptr && produce->acks == 0) return;
    std::optional<ResponseBody> body = InjectedError(request, code);
    if (body.has_value()) {
      answer(*body);
      return;
    }
  }
  std::visit(
      Overloaded{
          [&](UnsupportedRequest&) {},
          [&](ApiVersionsRequest&) { answer(MakeApiVersionsResponse()); },
          [&](MetadataRequest& r) { answer(HandleMetadata(r, h.api_version)); },
          [&](ProduceRequest& r) { HandleProduce(c, h, r); },
          [&](FetchRequest& r) { HandleFetch(c, h, r); },
          [&](ListOffsetsRequest& r) { answer(HandleListOffsets(r, h.api_version)); },
          [&](FindCoordinatorRequest& r) {
            FindCoordinatorResponse resp;
            if (r.key_type != 0) {
              // Transactions are not supported.
              resp.error_code = ErrorCode::kCoordinatorNotAvailable;
              resp.node_id = -1;
              resp.port = -1;
            } else {
              resp.node_id = options_.node_id;
              resp.host = advertised_host_;
              resp.port = port_;
            }
            answer(resp);
          },
          [&](JoinGroupRequest& r) { HandleJoinGroup(c, h, r); },
          [&](SyncGroupRequest& r) { HandleSyncGroup(c, h, r); },
          [&](HeartbeatRequest& r) {
            GroupHeartbeatRequest g{r.group_id, r.generation_id, r.member_id,
                                    r.group_instance_id.value_or("")};
            HeartbeatResponse resp;
            resp.error_code = static_cast<ErrorCode>(coord_->Heartbeat(g));
            answer(resp);
          },
          [&](LeaveGroupRequest& r) {
            GroupLeaveRequest g;
            g.group_id = r.group_id;
            g.members.push_back({r.member_id, ""});
            LeaveGroupResult res = coord_->LeaveGroup(g);
            int16_t e = res.error;
            if (e == 0 && !res.member_errors.empty()) e = res.member_errors[0];
            LeaveGroupResponse resp;
            resp.error_code = static_cast<ErrorCode>(e);
            answer(resp);
          },
          [&](OffsetCommitRequest& r) { HandleOffsetCommit(c, h, r); },
          [&](OffsetFetchRequest& r) { answer(HandleOffsetFetch(r)); },
          [&](DescribeGroupsRequest& r) { answer(HandleDescribeGroups(r)); },
          [&](ListGroupsRequest&) { answer(HandleListGroups()); },
          [&](CreateTopicsRequest& r) { answer(HandleCreateTopics(r, h.api_version)); },
          [&](DeleteTopicsRequest& r) { answer(HandleDeleteTopics(r)); },
          [&](DeleteRecordsRequest& r) { answer(HandleDeleteRecords(r)); },
          [&](InitProducerIdRequest& r) { answer(HandleInitProducerId(r)); },
          [&](DescribeConfigsRequest& r) { answer(HandleDescribeConfigs(r, h.api_version)); },
          [&](AlterConfigsRequest& r) { answer(HandleAlterConfigs(r)); },
      },
      request.body);
}

std::optional<ResponseBody> BrokerServer::InjectedError(const Request& request, ErrorCode code) {
  return std::visit(
      Overloaded{
          [&](const ProduceRequest& r) -> std::optional<ResponseBody> {
            ProduceResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (const auto& p : t.partitions) {
                rt.partitions.push_back({.index = p.index, .error_code = code});
              }
            }
            return resp;
          },
          [&](const FetchRequest& r) -> std::optional<ResponseBody> {
            FetchResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.responses.emplace_back();
              rt.topic = t.topic;
              for (const auto& p : t.partitions) {
                auto& rp = rt.partitions.emplace_back();
                rp.partition_index = p.partition;
                rp.error_code = code;
                rp.high_watermark = -1;
                rp.records = std::string();
              }
            }
            return resp;
          },
          [&](const ListOffsetsRequest& r) -> std::optional<ResponseBody> {
            ListOffsetsResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (const auto& p : t.partitions) {
                auto& rp = rt.partitions.emplace_back();
                rp.partition_index = p.partition_index;
                rp.error_code = code;
              }
            }
            return resp;
          },
          [&](const MetadataRequest& r) -> std::optional<ResponseBody> {
            MetadataResponse resp;
            resp.brokers.push_back({options_.node_id, advertised_host_, port_, std::nullopt});
            resp.cluster_id = cluster_id_;
            resp.controller_id = options_.node_id;
            for (const std::string& name : r.topics.value_or(std::vector<std::string>())) {
              auto& t = resp.topics.emplace_back();
              t.name = name;
              t.error_code = code;
            }
            return resp;
          },
          [&](const OffsetCommitRequest& r) -> std::optional<ResponseBody> {
            OffsetCommitResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (const auto& p : t.partitions) rt.partitions.push_back({p.partition_index, code});
            }
            return resp;
          },
          [&](const OffsetFetchRequest& r) -> std::optional<ResponseBody> {
            OffsetFetchResponse resp;
            resp.error_code = code;
            for (const auto& t : r.topics.value_or(std::vector<OffsetFetchRequest::Topic>())) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (int32_t p : t.partition_indexes) {
                auto& rp = rt.partitions.emplace_back();
                rp.partition_index = p;
                rp.error_code = code;
              }
            }
            return resp;
          },
          [&](const FindCoordinatorRequest&) -> std::optional<ResponseBody> {
            FindCoordinatorResponse resp;
            resp.error_code = code;
            resp.node_id = -1;
            resp.port = -1;
            return resp;
          },
          [&](const JoinGroupRequest& r) -> std::optional<ResponseBody> {
            JoinGroupResponse resp;
            resp.error_code = code;
            resp.member_id = r.member_id;
            return resp;
          },
          [&](const HeartbeatRequest&) -> std::optional<ResponseBody> {
            HeartbeatResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const LeaveGroupRequest&) -> std::optional<ResponseBody> {
            LeaveGroupResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const SyncGroupRequest&) -> std::optional<ResponseBody> {
            SyncGroupResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const ListGroupsRequest&) -> std::optional<ResponseBody> {
            ListGroupsResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const DescribeGroupsRequest& r) -> std::optional<ResponseBody> {
            DescribeGroupsResponse resp;
            for (const std::string& g : r.groups) {
              auto& rg = resp.groups.emplace_back();
              rg.error_code = code;
              rg.group_id = g;
            }
            return resp;
          },
          [&](const CreateTopicsRequest& r) -> std::optional<ResponseBody> {
            CreateTopicsResponse resp;
            for (const auto& t : r.topics) resp.topics.push_back({t.name, code, std::nullopt});
            return resp;
          },
          [&](const DeleteTopicsRequest& r) -> std::optional<ResponseBody> {
            DeleteTopicsResponse resp;
            for (const auto& t : r.topic_names) resp.responses.push_back({t, code});
            return resp;
          },
          [&](const DeleteRecordsRequest& r) -> std::optional<ResponseBody> {
            DeleteRecordsResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (const auto& p : t.partitions) {
                rt.partitions.push_back({p.partition_index, -1, code});
              }
            }
            return resp;
          },
          [&](const InitProducerIdRequest&) -> std::optional<ResponseBody> {
            InitProducerIdResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const DescribeConfigsRequest& r) -> std::optional<ResponseBody> {
            DescribeConfigsResponse resp;
            for (const auto& res : r.resources) {
              auto& rr = resp.results.emplace_back();
              rr.error_code = code;
              rr.resource_type = res.resource_type;
              rr.resource_name = res.resource_name;
            }
            return resp;
          },
          [&](const AlterConfigsRequest& r) -> std::optional<ResponseBody> {
            AlterConfigsResponse resp;
            for (const auto& res : r.resources) {
              auto& rr = resp.responses.emplace_back();
              rr.error_code = code;
              rr.resource_type = res.resource_type;
              rr.resource_name = res.resource_name;
            }
            return resp;
          },
          [&](const auto&) -> std::optional<ResponseBody> { return std::nullopt; },
      },
      request.body);
}

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
  TopicConfig defaults;
  defaults.segment_bytes = options_.segment_bytes;
  defaults.retention_ms = options_.retention_ms;
  defaults.retention_bytes = options_.retention_bytes;
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
  TopicConfig defaults;
  defaults.segment_bytes = options_.segment_bytes;
  defaults.retention_ms = options_.retention_ms;
  defaults.retention_bytes = options_.retention_bytes;
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
          {"message.max.bytes", std::to_string(TopicConfig().max_message_bytes)},
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
  TopicConfig defaults;
  defaults.segment_bytes = options_.segment_bytes;
  defaults.retention_ms = options_.retention_ms;
  defaults.retention_bytes = options_.retention_bytes;
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

// ---------------------------------------------------------------------------
// The data path.

void BrokerServer::HandleProduce(Conn* c, const RequestHeader& h, ProduceRequest& r) {
  produce_requests_.fetch_add(1, std::memory_order_relaxed);
  PendingProduce pending;
  pending.conn_id = c->id;
  pending.correlation_id = h.correlation_id;
  pending.version = h.api_version;
  const bool bad_acks = r.acks != 0 && r.acks != 1 && r.acks != -1;
  const int64_t now_ms = base::WallMs();
  bool appended = false;
  for (size_t ti = 0; ti < r.topics.size(); ti++) {
    auto& topic = r.topics[ti];
    auto& rt = pending.response.topics.emplace_back();
    rt.name = topic.name;
    for (size_t pi = 0; pi < topic.partitions.size(); pi++) {
      auto& part = topic.partitions[pi];
      auto& rp = rt.partitions.emplace_back();
      rp.index = part.index;
      if (bad_acks) {
        rp.error_code = ErrorCode::kInvalidRequiredAcks;
        continue;
      }
      if (r.transactional_id.has_value()) {
        rp.error_code = ErrorCode::kTransactionalIdAuthorizationFailed;
        continue;
      }
      PartitionLog* log = logs_->GetPartition(topic.name, part.index);
      if (log == nullptr) {
        rp.error_code = ErrorCode::kUnknownTopicOrPartition;
        continue;
      }
      rp.log_start_offset = log->log_start_offset();
      if (!part.records.has_value() || part.records->empty()) {
        rp.error_code = ErrorCode::kCorruptMessage;
        continue;
      }
      std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(part.records->data()),
                               part.records->size());
      auto result = log->Append(bytes, now_ms);
      if (!result.ok()) {
        rp.error_code = AppendError(result.status());
        TALLY_LOG_WARN_LIMITED(conn_log_, kLog, "produce to {}-{} from {} refused: {}", topic.name,
                               part.index, c->peer, result.status().ToString());
        continue;
      }
      switch (result->verdict) {
        case ProducerVerdict::kAppend:
          produce_records_.fetch_add(result->last_offset - result->base_offset + 1,
                                     std::memory_order_relaxed);
          produce_bytes_.fetch_add(static_cast<int64_t>(bytes.size()), std::memory_order_relaxed);
          appended = true;
          [[fallthrough]];
        case ProducerVerdict::kDuplicate:
          rp.base_offset = result->base_offset;
          pending.waits.push_back({ti, pi, result->last_offset});
          break;
        case ProducerVerdict::kOutOfOrderSequence:
          rp.error_code = ErrorCode::kOutOfOrderSequenceNumber;
          break;
        case ProducerVerdict::kInvalidEpoch:
          rp.error_code = ErrorCode::kInvalidProducerEpoch;
          break;
      }
    }
  }
  if (appended && options_.log_flush_ms == 0) recheck_ = true;  // wake fetches
  if (r.acks == 0) return;
  pending.slot = NewSlot(c);
  // Duplicates (a retry after a broker restart) and partitions the flusher
  // already passed are answered now: no flush round may come to wake them.
  bool durable = true;
  for (const PendingProduce::Wait& w : pending.waits) {
    const PartitionLog* log = logs_->GetPartition(
        r.topics[w.topic_index].name, r.topics[w.topic_index].partitions[w.partition_index].index);
    durable = durable && log != nullptr && log->high_watermark() > w.last_offset;
  }
  if (durable) {
    Fill(pending.conn_id, pending.slot, pending.correlation_id, pending.response, pending.version);
    return;
  }
  produces_.push_back(std::move(pending));
  if (options_.log_flush_ms == 0) recheck_ = true;
}

bool BrokerServer::BuildFetch(const FetchRequest& r, bool final, FetchResponse* out) {
  *out = FetchResponse();
  int64_t remaining = r.max_bytes > 0 ? r.max_bytes : INT32_MAX;
  int64_t total = 0;
  bool any_error = false;
  bool first_data = true;
  for (const auto& topic : r.topics) {
    auto& rt = out->responses.emplace_back();
    rt.topic = topic.topic;
    for (const auto& part : topic.partitions) {
      auto& rp = rt.partitions.emplace_back();
      rp.partition_index = part.partition;
      rp.preferred_read_replica = -1;
      rp.records = std::string();
      const PartitionLog* log = logs_->GetPartition(topic.topic, part.partition);
      if (log == nullptr) {
        rp.error_code = ErrorCode::kUnknownTopicOrPartition;
        rp.high_watermark = -1;
        any_error = true;
        continue;
      }
      const int64_t hw = log->high_watermark();
      rp.high_watermark = hw;
      rp.last_stable_offset = hw;
      rp.log_start_offset = log->log_start_offset();
      if (part.fetch_offset < rp.log_start_offset || part.fetch_offset > hw) {
        rp.error_code = ErrorCode::kOffsetOutOfRange;
        any_error = true;
        continue;
      }
      if (part.fetch_offset == hw) continue;
      const int64_t limit = std::min<int64_t>(part.partition_max_bytes, remaining);
      if (!first_data && limit <= 0) continue;
      auto data = log->Read(part.fetch_offset, std::max<int64_t>(limit, 1), hw);
      if (!data.ok()) {
        rp.error_code = data.status().code() == base::StatusCode::kOutOfRange
                            ? ErrorCode::kOffsetOutOfRange
                            : ErrorCode::kKafkaStorageError;
        any_error = true;
        continue;
      }
      if (data->empty()) continue;
      // Kafka's rule: only the first partition with data may exceed the
      // limits (by one batch), so a large batch never blocks a consumer.
      if (!first_data && static_cast<int64_t>(data->size()) > limit) continue;
      first_data = false;
      remaining -= static_cast<int64_t>(data->size());
      total += static_cast<int64_t>(data->size());
      rp.records = std::move(*data);
    }
  }
  const bool ready = final || any_error || r.max_wait_ms <= 0 || total >= r.min_bytes;
  if (ready) {
    fetch_bytes_.fetch_add(total, std::memory_order_relaxed);
    int64_t records = 0;
    for (const auto& t : out->responses) {
      for (const auto& p : t.partitions) {
        if (p.records.has_value()) records += CountRecords(*p.records);
      }
    }
    fetch_records_.fetch_add(records, std::memory_order_relaxed);
  }
  return ready;
}

void BrokerServer::HandleFetch(Conn* c, const RequestHeader& h, FetchRequest& r) {
  fetch_requests_.fetch_add(1, std::memory_order_relaxed);
  FetchResponse resp;
  const bool ready = BuildFetch(r, false, &resp);
  const uint64_t slot = NewSlot(c);
  if (ready) {
    Fill(c->id, slot, h.correlation_id, resp, h.api_version);
    return;
  }
  const int64_t deadline = base::SteadyMs() + r.max_wait_ms;
  fetches_.push_back({c->id, slot, h.correlation_id, h.api_version, std::move(r), deadline});
}

ResponseBody BrokerServer::HandleListOffsets(const ListOffsetsRequest& r, int16_t version) {
  ListOffsetsResponse resp;
  for (const auto& topic : r.topics) {
    auto& rt = resp.topics.emplace_back();
    rt.name = topic.name;
    for (const auto& part : topic.partitions) {
      auto& rp = rt.partitions.emplace_back();
      rp.partition_index = part.partition_index;
      const PartitionLog* log = logs_->GetPartition(topic.name, part.partition_index);
      if (log == nullptr) {
        rp.error_code = ErrorCode::kUnknownTopicOrPartition;
        continue;
      }
      auto found = log->ListOffsets(part.timestamp);
      if (!found.ok()) {
        rp.error_code = ErrorCode::kKafkaStorageError;
        continue;
      }
      const bool special =
          part.timestamp == kListOffsetsLatest || part.timestamp == kListOffsetsEarliest;
      if (version == 0) {
        if (found->offset >= 0 && part.max_num_offsets > 0) {
          rp.old_style_offsets.push_back(found->offset);
        }
        continue;
      }
      rp.offset = found->offset;
      rp.timestamp = special ? -1 : found->timestamp;
      rp.leader_epoch = found->offset >= 0 ? 0 : -1;
    }
  }
  return resp;
}

ResponseBody BrokerServer::HandleDeleteRecords(const DeleteRecordsRequest& r) {
  DeleteRecordsResponse resp;
  for (const auto& topic : r.topics) {
    auto& rt = resp.topics.emplace_back();
    rt.name = topic.name;
    for (const auto& part : topic.partitions) {
      auto& rp = rt.partitions.emplace_back();
      rp.partition_index = part.partition_index;
      rp.low_watermark = -1;
      PartitionLog* log = logs_->GetPartition(topic.name, part.partition_index);
      if (log == nullptr) {
        rp.error_code = ErrorCode::kUnknownTopicOrPartition;
        continue;
      }
      auto start = log->DeleteRecordsBefore(part.offset);
      if (!start.ok()) {
        rp.error_code = start.status().code() == base::StatusCode::kOutOfRange
                            ? ErrorCode::kOffsetOutOfRange
                            : ErrorCode::kKafkaStorageError;
        continue;
      }
      rp.low_watermark = *start;
    }
  }
  return resp;
}

ResponseBody BrokerServer::HandleInitProducerId(const InitProducerIdRequest& r) {
  InitProducerIdResponse resp;
  if (r.transactional_id.has_value()) {
    // Transactions are not supported; a fatal error for the client.
    resp.error_code = ErrorCode::kTransactionalIdAuthorizationFailed;
    return resp;
  }
  auto id = producer_ids_->Next();
  if (!id.ok()) {
    TALLY_LOG_ERROR(kLog, "cannot allocate a producer id: {}", id.status().ToString());
    resp.error_code = ErrorCode::kCoordinatorNotAvailable;
    return resp;
  }
  resp.producer_id = *id;
  resp.producer_epoch = 0;
  return resp;
}

// ---------------------------------------------------------------------------
// Groups.

void BrokerServer::HandleJoinGroup(Conn* c, const RequestHeader& h, const JoinGroupRequest& r) {
  GroupJoinRequest g;
  g.group_id = r.group_id;
  g.member_id = r.member_id;
  g.group_instance_id = r.group_instance_id.value_or("");
  g.client_id = h.client_id.value_or("");
  g.client_host = c->host;
  g.protocol_type = r.protocol_type;
  for (const auto& p : r.protocols) g.protocols.push_back({p.name, p.metadata});
  g.session_timeout_ms = r.session_timeout_ms;
  g.rebalance_timeout_ms = h.api_version == 0 ? r.session_timeout_ms : r.rebalance_timeout_ms;
  g.require_known_member_id = h.api_version >= 4;
  const uint64_t slot = NewSlot(c);
  coord_->JoinGroup(g, [this, conn_id = c->id, slot, corr = h.correlation_id,
                        version = h.api_version](JoinGroupResult res) {
    JoinGroupResponse resp;
    resp.error_code = static_cast<ErrorCode>(res.error);
    resp.generation_id = res.generation_id;
    resp.protocol_name = res.protocol_name;
    resp.leader = res.leader_id;
    resp.member_id = res.member_id;
    for (auto& m : res.members) {
      resp.members.push_back({m.member_id, NonEmpty(m.group_instance_id), std::move(m.metadata)});
    }
    Fill(conn_id, slot, corr, resp, version);
  });
}

void BrokerServer::HandleSyncGroup(Conn* c, const RequestHeader& h, const SyncGroupRequest& r) {
  GroupSyncRequest g;
  g.group_id = r.group_id;
  g.generation_id = r.generation_id;
  g.member_id = r.member_id;
  g.group_instance_id = r.group_instance_id.value_or("");
  for (const auto& a : r.assignments) g.assignments.push_back({a.member_id, a.assignment});
  const uint64_t slot = NewSlot(c);
  coord_->SyncGroup(g, [this, conn_id = c->id, slot, corr = h.correlation_id,
                        version = h.api_version](SyncGroupResult res) {
    SyncGroupResponse resp;
    resp.error_code = static_cast<ErrorCode>(res.error);
    resp.assignment = std::move(res.assignment);
    Fill(conn_id, slot, corr, resp, version);
  });
}

void BrokerServer::HandleOffsetCommit(Conn* c, const RequestHeader& h,
                                      const OffsetCommitRequest& r) {
  GroupOffsetCommitRequest g;
  g.group_id = r.group_id;
  g.generation_id = r.generation_id;
  g.member_id = r.member_id;
  g.group_instance_id = r.group_instance_id.value_or("");
  OffsetCommitResponse skeleton;
  for (const auto& t : r.topics) {
    auto& st = skeleton.topics.emplace_back();
    st.name = t.name;
    for (const auto& p : t.partitions) {
      g.partitions.push_back({t.name, p.partition_index, p.committed_offset,
                              p.committed_leader_epoch, p.committed_metadata.value_or("")});
      st.partitions.push_back({p.partition_index, ErrorCode::kNone});
    }
  }
  const uint64_t slot = NewSlot(c);
  coord_->OffsetCommit(
      g, [this, conn_id = c->id, slot, corr = h.correlation_id, version = h.api_version,
          resp = std::move(skeleton)](OffsetCommitResult res) mutable {
        size_t i = 0;
        for (auto& t : resp.topics) {
          for (auto& p : t.partitions) {
            if (i < res.partitions.size())
              p.error_code = static_cast<ErrorCode>(res.partitions[i].error);
            i++;
          }
        }
        Fill(conn_id, slot, corr, resp, version);
      });
}

ResponseBody BrokerServer::HandleOffsetFetch(const OffsetFetchRequest& r) {
  GroupOffsetFetchRequest g;
  g.group_id = r.group_id;
  g.all_partitions = !r.topics.has_value();
  if (r.topics.has_value()) {
    for (const auto& t : *r.topics) {
      for (int32_t p : t.partition_indexes) g.partitions.push_back({t.name, p});
    }
  }
  OffsetFetchResult res = coord_->OffsetFetch(g);
  OffsetFetchResponse resp;
  resp.error_code = static_cast<ErrorCode>(res.error);
  for (auto& p : res.partitions) {
    if (resp.topics.empty() || resp.topics.back().name != p.topic) {
      resp.topics.emplace_back().name = p.topic;
    }
    auto& rp = resp.topics.back().partitions.emplace_back();
    rp.partition_index = p.partition;
    rp.committed_offset = p.offset;
    rp.committed_leader_epoch = p.leader_epoch;
    rp.metadata = std::move(p.metadata);
    rp.error_code = static_cast<ErrorCode>(p.error != 0 ? p.error : res.error);
  }
  return resp;
}

ResponseBody BrokerServer::HandleDescribeGroups(const DescribeGroupsRequest& r) {
  DescribeGroupsResponse resp;
  for (const std::string& id : r.groups) {
    GroupDescription d = coord_->DescribeGroup(id);
    auto& g = resp.groups.emplace_back();
    g.error_code = static_cast<ErrorCode>(d.error);
    g.group_id = id;
    g.group_state = d.state;
    g.protocol_type = d.protocol_type;
    g.protocol_data = d.protocol_name;
    for (auto& m : d.members) {
      g.members.push_back({m.member_id, NonEmpty(m.group_instance_id), m.client_id, m.client_host,
                           std::move(m.metadata), std::move(m.assignment)});
    }
  }
  return resp;
}

ResponseBody BrokerServer::HandleListGroups() {
  ListGroupsResponse resp;
  for (const GroupListing& l : coord_->ListGroups()) {
    resp.groups.push_back({l.group_id, l.protocol_type});
  }
  return resp;
}

}  // namespace tally::broker
