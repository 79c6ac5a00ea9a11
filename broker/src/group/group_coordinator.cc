// The membership half of GroupCoordinator: JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup and the timers. Offsets, DescribeGroups and ListGroups are in
// group_offsets.cc. The rules follow Kafka's GroupCoordinator (2.4 to 3.x);
// where they differ from it, the README says so.
#include "group/group_coordinator.h"

#include <fmt/core.h>

#include <algorithm>
#include <random>
#include <utility>

#include "base/clock.h"
#include "base/hash.h"
#include "base/log.h"
#include "group/errors.h"

namespace tally::broker {

using internal::GroupState;
namespace err = group_error;

namespace {

constexpr const char* kLog = "group";

JoinGroupResult JoinError(std::string member_id, int16_t error) {
  JoinGroupResult r;
  r.error = error;
  r.member_id = std::move(member_id);
  return r;
}

SyncGroupResult SyncError(int16_t error) {
  SyncGroupResult r;
  r.error = error;
  return r;
}

}  // namespace

GroupCoordinator::GroupCoordinator(OffsetStore* store, GroupCoordinatorOptions options)
    : store_(store), options_(std::move(options)) {
  if (!options_.clock.steady_ms) options_.clock.steady_ms = base::SteadyMs;
  if (!options_.clock.wall_ms) options_.clock.wall_ms = base::WallMs;
  std::random_device rd;
  member_id_seed_ =
      (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(options_.clock.wall_ms());
  next_retention_check_ms_ = Now() + options_.offsets_retention_check_ms;
}

GroupCoordinator::~GroupCoordinator() = default;

internal::Group* GroupCoordinator::Find(const std::string& group_id) {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? nullptr : it->second.get();
}

const internal::Group* GroupCoordinator::Find(const std::string& group_id) const {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? nullptr : it->second.get();
}

std::string GroupCoordinator::NewMemberId(const Group& group, const GroupJoinRequest& request) {
  // Kafka's form "<client id or instance id>-<uuid>": unique across
  // restarts of the broker, so a member from before a restart is unknown.
  const std::string& prefix =
      request.group_instance_id.empty() ? request.client_id : request.group_instance_id;
  for (;;) {
    uint64_t a = base::SplitMix64(member_id_seed_ + ++member_id_counter_);
    uint64_t b = base::SplitMix64(a ^ member_id_seed_);
    std::string id =
        fmt::format("{}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", prefix.empty() ? "member" : prefix,
                    a >> 32, (a >> 16) & 0xffff, a & 0xffff, b >> 48, b & 0xffffffffffffULL);
    if (!group.Has(id) && group.pending_members.count(id) == 0) return id;
  }
}

void GroupCoordinator::Answer(JoinGroupCallback& done, JoinGroupResult result) {
  if (!done) return;
  ready_.push_back([cb = std::move(done), r = std::move(result)]() mutable { cb(std::move(r)); });
  done = nullptr;
}

void GroupCoordinator::Answer(SyncGroupCallback& done, SyncGroupResult result) {
  if (!done) return;
  ready_.push_back([cb = std::move(done), r = std::move(result)]() mutable { cb(std::move(r)); });
  done = nullptr;
}

void GroupCoordinator::Answer(OffsetCommitCallback& done, OffsetCommitResult result) {
  if (!done) return;
  ready_.push_back([cb = std::move(done), r = std::move(result)]() mutable { cb(std::move(r)); });
  done = nullptr;
}

void GroupCoordinator::RunReady() {
  // A callback may call the coordinator, which runs its own answers; take
  // the batch out first so nothing runs twice or is lost.
  while (!ready_.empty()) {
    std::vector<std::function<void()>> batch;
    batch.swap(ready_);
    for (auto& f : batch) f();
  }
}

// ---- JoinGroup ------------------------------------------------------------

void GroupCoordinator::JoinGroup(const GroupJoinRequest& request, JoinGroupCallback done) {
  if (request.group_id.empty()) {
    Answer(done, JoinError(request.member_id, err::kInvalidGroupId));
  } else if (request.session_timeout_ms < options_.min_session_timeout_ms ||
             request.session_timeout_ms > options_.max_session_timeout_ms) {
    Answer(done, JoinError(request.member_id, err::kInvalidSessionTimeout));
  } else {
    Group* group = Find(request.group_id);
    if (group == nullptr && !request.member_id.empty()) {
      Answer(done, JoinError(request.member_id, err::kUnknownMemberId));
    } else {
      if (group == nullptr) {
        group = groups_.emplace(request.group_id, std::make_unique<Group>(request.group_id))
                    .first->second.get();
      }
      if (request.member_id.empty()) {
        JoinUnknownMember(*group, request, std::move(done));
      } else {
        JoinKnownMember(*group, request, std::move(done));
      }
      MaybeCompleteJoin(*group);
    }
  }
  RunReady();
}

void GroupCoordinator::JoinUnknownMember(Group& group, const GroupJoinRequest& request,
                                         JoinGroupCallback done) {
  if (!group.SupportsProtocols(request.protocol_type, request.protocols)) {
    Answer(done, JoinError("", err::kInconsistentGroupProtocol));
    return;
  }
  std::string id = NewMemberId(group, request);
  if (!request.group_instance_id.empty()) {
    auto it = group.static_members.find(request.group_instance_id);
    if (it != group.static_members.end()) {
      std::string old_id = it->second;
      ReplaceStaticMember(group, old_id, id, request, std::move(done));
    } else {
      AddMemberAndRebalance(group, id, request, std::move(done));
    }
  } else if (request.require_known_member_id) {
    // The member learns its id first and joins with it, so a JoinGroup
    // whose answer is lost does not leave an unknown member behind.
    group.pending_members[id] = Now() + request.session_timeout_ms;
    Answer(done, JoinError(id, err::kMemberIdRequired));
  } else {
    AddMemberAndRebalance(group, id, request, std::move(done));
  }
}

void GroupCoordinator::JoinKnownMember(Group& group, const GroupJoinRequest& request,
                                       JoinGroupCallback done) {
  const std::string& id = request.member_id;
  if (!group.SupportsProtocols(request.protocol_type, request.protocols)) {
    Answer(done, JoinError(id, err::kInconsistentGroupProtocol));
    return;
  }
  auto pending = group.pending_members.find(id);
  if (pending != group.pending_members.end() && request.group_instance_id.empty()) {
    group.pending_members.erase(pending);
    AddMemberAndRebalance(group, id, request, std::move(done));
    return;
  }
  if (group.IsFenced(id, request.group_instance_id)) {
    Answer(done, JoinError(id, err::kFencedInstanceId));
    return;
  }
  if (!group.Has(id) || (!request.group_instance_id.empty() &&
                         group.static_members.count(request.group_instance_id) == 0)) {
    Answer(done, JoinError(id, err::kUnknownMemberId));
    return;
  }
  Member& member = group.members.at(id);
  member.last_heard_ms = Now();
  switch (group.state) {
    case GroupState::kPreparingRebalance:
      UpdateMemberAndRebalance(group, member, request, std::move(done));
      break;
    case GroupState::kCompletingRebalance:
      if (member.SameProtocols(request.protocols)) {
        // The member lost our answer and asks again: repeat it.
        Answer(done, CurrentGeneration(group, member, group.leader_id == id));
      } else {
        UpdateMemberAndRebalance(group, member, request, std::move(done));
      }
      break;
    case GroupState::kStable:
      // The leader rejoins to have the group reassigned (its metadata may
      // not show why, e.g. new partitions); any member whose metadata
      // changed (a cooperative member after a revoke, a new subscription)
      // needs a new assignment too. Others just get the current generation.
      if (group.leader_id == id || !member.SameProtocols(request.protocols)) {
        UpdateMemberAndRebalance(group, member, request, std::move(done));
      } else {
        Answer(done, CurrentGeneration(group, member, false));
      }
      break;
    case GroupState::kEmpty:
      Answer(done, JoinError(id, err::kUnknownMemberId));
      break;
  }
}

void GroupCoordinator::AddMemberAndRebalance(Group& group, const std::string& member_id,
                                             const GroupJoinRequest& request,
                                             JoinGroupCallback done) {
  if (group.members.empty()) group.protocol_type = request.protocol_type;
  Member member;
  member.id = member_id;
  member.instance_id = request.group_instance_id;
  member.client_id = request.client_id;
  member.client_host = request.client_host;
  member.protocol_type = request.protocol_type;
  member.protocols = request.protocols;
  member.session_timeout_ms = request.session_timeout_ms;
  member.rebalance_timeout_ms = request.rebalance_timeout_ms;
  member.join_callback = std::move(done);
  member.last_heard_ms = Now();
  group.members.emplace(member_id, std::move(member));
  if (!request.group_instance_id.empty()) {
    group.static_members[request.group_instance_id] = member_id;
  }
  if (group.leader_id.empty()) group.leader_id = member_id;
  MaybePrepareRebalance(group, "a member joined");
}

void GroupCoordinator::UpdateMemberAndRebalance(Group& group, Member& member,
                                                const GroupJoinRequest& request,
                                                JoinGroupCallback done) {
  // A second JoinGroup while the first is held (the client gave up on it)
  // takes its place.
  Answer(member.join_callback, JoinError(member.id, err::kRebalanceInProgress));
  member.protocols = request.protocols;
  member.session_timeout_ms = request.session_timeout_ms;
  member.rebalance_timeout_ms = request.rebalance_timeout_ms;
  member.join_callback = std::move(done);
  MaybePrepareRebalance(group, "a member rejoined");
}

void GroupCoordinator::ReplaceStaticMember(Group& group, const std::string& old_id,
                                           const std::string& new_id,
                                           const GroupJoinRequest& request,
                                           JoinGroupCallback done) {
  auto node = group.members.extract(old_id);
  Member& member = node.mapped();
  // Whatever the old incarnation still waits for, it is fenced now.
  Answer(member.join_callback, JoinError(old_id, err::kFencedInstanceId));
  Answer(member.sync_callback, SyncError(err::kFencedInstanceId));
  const std::string old_leader = group.leader_id;
  member.id = new_id;
  member.client_id = request.client_id;
  member.client_host = request.client_host;
  member.protocols = request.protocols;
  member.session_timeout_ms = request.session_timeout_ms;
  member.rebalance_timeout_ms = request.rebalance_timeout_ms;
  member.last_heard_ms = Now();
  node.key() = new_id;
  Member& placed = group.members.insert(std::move(node)).position->second;
  group.static_members[request.group_instance_id] = new_id;
  if (group.leader_id == old_id) group.leader_id = new_id;
  TALLY_LOG_INFO(kLog, "group {}: static member {} rejoined as {} (was {})", group.id,
                 request.group_instance_id, new_id, old_id);

  switch (group.state) {
    case GroupState::kStable:
      if (group.SelectProtocol() == group.protocol_name) {
        // No rebalance: the member keeps its assignment and fetches it with
        // SyncGroup. The old leader id is returned so that a restarted
        // leader does not compute an assignment a Stable group would not
        // pass on.
        JoinGroupResult r = CurrentGeneration(group, placed, false);
        r.leader_id = old_leader;
        Answer(done, std::move(r));
      } else {
        placed.join_callback = std::move(done);
        PrepareRebalance(group, "a static member rejoined with other protocols");
      }
      break;
    case GroupState::kCompletingRebalance:
      // The leader may be assigning to the old id: start over.
      placed.join_callback = std::move(done);
      PrepareRebalance(group, "a static member rejoined during a rebalance");
      break;
    case GroupState::kPreparingRebalance:
    case GroupState::kEmpty:
      placed.join_callback = std::move(done);
      break;
  }
}

JoinGroupResult GroupCoordinator::CurrentGeneration(const Group& group, const Member& member,
                                                    bool with_members) const {
  JoinGroupResult r;
  r.generation_id = group.generation;
  r.protocol_type = group.protocol_type;
  r.protocol_name = group.protocol_name;
  r.leader_id = group.leader_id;
  r.member_id = member.id;
  if (with_members) {
    for (const auto& [id, m] : group.members) {
      r.members.push_back({id, m.instance_id, m.MetadataFor(group.protocol_name)});
    }
  }
  return r;
}

void GroupCoordinator::MaybePrepareRebalance(Group& group, const char* reason) {
  if (group.state != GroupState::kPreparingRebalance) PrepareRebalance(group, reason);
}

void GroupCoordinator::PrepareRebalance(Group& group, const char* reason) {
  const int64_t now = Now();
  if (group.state == GroupState::kCompletingRebalance) {
    // Held SyncGroups will never get this generation's assignment; their
    // members rejoin now, so their sessions start over.
    for (auto& [id, m] : group.members) {
      m.assignment.clear();
      if (m.sync_callback) m.last_heard_ms = now;
      Answer(m.sync_callback, SyncError(err::kRebalanceInProgress));
    }
  }
  group.initial_delay_until_ms =
      group.state == GroupState::kEmpty ? now + options_.initial_rebalance_delay_ms : 0;
  group.rebalance_deadline_ms = now + group.MaxRebalanceTimeoutMs();
  TALLY_LOG_INFO(kLog, "group {}: preparing to rebalance in state {} at generation {} ({})",
                 group.id, internal::GroupStateName(group.state), group.generation, reason);
  group.state = GroupState::kPreparingRebalance;
}

void GroupCoordinator::MaybeCompleteJoin(Group& group) {
  if (group.state == GroupState::kPreparingRebalance && group.AllJoined() &&
      Now() >= group.initial_delay_until_ms) {
    CompleteJoin(group);
  }
}

void GroupCoordinator::CompleteJoin(Group& group) {
  // Members that did not rejoin in time are out (static ones too, unlike
  // Kafka, which keeps them until their session expires).
  for (auto it = group.members.begin(); it != group.members.end();) {
    if (it->second.awaiting_join()) {
      ++it;
      continue;
    }
    TALLY_LOG_INFO(kLog, "group {}: member {} did not rejoin in time; removed", group.id,
                   it->first);
    Answer(it->second.sync_callback, SyncError(err::kRebalanceInProgress));
    if (!it->second.instance_id.empty()) group.static_members.erase(it->second.instance_id);
    it = group.members.erase(it);
  }
  group.generation++;
  if (group.members.empty()) {
    group.state = GroupState::kEmpty;
    group.protocol_name.clear();
    group.leader_id.clear();
    TALLY_LOG_INFO(kLog, "group {}: empty at generation {}", group.id, group.generation);
    return;
  }
  if (!group.Has(group.leader_id)) group.leader_id = group.members.begin()->first;
  group.protocol_name = group.SelectProtocol();
  group.state = GroupState::kCompletingRebalance;
  const int64_t now = Now();
  for (auto& [id, m] : group.members) {
    Answer(m.join_callback, CurrentGeneration(group, m, id == group.leader_id));
    m.last_heard_ms = now;
    m.pending_sync = true;
    m.sync_deadline_ms = now + m.session_timeout_ms;
  }
  TALLY_LOG_INFO(kLog, "group {}: generation {} with {} members, protocol {}, leader {}", group.id,
                 group.generation, group.members.size(), group.protocol_name, group.leader_id);
}

// ---- SyncGroup, Heartbeat, LeaveGroup -------------------------------------

void GroupCoordinator::SyncGroup(const GroupSyncRequest& request, SyncGroupCallback done) {
  Group* group = request.group_id.empty() ? nullptr : Find(request.group_id);
  if (request.group_id.empty()) {
    Answer(done, SyncError(err::kInvalidGroupId));
  } else if (group == nullptr) {
    Answer(done, SyncError(err::kUnknownMemberId));
  } else if (group->IsFenced(request.member_id, request.group_instance_id)) {
    Answer(done, SyncError(err::kFencedInstanceId));
  } else if (!group->Has(request.member_id)) {
    Answer(done, SyncError(err::kUnknownMemberId));
  } else if (request.generation_id != group->generation) {
    Answer(done, SyncError(err::kIllegalGeneration));
  } else {
    Member& member = group->members.at(request.member_id);
    switch (group->state) {
      case GroupState::kEmpty:
        Answer(done, SyncError(err::kUnknownMemberId));
        break;
      case GroupState::kPreparingRebalance:
        Answer(done, SyncError(err::kRebalanceInProgress));
        break;
      case GroupState::kCompletingRebalance: {
        member.last_heard_ms = Now();
        member.pending_sync = false;
        Answer(member.sync_callback, SyncError(err::kRebalanceInProgress));
        member.sync_callback = std::move(done);
        if (group->leader_id != member.id) break;
        std::map<std::string, std::string> given;
        for (const SyncGroupAssignment& a : request.assignments) given[a.member_id] = a.assignment;
        const int64_t now = Now();
        for (auto& [id, m] : group->members) {
          auto it = given.find(id);
          m.assignment = it == given.end() ? std::string() : it->second;
          if (m.sync_callback) m.last_heard_ms = now;
          Answer(m.sync_callback,
                 {err::kNone, group->protocol_type, group->protocol_name, m.assignment});
        }
        group->state = GroupState::kStable;
        TALLY_LOG_INFO(kLog, "group {}: stable at generation {}", group->id, group->generation);
        break;
      }
      case GroupState::kStable:
        member.last_heard_ms = Now();
        member.pending_sync = false;
        Answer(done, {err::kNone, group->protocol_type, group->protocol_name, member.assignment});
        break;
    }
  }
  RunReady();
}

int16_t GroupCoordinator::Heartbeat(const GroupHeartbeatRequest& request) {
  if (request.group_id.empty()) return err::kInvalidGroupId;
  Group* group = Find(request.group_id);
  if (group == nullptr) return err::kUnknownMemberId;
  if (group->IsFenced(request.member_id, request.group_instance_id)) {
    return err::kFencedInstanceId;
  }
  if (!group->Has(request.member_id)) return err::kUnknownMemberId;
  if (request.generation_id != group->generation) return err::kIllegalGeneration;
  Member& member = group->members.at(request.member_id);
  switch (group->state) {
    case GroupState::kEmpty:
      return err::kUnknownMemberId;
    case GroupState::kPreparingRebalance:
      member.last_heard_ms = Now();
      return err::kRebalanceInProgress;
    case GroupState::kCompletingRebalance:
    case GroupState::kStable:
      member.last_heard_ms = Now();
      return err::kNone;
  }
  return err::kNone;
}

LeaveGroupResult GroupCoordinator::LeaveGroup(const GroupLeaveRequest& request) {
  LeaveGroupResult result;
  if (request.group_id.empty()) {
    result.error = err::kInvalidGroupId;
    return result;
  }
  Group* group = Find(request.group_id);
  for (const LeaveGroupMember& leaving : request.members) {
    int16_t error = err::kNone;
    if (group == nullptr) {
      error = err::kUnknownMemberId;
    } else if (!leaving.member_id.empty() &&
               group->IsFenced(leaving.member_id, leaving.group_instance_id)) {
      error = err::kFencedInstanceId;
    } else if (group->pending_members.erase(leaving.member_id) > 0) {
      MaybeCompleteJoin(*group);
    } else {
      auto it = leaving.group_instance_id.empty()
                    ? group->static_members.end()
                    : group->static_members.find(leaving.group_instance_id);
      std::string id = it != group->static_members.end() ? it->second : leaving.member_id;
      if (group->Has(id)) {
        RemoveMember(*group, id, "the member left");
      } else {
        error = err::kUnknownMemberId;
      }
    }
    result.member_errors.push_back(error);
  }
  RunReady();
  return result;
}

void GroupCoordinator::RemoveMember(Group& group, const std::string& member_id,
                                    const char* reason) {
  auto it = group.members.find(member_id);
  if (it == group.members.end()) return;
  TALLY_LOG_INFO(kLog, "group {}: member {} removed: {}", group.id, member_id, reason);
  Answer(it->second.join_callback, JoinError("", err::kUnknownMemberId));
  Answer(it->second.sync_callback, SyncError(err::kUnknownMemberId));
  if (!it->second.instance_id.empty()) group.static_members.erase(it->second.instance_id);
  group.members.erase(it);
  if (group.leader_id == member_id) {
    group.leader_id = group.members.empty() ? std::string() : group.members.begin()->first;
  }
  switch (group.state) {
    case GroupState::kStable:
    case GroupState::kCompletingRebalance:
      PrepareRebalance(group, reason);
      MaybeCompleteJoin(group);
      break;
    case GroupState::kPreparingRebalance:
      MaybeCompleteJoin(group);
      break;
    case GroupState::kEmpty:
      break;
  }
}

// ---- timers ---------------------------------------------------------------

int64_t GroupCoordinator::Tick() {
  const int64_t now = Now();
  int64_t next = kNoDeadline;
  for (auto& [group_id, owned] : groups_) {
    Group& group = *owned;
    for (auto it = group.pending_members.begin(); it != group.pending_members.end();) {
      if (now >= it->second) {
        it = group.pending_members.erase(it);
        MaybeCompleteJoin(group);
      } else {
        next = std::min(next, it->second);
        ++it;
      }
    }
    std::vector<std::pair<std::string, const char*>> expired;
    for (auto& [id, m] : group.members) {
      // A held JoinGroup is bounded by the rebalance timeout, a held
      // SyncGroup by the leader's sync deadline: neither needs heartbeats.
      if (m.awaiting_join() || m.sync_callback) continue;
      if (m.pending_sync && group.state != GroupState::kPreparingRebalance) {
        if (now >= m.sync_deadline_ms) {
          expired.emplace_back(id, "no SyncGroup within the session timeout");
          continue;
        }
        next = std::min(next, m.sync_deadline_ms);
      }
      const int64_t session_end = m.last_heard_ms + m.session_timeout_ms;
      if (now >= session_end) {
        expired.emplace_back(id, "session timed out");
      } else {
        next = std::min(next, session_end);
      }
    }
    for (const auto& [id, reason] : expired) RemoveMember(group, id, reason);
    if (group.state == GroupState::kPreparingRebalance) {
      if (now >= group.rebalance_deadline_ms) {
        CompleteJoin(group);
      } else {
        MaybeCompleteJoin(group);
      }
    }
    if (group.state == GroupState::kPreparingRebalance) {
      next = std::min(next, group.rebalance_deadline_ms);
      if (group.initial_delay_until_ms > now) next = std::min(next, group.initial_delay_until_ms);
    }
  }
  // A group without members or offsets is forgotten, as Kafka does at its
  // next cleanup; it costs nothing to recreate.
  for (auto it = groups_.begin(); it != groups_.end();) {
    const Group& g = *it->second;
    if (g.state == GroupState::kEmpty && g.members.empty() && g.pending_members.empty() &&
        store_->ForGroup(g.id) == nullptr) {
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
  if (now >= next_retention_check_ms_) {
    next_retention_check_ms_ = now + options_.offsets_retention_check_ms;
    ExpireOffsets();
  }
  next = std::min(next, next_retention_check_ms_);
  ReleaseDurableCommits();  // runs the answers queued above
  RunReady();
  return next;
}

void GroupCoordinator::AbortHeld() {
  for (auto& [group_id, group] : groups_) {
    for (auto& [id, m] : group->members) {
      Answer(m.join_callback, JoinError(id, err::kCoordinatorNotAvailable));
      Answer(m.sync_callback, SyncError(err::kCoordinatorNotAvailable));
    }
  }
  for (PendingCommit& p : pending_commits_) {
    for (auto& part : p.result.partitions) part.error = err::kCoordinatorNotAvailable;
    Answer(p.done, std::move(p.result));
  }
  pending_commits_.clear();
  RunReady();
}

}  // namespace tally::broker
