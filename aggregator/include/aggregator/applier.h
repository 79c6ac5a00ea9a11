// Applier: the second stage of the aggregator. Consumes tally.deltas,
// coalesces each partition's deltas over a flush window and commits every
// window to that partition's RocksDB with its offsets (window_applier.h).
//
// Alone (the default), the applier takes every partition of the state
// itself (no consumer group: the state directory holds all partitions and
// the HTTP tier answers from it) and starts each at the next offset stored
// in RocksDB. Two processes over two state directories are two complete
// replicas.
//
// In a cluster (ApplierOptions::cluster, SPEC section 6, docs/cluster.md)
// the group "<group>-applier" decides which partitions this member owns
// (DeltasOwnership, cooperative); the applier reads every partition it
// applies with its own consumer and applies some without owning them:
//   - owned: served once the state has caught up with the log's end as of
//     the assignment ("restoring" until then);
//   - standby: applied as well, never owned: the next `standbys`
//     members' copies of each owned partition (in member order after the
//     owner), and a partition this member gave up, until its new owner
//     says in the directory that it has caught up (warm-up: reads go to
//     the old owner meanwhile);
//   - global-only: the partition of kGlobalEntity when it is neither owned
//     nor a standby here, applied for its global entity only (the notices
//     and red dots every member reads locally; aggregator/README.md, "The
//     global entity in a cluster").
// A member that finds no other live member in the directory at start
// applies every partition at once as provisional standbys, without
// waiting for the group's first assignment (its initial rebalance delay);
// the assignment makes them owned or hands them over (docs/cluster.md,
// "Starting, stopping, faults").
// Every member applying a partition publishes its derived deltas (a
// follow's effects on the followed user), which the targets deduplicate by
// mark (applier.cc, HandleMessage, says why that is exact). A partition it
// stops applying is dropped from the store. What it holds,
// serves and restores is handed to ClusterOptions::publish (for the members
// directory) on every change and at least every second while restoring.
// Thread model: Run() occupies the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "aggregator/defaults.h"
#include "base/hot_keys.h"
#include "base/kafka.h"
#include "base/status.h"
#include "cluster/member_info.h"
#include "cluster/members_directory.h"
#include "store/state_store.h"

namespace tally::aggregator {

struct ApplierClusterOptions {
  bool enabled = false;
  // Required when enabled; must outlive the applier. Read for who owns what.
  const cluster::MembersDirectory* directory = nullptr;
  std::string member;  // this member's id in the directory
  std::string http;    // where the other members reach it
  int standbys = 0;    // hot copies of each partition kept by the members after its owner
  // Called on the applier thread with what this member says about itself
  // now (MemberInfo::member and ts_ms left for the directory to fill).
  std::function<void(const cluster::MemberInfo&)> publish;
};

struct ApplierOptions {
  base::KafkaOptions kafka;
  // Its consumer's group.id is "<group>-applier" (never joined).
  std::string group = std::string(base::kDefaultGroup);
  std::string deltas_topic = std::string(base::kDeltasTopic);
  int flush_ms = kDefaultFlushMs;  // window length once caught up (a backlog stretches it to 10x)
  // A cluster member applying 1/k of the partitions ends its windows k
  // times as far apart, at most this long, so tally.deltas carries the
  // derived deltas of one applier's windows, not k (aggregator/README.md,
  // "Windows in a cluster, and at rest").
  int max_flush_ms = kDefaultMaxStretchedMs;
  size_t key_budget = kDefaultKeyBudget;  // a window is cut early when it touches this many keys
  ApplierClusterOptions cluster;
  // Optional; must outlive the applier. Every window's post increments are
  // tallied there (WindowApplier::set_hot_posts): alone, of every
  // partition; in a cluster, of the partitions this member owns and has
  // caught up (a restore's or a standby's windows are not news).
  base::HotKeys* hot_posts = nullptr;
};

class Applier {
 public:
  // `store` must outlive the applier and have one partition per deltas
  // partition; in a cluster it holds (or comes to hold) only what is applied.
  Applier(ApplierOptions options, store::StateStore* store);
  ~Applier();

  // Runs until *stop becomes true, then commits the last window. An error Status when the state cannot be written or the log
  // no longer holds what the state needs.
  base::Status Run(const std::atomic<bool>* stop);

 private:
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace tally::aggregator
