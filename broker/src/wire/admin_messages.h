// The cluster and topic administration messages: ApiVersions, Metadata,
// CreateTopics, DeleteTopics, InitProducerId, DescribeConfigs and
// AlterConfigs, requests and responses. Common contract in wire/message.h.
//
// Thread model: value types; externally synchronized.
#pragma once

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wire/message.h"

namespace tally::broker {

// ApiVersions (key 18), supported v0-3; v3 is flexible.
struct ApiVersionsRequest {
  std::string client_software_name;     // v3+
  std::string client_software_version;  // v3+

  TALLY_WIRE_MESSAGE(ApiVersionsRequest, ApiKey::kApiVersions);
};

struct ApiVersionsResponse {
  struct ApiVersion {
    int16_t api_key = 0;
    int16_t min_version = 0;
    int16_t max_version = 0;
    bool operator==(const ApiVersion&) const = default;
  };
  ErrorCode error_code = ErrorCode::kNone;
  std::vector<ApiVersion> api_keys;
  int32_t throttle_time_ms = 0;  // v1+
  // The v3+ tagged fields (supported and finalized features) are skipped
  // when read and never written.

  TALLY_WIRE_MESSAGE(ApiVersionsResponse, ApiKey::kApiVersions);
};

// The response to a supported ApiVersions request: error NONE and every row
// of ApiVersionsTable().
ApiVersionsResponse MakeApiVersionsResponse();

// The answer to an ApiVersions request of an unsupported version, to be
// encoded at version 0 whatever the request's version: error
// UNSUPPORTED_VERSION and every row of the table, so that the client can
// retry at a version both sides know.
ApiVersionsResponse MakeUnsupportedApiVersionsResponse();

// Metadata (key 3), supported v0-8.
struct MetadataRequest {
  // Null asks for every topic. At v0 an empty array means every topic on the
  // wire; Decode turns it into null and Encode writes null as empty, so null
  // means "all" at every version. At v1+ an empty array asks for none.
  std::optional<std::vector<std::string>> topics;
  bool allow_auto_topic_creation = true;               // v4+
  bool include_cluster_authorized_operations = false;  // v8+
  bool include_topic_authorized_operations = false;    // v8+

  TALLY_WIRE_MESSAGE(MetadataRequest, ApiKey::kMetadata);
};

struct MetadataResponse {
  struct Broker {
    int32_t node_id = 0;
    std::string host;
    int32_t port = 0;
    std::optional<std::string> rack;  // v1+
    bool operator==(const Broker&) const = default;
  };
  struct Partition {
    ErrorCode error_code = ErrorCode::kNone;
    int32_t partition_index = 0;
    int32_t leader_id = 0;
    int32_t leader_epoch = -1;  // v7+
    std::vector<int32_t> replica_nodes;
    std::vector<int32_t> isr_nodes;
    std::vector<int32_t> offline_replicas;  // v5+
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    ErrorCode error_code = ErrorCode::kNone;
    std::string name;
    bool is_internal = false;  // v1+
    std::vector<Partition> partitions;
    int32_t topic_authorized_operations = INT32_MIN;  // v8+
    bool operator==(const Topic&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v3+
  std::vector<Broker> brokers;
  std::optional<std::string> cluster_id;  // v2+
  int32_t controller_id = -1;             // v1+
  std::vector<Topic> topics;
  int32_t cluster_authorized_operations = INT32_MIN;  // v8+

  TALLY_WIRE_MESSAGE(MetadataResponse, ApiKey::kMetadata);
};

// CreateTopics (key 19), supported v0-4.
struct CreateTopicsRequest {
  struct Assignment {
    int32_t partition_index = 0;
    std::vector<int32_t> broker_ids;
    bool operator==(const Assignment&) const = default;
  };
  struct Config {
    std::string name;
    std::optional<std::string> value;
    bool operator==(const Config&) const = default;
  };
  struct Topic {
    std::string name;
    int32_t num_partitions = -1;      // -1: the broker's default
    int16_t replication_factor = -1;  // -1: the broker's default
    std::vector<Assignment> assignments;
    std::vector<Config> configs;
    bool operator==(const Topic&) const = default;
  };
  std::vector<Topic> topics;
  int32_t timeout_ms = 60000;
  bool validate_only = false;  // v1+

  TALLY_WIRE_MESSAGE(CreateTopicsRequest, ApiKey::kCreateTopics);
};

struct CreateTopicsResponse {
  struct Topic {
    std::string name;
    ErrorCode error_code = ErrorCode::kNone;
    std::optional<std::string> error_message;  // v1+
    bool operator==(const Topic&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v2+
  std::vector<Topic> topics;

  TALLY_WIRE_MESSAGE(CreateTopicsResponse, ApiKey::kCreateTopics);
};

// DeleteTopics (key 20), supported v0-3.
struct DeleteTopicsRequest {
  std::vector<std::string> topic_names;
  int32_t timeout_ms = 0;

  TALLY_WIRE_MESSAGE(DeleteTopicsRequest, ApiKey::kDeleteTopics);
};

struct DeleteTopicsResponse {
  struct Result {
    std::string name;
    ErrorCode error_code = ErrorCode::kNone;
    bool operator==(const Result&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v1+
  std::vector<Result> responses;

  TALLY_WIRE_MESSAGE(DeleteTopicsResponse, ApiKey::kDeleteTopics);
};

// InitProducerId (key 22), supported v0-1.
struct InitProducerIdRequest {
  std::optional<std::string> transactional_id;  // null for an idempotent producer
  int32_t transaction_timeout_ms = 0;

  TALLY_WIRE_MESSAGE(InitProducerIdRequest, ApiKey::kInitProducerId);
};

struct InitProducerIdResponse {
  int32_t throttle_time_ms = 0;
  ErrorCode error_code = ErrorCode::kNone;
  int64_t producer_id = -1;
  int16_t producer_epoch = 0;

  TALLY_WIRE_MESSAGE(InitProducerIdResponse, ApiKey::kInitProducerId);
};

// Resource types of DescribeConfigs and AlterConfigs.
inline constexpr int8_t kResourceTypeTopic = 2;
inline constexpr int8_t kResourceTypeBroker = 4;

// DescribeConfigs (key 32), supported v0-2.
struct DescribeConfigsRequest {
  struct Resource {
    int8_t resource_type = 0;
    std::string resource_name;
    std::optional<std::vector<std::string>> configuration_keys;  // null: all
    bool operator==(const Resource&) const = default;
  };
  std::vector<Resource> resources;
  bool include_synonyms = false;  // v1+

  TALLY_WIRE_MESSAGE(DescribeConfigsRequest, ApiKey::kDescribeConfigs);
};

struct DescribeConfigsResponse {
  struct Synonym {
    std::string name;
    std::optional<std::string> value;
    int8_t source = 0;
    bool operator==(const Synonym&) const = default;
  };
  struct Config {
    std::string name;
    std::optional<std::string> value;
    bool read_only = false;
    bool is_default = false;    // v0 only
    int8_t config_source = -1;  // v1+ (5 default config, 1 topic config)
    bool is_sensitive = false;
    std::vector<Synonym> synonyms;  // v1+
    bool operator==(const Config&) const = default;
  };
  struct Result {
    ErrorCode error_code = ErrorCode::kNone;
    std::optional<std::string> error_message;
    int8_t resource_type = 0;
    std::string resource_name;
    std::vector<Config> configs;
    bool operator==(const Result&) const = default;
  };
  int32_t throttle_time_ms = 0;
  std::vector<Result> results;

  TALLY_WIRE_MESSAGE(DescribeConfigsResponse, ApiKey::kDescribeConfigs);
};

// AlterConfigs (key 33), supported v0-1.
struct AlterConfigsRequest {
  struct Config {
    std::string name;
    std::optional<std::string> value;
    bool operator==(const Config&) const = default;
  };
  struct Resource {
    int8_t resource_type = 0;
    std::string resource_name;
    std::vector<Config> configs;
    bool operator==(const Resource&) const = default;
  };
  std::vector<Resource> resources;
  bool validate_only = false;

  TALLY_WIRE_MESSAGE(AlterConfigsRequest, ApiKey::kAlterConfigs);
};

struct AlterConfigsResponse {
  struct Result {
    ErrorCode error_code = ErrorCode::kNone;
    std::optional<std::string> error_message;
    int8_t resource_type = 0;
    std::string resource_name;
    bool operator==(const Result&) const = default;
  };
  int32_t throttle_time_ms = 0;
  std::vector<Result> responses;

  TALLY_WIRE_MESSAGE(AlterConfigsResponse, ApiKey::kAlterConfigs);
};

}  // namespace tally::broker
