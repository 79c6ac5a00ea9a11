// GroupCoordinator: Kafka's classic consumer-group protocol for a broker
// that coordinates every group (FindCoordinator always names this broker),
// plus the groups' committed offsets (kept by an OffsetStore).
//
// Each method mirrors one request. Heartbeat, LeaveGroup, OffsetFetch,
// DescribeGroups and ListGroups answer at once. JoinGroup and SyncGroup may
// be held: their callback runs when the rebalance completes, the leader's
// assignment arrives or a timer passes, from inside whichever later call
// (another member's request, Tick) made that happen. OffsetCommit answers
// through its callback once the commit is durable: after the flusher
// thread's OffsetStore::Flush, the network thread calls
// ReleaseDurableCommits (Tick does too); an invalid commit is answered at
// once. Protocol types, names, metadata and assignments are opaque bytes.
//
// Group membership lives in memory, as Kafka's does between restarts of its
// coordinator; after a broker restart members find themselves unknown and
// rejoin (UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION), while committed offsets
// come back from the store.
//
// Thread model: externally synchronized: one thread (the server's network
// thread) calls every method, and the callbacks run on it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "group/group.h"
#include "group/offset_store.h"
#include "group/requests.h"

namespace tally::broker {

// Where the coordinator reads time. Both default to the real clocks; tests
// inject a manual one.
struct GroupClock {
  std::function<int64_t()> steady_ms;  // timers (sessions, rebalances)
  std::function<int64_t()> wall_ms;    // commit timestamps, offset retention
};

struct GroupCoordinatorOptions {
  // Kafka's group.min/max.session.timeout.ms: JoinGroup outside the range
  // is answered INVALID_SESSION_TIMEOUT.
  int32_t min_session_timeout_ms = 6000;
  int32_t max_session_timeout_ms = 1800000;
  // Kafka's group.initial.rebalance.delay.ms: how long the first join of
  // an empty group waits for more members before completing. Kafka's
  // default is 3000; 0 here (no client needs the wait, and on one node it
  // only delays every consumer's start).
  int32_t initial_rebalance_delay_ms = 0;
  // Kafka's offset.metadata.max.bytes: longer commit metadata is answered
  // OFFSET_METADATA_TOO_LARGE.
  int32_t max_metadata_bytes = 4096;
  // Kafka's offsets.retention.minutes: offsets of a group without members
  // older than this (by commit time) are deleted. <= 0: kept forever.
  int64_t offsets_retention_ms = 7LL * 24 * 3600 * 1000;
  // How often Tick looks for expired offsets.
  int64_t offsets_retention_check_ms = 10 * 60 * 1000;
  // If set, a commit to a partition for which it returns false is answered
  // UNKNOWN_TOPIC_OR_PARTITION (the server asks its log).
  std::function<bool(const std::string& topic, int32_t partition)> partition_exists;
  // Defaults to base::SteadyMs and base::WallMs where unset.
  GroupClock clock;
};

class GroupCoordinator {
 public:
  // Tick's answer when nothing is scheduled.
  static constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();

  // `store` holds the committed offsets and must outlive the coordinator.
  explicit GroupCoordinator(OffsetStore* store, GroupCoordinatorOptions options = {});
  ~GroupCoordinator();
  GroupCoordinator(const GroupCoordinator&) = delete;
  GroupCoordinator& operator=(const GroupCoordinator&) = delete;

  // JoinGroup. `done` runs exactly once: at once for an error, for
  // MEMBER_ID_REQUIRED (v4+ new dynamic members, with the new id), for a
  // follower rejoining a Stable or CompletingRebalance group with unchanged
  // metadata and for a restarted static member when the group's protocol
  // does not change; otherwise when the rebalance completes (every member
  // rejoined, or the largest rebalance timeout passed, dropping the members
  // that did not). Errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT,
  // INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
  // REBALANCE_IN_PROGRESS (a second JoinGroup of one member replaced it).
  void JoinGroup(const GroupJoinRequest& request, JoinGroupCallback done);

  // SyncGroup. `done` runs once: at once in Stable (the member's
  // assignment) and for errors (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
  // FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS); a follower's SyncGroup in
  // CompletingRebalance is held until the leader's arrives (answered with
  // its assignment, "" if the leader gave it none) or a new rebalance
  // starts (REBALANCE_IN_PROGRESS); it waits at most the leader's session
  // timeout, after which the leader is dropped for never syncing.
  void SyncGroup(const GroupSyncRequest& request, SyncGroupCallback done);

  // Heartbeat: NONE in Stable and CompletingRebalance, REBALANCE_IN_PROGRESS
  // while the group prepares a rebalance (the member should rejoin), or
  // UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID.
  int16_t Heartbeat(const GroupHeartbeatRequest& request);

  // LeaveGroup: removes each named member (a static one may be named by
  // instance id alone) and starts a rebalance if others remain.
  LeaveGroupResult LeaveGroup(const GroupLeaveRequest& request);

  // OffsetCommit. Accepted (then answered once durable) from a member of
  // the current generation in any state (see README for Kafka's
  // CompletingRebalance rule and why we differ), or with generation < 0
  // while the group has no members. Errors per partition:
  // UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID,
  // OFFSET_METADATA_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION (with
  // partition_exists), COORDINATOR_NOT_AVAILABLE (the store failed).
  void OffsetCommit(const GroupOffsetCommitRequest& request, OffsetCommitCallback done);

  // OffsetFetch: the committed offsets asked for; -1 with no error for a
  // partition never committed (or a group that does not exist).
  OffsetFetchResult OffsetFetch(const GroupOffsetFetchRequest& request) const;

  // DescribeGroups for one group: state "Dead" with no error if unknown.
  GroupDescription DescribeGroup(const std::string& group_id) const;

  // ListGroups: every group with members or committed offsets, by id.
  std::vector<GroupListing> ListGroups() const;

  // Answers the commits that the store's DurableSequence now covers (or
  // fails them all with COORDINATOR_NOT_AVAILABLE if the store failed).
  // Call after each OffsetStore::Flush.
  void ReleaseDurableCommits();

  // Runs the timers due by the clock's now: expires sessions, pending
  // member ids and members that never synced; completes rebalances whose
  // timeout passed; expires old offsets; releases durable commits. Returns
  // the steady time of the next timer, or kNoDeadline.
  int64_t Tick();

  // Answers every held JoinGroup, SyncGroup and undurable commit with
  // COORDINATOR_NOT_AVAILABLE, for a server that is stopping.
  void AbortHeld();

  // Commits appended but not yet answered.
  size_t pending_commits() const { return pending_commits_.size(); }

 private:
  struct PendingCommit {
    uint64_t seq;
    OffsetCommitResult result;
    OffsetCommitCallback done;
  };
  using Group = internal::Group;
  using Member = internal::Member;

  int64_t Now() const { return options_.clock.steady_ms(); }
  internal::Group* Find(const std::string& group_id);
  const internal::Group* Find(const std::string& group_id) const;
  std::string NewMemberId(const Group& group, const GroupJoinRequest& request);

  void JoinUnknownMember(Group& group, const GroupJoinRequest& request, JoinGroupCallback done);
  void JoinKnownMember(Group& group, const GroupJoinRequest& request, JoinGroupCallback done);
  void AddMemberAndRebalance(Group& group, const std::string& member_id,
                             const GroupJoinRequest& request, JoinGroupCallback done);
  void UpdateMemberAndRebalance(Group& group, Member& member, const GroupJoinRequest& request,
                                JoinGroupCallback done);
  void ReplaceStaticMember(Group& group, const std::string& old_id, const std::string& new_id,
                           const GroupJoinRequest& request, JoinGroupCallback done);
  void MaybePrepareRebalance(Group& group, const char* reason);
  void PrepareRebalance(Group& group, const char* reason);
  void MaybeCompleteJoin(Group& group);
  void CompleteJoin(Group& group);
  void RemoveMember(Group& group, const std::string& member_id, const char* reason);
  JoinGroupResult CurrentGeneration(const Group& group, const Member& member,
                                    bool with_members) const;
  void ExpireOffsets();

  // Queues a callback to run once the current call has updated the state.
  void Answer(JoinGroupCallback& done, JoinGroupResult result);
  void Answer(SyncGroupCallback& done, SyncGroupResult result);
  void Answer(OffsetCommitCallback& done, OffsetCommitResult result);
  void RunReady();

  OffsetStore* const store_;
  GroupCoordinatorOptions options_;
  std::map<std::string, std::unique_ptr<Group>> groups_;
  std::deque<PendingCommit> pending_commits_;
  std::vector<std::function<void()>> ready_;
  uint64_t member_id_counter_ = 0;
  uint64_t member_id_seed_ = 0;
  int64_t next_retention_check_ms_ = 0;
};

}  // namespace tally::broker
