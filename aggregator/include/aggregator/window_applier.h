// WindowApplier: applies the deltas of one tally.deltas partition to that
// partition's state, one window at a time.
//
// Deltas are coalesced per key over a window (CounterOp: "three +1s become
// one +3", resets and floors included); like and follow edges are decided
// in delta order against the window's own changes over the stored edges.
// Commit() writes the window as ONE WriteBatch holding the state changes,
// the next deltas offset and, for every source stream, the highest
// (offset, effect) applied. A delta at or below its stream's mark is a
// duplicate from a restarted router and is skipped. That invariant is the
// whole of tally's exactly-once: see aggregator/README.md.
//
// A follow edge lives in the follower's partition; when it changes, the
// window derives deltas for the target's partition (followers, unread
// follower), sourced at (tally.deltas, this partition, offset, index), so
// they are deduplicated the same way. The caller must have them
// acknowledged by the broker before Commit(), or a crash would lose them.
//
// Commit() is Seal(), CommitSealed() and FinishCommit() in a row. The live
// applier splits them: it seals a window, has another thread write it, and
// applies the next window meanwhile (edges, and whether a notice id is
// listed already, are then decided over the window, the sealed window and
// the store, in that order).
//
// Thread model: confined to the applier thread that owns the partition,
// except CommitSealed() and RecoverFromFailedCommit(), which may run on
// another thread between Seal() and FinishCommit() while this one goes on
// applying; they touch only the sealed batch and the partition.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "aggregator/window_map.h"
#include "base/hot_keys.h"
#include "base/log.h"
#include "base/status.h"
#include "schemas/delta.h"
#include "store/counter_op.h"
#include "store/state_store.h"

namespace tally::aggregator {

struct WindowStats {
  uint64_t applied = 0;     // deltas applied
  uint64_t duplicates = 0;  // deltas skipped by mark
  uint64_t repeated_notices = 0;  // notices whose id was in the list already
  uint64_t duplicate_event_ids = 0;  // deltas of a copy of an event applied already
};

class WindowApplier {
 public:
  // `partition` must outlive this object. `deltas_topic` names the source
  // stream of derived deltas. `partitions` is the deltas partition count.
  // `dedup_ms`: two records of events with the same id whose event times
  // lie within this of each other are one event, applied once.
  WindowApplier(store::Partition* partition, std::string deltas_topic, uint32_t partitions,
                store::ViewedOptions viewed = {}, int64_t dedup_ms = 24 * 3600 * 1000LL);

  // Loads the committed progress. Call before anything else.
  base::Status Load();
  const store::Progress& progress() const { return progress_; }

  // Applies the batch stored at `offset` of this partition's deltas log.
  // Derived deltas are appended to (*derived)[target partition] when
  // `derived` is not null (live mode); replay passes null because the live
  // applier already logged them. Corruption if the batch does not decode:
  // nothing of it is applied, but the offset is consumed (the caller logs it).
  base::Status ApplyBatch(std::string_view bytes, int64_t offset,
                          std::vector<schemas::DeltaBatchBuilder>* derived);

  // The records of this partition's deltas log below `offset` (above the
  // next offset) are gone (retention removed them before they were
  // applied): the window goes on from `offset`, and its commit records it
  // as the next offset even if no batch follows. No-op when `offset` is not
  // above the next offset.
  void SkipTo(int64_t offset);

  // Keys touched by the uncommitted window (for the key budget).
  size_t pending_keys() const;
  // True if anything (state or offsets) awaits Commit().
  bool dirty() const { return dirty_ || (sealed_ && !sealed_landed_); }
  // True if the window has applied deltas that are not sealed yet.
  bool window_dirty() const { return dirty_; }
  // True between Seal() and FinishCommit().
  bool sealed() const { return sealed_; }
  // The next deltas offset once the sealed window is written.
  int64_t sealed_next_offset() const { return sealed_next_offset_; }

  // Writes the window atomically; on error the window is kept (sealed) so
  // Commit() can be retried, and nothing of it is visible.
  base::Status Commit();

  // Encodes the window (state changes and progress) into the batch that
  // CommitSealed() writes, and starts an empty window. Requires
  // window_dirty() and !sealed().
  void Seal();
  // Writes the sealed window atomically. On error it stays sealed, for a
  // retry; nothing of it is visible.
  base::Status CommitSealed();
  // After CommitSealed() succeeded: committed_offset() moves to the sealed
  // window's end and the next Seal() may come.
  void FinishCommit();

  // After a failed commit: asks the store to accept writes again
  // (Partition::Resume) and checks whether the failed write landed after all
  // (the stored progress already is the sealed window's): then the window
  // counts as written, dirty() turns false and a retry writes nothing, so it
  // cannot apply twice. The store's error while it still refuses writes.
  base::Status RecoverFromFailedCommit();

  // The next deltas offset the store holds (what a restart resumes from).
  int64_t committed_offset() const { return committed_offset_; }

  // Where Seal() tallies each post's increments of the window (the net
  // positive add per post, one Add per post per window), for the hottest
  // posts of the last minute; null (the default): nowhere. Borrowed: must
  // outlive this object or be replaced first.
  void set_hot_posts(base::HotKeys* hot) { hot_posts_ = hot; }

  // Applies only the deltas of kGlobalEntity (notices, red dots), deciding
  // every other delta (its stream's mark, its event id) as a full copy
  // would without applying it: a cluster member's copy of the partition of
  // kGlobalEntity when it neither owns nor stands by for that partition
  // (aggregator/README.md, "The global entity in a cluster"). The partition then holds
  // nothing else (PartitionBatch::DropAllButGlobal). Off by default.
  void set_global_only(bool global_only) { global_only_ = global_only; }
  bool global_only() const { return global_only_; }

  // A notice listed again from a deltas offset below `offset` is expected,
  // not a repeat: the partition is being applied again from offset 0 over
  // the notices a global-only copy kept up to `offset`. It is ignored as
  // any listed notice is, but neither logged nor counted in
  // WindowStats::repeated_notices. 0 (the default): none expected.
  void set_relisting_until(int64_t offset) { relisting_until_ = offset; }

  // Returns the counts since the last call and resets them.
  WindowStats TakeStats() {
    WindowStats s = stats_;
    stats_ = WindowStats();
    return s;
  }

 private:
  using Edges = WindowMap<std::pair<uint64_t, uint64_t>, bool>;

  base::Result<bool> EdgeSet(bool like, uint64_t a, uint64_t b);
  // True when `d` belongs to another copy (another record) of an event
  // already applied in this partition; otherwise claims its id for the copy
  // `copy`, so that later copies are dropped.
  base::Result<bool> IsCopyOfAppliedEvent(const schemas::Delta& d, uint64_t copy);
  bool NoticeListed(uint64_t id) const;
  void ClearWindow();
  void DropViewBitsOf(uint32_t table_id);
  void ApplyOne(const schemas::Delta& d, uint32_t* derived_index, int64_t offset,
                std::vector<schemas::DeltaBatchBuilder>* derived, base::Status* st);

  store::Partition* partition_;
  std::string deltas_topic_;
  uint32_t partitions_;
  store::Progress progress_;
  int64_t committed_offset_ = 0;
  bool dirty_ = false;
  using PostOps = std::array<store::CounterOp, schemas::kPostFieldCount>;
  using UserOps = std::array<store::CounterOp, schemas::kUserFieldCount>;
  using UnreadOps = std::array<store::CounterOp, schemas::kUnreadCounterKinds>;
  WindowMap<uint64_t, PostOps> post_ops_;
  WindowMap<uint64_t, UserOps> user_ops_;
  WindowMap<uint64_t, UnreadOps> unread_ops_;
  Edges likes_;
  Edges follows_;
  // Event ids claimed by the window: id hash -> the copy applied.
  struct IdClaim {
    int64_t ts = 0;
    uint64_t copy = 0;
  };
  int64_t dedup_ms_;
  WindowMap<uint64_t, IdClaim> event_ids_;
  WindowMap<uint64_t, IdClaim> sealed_event_ids_;
  std::vector<uint64_t>
      stream_copy_seeds_;  // per stream of the batch: its part of a copy's fingerprint
  // Unread shapes other than plain counters. Notices: id -> title, a
  // set of ids whatever order they arrive in (SPEC section 1).
  std::map<uint64_t, std::string> notices_;
  std::unordered_map<uint64_t, std::array<store::CounterOp, 2>> notice_reads_;
  std::unordered_map<std::string, store::CounterOp> red_dots_;
  std::map<std::pair<uint64_t, std::string>, int64_t> user_red_dots_;
  std::unordered_map<uint64_t, std::pair<int64_t, std::vector<std::pair<uint64_t, uint64_t>>>> snapshots_;
  store::ViewedOptions viewed_options_;
  store::ViewedTables viewed_;
  bool viewed_dirty_ = false;
  // "Viewed" bits set by the window, grouped by (table, chunk) without an
  // allocation per chunk: the chunk's key (table << 32 | chunk) maps to the
  // last of its bits in view_bits_, and each bit links to the one before it.
  // A map of vectors allocated twice per chunk per window; sorting every bit
  // at seal cost 2.5 % of tally up's CPU at a steady load.
  struct ViewBitNode {
    uint16_t bit;
    uint32_t prev;  // index + 1 of the chunk's previous bit; 0: none
  };
  WindowMap<uint64_t, uint32_t> view_chunks_;  // chunk -> index + 1 of its last bit
  std::vector<ViewBitNode> view_bits_;
  std::vector<uint16_t> chunk_bits_;  // Seal's scratch
  std::vector<uint32_t> dropped_tables_;
  schemas::DeltaBatchReader reader_;
  std::vector<schemas::Delta> decoded_;  // the batch being applied, reused
  std::vector<store::SourceMark*> stream_marks_;
  // The sealed window: its encoded batch, the offset it ends at, its edges.
  store::PartitionBatch batch_;
  bool sealed_ = false;
  bool sealed_landed_ = false;  // found in the store after a failed write
  int64_t sealed_next_offset_ = 0;
  Edges sealed_likes_;
  Edges sealed_follows_;
  std::map<uint64_t, std::string> sealed_notices_;
  WindowStats stats_;
  base::HotKeys* hot_posts_ = nullptr;
  bool global_only_ = false;
  int64_t relisting_until_ = 0;
  // A producer whose notice ids restart (a second `tally produce --gen`, a
  // reset sequence) sends one repeated notice after another.
  base::LogLimiter repeated_notice_log_{10, 10000};
};

}  // namespace tally::aggregator
