// The consumer group messages: FindCoordinator, JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup, DescribeGroups, ListGroups, OffsetCommit and
// OffsetFetch, requests and responses. Common contract in wire/message.h.
// Member metadata and assignments are opaque bytes, passed through.
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

// FindCoordinator (key 10), supported v0-2.
struct FindCoordinatorRequest {
  std::string key;      // the group id (or transactional id)
  int8_t key_type = 0;  // v1+; 0 group, 1 transaction

  TALLY_WIRE_MESSAGE(FindCoordinatorRequest, ApiKey::kFindCoordinator);
};

struct FindCoordinatorResponse {
  int32_t throttle_time_ms = 0;  // v1+
  ErrorCode error_code = ErrorCode::kNone;
  std::optional<std::string> error_message;  // v1+
  int32_t node_id = 0;
  std::string host;
  int32_t port = 0;

  TALLY_WIRE_MESSAGE(FindCoordinatorResponse, ApiKey::kFindCoordinator);
};

// JoinGroup (key 11), supported v0-5.
struct JoinGroupRequest {
  struct Protocol {
    std::string name;
    std::string metadata;
    bool operator==(const Protocol&) const = default;
  };
  std::string group_id;
  int32_t session_timeout_ms = 0;
  int32_t rebalance_timeout_ms = -1;  // v1+; v0 uses the session timeout
  std::string member_id;
  std::optional<std::string> group_instance_id;  // v5+
  std::string protocol_type;
  std::vector<Protocol> protocols;

  TALLY_WIRE_MESSAGE(JoinGroupRequest, ApiKey::kJoinGroup);
};

struct JoinGroupResponse {
  struct Member {
    std::string member_id;
    std::optional<std::string> group_instance_id;  // v5+
    std::string metadata;
    bool operator==(const Member&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v2+
  ErrorCode error_code = ErrorCode::kNone;
  int32_t generation_id = -1;
  std::string protocol_name;
  std::string leader;
  std::string member_id;
  std::vector<Member> members;  // only the leader gets them

  TALLY_WIRE_MESSAGE(JoinGroupResponse, ApiKey::kJoinGroup);
};

// Heartbeat (key 12), supported v0-3.
struct HeartbeatRequest {
  std::string group_id;
  int32_t generation_id = 0;
  std::string member_id;
  std::optional<std::string> group_instance_id;  // v3+

  TALLY_WIRE_MESSAGE(HeartbeatRequest, ApiKey::kHeartbeat);
};

struct HeartbeatResponse {
  int32_t throttle_time_ms = 0;  // v1+
  ErrorCode error_code = ErrorCode::kNone;

  TALLY_WIRE_MESSAGE(HeartbeatResponse, ApiKey::kHeartbeat);
};

// LeaveGroup (key 13), supported v0-2 (v3 batches members; not spoken).
struct LeaveGroupRequest {
  std::string group_id;
  std::string member_id;

  TALLY_WIRE_MESSAGE(LeaveGroupRequest, ApiKey::kLeaveGroup);
};

struct LeaveGroupResponse {
  int32_t throttle_time_ms = 0;  // v1+
  ErrorCode error_code = ErrorCode::kNone;

  TALLY_WIRE_MESSAGE(LeaveGroupResponse, ApiKey::kLeaveGroup);
};

// SyncGroup (key 14), supported v0-3.
struct SyncGroupRequest {
  struct Assignment {
    std::string member_id;
    std::string assignment;
    bool operator==(const Assignment&) const = default;
  };
  std::string group_id;
  int32_t generation_id = 0;
  std::string member_id;
  std::optional<std::string> group_instance_id;  // v3+
  std::vector<Assignment> assignments;           // only the leader sends them

  TALLY_WIRE_MESSAGE(SyncGroupRequest, ApiKey::kSyncGroup);
};

struct SyncGroupResponse {
  int32_t throttle_time_ms = 0;  // v1+
  ErrorCode error_code = ErrorCode::kNone;
  std::string assignment;

  TALLY_WIRE_MESSAGE(SyncGroupResponse, ApiKey::kSyncGroup);
};

// DescribeGroups (key 15), supported v0-4.
struct DescribeGroupsRequest {
  std::vector<std::string> groups;
  bool include_authorized_operations = false;  // v3+

  TALLY_WIRE_MESSAGE(DescribeGroupsRequest, ApiKey::kDescribeGroups);
};

struct DescribeGroupsResponse {
  struct Member {
    std::string member_id;
    std::optional<std::string> group_instance_id;  // v4+
    std::string client_id;
    std::string client_host;
    std::string member_metadata;
    std::string member_assignment;
    bool operator==(const Member&) const = default;
  };
  struct Group {
    ErrorCode error_code = ErrorCode::kNone;
    std::string group_id;
    std::string group_state;    // "Stable", "PreparingRebalance", ...
    std::string protocol_type;  // "consumer"
    std::string protocol_data;  // the chosen protocol (assignor) name
    std::vector<Member> members;
    int32_t authorized_operations = INT32_MIN;  // v3+
    bool operator==(const Group&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v1+
  std::vector<Group> groups;

  TALLY_WIRE_MESSAGE(DescribeGroupsResponse, ApiKey::kDescribeGroups);
};

// ListGroups (key 16), supported v0-2. The request has no fields.
struct ListGroupsRequest {
  TALLY_WIRE_MESSAGE(ListGroupsRequest, ApiKey::kListGroups);
};

struct ListGroupsResponse {
  struct Group {
    std::string group_id;
    std::string protocol_type;
    bool operator==(const Group&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v1+
  ErrorCode error_code = ErrorCode::kNone;
  std::vector<Group> groups;

  TALLY_WIRE_MESSAGE(ListGroupsResponse, ApiKey::kListGroups);
};

// OffsetCommit (key 8), supported v0-7.
struct OffsetCommitRequest {
  struct Partition {
    int32_t partition_index = 0;
    int64_t committed_offset = 0;
    int32_t committed_leader_epoch = -1;  // v6+
    int64_t commit_timestamp = -1;        // v1 only
    std::optional<std::string> committed_metadata;
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  std::string group_id;
  int32_t generation_id = -1;                    // v1+
  std::string member_id;                         // v1+
  std::optional<std::string> group_instance_id;  // v7+
  int64_t retention_time_ms = -1;                // v2-4
  std::vector<Topic> topics;

  TALLY_WIRE_MESSAGE(OffsetCommitRequest, ApiKey::kOffsetCommit);
};

struct OffsetCommitResponse {
  struct Partition {
    int32_t partition_index = 0;
    ErrorCode error_code = ErrorCode::kNone;
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v3+
  std::vector<Topic> topics;

  TALLY_WIRE_MESSAGE(OffsetCommitResponse, ApiKey::kOffsetCommit);
};

// OffsetFetch (key 9), supported v0-5.
struct OffsetFetchRequest {
  struct Topic {
    std::string name;
    std::vector<int32_t> partition_indexes;
    bool operator==(const Topic&) const = default;
  };
  std::string group_id;
  // Null (v2+) asks for every partition the group has committed; v0-1 have
  // no null (Encode writes it as an empty array).
  std::optional<std::vector<Topic>> topics = std::vector<Topic>();

  TALLY_WIRE_MESSAGE(OffsetFetchRequest, ApiKey::kOffsetFetch);
};

struct OffsetFetchResponse {
  struct Partition {
    int32_t partition_index = 0;
    int64_t committed_offset = -1;        // -1 with no error: nothing committed
    int32_t committed_leader_epoch = -1;  // v5+
    std::optional<std::string> metadata;
    ErrorCode error_code = ErrorCode::kNone;
    bool operator==(const Partition&) const = default;
  };
  struct Topic {
    std::string name;
    std::vector<Partition> partitions;
    bool operator==(const Topic&) const = default;
  };
  int32_t throttle_time_ms = 0;  // v3+
  std::vector<Topic> topics;
  ErrorCode error_code = ErrorCode::kNone;  // v2+

  TALLY_WIRE_MESSAGE(OffsetFetchResponse, ApiKey::kOffsetFetch);
};

}  // namespace tally::broker
