#include "aggregator/applier.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "aggregator/deltas_ownership.h"
#include "aggregator/window_applier.h"
#include "base/clock.h"
#include "base/kafka_consumer.h"
#include "base/kafka_producer.h"
#include "base/log.h"
#include "base/metrics.h"
#include "retention_gaps.h"
#include "sealed_window_writer.h"

namespace tally::aggregator {

using base::Status;

namespace {
constexpr const char* kLog = "applier";
}  // namespace

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

  Rep(ApplierOptions opts, store::StateStore* s)
      : o(std::move(opts)),
        store(s),
        gaps(kLog, "the applier applied them: their effects are missing from the state",
             base::MetricsRegistry::Global().GetCounter(
                 "tally_deltas_lost_records_total",
                 "tally.deltas records removed by retention before the applier applied them"),
             /*resume_past_end=*/false) {
    derived.resize(store->partitions());
    auto& m = base::MetricsRegistry::Global();
    applied_total = m.GetCounter("tally_applier_deltas_total", "Deltas applied to the state");
    duplicates_total = m.GetCounter("tally_applier_duplicates_total", "Deltas skipped as already applied");
    repeated_notices_total =
        m.GetCounter("tally_applier_repeated_notices_total",
                     "Notices ignored because their id was in the list already");
    duplicate_event_ids_total = m.GetCounter(
        "tally_applier_duplicate_event_ids_total",
        "Deltas dropped because another record of an event with the same id was applied");
    windows_total = m.GetCounter("tally_applier_windows_total", "Partition windows committed");
    global_partition =
        static_cast<int32_t>(schemas::PartitionOf(schemas::kGlobalEntity, store->partitions()));
    corrupt_total = m.GetCounter("tally_applier_corrupt_batches_total", "Undecodable tally.deltas messages skipped");
    commit_seconds = m.GetHistogram("tally_applier_commit_seconds", "Time to commit one partition window");
  }

  // The applier of partition p, its committed progress loaded.
  base::Result<std::unique_ptr<WindowApplier>> NewApplier(int32_t p) {
    auto wa = std::make_unique<WindowApplier>(
        store->partition(static_cast<uint32_t>(p)), o.deltas_topic, store->partitions(),
        store->options().viewed, store->options().dedup_hours * 3600000LL);
    TALLY_RETURN_IF_ERROR(wa->Load());
    return wa;
  }

  // On whichever thread polls the producer (this one, or a helper waiting
  // in WaitDerivedAcknowledged).
  void OnDelivery(const rd_kafka_message_t& m) {
    if (!m.err) return;
    std::lock_guard<std::mutex> l(failure_mu);
    if (first_failure.empty()) {
      first_failure = fmt::format("derived delta delivery to {}/{} failed: {}",
                                  rd_kafka_topic_name(m.rkt), m.partition, rd_kafka_err2str(m.err));
    }
  }

  // Takes every partition of the state: the state directory holds them all
  // and the HTTP tier answers from it, so one applier must apply them all.
  // No consumer group: the offsets that count are the ones in RocksDB (a
  // group would only delay the start by its rebalance and could hand half
  // the partitions to another process, leaving both states incomplete).
  Status AssignAll() {
    auto count = base::PartitionCount(consumer.get(), o.deltas_topic, 30000);
    if (!count.ok()) return count.status().WithContext("applier");
    if (static_cast<uint32_t>(*count) != store->partitions()) {
      return Status::FailedPrecondition(fmt::format("{} has {} partitions but the state has {}", o.deltas_topic,
                                                    *count, store->partitions()));
    }
    base::KafkaPartitionList parts(rd_kafka_topic_partition_list_new(static_cast<int>(store->partitions())));
    for (uint32_t p = 0; p < store->partitions(); p++) {
      if (static_cast<int32_t>(p) == global_partition) {
        TALLY_RETURN_IF_ERROR(
            RestoreInFullIfGlobalOnly("one process applies every partition in full"));
      }
      auto made = NewApplier(static_cast<int32_t>(p));
      if (!made.ok()) return made.status();
      std::unique_ptr<WindowApplier> wa = std::move(made).value();
      wa->set_hot_posts(o.hot_posts);
      int64_t offset = wa->progress().next_deltas_offset;
      rd_kafka_topic_partition_list_add(parts.get(), o.deltas_topic.c_str(), static_cast<int32_t>(p))->offset = offset;
      TALLY_LOG_INFO(kLog, "applying {}/{} from offset {} (from the state)", o.deltas_topic, p, offset);
      owned[static_cast<int32_t>(p)] = std::move(wa);
    }
    return base::Assign(consumer.get(), parts.get(), "assigning the deltas partitions");
  }

  // librdkafka stopped partition `m->partition` at an offset outside its
  // log (auto.offset.reset=error). Below the log start (retention removed
  // deltas before they were applied): RetentionGaps reports the range, the
  // window goes on from the log start (its commit records it), and every
  // partition is assigned again at the offset its window goes on from.
  // Past the log's end: an error (a replaced log needs a start).
  Status ResumeAfterReset(const rd_kafka_message_t* m) {
    auto it = owned.find(m->partition);
    if (it == owned.end()) return Status::Ok();
    const int64_t next = it->second->progress().next_deltas_offset;
    base::Result<int64_t> at = Status::Unavailable("stopping");
    for (int attempt = 0; !stop->load(); attempt++) {
      at = gaps.Resume(consumer.get(), {o.deltas_topic, m->partition, m->offset}, next, 5000);
      if (at.ok() || at.status().code() != base::StatusCode::kUnavailable) break;
      if (attempt == 0) TALLY_LOG_WARN(kLog, "{}", at.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (!at.ok()) return stop->load() ? Status::Ok() : at.status();  // stopping: a restart resumes
    it->second->SkipTo(*at);
    base::KafkaPartitionList parts(
        rd_kafka_topic_partition_list_new(static_cast<int>(owned.size())));
    for (const auto& [p, wa] : owned) {
      rd_kafka_topic_partition_list_add(parts.get(), o.deltas_topic.c_str(), p)->offset =
          wa->progress().next_deltas_offset;
    }
    return base::Assign(consumer.get(), parts.get(), "assigning the deltas partitions again");
  }

  // True when nothing waits to be sealed or written: the loop may then
  // sleep longer between polls (a delta that arrives wakes it at once).
  bool Idle() {
    for (const auto& [p, wa] : owned) {
      if (wa->window_dirty()) return false;
    }
    return !CommitBusy();
  }

  size_t PendingKeys() const {
    size_t n = 0;
    for (const auto& [p, wa] : owned) n += wa->pending_keys();
    return n;
  }

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
  Status FlushAll() {
    TALLY_RETURN_IF_ERROR(FinishCommits());
    last_flush_ms = base::SteadyMs();
    bool any_derived = false;
    for (uint32_t d = 0; d < derived.size(); d++) {
      if (derived[d].empty()) continue;
      std::string value = derived[d].Finish();
      any_derived = true;
      base::ProducerRecord r;
      r.rkt = deltas_rkt;
      r.partition = static_cast<int32_t>(d);
      r.value = value;
      TALLY_RETURN_IF_ERROR(producer->Produce(r, base::QueueFullWait{}, [d] {
        return fmt::format("producing derived deltas to partition {}", d);
      }));
    }
    if (any_derived) {
      std::lock_guard<std::mutex> l(derived_wait_mu);
      derived_pending = true;
    }
    for (auto& [p, wa] : owned) {
      // A window still sealed is one whose write failed when the applier
      // was told to stop; it is redone on restart.
      if (!wa->window_dirty() || wa->sealed()) continue;
      writer.Seal(p, wa.get());
    }
    for (auto& [p, wa] : owned) {
      WindowStats ws = wa->TakeStats();
      applied_total->Inc(ws.applied);
      duplicates_total->Inc(ws.duplicates);
      repeated_notices_total->Inc(ws.repeated_notices);
      duplicate_event_ids_total->Inc(ws.duplicate_event_ids);
    }
    writer.Start();
    return Status::Ok();
  }

  // On a helper thread, before writing a window: waits until the broker has
  // acknowledged every derived delta published so far (FlushAll publishes
  // none while the helpers write). The first helper to get here waits; the
  // others find the answer. A failed delivery fails every window of the
  // batch, so none is written and the applier stops (a restart re-derives).
  Status WaitDerivedAcknowledged() {
    std::lock_guard<std::mutex> l(derived_wait_mu);
    if (!derived_pending) return derived_status;
    Status st = producer->Flush(stop, [](int waited_s) {
      TALLY_LOG_WARN(
          kLog,
          "waiting {} s for the broker to acknowledge derived deltas; no window commits meanwhile",
          waited_s);
    });
    if (!st.ok()) {
      // Told to stop: the windows stay unwritten; a restart applies their
      // deltas again and derives again.
      derived_pending = false;
      derived_status = Status::Aborted(fmt::format(
          "{} (derived deltas); the windows waiting for them are applied again on restart",
          st.message()));
      return derived_status;
    }
    derived_pending = false;
    std::lock_guard<std::mutex> f(failure_mu);
    if (!first_failure.empty()) derived_status = Status::Unavailable(first_failure);
    return derived_status;
  }

  // Writes one partition's sealed window (on the helper thread). A store
  // that refuses the write (a full or failing disk) is retried with backoff
  // until it accepts the window or we are told to stop: meanwhile nothing of
  // the window is visible, the state's offset stays where it was (a restart
  // redoes the window from there), reads are served, the applier stops
  // applying at the next window's end, and the log says so once, not per
  // attempt.
  Status CommitWindow(int32_t p, WindowApplier* wa) {
    TALLY_RETURN_IF_ERROR(WaitDerivedAcknowledged());
    const int64_t t0 = base::SteadyMs();
    int64_t last_log_ms = t0;
    int attempts = 0;
    int backoff_ms = 100;
    bool reporting = false;  // this call reports the failure (see failing_windows)
    for (;;) {
      int64_t t = base::SteadyMs();
      Status st = wa->CommitSealed();
      if (st.ok()) {
        commit_seconds->Observe((base::SteadyMs() - t) / 1000.0);
        windows_total->Inc();
        if (attempts > 0 && failing_windows.fetch_sub(1) == 1) {
          last_failure_end_ms.store(base::SteadyMs());
          TALLY_LOG_WARN(kLog,
                         "{}/{}: window up to offset {} committed after {:.1f} s of failed writes "
                         "({} attempts); "
                         "applying resumes",
                         o.deltas_topic, p, wa->sealed_next_offset() - 1,
                         (base::SteadyMs() - t0) / 1000.0, attempts + 1);
        }
        return Status::Ok();
      }
      attempts++;
      int64_t now = base::SteadyMs();
      if (attempts == 1) reporting = failing_windows.fetch_add(1) == 0;
      if (attempts == 1 || now - last_log_ms >= 60000) last_log_ms = now;
      // A disk that refuses writes again within a minute of letting one
      // through (RocksDB gives back a preallocated WAL file when it reopens
      // a partition, and the next window takes it) is the same fault: one
      // ERROR for it, the rest at WARN.
      const int64_t ended = last_failure_end_ms.load();
      const bool again = attempts == 1 && ended != 0 && now - ended < 60000;
      if (reporting && last_log_ms == now) {
        TALLY_LOG_AT(
            again ? base::LogLevel::kWarn : base::LogLevel::kError, kLog,
            "{}/{}: cannot commit the window up to offset {} ({}); the state stays at offset {}, "
            "retrying with backoff, reads are still served{}",
            o.deltas_topic, p, wa->sealed_next_offset() - 1, st.message(), wa->committed_offset(),
            attempts == 1 ? "" : fmt::format(" ({:.0f} s so far)", (now - t0) / 1000.0));
      }
      // Told to stop: give the store a few seconds, then leave the window
      // uncommitted (the restart redoes it).
      while (backoff_ms > 0) {
        if (stop->load() && base::SteadyMs() - t0 > 5000) {
          failing_windows.fetch_sub(1);
          return st;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (base::SteadyMs() - now >= backoff_ms) break;
      }
      backoff_ms = std::min(backoff_ms * 2, 2000);
      // If the write had landed after all, the next CommitSealed() writes
      // nothing and succeeds.
      (void)wa->RecoverFromFailedCommit();
    }
  }

  // ---- In a cluster (ApplierOptions::cluster) ----

  // Assigns the consumer every partition applied here, each at the offset
  // its window goes on from.
  Status AssignApplied() {
    reassign = false;
    base::KafkaPartitionList parts(
        rd_kafka_topic_partition_list_new(static_cast<int>(std::max<size_t>(owned.size(), 1))));
    for (const auto& [p, wa] : owned) {
      rd_kafka_topic_partition_list_add(parts.get(), o.deltas_topic.c_str(), p)->offset =
          wa->progress().next_deltas_offset;
    }
    return base::Assign(consumer.get(), parts.get(),
                        "assigning the deltas partitions applied here");
  }

  // A partition of kGlobalEntity that holds only its global entity
  // (GlobalOnly) is made whole again: its event ids and progress go, so it
  // is applied in full from offset 0, over the notices and red dots it
  // keeps (their deltas are idempotent: a listed notice id is ignored, a
  // dot time is a maximum), which are read meanwhile as they were.
  Status RestoreInFullIfGlobalOnly(const char* why) {
    store::Partition* part = store->partition(static_cast<uint32_t>(global_partition));
    auto only = part->LoadGlobalOnly();
    if (!only.ok()) return only.status();
    if (!*only) return Status::Ok();
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
    return Status::Ok();
  }

  // Applies the partition of kGlobalEntity here for its global entity only
  // (it is neither owned nor a standby here): a full copy held here first
  // loses everything but the global entity and the event ids, in one
  // commit, and goes on from its offset. `current`: that copy had caught up.
  Status HoldGlobalOnly(const char* why, bool current) {
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

  // Starts applying partition p here (opening or creating its state).
  Status StartApplying(int32_t p, bool owner) {
    TALLY_RETURN_IF_ERROR(store->OpenPartition(static_cast<uint32_t>(p)));
    if (p == global_partition && global_only.on) {
      TALLY_RETURN_IF_ERROR(FlushAll());
      TALLY_RETURN_IF_ERROR(FinishCommits());
      TALLY_RETURN_IF_ERROR(
          RestoreInFullIfGlobalOnly(owner ? "owned here now" : "a standby here now"));
      global_only = GlobalOnly();
      resync_global = true;
    }
    auto made = NewApplier(p);
    if (!made.ok()) return made.status();
    std::unique_ptr<WindowApplier> wa = std::move(made).value();
    TALLY_LOG_INFO(kLog, "{}/{}: applying from offset {} as {}", o.deltas_topic, p,
                   wa->progress().next_deltas_offset, owner ? "owner" : "standby");
    owned[p] = std::move(wa);
    held[p] = Held{owner, false, false, -1};
    restoring++;
    reassign = true;
    publish_due = true;
    return Status::Ok();
  }

  // Stops applying p and, unless `keep`, drops its state: it is neither
  // owned nor kept as a standby here any more. A kept copy stays on disk
  // as one left from before a restart (Reconcile drops it once another
  // member serves the partition).
  Status StopApplying(int32_t p, const char* why, bool keep = false) {
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

  // Before the group's first assignment, which comes after its initial
  // rebalance delay (3 s on Kafka by default and on the embedded broker):
  // a member that finds no other live member in the directory applies
  // every partition at once, as provisional standbys, so that a member
  // restarting alone serves and applies from its first second. The
  // assignment then makes them owned; Reconcile settles the rest.
  Status StartIfAlone(int64_t now) {
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

  // Once the group has assigned: a provisional partition it gave this
  // member is owned already (Assigned); one it gave another member is
  // handed over like one given up (kept until its owner has caught up)
  // when it is current here, else stopped: dropped when this start made
  // it, kept on disk when the member had it before.
  Status SettleProvisional(const std::set<int32_t>& want) {
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

  // OwnershipListener, on this thread inside ownership->Poll()/Close().
  // A listener cannot fail: a partition that cannot be opened ends the
  // applier at the next loop (cluster_failure), whose restart rejoins.
  Status cluster_failure;

  void Assigned(std::vector<PartitionStart>* starts) override {
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

  void GiveUp(const std::vector<int32_t>& partitions, const char* how) {
    for (int32_t p : partitions) {
      auto h = held.find(p);
      if (h == held.end()) continue;
      h->second.owner = false;
      h->second.warm = true;
      TALLY_LOG_INFO(kLog,
                     "{}/{}: {}; applied here as a standby until its next owner has caught up",
                     o.deltas_topic, p, how);
    }
    publish_due = true;
    Publish(base::SteadyMs());  // at once: reads of these go to the standby here meanwhile
  }

  void Revoked(const std::vector<int32_t>& partitions) override {
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

  void Lost(const std::vector<int32_t>& partitions) override {
    GiveUp(partitions, "lost (session expired)");
  }

  // Sets the target of every held partition that has none to its log's
  // end now, in one request for all (a look-up per partition, one round
  // trip each, held up a start of 16 partitions by 250 ms). A partition
  // the broker did not answer for keeps none: asked again next time.
  void AskTargets() {
    base::KafkaPartitionList ask(rd_kafka_topic_partition_list_new(1));
    for (const auto& [p, h] : held) {
      if (h.current || h.target >= 0) continue;
      // The timestamp "latest": ListOffsets answers the log's end.
      rd_kafka_topic_partition_list_add(ask.get(), o.deltas_topic.c_str(), p)->offset =
          RD_KAFKA_OFFSET_END;
    }
    if (global_only.on && !global_only.current && global_only.target < 0) {
      rd_kafka_topic_partition_list_add(ask.get(), o.deltas_topic.c_str(), global_partition)
          ->offset = RD_KAFKA_OFFSET_END;
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

  // Marks what has caught up with the end of its log as current.
  void UpdateCurrent() {
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

  // Which standbys this member keeps, from the directory: each partition
  // whose owner is followed by this member
  // within the next `standbys` members (in member id order, wrapping). A
  // standby no longer wanted is still kept while no live member claims its
  // partition (Reconcile).
  std::set<int32_t> WantedStandbys(const std::vector<cluster::MemberInfo>& members) const {
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

  // Brings the standbys in line with the directory: starts the wanted ones,
  // drops a given-up partition once another member serves it as caught-up
  // owner, and drops standbys no longer wanted.
  Status Reconcile() {
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
        TALLY_LOG_INFO(kLog, "{}/{}: dropping the copy left from before ({} owns it)",
                       o.deltas_topic, p, m.member);
        TALLY_RETURN_IF_ERROR(store->DropPartition(p));
        break;
      }
    }
    for (int32_t p : want) {
      if (!held.count(p)) TALLY_RETURN_IF_ERROR(StartApplying(p, false));
    }
    return Status::Ok();
  }

  cluster::MemberInfo Describe() const {
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
      info.restoring.push_back(
          cluster::RestoringPartition{global_partition, wa.progress().next_deltas_offset,
                                      std::max<int64_t>(global_only.target, 0)});
      std::sort(info.restoring.begin(), info.restoring.end(),
                [](const auto& a, const auto& b) { return a.partition < b.partition; });
    }
    if (ownership) info.generation = std::max<int64_t>(ownership->Identity().generation, 0);
    return info;
  }

  // Hands what this member is to the directory on a change, and every
  // second while something restores (its progress).
  void Publish(int64_t now) {
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

  // The cluster's share of each loop: the group, what is current, the
  // standbys, the directory, and the consumer's assignment.
  Status ClusterStep() {
    const int64_t now = base::SteadyMs();
    ownership->Poll(0);
    if (!cluster_failure.ok()) return cluster_failure;
    if (!alone_checked) TALLY_RETURN_IF_ERROR(StartIfAlone(now));
    // Fetching first: what follows may wait on the broker.
    if (reassign) TALLY_RETURN_IF_ERROR(AssignApplied());
    if (now - last_reconcile_ms >= 200 ||
        o.cluster.directory->Version() != seen_directory_version) {
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

  // Joins the group; the partitions come in the following ClusterStep()s.
  Status StartCluster() {
    auto count = base::PartitionCount(consumer.get(), o.deltas_topic, 30000);
    if (!count.ok()) return count.status().WithContext("applier");
    if (static_cast<uint32_t>(*count) != store->partitions()) {
      return Status::FailedPrecondition(fmt::format("{} has {} partitions but the state has {}",
                                                    o.deltas_topic, *count, store->partitions()));
    }
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
    TALLY_LOG_INFO(kLog, "joining the group {}-applier as member {} ({})", o.group,
                   o.cluster.member, o.cluster.http);
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

  Status HandleMessage(const rd_kafka_message_t* m) {
    auto it = owned.find(m->partition);
    if (it == owned.end()) return Status::Ok();  // stale message of a revoked partition
    // Fetched before the consumer was assigned again from the window's offset.
    if (m->offset < it->second->progress().next_deltas_offset) return Status::Ok();
    if (m->partition == global_partition && resync_global) {
      if (m->offset != it->second->progress().next_deltas_offset) return Status::Ok();
      resync_global = false;
    }
    // Every member applying a partition publishes its derived deltas, the
    // standbys too: a derived delta is the same whoever derives it (same
    // source offset, same effect index, from the same state), so the
    // target applies the first copy and drops the others by mark. What
    // makes that exact is that each publisher's stream has no holes: it
    // starts where its own state starts, and everything before was
    // published (and acknowledged) before that state was committed. A
    // standby that derived nothing would break that when it takes over
    // from an owner that crashed before publishing its last window's
    // derived deltas: those would never be published.
    Status st = it->second->ApplyBatch(
        std::string_view(static_cast<const char*>(m->payload ? m->payload : ""), m->len), m->offset, &derived);
    if (st.code() == base::StatusCode::kCorruption) {
      corrupt_total->Inc();
      TALLY_LOG_ERROR(kLog, "skipping undecodable message: {}", st.message());
      return Status::Ok();
    }
    return st;
  }
};

Applier::Applier(ApplierOptions options, store::StateStore* store)
    : rep_(std::make_unique<Rep>(std::move(options), store)) {}
Applier::~Applier() = default;

Status Applier::Run(const std::atomic<bool>* stop) {
  Rep& r = *rep_;
  r.stop = stop;
  store::DisablePerfCounters();
  base::ProducerSettings ps;
  ps.client_id = "tally-applier";
  ps.linger_ms = 1;
  ps.on_delivery = [&r](const rd_kafka_message_t& m) { r.OnDelivery(m); };
  auto producer = base::KafkaProducer::Create(r.o.kafka, std::move(ps));
  if (!producer.ok()) return producer.status();
  r.producer = std::move(producer).value();
  // Metadata now, or the first window's derived deltas wait for the next refresh.
  auto rkt = r.producer->Topic(r.o.deltas_topic, 10000);
  if (!rkt.ok()) return rkt.status();
  r.deltas_rkt = *rkt;

  // This consumer never joins its group nor commits to it.
  base::ConsumerSettings cs;
  cs.group = r.o.group + "-applier";
  cs.client_id = "tally-applier";
  cs.store_offsets = false;
  cs.short_fetch_wait = true;
  auto consumer = base::MakeConsumer(r.o.kafka, cs);
  if (!consumer.ok()) return consumer.status();
  r.consumer = std::move(consumer).value();
  if (auto st = r.o.cluster.enabled ? r.StartCluster() : r.AssignAll(); !st.ok()) {
    TALLY_LOG_ERROR(kLog, "stopped: {}", st.ToString());
    return st;
  }
  TALLY_LOG_INFO(kLog, "applying {} into {} (window {} ms, key budget {})", r.o.deltas_topic, r.store->dir(),
                 r.o.flush_ms, r.o.key_budget);
  r.last_flush_ms = base::SteadyMs();

  Status result = Status::Ok();
  // A window ends --flush-ms after the last one once the consumer has caught
  // up (a poll found nothing), so fresh deltas become visible quickly; while
  // a backlog keeps every poll busy it grows to 10x that, so hot keys
  // coalesce more and RocksDB sees fewer, larger batches. While the helper
  // is still writing the previous window, this one goes on growing instead
  // of waiting for it; only the key budget makes the applier wait.
  const int64_t max_window_ms = static_cast<int64_t>(r.o.flush_ms) * 10;
  bool caught_up = false;
  bool last_poll_empty = false;
  // The state's deltas offsets and marks belong to one log. A broker that
  // now answers as another cluster (a restarted embedded broker) may hand
  // out its new log at offsets the state has not reached, and applying
  // those would skip or double records: stop before applying anything of
  // it, so the command attaches the state to the new log as at start.
  // librdkafka reports the new cluster id before it fetches from it.
  const std::string recorded = r.store->recorded_cluster();
  const std::string own_cluster = recorded.substr(0, recorded.find('/'));
  uint64_t cluster_reports = base::ClusterIdReports();
  while (!stop->load(std::memory_order_relaxed)) {
    if (r.ownership) {
      result = r.ClusterStep();
      if (!result.ok()) break;
    }
    // 5 ms while a window is open or being written (its end and the
    // cluster's bookkeeping run between polls); idle, 50 ms: 200 wake-ups
    // a second were 0.7 % of a core at rest (aggregator/README.md).
    // Idle() is asked only after an empty poll: under load it is not.
    base::KafkaMessage m(
        rd_kafka_consumer_poll(r.consumer.get(), last_poll_empty && r.Idle() ? 50 : 5));
    last_poll_empty = !m;
    if (base::ClusterIdReports() != cluster_reports) {
      cluster_reports = base::ClusterIdReports();
      std::string now = base::LastReportedClusterId();
      if (!own_cluster.empty() && now != own_cluster) {
        result =
            Status::OutOfRange(fmt::format("the broker now answers as cluster {}, the state was "
                                           "built from {}: its log was replaced",
                                           now, own_cluster));
        break;
      }
    }
    if (!m) caught_up = true;
    if (m) {
      if (IsOffsetReset(m->err)) {
        if (Status st = r.ResumeAfterReset(m.get()); !st.ok()) {
          result = Status::OutOfRange(fmt::format(
              "{}/{}: the log no longer holds the offset the state needs ({}): {}",
              r.o.deltas_topic, m->partition, rd_kafka_message_errstr(m.get()), st.message()));
          break;
        }
      } else if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          TALLY_LOG_WARN(kLog, "consumer: {}", rd_kafka_message_errstr(m.get()));
        }
      } else {
        result = r.HandleMessage(m.get());
        if (!result.ok()) break;
        // The last message the broker has for this partition (as of the
        // latest fetch) also means caught up, for a steady stream that never
        // leaves a poll empty.
        int64_t low = 0, high = 0;
        if (rd_kafka_get_watermark_offsets(r.consumer.get(), rd_kafka_topic_name(m->rkt), m->partition, &low,
                                           &high) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            m->offset + 1 >= high) {
          caught_up = true;
        }
      }
    }
    r.producer->Poll(0);
    int64_t elapsed = base::SteadyMs() - r.last_flush_ms;
    const bool window_over = (elapsed >= r.o.flush_ms && caught_up) || elapsed >= max_window_ms;
    if ((window_over && !r.CommitBusy()) || r.PendingKeys() >= r.o.key_budget) {
      result = r.FlushAll();
      if (!result.ok()) break;
      caught_up = false;
    }
  }
  if (result.ok()) result = r.FlushAll();
  // Always: the helper must be done with the windows before they go.
  Status last = r.FinishCommits();
  if (result.ok()) result = last;
  if (r.ownership) {
    // Leaves the group: Revoked() commits nothing new (the windows are
    // written), and the partitions move to the other members at once.
    if (auto st = r.ownership->Close(); !st.ok()) TALLY_LOG_WARN(kLog, "{}", st.ToString());
    r.ownership.reset();
  }
  rd_kafka_consumer_close(r.consumer.get());
  r.owned.clear();
  if (result.ok()) {
    TALLY_LOG_INFO(kLog, "stopped cleanly");
  } else {
    TALLY_LOG_ERROR(kLog, "stopped: {}", result.ToString());
  }
  return result;
}

}  // namespace tally::aggregator
