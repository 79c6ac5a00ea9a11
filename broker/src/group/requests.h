// The group coordinator's requests and answers: plain structs that mirror
// Kafka's JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
// OffsetFetch, DescribeGroups and ListGroups, without their wire encoding.
// The server translates the decoded wire structs into these and back; a
// field a request version lacks takes the default written here. Byte
// strings (protocol metadata, assignments, offset metadata) are carried in
// std::string and passed through byte for byte.
// Thread model: value types.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tally::broker {

// One protocol a member supports ("range", "cooperative-sticky"...) with its
// opaque metadata (for "consumer": subscription and owned partitions).
struct GroupProtocol {
  std::string name;
  std::string metadata;
};

struct GroupJoinRequest {
  std::string group_id;
  std::string member_id;                 // "" for a member that has none yet
  std::string group_instance_id;         // static membership (v5+); "" for dynamic
  std::string client_id;                 // from the request header; names new member ids
  std::string client_host;               // shown by DescribeGroups
  std::string protocol_type;             // "consumer" for consumers; opaque here
  std::vector<GroupProtocol> protocols;  // in the member's order of preference
  int32_t session_timeout_ms = 0;
  int32_t rebalance_timeout_ms = 0;  // v0 has none: pass the session timeout
  // v4+: a new dynamic member is first answered MEMBER_ID_REQUIRED with its
  // id, and joins with that id in a second request.
  bool require_known_member_id = false;
};

// A member as the leader sees it in its JoinGroup answer.
struct JoinGroupMember {
  std::string member_id;
  std::string group_instance_id;
  std::string metadata;  // for the group's chosen protocol
};

struct JoinGroupResult {
  int16_t error = 0;
  int32_t generation_id = -1;
  std::string protocol_type;
  std::string protocol_name;
  std::string leader_id;
  std::string member_id;                 // the member's id (a new one for a new member)
  std::vector<JoinGroupMember> members;  // every member for the leader, else empty
};

struct SyncGroupAssignment {
  std::string member_id;
  std::string assignment;
};

struct GroupSyncRequest {
  std::string group_id;
  int32_t generation_id = -1;
  std::string member_id;
  std::string group_instance_id;
  std::vector<SyncGroupAssignment> assignments;  // from the leader only
};

struct SyncGroupResult {
  int16_t error = 0;
  std::string protocol_type;  // SyncGroup v5+ echoes these
  std::string protocol_name;
  std::string assignment;  // may be empty, also on success
};

struct GroupHeartbeatRequest {
  std::string group_id;
  int32_t generation_id = -1;
  std::string member_id;
  std::string group_instance_id;
};

// One member leaving: v0-2 name one member id; v3+ a list, each with an
// optional instance id (a static member may leave by instance id alone).
struct LeaveGroupMember {
  std::string member_id;
  std::string group_instance_id;
};

struct GroupLeaveRequest {
  std::string group_id;
  std::vector<LeaveGroupMember> members;
};

struct LeaveGroupResult {
  int16_t error = 0;                   // the request's error (v0-2 carry only this)
  std::vector<int16_t> member_errors;  // one per request member, in order
};

struct OffsetCommitPartition {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  int32_t leader_epoch = -1;  // v6+; -1 when absent
  std::string metadata;       // a null metadata arrives as ""
};

struct GroupOffsetCommitRequest {
  std::string group_id;
  // -1 with an empty member id: a commit from outside group management
  // (kcat, admin tools, manual assignment), accepted while the group has no
  // members.
  int32_t generation_id = -1;
  std::string member_id;
  std::string group_instance_id;
  std::vector<OffsetCommitPartition> partitions;
};

struct OffsetCommitPartitionResult {
  std::string topic;
  int32_t partition = 0;
  int16_t error = 0;
};

// One entry per request partition, in the request's order.
struct OffsetCommitResult {
  std::vector<OffsetCommitPartitionResult> partitions;
};

struct TopicPartitionRef {
  std::string topic;
  int32_t partition = 0;
};

struct GroupOffsetFetchRequest {
  std::string group_id;
  bool all_partitions = false;                // v2+ null topics: every committed partition
  std::vector<TopicPartitionRef> partitions;  // when !all_partitions
};

struct OffsetFetchPartition {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = -1;  // -1: never committed (not an error)
  int32_t leader_epoch = -1;
  std::string metadata;
  int16_t error = 0;
};

struct OffsetFetchResult {
  int16_t error = 0;  // v2+ top-level error
  // Request order, or for all_partitions sorted by topic then partition.
  std::vector<OffsetFetchPartition> partitions;
};

struct GroupMemberDescription {
  std::string member_id;
  std::string group_instance_id;
  std::string client_id;
  std::string client_host;
  std::string metadata;    // empty unless the group is Stable, as Kafka
  std::string assignment;  // empty unless the group is Stable, as Kafka
};

struct GroupDescription {
  int16_t error = 0;
  std::string group_id;
  // "Empty", "PreparingRebalance", "CompletingRebalance", "Stable" or
  // "Dead" (a group that does not exist, as Kafka answers it).
  std::string state;
  std::string protocol_type;
  std::string protocol_name;  // "" unless Stable
  std::vector<GroupMemberDescription> members;
};

struct GroupListing {
  std::string group_id;
  std::string protocol_type;  // "" for a group that only has committed offsets
  std::string state;
};

// How held answers come back. A callback runs on the thread that calls the
// coordinator, from inside a coordinator call (the one that completed it:
// another member's request, Tick, ReleaseDurableCommits), after the
// coordinator's state is updated; it may call the coordinator again.
using JoinGroupCallback = std::function<void(JoinGroupResult)>;
using SyncGroupCallback = std::function<void(SyncGroupResult)>;
using OffsetCommitCallback = std::function<void(OffsetCommitResult)>;

}  // namespace tally::broker
