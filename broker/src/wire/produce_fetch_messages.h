// The data path's messages: Produce, Fetch, ListOffsets and DeleteRecords,
// requests and responses. Common contract in wire/message.h. Record sets are
// opaque nullable bytes.
//
// Thread model: value types; externally synchronized.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wire/message.h"

namespace tally::broker {

// Produce (key 0), supported v3-7.
struct ProduceRequest {
  struct Partition {
    int32_t index = 0;
    std::optional<std::string> records;  // a record set (batches of format v2)
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  std::optional<std::string> transactional_id;  // v3+
  int16_t acks = 0;
  int32_t timeout_ms = 0;
  std::vector<Topic> topics;

  TALLY_WIRE_MESSAGE(ProduceRequest, ApiKey::kProduce);
};

struct ProduceResponse {
  struct Partition {
    int32_t index = 0;
    ErrorCode error_code = ErrorCode::kNone;
    int64_t base_offset = -1;
    int64_t log_append_time_ms = -1;  // v2+; -1 for CreateTime topics
    int64_t log_start_offset = -1;    // v5+
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  std::vector<Topic> topics;
  int32_t throttle_time_ms = 0;  // v1+

  TALLY_WIRE_MESSAGE(ProduceResponse, ApiKey::kProduce);
};

// Fetch (key 1), supported v4-11.
struct FetchRequest {
  struct Partition {
    int32_t partition = 0;
    int32_t current_leader_epoch = -1;  // v9+
    int64_t fetch_offset = 0;
    int64_t log_start_offset = -1;  // v5+; only followers set it
    int32_t partition_max_bytes = 0;
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string topic;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  struct ForgottenTopic {
    std::string topic;
    std::vector<int32_t> partitions;
    bool operator==(const ForgottenTopic&) const = default;
  };
  int32_t replica_id = -1;  // -1 for consumers
  int32_t max_wait_ms = 0;
  int32_t min_bytes = 0;
  int32_t max_bytes = INT32_MAX;  // v3+
  int8_t isolation_level = 0;     // v4+; 0 read uncommitted, 1 read committed
  int32_t session_id = 0;         // v7+
  int32_t session_epoch = -1;     // v7+
  std::vector<Topic> topics;
  std::vector<ForgottenTopic> forgotten_topics_data;  // v7+
  std::string rack_id;                                // v11+

  TALLY_WIRE_MESSAGE(FetchRequest, ApiKey::kFetch);
};

struct FetchResponse {
  struct AbortedTransaction {
    int64_t producer_id = 0;
    int64_t first_offset = 0;
    bool operator==(const AbortedTransaction&) const = default;
  };
  struct Partition {
    int32_t partition_index = 0;
    ErrorCode error_code = ErrorCode::kNone;
    int64_t high_watermark = 0;
    int64_t last_stable_offset = -1;                                      // v4+
    int64_t log_start_offset = -1;                                        // v5+
    std::optional<std::vector<AbortedTransaction>> aborted_transactions;  // v4+
    int32_t preferred_read_replica = -1;                                  // v11+
    std::optional<std::string> records;
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string topic;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  int32_t throttle_time_ms = 0;             // v1+
  ErrorCode error_code = ErrorCode::kNone;  // v7+
  int32_t session_id = 0;                   // v7+
  std::vector<Topic> responses;

  TALLY_WIRE_MESSAGE(FetchResponse, ApiKey::kFetch);
};

// ListOffsets (key 2), supported v0-5.
struct ListOffsetsRequest {
  struct Partition {
    int32_t partition_index = 0;
    int32_t current_leader_epoch = -1;  // v4+
    int64_t timestamp = 0;              // -1 latest, -2 earliest, else a time
    int32_t max_num_offsets = 1;        // v0 only
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  int32_t replica_id = -1;
  int8_t isolation_level = 0;  // v2+
  std::vector<Topic> topics;

  TALLY_WIRE_MESSAGE(ListOffsetsRequest, ApiKey::kListOffsets);
};

struct ListOffsetsResponse {
  struct Partition {
    int32_t partition_index = 0;
    ErrorCode error_code = ErrorCode::kNone;
    std::vector<int64_t> old_style_offsets;  // v0 only
    int64_t timestamp = -1;                  // v1+
    int64_t offset = -1;                     // v1+
    int32_t leader_epoch = -1;               // v4+
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v2+
  std::vector<Topic> topics;

  TALLY_WIRE_MESSAGE(ListOffsetsResponse, ApiKey::kListOffsets);
};

// DeleteRecords (key 21), supported v0-1.
struct DeleteRecordsRequest {
  struct Partition {
    int32_t partition_index = 0;
    int64_t offset = 0;  // delete below this; -1 means the high watermark
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  std::vector<Topic> topics;
  int32_t timeout_ms = 0;

  TALLY_WIRE_MESSAGE(DeleteRecordsRequest, ApiKey::kDeleteRecords);
};

struct DeleteRecordsResponse {
  struct Partition {
    int32_t partition_index = 0;
    int64_t low_watermark = 0;
    ErrorCode error_code = ErrorCode::kNone;
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  int32_t throttle_time_ms = 0;
  std::vector<Topic> topics;

  TALLY_WIRE_MESSAGE(DeleteRecordsResponse, ApiKey::kDeleteRecords);
};

}  // namespace tally::broker
