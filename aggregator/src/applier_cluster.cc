// The applier's share in a cluster (see applier_rep.h): which partitions
// are applied here and in which role, as the group and the directory say.
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

#include "aggregator/deltas_ownership.h"
#include "applier_rep.h"
#include "base/clock.h"
#include "base/kafka_consumer.h"
#include "base/log.h"

namespace tally::aggregator {

namespace {
constexpr const char* kLog = "applier";
}  // namespace

Status Applier::Rep::AssignApplied() {
  reassign = false;
  base::KafkaPartitionList parts(
      rd_kafka_topic_partition_list_new(static_cast<int>(std::max<size_t>(owned.size(), 1))));
  for (const auto& [p, wa] : owned) {
    rd_kafka_topic_partition_list_add(parts.get(), o.deltas_topic.c_str(), p)->offset =
        wa->progress().next_deltas_offset;
  }
  return base::Assign(consumer.get(), parts.get(), "assigning the deltas partitions applied here");
}

base::Result<int64_t> Applier::Rep::RestoreInFullIfGlobalOnly(const char* why) {
  store::Partition* part = store->partition(static_cast<uint32_t>(global_partition));
  auto only = part->LoadGlobalOnly();
  if (!only.ok()) return only.status();
  if (!*only) return int64_t{0};
  auto progress = part->LoadProgress();
  if (!progress.ok()) return progress.status();
  store::PartitionBatch b;
  b.DropAllButGlobal();  // nothing but the "viewed" tables' record, kept since
  b.DropEventIds();
  b.SetProgress(store::Progress());
  b.SetGlobalOnly(false);
  TALLY_RETURN_IF_ERROR(part->Commit(&b));
  TALLY_LOG_INFO(kLog,
                 "{}/{}: held for its global entity only until now; {}: applying it in full "
                 "from offset 0 (its notices and red dots are still read meanwhile)",
                 o.deltas_topic, global_partition, why);
  return progress->next_deltas_offset;
}

Status Applier::Rep::HoldGlobalOnly(const char* why, bool current) {
  const int32_t g = global_partition;
  // Every window written (derived deltas first, as always), so that the
  // new applier goes on exactly where the consumer is.
  TALLY_RETURN_IF_ERROR(FlushAll());
  TALLY_RETURN_IF_ERROR(FinishCommits());
  if (held.erase(g) > 0) {
    // Said first, so this member's own reads of g go to its owner.
    publish_due = true;
    Publish(base::SteadyMs());
  }
  store::Partition* part = store->partition(static_cast<uint32_t>(g));
  auto only = part->LoadGlobalOnly();
  if (!only.ok()) return only.status();
  if (!*only) {
    store::PartitionBatch b;
    b.DropAllButGlobal();
    b.SetGlobalOnly(true);
    TALLY_RETURN_IF_ERROR(part->Commit(&b));
  }
  auto made = NewApplier(g);
  if (!made.ok()) return made.status();
  std::unique_ptr<WindowApplier> wa = std::move(made).value();
  wa->set_global_only(true);
  TALLY_LOG_INFO(kLog,
                 "{}/{}: applying its global entity only (notices, red dots) from offset {} "
                 "({})",
                 o.deltas_topic, g, wa->progress().next_deltas_offset, why);
  owned[g] = std::move(wa);
  resync_global = true;
  global_only = GlobalOnly{true, current, -1};
  if (!current) restoring++;
  reassign = true;
  publish_due = true;
  return Status::Ok();
}

Status Applier::Rep::StartApplying(int32_t p, bool owner) {
  TALLY_RETURN_IF_ERROR(store->OpenPartition(static_cast<uint32_t>(p)));
  int64_t relisting_until = 0;
  if (p == global_partition && global_only.on) {
    TALLY_RETURN_IF_ERROR(FlushAll());
    TALLY_RETURN_IF_ERROR(FinishCommits());
    auto restored = RestoreInFullIfGlobalOnly(owner ? "owned here now" : "a standby here now");
    if (!restored.ok()) return restored.status();
    relisting_until = *restored;
    global_only = GlobalOnly();
    resync_global = true;
  }
  auto made = NewApplier(p);
  if (!made.ok()) return made.status();
  std::unique_ptr<WindowApplier> wa = std::move(made).value();
  wa->set_relisting_until(relisting_until);
  TALLY_LOG_INFO(kLog, "{}/{}: applying from offset {} as {}", o.deltas_topic, p,
                 wa->progress().next_deltas_offset, owner ? "owner" : "standby");
  owned[p] = std::move(wa);
  held[p] = Held{owner, false, false, -1};
  restoring++;
  reassign = true;
  publish_due = true;
  return Status::Ok();
}

Status Applier::Rep::StopApplying(int32_t p, const char* why, bool keep) {
  if (p == global_partition) {
    // Every member reads the global entity: it stays.
    auto h = held.find(p);
    return HoldGlobalOnly(why, h != held.end() && h->second.current);
  }
  TALLY_RETURN_IF_ERROR(FinishCommits());  // a sealed window of p may be in flight
  TALLY_LOG_INFO(kLog, "{}/{}: {} at offset {} ({})", o.deltas_topic, p,
                 keep ? "no longer applied, kept" : "dropped", owned[p]->committed_offset(), why);
  owned.erase(p);
  held.erase(p);
  reassign = true;
  // Said first, so this member's own reads go to the owner before the
  // partition is gone here.
  publish_due = true;
  Publish(base::SteadyMs());
  return keep ? Status::Ok() : store->DropPartition(static_cast<uint32_t>(p));
}

Status Applier::Rep::StartIfAlone(int64_t now) {
  if (ownership->Identity().generation > 0) {
    alone_checked = true;  // the group answered first
    return Status::Ok();
  }
  if (!o.cluster.directory->CaughtUp()) {
    // A directory that has not read its topic is no evidence of being alone.
    if (now - cluster_started_ms >= 3000) alone_checked = true;
    return Status::Ok();
  }
  alone_checked = true;
  for (const auto& m : o.cluster.directory->Snapshot()) {
    if (m.member != o.cluster.member) return Status::Ok();
  }
  TALLY_LOG_INFO(kLog,
                 "no other member of the cluster is live: applying every partition until the "
                 "group {}-applier assigns them",
                 o.group);
  std::vector<uint32_t> missing;
  for (uint32_t u = 0; u < store->partitions(); u++) {
    if (!held.count(static_cast<int32_t>(u))) missing.push_back(u);
  }
  TALLY_RETURN_IF_ERROR(store->OpenPartitions(missing));  // all at once
  for (uint32_t u : missing) {
    const auto p = static_cast<int32_t>(u);
    TALLY_RETURN_IF_ERROR(StartApplying(p, false));
    held[p].provisional = true;
  }
  return Status::Ok();
}

Status Applier::Rep::SettleProvisional(const std::set<int32_t>& want) {
  std::vector<int32_t> stop_applying;
  for (auto& [p, h] : held) {
    if (!h.provisional) continue;
    h.provisional = false;
    if (h.owner || want.count(p)) continue;
    if (h.current) {
      h.warm = true;
      publish_due = true;
      TALLY_LOG_INFO(kLog,
                     "{}/{}: assigned to another member; applied here as a standby until it "
                     "has caught up",
                     o.deltas_topic, p);
    } else {
      stop_applying.push_back(p);
    }
  }
  for (int32_t p : stop_applying) {
    TALLY_RETURN_IF_ERROR(StopApplying(p, "assigned to another member before it caught up here",
                                       on_disk_at_start.count(p) > 0));
  }
  return Status::Ok();
}

void Applier::Rep::Assigned(std::vector<PartitionStart>* starts) {
  for (const PartitionStart& s : *starts) {
    auto h = held.find(s.partition);
    if (h != held.end()) {
      h->second.owner = true;
      h->second.warm = false;
      TALLY_LOG_INFO(kLog, "{}/{}: owned (was a {} standby here)", o.deltas_topic, s.partition,
                     h->second.current ? "current" : "restoring");
      publish_due = true;
      continue;
    }
    if (Status st = StartApplying(s.partition, true); !st.ok() && cluster_failure.ok()) {
      cluster_failure =
          st.WithContext(fmt::format("taking over {}/{}", o.deltas_topic, s.partition));
    }
  }
}

void Applier::Rep::GiveUp(const std::vector<int32_t>& partitions, const char* how) {
  for (int32_t p : partitions) {
    auto h = held.find(p);
    if (h == held.end()) continue;
    h->second.owner = false;
    h->second.warm = true;
    TALLY_LOG_INFO(kLog, "{}/{}: {}; applied here as a standby until its next owner has caught up",
                   o.deltas_topic, p, how);
  }
  publish_due = true;
  Publish(base::SteadyMs());  // at once: reads of these go to the standby here meanwhile
}

void Applier::Rep::Revoked(const std::vector<int32_t>& partitions) {
  // The windows applied as owner are committed (and their derived deltas
  // acknowledged) before the group hands the partitions on. At a stop
  // Run() has done that already (or given up on a failing disk).
  if (!stop->load()) {
    Status st = FlushAll();
    if (st.ok()) st = FinishCommits();
    if (!st.ok() && cluster_failure.ok()) cluster_failure = st;
  }
  GiveUp(partitions, "given up to another member");
}

void Applier::Rep::Lost(const std::vector<int32_t>& partitions) {
  GiveUp(partitions, "lost (session expired)");
}

void Applier::Rep::AskTargets() {
  base::KafkaPartitionList ask(rd_kafka_topic_partition_list_new(1));
  for (const auto& [p, h] : held) {
    if (h.current || h.target >= 0) continue;
    // The timestamp "latest": ListOffsets answers the log's end.
    rd_kafka_topic_partition_list_add(ask.get(), o.deltas_topic.c_str(), p)->offset =
        RD_KAFKA_OFFSET_END;
  }
  if (global_only.on && !global_only.current && global_only.target < 0) {
    rd_kafka_topic_partition_list_add(ask.get(), o.deltas_topic.c_str(), global_partition)->offset =
        RD_KAFKA_OFFSET_END;
  }
  if (ask->cnt == 0) return;
  if (rd_kafka_offsets_for_times(consumer.get(), ask.get(), 2000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return;
  }
  for (int i = 0; i < ask->cnt; i++) {
    const auto& e = ask->elems[i];
    if (e.err != RD_KAFKA_RESP_ERR_NO_ERROR || e.offset < 0) continue;
    if (auto h = held.find(e.partition); h != held.end()) {
      h->second.target = e.offset;
    } else if (e.partition == global_partition && global_only.on) {
      global_only.target = e.offset;
    }
  }
}

void Applier::Rep::UpdateCurrent() {
  last_current_check_ms = base::SteadyMs();
  restoring = 0;
  AskTargets();
  for (auto& [p, h] : held) {
    if (h.current) continue;
    if (h.target < 0) {
      restoring++;
      continue;  // asked again at the next look
    }
    const WindowApplier& wa = *owned[p];
    // Applied to the end but not written because the store refuses
    // writes (a full or failing disk): the member serves what it has, as
    // one process does on a full disk, and /healthz says why.
    const bool stalled_by_disk =
        wa.progress().next_deltas_offset >= h.target && !store->WriteProblem().empty();
    if (wa.committed_offset() < h.target && !stalled_by_disk) {
      restoring++;
    } else {
      h.current = true;
      publish_due = true;
      TALLY_LOG_INFO(kLog, "{}/{}: caught up at offset {}; served here as {}", o.deltas_topic, p,
                     wa.committed_offset(), h.owner ? "owner" : "standby");
    }
  }
  if (global_only.on && !global_only.current) {
    const WindowApplier& wa = *owned[global_partition];
    if (global_only.target < 0 || wa.committed_offset() < global_only.target) {
      restoring++;
    } else {
      global_only.current = true;
      publish_due = true;
      TALLY_LOG_INFO(kLog, "{}/{}: its global entity caught up at offset {}", o.deltas_topic,
                     global_partition, wa.committed_offset());
    }
  }
}

std::set<int32_t> Applier::Rep::WantedStandbys(
    const std::vector<cluster::MemberInfo>& members) const {
  std::set<int32_t> want;
  if (o.cluster.standbys <= 0) return want;
  std::vector<std::string> ids;
  for (const auto& m : members) ids.push_back(m.member);
  if (std::find(ids.begin(), ids.end(), o.cluster.member) == ids.end())
    ids.push_back(o.cluster.member);
  std::sort(ids.begin(), ids.end());
  for (uint32_t p = 0; p < store->partitions(); p++) {
    auto owner = o.cluster.directory->OwnerOf(static_cast<int32_t>(p));
    if (!owner || owner->member == o.cluster.member) continue;
    auto at = std::find(ids.begin(), ids.end(), owner->member);
    if (at == ids.end()) continue;
    size_t i = static_cast<size_t>(at - ids.begin());
    for (int k = 1; k <= o.cluster.standbys && k < static_cast<int>(ids.size()); k++) {
      if (ids[(i + k) % ids.size()] == o.cluster.member) want.insert(static_cast<int32_t>(p));
    }
  }
  return want;
}

Status Applier::Rep::Reconcile() {
  const auto members = o.cluster.directory->Snapshot();
  const std::set<int32_t> want = WantedStandbys(members);
  const bool joined = ownership && ownership->Identity().generation > 0;
  if (joined) TALLY_RETURN_IF_ERROR(SettleProvisional(want));
  std::vector<int32_t> drop;
  for (auto& [p, h] : held) {
    if (h.owner || h.provisional) continue;
    if (h.warm) {
      bool served_elsewhere = false;
      for (const auto& m : members) {
        if (m.member != o.cluster.member && cluster::HasPartition(m.owns, p))
          served_elsewhere = true;
      }
      if (!served_elsewhere) continue;
      h.warm = false;
      publish_due = true;
      TALLY_LOG_INFO(kLog, "{}/{}: its new owner has caught up", o.deltas_topic, p);
    }
    // A standby whose owner is gone (killed, not yet replaced) is what
    // answers for the partition meanwhile: kept until a live member
    // serves it as owner again.
    if (!want.count(p) && o.cluster.directory->OwnerOf(p).has_value()) drop.push_back(p);
  }
  for (int32_t p : drop) TALLY_RETURN_IF_ERROR(StopApplying(p, "not owned nor a standby here"));
  // Copies left from before a restart that the group gave to others: dropped
  // once another member serves them (until then this member may get them back).
  // Not before this member has had its first assignment, and only for a
  // claim written since (a heartbeat of a live owner): a restarted
  // member's old record, or a killed predecessor's, may still claim them
  // while the group has not handed them on yet.
  if (joined_wall_ms == 0 && joined) {
    joined_wall_ms = base::WallMs();
  }
  for (uint32_t p : joined_wall_ms ? store->HeldPartitions() : std::vector<uint32_t>{}) {
    if (held.count(static_cast<int32_t>(p)) || static_cast<int32_t>(p) == global_partition) {
      continue;
    }
    for (const auto& m : members) {
      if (m.member == o.cluster.member || m.ts_ms <= joined_wall_ms ||
          !cluster::HasPartition(m.owns, static_cast<int32_t>(p))) {
        continue;
      }
      TALLY_LOG_INFO(kLog, "{}/{}: dropping the copy left from before ({} owns it)", o.deltas_topic,
                     p, m.member);
      TALLY_RETURN_IF_ERROR(store->DropPartition(p));
      break;
    }
  }
  for (int32_t p : want) {
    if (!held.count(p)) TALLY_RETURN_IF_ERROR(StartApplying(p, false));
  }
  return Status::Ok();
}

cluster::MemberInfo Applier::Rep::Describe() const {
  cluster::MemberInfo info;
  info.member = o.cluster.member;
  info.http = o.cluster.http;
  for (const auto& [p, h] : held) {
    if (!h.current) {
      const WindowApplier& wa = *owned.at(p);
      info.restoring.push_back(cluster::RestoringPartition{p, wa.progress().next_deltas_offset,
                                                           std::max<int64_t>(h.target, 0)});
    } else if (h.owner) {
      info.owns.push_back(p);
    } else {
      info.standby.push_back(p);
    }
  }
  // Not served here, but what this member's notices and red dots are read
  // from: restoring until it has caught up (a member is not ready before).
  if (global_only.on && !global_only.current) {
    const WindowApplier& wa = *owned.at(global_partition);
    info.restoring.push_back(cluster::RestoringPartition{global_partition,
                                                         wa.progress().next_deltas_offset,
                                                         std::max<int64_t>(global_only.target, 0)});
    std::sort(info.restoring.begin(), info.restoring.end(),
              [](const auto& a, const auto& b) { return a.partition < b.partition; });
  }
  if (ownership) info.generation = std::max<int64_t>(ownership->Identity().generation, 0);
  return info;
}

void Applier::Rep::Publish(int64_t now) {
  // The hottest posts are those this member serves: owned and caught up.
  for (const auto& [p, h] : held) {
    if (auto w = owned.find(p); w != owned.end()) {
      w->second->set_hot_posts(h.owner && h.current ? o.hot_posts : nullptr);
    }
  }
  cluster::MemberInfo info = Describe();
  const bool restoring = !info.restoring.empty();
  // A new group generation is news even when nothing moved here: the
  // group calls no listener for an empty assignment, and a member given
  // no partition (more members than partitions) becomes ready only once
  // it has published a generation (ClusterMember::Ready()).
  if (info.generation != last_published.generation) publish_due = true;
  if (!publish_due && !(restoring && now - last_publish_ms >= 1000)) return;
  publish_due = false;
  last_publish_ms = now;
  if (info == last_published) return;
  last_published = info;
  if (o.cluster.publish) o.cluster.publish(info);
}

Status Applier::Rep::ClusterStep() {
  const int64_t now = base::SteadyMs();
  ownership->Poll(0);
  if (!cluster_failure.ok()) return cluster_failure;
  if (!alone_checked) TALLY_RETURN_IF_ERROR(StartIfAlone(now));
  // Fetching first: what follows may wait on the broker.
  if (reassign) TALLY_RETURN_IF_ERROR(AssignApplied());
  if (now - last_reconcile_ms >= 200 || o.cluster.directory->Version() != seen_directory_version) {
    last_reconcile_ms = now;
    seen_directory_version = o.cluster.directory->Version();
    UpdateCurrent();
    TALLY_RETURN_IF_ERROR(Reconcile());
  } else if (restoring > 0 && now - last_current_check_ms >= 20) {
    UpdateCurrent();
  }
  if (reassign) TALLY_RETURN_IF_ERROR(AssignApplied());
  Publish(now);
  if (now - last_progress_log_ms >= 10000) {
    last_progress_log_ms = now;
    for (const auto& [p, h] : held) {
      if (h.current || h.target < 0) continue;
      const int64_t at = owned[p]->progress().next_deltas_offset;
      TALLY_LOG_INFO(
          kLog, "{}/{}: restoring as {}: offset {} of {} ({:.0f} %)", o.deltas_topic, p,
          h.owner ? "owner" : "standby", at, h.target,
          h.target > 0 ? 100.0 * static_cast<double>(at) / static_cast<double>(h.target) : 100.0);
    }
  }
  return Status::Ok();
}

Status Applier::Rep::StartCluster() {
  TALLY_RETURN_IF_ERROR(CheckPartitionCount());
  OwnershipOptions oo;
  oo.kafka = o.kafka;
  oo.group = o.group;
  oo.deltas_topic = o.deltas_topic;
  oo.client_id = "tally-applier-group";
  oo.fetch = false;
  cluster_started_ms = base::SteadyMs();
  for (uint32_t p : store->HeldPartitions()) on_disk_at_start.insert(static_cast<int32_t>(p));
  auto own = DeltasOwnership::Start(oo, this);
  if (!own.ok()) return own.status();
  ownership = std::move(own).value();
  TALLY_LOG_INFO(kLog, "joining the group {}-applier as member {} ({})", o.group, o.cluster.member,
                 o.cluster.http);
  // The partition of kGlobalEntity is applied on every member from the
  // start: a full copy held from before as a standby (Reconcile settles
  // it), else for its global entity only. A copy's progress does not
  // tell (a state attached to a new log has offset 0 and its counts).
  const bool held_before = on_disk_at_start.count(global_partition) > 0;
  TALLY_RETURN_IF_ERROR(store->OpenPartition(static_cast<uint32_t>(global_partition)));
  auto only = store->partition(static_cast<uint32_t>(global_partition))->LoadGlobalOnly();
  if (!only.ok()) return only.status();
  if (*only || !held_before) {
    TALLY_RETURN_IF_ERROR(HoldGlobalOnly("neither owned nor a standby here yet", false));
  } else {
    TALLY_RETURN_IF_ERROR(StartApplying(global_partition, false));
  }
  return AssignApplied();
}

}  // namespace tally::aggregator
