// The state of one consumer group inside the coordinator: its members, its
// generation and where it is in Kafka's classic rebalance protocol
//   Empty -> PreparingRebalance -> CompletingRebalance -> Stable
// (Dead is what a group that does not exist is reported as). Only
// GroupCoordinator changes it; the protocol rules (which protocol the group
// uses, who is fenced) live here as small pure helpers.
// Thread model: externally synchronized, owned by the coordinator.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "group/requests.h"

namespace tally::broker::internal {

enum class GroupState { kEmpty, kPreparingRebalance, kCompletingRebalance, kStable };

// Kafka's name of `state` ("CompletingRebalance"...).
const char* GroupStateName(GroupState state);

struct Member {
  std::string id;
  std::string instance_id;  // "" for a dynamic member
  std::string client_id;
  std::string client_host;
  std::string protocol_type;
  std::vector<GroupProtocol> protocols;
  int32_t session_timeout_ms = 0;
  int32_t rebalance_timeout_ms = 0;
  std::string assignment;  // of the current generation

  // A held JoinGroup: the member has (re)joined the rebalance in progress.
  JoinGroupCallback join_callback;
  // A held SyncGroup: waiting for the leader's assignment.
  SyncGroupCallback sync_callback;
  // Joined the current generation but has not sent SyncGroup yet; removed
  // at sync_deadline_ms if it does not.
  bool pending_sync = false;
  int64_t sync_deadline_ms = 0;
  // When the member was last heard of (join, sync, heartbeat, commit).
  int64_t last_heard_ms = 0;

  bool awaiting_join() const { return static_cast<bool>(join_callback); }
  // The metadata of protocol `name`, or "" if the member lacks it.
  const std::string& MetadataFor(const std::string& name) const;
  // True if `protocols` are the same names and metadata in the same order.
  bool SameProtocols(const std::vector<GroupProtocol>& protocols) const;
};

struct Group {
  explicit Group(std::string group_id) : id(std::move(group_id)) {}

  std::string id;
  GroupState state = GroupState::kEmpty;
  int32_t generation = 0;
  std::string protocol_type;  // set by the first member of an empty group
  std::string protocol_name;  // chosen at each completed join
  std::string leader_id;
  std::map<std::string, Member> members;
  std::map<std::string, std::string> static_members;  // instance id -> member id
  // Ids handed out with MEMBER_ID_REQUIRED, with the time they lapse. A
  // rebalance waits for them as for members (Kafka does).
  std::map<std::string, int64_t> pending_members;
  // PreparingRebalance: when the join completes whoever has rejoined.
  int64_t rebalance_deadline_ms = 0;
  // PreparingRebalance of a group that was empty: not before this time.
  int64_t initial_delay_until_ms = 0;

  bool Has(const std::string& member_id) const { return members.count(member_id) > 0; }

  // Whether a member with `protocol_type` and `protocols` may join: an empty
  // group takes any non-empty type and list; otherwise the type must match
  // and one of the protocols must be supported by every member.
  bool SupportsProtocols(const std::string& type,
                         const std::vector<GroupProtocol>& protocols) const;

  // Kafka's choice among the protocols every member supports: each member
  // votes for the first of them in its own order; most votes wins, a tie
  // going to the earlier one in the leader's order. "" if none is common.
  std::string SelectProtocol() const;

  // A static member's instance id is known with another member id.
  bool IsFenced(const std::string& member_id, const std::string& instance_id) const;

  // Every member has a held JoinGroup and no handed-out id is outstanding.
  bool AllJoined() const;

  // The longest rebalance timeout of the members.
  int32_t MaxRebalanceTimeoutMs() const;
};

}  // namespace tally::broker::internal
