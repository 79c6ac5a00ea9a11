// Applier::Rep: the live applier's state and steps, shared by its two
// source files. applier.cc holds the windows (apply, seal, commit with the
// derived deltas first) and the loop; applier_cluster.cc holds what a
// member of a cluster adds: the partitions held here and in which role
// (owner, standby, global-only), the group's listener, the standbys'
// reconciliation with the directory, and what the member publishes.
// Internal to the aggregator.
//
// Thread model: the applier's thread, but for what the comments mark as
// the commit helpers' (CommitWindow, WaitDerivedAcknowledged, OnDelivery).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "aggregator/applier.h"
#include "aggregator/deltas_ownership.h"
#include "aggregator/window_applier.h"
#include "base/kafka.h"
#include "base/kafka_producer.h"
#include "base/metrics.h"
#include "retention_gaps.h"
#include "sealed_window_writer.h"

namespace tally::aggregator {

using base::Status;

struct Applier::Rep : public OwnershipListener {
  ApplierOptions o;
  store::StateStore* store;
  base::KafkaHandle consumer;
  std::unique_ptr<base::KafkaProducer> producer;  // derived deltas (follow -> target's followers)
  rd_kafka_topic_t* deltas_rkt = nullptr;         // owned by `producer`
  std::map<int32_t, std::unique_ptr<WindowApplier>> owned;
  std::vector<schemas::DeltaBatchBuilder> derived;
  // Windows whose write is failing now: a full or failing disk fails every
  // partition the helpers write, and one partition may get through before
  // another fails, so the log says once when the first fails and once when
  // the last is written.
  std::atomic<int> failing_windows{0};
  std::atomic<int64_t> last_failure_end_ms{
      0};  // steady clock; when the last failing window got written
  int64_t last_flush_ms = 0;
  const std::atomic<bool>* stop = nullptr;

  std::mutex failure_mu;
  std::string first_failure;

  // Derived deltas of the windows being written that the broker has not yet
  // acknowledged: the first helper to write one of those windows waits for
  // them (holding derived_wait_mu, so the other waits too), and no window is
  // written before they are acknowledged. Set by FlushAll, which runs only
  // after the helpers are done.
  std::mutex derived_wait_mu;
  bool derived_pending = false;  // guarded by derived_wait_mu
  Status derived_status;         // guarded by derived_wait_mu

  base::Counter* applied_total;
  base::Counter* duplicates_total;
  base::Counter* repeated_notices_total;
  base::Counter* duplicate_event_ids_total;
  base::Counter* windows_total;
  base::Counter* corrupt_total;
  base::Histogram* commit_seconds;

  // Writes sealed windows on two helper threads while this thread applies
  // the next ones (CommitWindow, with its retries). Last: it is destroyed
  // first, waiting for its helpers before what they use goes.
  SealedWindowWriter writer{[this](int32_t p, WindowApplier* wa) { return CommitWindow(p, wa); }};

  RetentionGaps gaps;

  // In a cluster: what each partition applied here is to this member
  // (`owned` holds the same keys). Applier thread only.
  struct Held {
    bool owner = false;  // given by the group; else a standby
    bool warm =
        false;  // a standby because this member gave it up, until its next owner has caught up
    bool current = false;  // applied and committed up to the log's end as of when it came
    int64_t target = -1;   // that end; -1 until asked
    // Applied before the group's first assignment because no other member
    // was live (StartIfAlone); settled by Reconcile once it came.
    bool provisional = false;
  };
  std::map<int32_t, Held> held;
  // The partition of kGlobalEntity when it is neither owned nor a standby
  // here: applied for its global entity only (the notices and red dots
  // every member reads locally), in `owned` but not in `held`.
  struct GlobalOnly {
    bool on = false;
    bool current = false;  // as Held::current
    int64_t target = -1;
  };
  GlobalOnly global_only;
  // The applier of that partition was replaced while its consumer was
  // fetching it: its messages count again from the one at the applier's
  // next offset (a message fetched before the consumer was assigned again
  // must not make it skip ahead).
  bool resync_global = false;
  std::unique_ptr<DeltasOwnership> ownership;
  int32_t global_partition = 0;
  bool reassign = false;  // the set applied changed: assign the consumer again
  bool publish_due = true;
  int64_t last_publish_ms = 0;
  int64_t last_reconcile_ms = 0;
  uint64_t seen_directory_version = 0;
  int64_t joined_wall_ms = 0;        // when the group first gave this member its partitions
  int64_t last_progress_log_ms = 0;  // restore progress is logged every 10 s
  int64_t cluster_started_ms = 0;    // steady clock; when StartCluster() ran
  // Held partitions not current as of the last UpdateCurrent(), which runs
  // every 20 ms while there are some (a partition's restore ends within
  // 20 ms of its window's commit, not 200).
  size_t restoring = 0;
  int64_t last_current_check_ms = 0;
  bool alone_checked = false;          // StartIfAlone() has decided
  std::set<int32_t> on_disk_at_start;  // partitions the store held when the applier started
  cluster::MemberInfo last_published;

  Rep(ApplierOptions opts, store::StateStore* s);

  // The applier of partition p, its committed progress loaded.
  base::Result<std::unique_ptr<WindowApplier>> NewApplier(int32_t p);

  // On whichever thread polls the producer (this one, or a helper waiting
  // in WaitDerivedAcknowledged).
  void OnDelivery(const rd_kafka_message_t& m);

  // FailedPrecondition unless the deltas topic has the state's partition
  // count; what the look-up answered if it failed.
  Status CheckPartitionCount();

  // Takes every partition of the state: the state directory holds them all
  // and the HTTP tier answers from it, so one applier must apply them all.
  // No consumer group: the offsets that count are the ones in RocksDB (a
  // group would only delay the start by its rebalance and could hand half
  // the partitions to another process, leaving both states incomplete).
  Status AssignAll();

  // librdkafka stopped partition `m->partition` at an offset outside its
  // log (auto.offset.reset=error). Below the log start (retention removed
  // deltas before they were applied): RetentionGaps reports the range, the
  // window goes on from the log start (its commit records it), and every
  // partition is assigned again at the offset its window goes on from.
  // Past the log's end: an error (a replaced log needs a start).
  Status ResumeAfterReset(const rd_kafka_message_t* m);

  // True when nothing waits to be sealed or written: the loop may then
  // sleep longer between polls (a delta that arrives wakes it at once).
  bool Idle();

  size_t PendingKeys() const;
  // How long a window lasts once caught up: o.flush_ms, stretched in a
  // cluster by the share of the partitions applied here (max_flush_ms);
  // says so in the log when that changes.
  int WindowMs();
  int window_ms = 0;  // what WindowMs() last said

  // True while the helpers are still writing the last sealed windows.
  bool CommitBusy() { return writer.Busy(); }

  // Waits for the sealed windows to be written. Their appliers may seal
  // again afterwards. The first write error, if any (CommitWindow retries
  // until it succeeds or we are told to stop).
  Status FinishCommits() { return writer.Finish(); }

  // Ends the window: waits for the previous one to be written, publishes
  // its derived deltas, then seals every partition's window and hands them
  // to the helper threads, which wait until the broker has acknowledged the
  // derived deltas and then write the windows, while this thread applies
  // the next window. Derived deltas come first: a crash between them and
  // the window re-derives them from the same deltas, and the target drops
  // the copies by mark. (Waiting for that acknowledgement here held this
  // thread 4 ms per window at the median and 45 ms at p99 under a steady
  // load, with fresh deltas queueing behind it.)
  Status FlushAll();

  // On a helper thread, before writing a window: waits until the broker has
  // acknowledged every derived delta published so far (FlushAll publishes
  // none while the helpers write). The first helper to get here waits; the
  // others find the answer. A failed delivery fails every window of the
  // batch, so none is written and the applier stops (a restart re-derives).
  Status WaitDerivedAcknowledged();

  // Writes one partition's sealed window (on the helper thread). A store
  // that refuses the write (a full or failing disk) is retried with backoff
  // until it accepts the window or we are told to stop: meanwhile nothing of
  // the window is visible, the state's offset stays where it was (a restart
  // redoes the window from there), reads are served, the applier stops
  // applying at the next window's end, and the log says so once, not per
  // attempt.
  Status CommitWindow(int32_t p, WindowApplier* wa);

  // ---- In a cluster (ApplierOptions::cluster) ----

  // Assigns the consumer every partition applied here, each at the offset
  // its window goes on from.
  Status AssignApplied();

  // A partition of kGlobalEntity that holds only its global entity
  // (GlobalOnly) is made whole again: its event ids and progress go, so it
  // is applied in full from offset 0, over the notices and red dots it
  // keeps (their deltas are idempotent: a listed notice id is ignored, a
  // dot time is a maximum), which are read meanwhile as they were. The
  // offset the global-only copy had reached, below which its next applier
  // finds the notices listed already (set_relisting_until); 0 when the
  // partition was whole.
  base::Result<int64_t> RestoreInFullIfGlobalOnly(const char* why);

  // Applies the partition of kGlobalEntity here for its global entity only
  // (it is neither owned nor a standby here): a full copy held here first
  // loses everything but the global entity and the event ids, in one
  // commit, and goes on from its offset. `current`: that copy had caught up.
  Status HoldGlobalOnly(const char* why, bool current);

  // Starts applying partition p here (opening or creating its state).
  Status StartApplying(int32_t p, bool owner);

  // Stops applying p and, unless `keep`, drops its state: it is neither
  // owned nor kept as a standby here any more. A kept copy stays on disk
  // as one left from before a restart (Reconcile drops it once another
  // member serves the partition).
  Status StopApplying(int32_t p, const char* why, bool keep = false);

  // Before the group's first assignment, which comes after its initial
  // rebalance delay (3 s on Kafka by default and on the embedded broker):
  // a member that finds no other live member in the directory applies
  // every partition at once, as provisional standbys, so that a member
  // restarting alone serves and applies from its first second. The
  // assignment then makes them owned; Reconcile settles the rest.
  Status StartIfAlone(int64_t now);

  // Once the group has assigned: a provisional partition it gave this
  // member is owned already (Assigned); one it gave another member is
  // handed over like one given up (kept until its owner has caught up)
  // when it is current here, else stopped: dropped when this start made
  // it, kept on disk when the member had it before.
  Status SettleProvisional(const std::set<int32_t>& want);

  // OwnershipListener, on this thread inside ownership->Poll()/Close().
  // A listener cannot fail: a partition that cannot be opened ends the
  // applier at the next loop (cluster_failure), whose restart rejoins.
  Status cluster_failure;

  void Assigned(std::vector<PartitionStart>* starts) override;

  void GiveUp(const std::vector<int32_t>& partitions, const char* how);

  void Revoked(const std::vector<int32_t>& partitions) override;

  void Lost(const std::vector<int32_t>& partitions) override;

  // Sets the target of every held partition that has none to its log's
  // end now, in one request for all (a look-up per partition, one round
  // trip each, held up a start of 16 partitions by 250 ms). A partition
  // the broker did not answer for keeps none: asked again next time.
  void AskTargets();

  // Marks what has caught up with the end of its log as current.
  void UpdateCurrent();

  // Which standbys this member keeps, from the directory: each partition
  // whose owner is followed by this member
  // within the next `standbys` members (in member id order, wrapping). A
  // standby no longer wanted is still kept while no live member claims its
  // partition (Reconcile).
  std::set<int32_t> WantedStandbys(const std::vector<cluster::MemberInfo>& members) const;

  // Brings the standbys in line with the directory: starts the wanted ones,
  // drops a given-up partition once another member serves it as caught-up
  // owner, and drops standbys no longer wanted.
  Status Reconcile();

  cluster::MemberInfo Describe() const;

  // Hands what this member is to the directory on a change, and every
  // second while something restores (its progress).
  void Publish(int64_t now);

  // The cluster's share of each loop: the group, what is current, the
  // standbys, the directory, and the consumer's assignment.
  Status ClusterStep();

  // Joins the group; the partitions come in the following ClusterStep()s.
  Status StartCluster();

  Status HandleMessage(const rd_kafka_message_t* m);
};

}  // namespace tally::aggregator
