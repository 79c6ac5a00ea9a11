// The offsets half of GroupCoordinator: OffsetCommit (answered once the
// OffsetStore has it on disk), OffsetFetch, offset retention, and the two
// read-only requests DescribeGroups and ListGroups.
#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "base/log.h"
#include "group/errors.h"
#include "group/group_coordinator.h"

namespace tally::broker {

using internal::GroupState;
namespace err = group_error;

namespace {

constexpr const char* kLog = "group";

base::LogLimiter store_error_limiter(5, 60000);

}  // namespace

void GroupCoordinator::OffsetCommit(const GroupOffsetCommitRequest& request,
                                    OffsetCommitCallback done) {
  OffsetCommitResult result;
  result.partitions.reserve(request.partitions.size());
  for (const OffsetCommitPartition& p : request.partitions) {
    result.partitions.push_back({p.topic, p.partition, err::kNone});
  }
  auto fail_all = [&](int16_t error) {
    for (auto& part : result.partitions) part.error = error;
    Answer(done, std::move(result));
    RunReady();
  };

  // Kafka's rules (GroupCoordinator.handleCommitOffsets): a commit outside
  // group management (generation < 0) is taken while the group has no
  // members; otherwise it must come from a member of the current
  // generation. Unlike Kafka we take it in CompletingRebalance too: the
  // member and generation are valid, and librdkafka treats the
  // REBALANCE_IN_PROGRESS Kafka answers there as a final failure.
  if (request.group_id.size() > UINT16_MAX) return fail_all(err::kInvalidGroupId);
  Group* group = Find(request.group_id);
  if (group == nullptr) {
    if (request.generation_id >= 0) return fail_all(err::kIllegalGeneration);
  } else if (group->IsFenced(request.member_id, request.group_instance_id)) {
    return fail_all(err::kFencedInstanceId);
  } else if (request.generation_id < 0 && group->members.empty()) {
    // A simple commit.
  } else if (!group->Has(request.member_id)) {
    return fail_all(err::kUnknownMemberId);
  } else if (request.generation_id != group->generation) {
    return fail_all(err::kIllegalGeneration);
  } else {
    group->members.at(request.member_id).last_heard_ms = Now();
  }

  const int64_t wall = options_.clock.wall_ms();
  std::vector<OffsetRecord> records;
  std::vector<size_t> written;  // indexes into result.partitions
  for (size_t i = 0; i < request.partitions.size(); i++) {
    const OffsetCommitPartition& p = request.partitions[i];
    if (p.metadata.size() > static_cast<size_t>(std::max(options_.max_metadata_bytes, 0))) {
      result.partitions[i].error = err::kOffsetMetadataTooLarge;
    } else if (p.topic.empty() || p.topic.size() > UINT16_MAX || p.partition < 0 ||
               (options_.partition_exists && !options_.partition_exists(p.topic, p.partition))) {
      result.partitions[i].error = err::kUnknownTopicOrPartition;
    } else {
      records.push_back(OffsetRecord{request.group_id, p.topic, p.partition, p.offset,
                                     p.leader_epoch, p.metadata, wall, false});
      written.push_back(i);
    }
  }
  if (records.empty()) {
    Answer(done, std::move(result));
    RunReady();
    return;
  }
  base::Result<uint64_t> seq = store_->Append(records);
  if (!seq.ok()) {
    TALLY_LOG_WARN_LIMITED(store_error_limiter, kLog, "group {}: commit of {} offsets failed: {}",
                           request.group_id, records.size(), seq.status().ToString());
    for (size_t i : written) result.partitions[i].error = err::kCoordinatorNotAvailable;
    Answer(done, std::move(result));
    RunReady();
    return;
  }
  pending_commits_.push_back({*seq, std::move(result), std::move(done)});
  ReleaseDurableCommits();
}

void GroupCoordinator::ReleaseDurableCommits() {
  if (store_->Failed()) {
    for (PendingCommit& p : pending_commits_) {
      for (auto& part : p.result.partitions) {
        if (part.error == err::kNone) part.error = err::kCoordinatorNotAvailable;
      }
      Answer(p.done, std::move(p.result));
    }
    pending_commits_.clear();
  } else {
    const uint64_t durable = store_->DurableSequence();
    while (!pending_commits_.empty() && pending_commits_.front().seq <= durable) {
      PendingCommit& p = pending_commits_.front();
      Answer(p.done, std::move(p.result));
      pending_commits_.pop_front();
    }
  }
  RunReady();
}

OffsetFetchResult GroupCoordinator::OffsetFetch(const GroupOffsetFetchRequest& request) const {
  OffsetFetchResult result;
  if (request.all_partitions) {
    if (const OffsetStore::GroupOffsets* offsets = store_->ForGroup(request.group_id)) {
      for (const auto& [key, value] : *offsets) {
        result.partitions.push_back(
            {key.first, key.second, value.offset, value.leader_epoch, value.metadata, err::kNone});
      }
    }
    return result;
  }
  for (const TopicPartitionRef& tp : request.partitions) {
    OffsetFetchPartition out{tp.topic, tp.partition, -1, -1, "", err::kNone};
    if (const CommittedOffset* c = store_->Get(request.group_id, tp.topic, tp.partition)) {
      out.offset = c->offset;
      out.leader_epoch = c->leader_epoch;
      out.metadata = c->metadata;
    }
    result.partitions.push_back(std::move(out));
  }
  return result;
}

void GroupCoordinator::ExpireOffsets() {
  if (options_.offsets_retention_ms <= 0) return;
  const int64_t cutoff = options_.clock.wall_ms() - options_.offsets_retention_ms;
  std::vector<OffsetRecord> deletes;
  for (const auto& [group_id, offsets] : store_->groups()) {
    // Offsets of a group with members are theirs to keep (Kafka expires
    // them only once the group is empty).
    const Group* group = Find(group_id);
    if (group != nullptr && !group->members.empty()) continue;
    for (const auto& [key, value] : offsets) {
      if (value.commit_timestamp_ms < cutoff) {
        OffsetRecord del;
        del.group = group_id;
        del.topic = key.first;
        del.partition = key.second;
        del.deleted = true;
        deletes.push_back(std::move(del));
      }
    }
  }
  if (deletes.empty()) return;
  // A delete needs no acknowledgement: if it is lost, the next check
  // deletes again.
  base::Result<uint64_t> seq = store_->Append(deletes);
  if (!seq.ok()) {
    TALLY_LOG_WARN(kLog, "expiring {} offsets failed: {}", deletes.size(), seq.status().ToString());
  } else {
    TALLY_LOG_INFO(kLog, "expired {} committed offsets older than {} ms", deletes.size(),
                   options_.offsets_retention_ms);
  }
}

GroupDescription GroupCoordinator::DescribeGroup(const std::string& group_id) const {
  GroupDescription d;
  d.group_id = group_id;
  const Group* group = Find(group_id);
  if (group == nullptr) {
    d.state = store_->ForGroup(group_id) != nullptr ? "Empty" : "Dead";
    return d;
  }
  d.state = internal::GroupStateName(group->state);
  d.protocol_type = group->protocol_type;
  const bool stable = group->state == GroupState::kStable;
  if (stable) d.protocol_name = group->protocol_name;
  for (const auto& [id, m] : group->members) {
    GroupMemberDescription md;
    md.member_id = id;
    md.group_instance_id = m.instance_id;
    md.client_id = m.client_id;
    md.client_host = m.client_host;
    if (stable) {
      md.metadata = m.MetadataFor(group->protocol_name);
      md.assignment = m.assignment;
    }
    d.members.push_back(std::move(md));
  }
  return d;
}

std::vector<GroupListing> GroupCoordinator::ListGroups() const {
  std::map<std::string, GroupListing> all;
  for (const auto& [id, offsets] : store_->groups()) all[id] = {id, "", "Empty"};
  for (const auto& [id, group] : groups_) {
    if (group->state == GroupState::kEmpty && group->members.empty() &&
        store_->ForGroup(id) == nullptr) {
      continue;  // created by a failed join or a pending id only
    }
    all[id] = {id, group->protocol_type, internal::GroupStateName(group->state)};
  }
  std::vector<GroupListing> out;
  out.reserve(all.size());
  for (auto& [id, listing] : all) out.push_back(std::move(listing));
  return out;
}

}  // namespace tally::broker
