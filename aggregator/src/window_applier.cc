#include "aggregator/window_applier.h"

#include <fmt/core.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <utility>

#include "base/clock.h"
#include "base/hash.h"
#include "base/log.h"

namespace tally::aggregator {

using base::Status;
using schemas::Delta;
using schemas::DeltaOp;
using store::CounterOp;

WindowApplier::WindowApplier(store::Partition* partition, std::string deltas_topic,
                             uint32_t partitions, store::ViewedOptions viewed, int64_t dedup_ms)
    : partition_(partition),
      deltas_topic_(std::move(deltas_topic)),
      partitions_(partitions),
      dedup_ms_(dedup_ms),
      viewed_options_(viewed),
      viewed_(viewed) {}

Status WindowApplier::Load() {
  auto p = partition_->LoadProgress();
  if (!p.ok()) return p.status();
  progress_ = std::move(p).value();
  committed_offset_ = progress_.next_deltas_offset;
  auto viewed = partition_->LoadViewedTables(viewed_options_);
  if (!viewed.ok()) return viewed.status();
  viewed_ = std::move(viewed).value();
  return Status::Ok();
}

size_t WindowApplier::pending_keys() const {
  return post_ops_.size() + user_ops_.size() + unread_ops_.size() + likes_.size() +
         follows_.size() + notices_.size() + notice_reads_.size() + red_dots_.size() +
         user_red_dots_.size() + snapshots_.size() + view_chunks_.size() + event_ids_.size();
}

base::Result<bool> WindowApplier::EdgeSet(bool like, uint64_t a, uint64_t b) {
  if (const bool* set = (like ? likes_ : follows_).find({a, b})) return *set;
  // A sealed window may still be on its way to the store.
  if (sealed_) {
    if (const bool* set = (like ? sealed_likes_ : sealed_follows_).find({a, b})) return *set;
  }
  return like ? partition_->HasLike(a, b) : partition_->HasFollow(a, b);
}

base::Result<bool> WindowApplier::IsCopyOfAppliedEvent(const Delta& d, uint64_t copy) {
  const IdClaim* claim = event_ids_.find(d.event_id);
  if (claim == nullptr && sealed_) claim = sealed_event_ids_.find(d.event_id);
  IdClaim stored;
  if (claim == nullptr) {
    auto r = partition_->GetEventId(d.event_id);
    if (!r.ok()) return r.status();
    if (r->has_value()) {
      stored = IdClaim{(*r)->ts, (*r)->copy};
      claim = &stored;
    }
  }
  // The other effects of the same record share its fingerprint and apply.
  // A record of the same id far apart in event time is another event that
  // reuses the id: it applies, and later copies are judged against it.
  if (claim != nullptr && claim->copy != copy && std::abs(d.source.ts - claim->ts) <= dedup_ms_)
    return true;
  if (claim == nullptr || claim->copy != copy) event_ids_[d.event_id] = IdClaim{d.source.ts, copy};
  return false;
}

// In the window, the sealed window (on its way to the store) or the store.
bool WindowApplier::NoticeListed(uint64_t id) const {
  if (notices_.count(id) != 0) return true;
  if (sealed_ && sealed_notices_.count(id) != 0) return true;
  return partition_->HasNotice(id);
}

void WindowApplier::SkipTo(int64_t offset) {
  if (offset <= progress_.next_deltas_offset) return;
  progress_.next_deltas_offset = offset;
  dirty_ = true;
}

Status WindowApplier::ApplyBatch(std::string_view bytes, int64_t offset,
                                 std::vector<schemas::DeltaBatchBuilder>* derived) {
  progress_.next_deltas_offset = offset + 1;
  dirty_ = true;
  // Decode the whole batch before applying any of it: a corrupt batch must
  // not be half applied (nor leave marks behind).
  Status st = reader_.Open(bytes);
  decoded_.clear();
  if (st.ok()) {
    Delta d;
    while (reader_.Next(&d)) decoded_.push_back(d);
    st = reader_.status();
  }
  if (!st.ok()) return st.WithContext(fmt::format("{}/{} offset {}", deltas_topic_, partition_->id(), offset));
  // Resolve each stream of the batch to its mark once.
  stream_marks_.clear();
  stream_copy_seeds_.clear();
  for (const auto& s : reader_.streams()) {
    stream_marks_.push_back(&progress_.marks[s]);
    stream_copy_seeds_.push_back(base::SplitMix64(
        schemas::EventIdHash(s.topic) ^ base::SplitMix64(static_cast<uint32_t>(s.partition))));
  }
  uint32_t derived_index = 0;
  for (const Delta& d : decoded_) {
    store::SourceMark* mark = stream_marks_[d.source.stream];
    if (mark->Covers(d.source.offset, d.source.effect)) {
      stats_.duplicates++;
      continue;
    }
    if (d.event_id != 0) {
      // The record (stream, offset) that carried this copy of the event.
      const uint64_t copy = base::SplitMix64(stream_copy_seeds_[d.source.stream] ^
                                             static_cast<uint64_t>(d.source.offset));
      auto dup = IsCopyOfAppliedEvent(d, copy);
      if (!dup.ok()) return dup.status();
      if (*dup) {
        stats_.duplicate_event_ids++;
        *mark = store::SourceMark{d.source.offset, d.source.effect, d.source.ts};
        continue;
      }
    }
    // A global-only copy decides every delta as a full copy does (marks,
    // event ids) and applies only kGlobalEntity's: its global state is the
    // full copy's (aggregator/README.md, "The global entity in a cluster").
    if (!global_only_ || d.entity == schemas::kGlobalEntity) {
      ApplyOne(d, &derived_index, offset, derived, &st);
      if (!st.ok()) return st;  // a store read failed: the window is unusable, caller restarts
      stats_.applied++;
    }
    *mark = store::SourceMark{d.source.offset, d.source.effect, d.source.ts};
    progress_.max_event_ts = std::max(progress_.max_event_ts, d.source.ts);
  }
  return Status::Ok();
}

void WindowApplier::ApplyOne(const Delta& d, uint32_t* derived_index, int64_t offset,
                             std::vector<schemas::DeltaBatchBuilder>* derived, Status* st) {
  auto derive = [&](DeltaOp op, uint64_t entity, uint8_t field, int64_t amount) {
    // Counted whether or not emitted, so indexes are the same in live and replay.
    uint32_t index = (*derived_index)++;
    if (!derived) return;
    auto& b = (*derived)[schemas::PartitionOf(entity, partitions_)];
    Delta out;
    out.op = op;
    out.entity = entity;
    out.field = field;
    out.amount = amount;
    out.source.stream = b.StreamIndex(deltas_topic_, static_cast<int32_t>(partition_->id()));
    out.source.offset = offset;
    out.source.effect = index;
    out.source.ts = d.source.ts;
    b.Add(out);
  };
  switch (d.op) {
    case DeltaOp::kPostCounter:
      if (d.field < schemas::kPostFieldCount) post_ops_[d.entity][d.field].Then(CounterOp::Add(d.amount));
      break;
    case DeltaOp::kUserCounter:
      if (d.field < schemas::kUserFieldCount) user_ops_[d.entity][d.field].Then(CounterOp::Add(d.amount));
      break;
    case DeltaOp::kUnreadAdd:
      if (d.field < schemas::kUnreadCounterKinds) unread_ops_[d.entity][d.field].Then(CounterOp::Add(d.amount));
      break;
    case DeltaOp::kUnreadReset:
      if (d.field < schemas::kUnreadCounterKinds) unread_ops_[d.entity][d.field].Then(CounterOp::Reset());
      break;
    case DeltaOp::kLikeSet:
    case DeltaOp::kLikeUnset: {
      bool want = d.op == DeltaOp::kLikeSet;
      auto cur = EdgeSet(true, d.entity, d.member);
      if (!cur.ok()) {
        *st = cur.status();
        return;
      }
      if (*cur == want) break;  // a duplicate like, or an unlike of nothing
      likes_[{d.entity, d.member}] = want;
      post_ops_[d.entity][static_cast<int>(schemas::PostField::kLike)].Then(CounterOp::Add(want ? 1 : -1));
      break;
    }
    case DeltaOp::kFollowSet:
    case DeltaOp::kFollowUnset: {
      bool want = d.op == DeltaOp::kFollowSet;
      auto cur = EdgeSet(false, d.entity, d.member);
      if (!cur.ok()) {
        *st = cur.status();
        return;
      }
      if (*cur == want) break;  // already followed / not followed: no-op for every effect
      follows_[{d.entity, d.member}] = want;
      user_ops_[d.entity][static_cast<int>(schemas::UserField::kFollowing)].Then(CounterOp::Add(want ? 1 : -1));
      derive(DeltaOp::kUserCounter, d.member, static_cast<uint8_t>(schemas::UserField::kFollowers), want ? 1 : -1);
      if (want) derive(DeltaOp::kUnreadAdd, d.member, static_cast<uint8_t>(schemas::UnreadKind::kFollower), 1);
      break;
    }
    case DeltaOp::kNoticeAppend:
      // The list is a set of ids: a notice counts however late it comes
      // (notices published unkeyed arrive from every input partition, in
      // any order), and an id already listed is a repeat, ignored. Which
      // copy is the first is fixed by tally.deltas, so replay keeps it.
      if (NoticeListed(d.member)) {
        if (offset < relisting_until_) break;
        stats_.repeated_notices++;
        TALLY_LOG_WARN_LIMITED(repeated_notice_log_, "applier",
                               "{}/{} offset {}: notice {} ignored, already in the list",
                               deltas_topic_, partition_->id(), offset, d.member);
        break;
      }
      notices_.emplace(d.member, std::string(d.text));
      break;
    case DeltaOp::kNoticeRead: {
      auto& ops = notice_reads_[d.entity];
      ops[0].Then(CounterOp{true, static_cast<int64_t>(d.member), 0});
      ops[1].Then(CounterOp{false, 0, d.source.ts});
      break;
    }
    case DeltaOp::kRedDotPublish:
      red_dots_[std::string(d.text)].Then(CounterOp{false, 0, d.source.ts});
      break;
    case DeltaOp::kRedDotRead: {
      int64_t& t = user_red_dots_.try_emplace({d.entity, std::string(d.text)}, 0).first->second;
      t = std::max(t, d.source.ts);
      break;
    }
    case DeltaOp::kFeedSnapshot: {
      auto& snap = snapshots_[d.entity];
      snap.first = d.source.ts;
      snap.second.assign(d.snapshot, d.snapshot + d.snapshot_size);
      break;
    }
    case DeltaOp::kViewMember: {
      store::ViewProbe probe;
      size_t before = dropped_tables_.size();
      viewed_.Insert(d.entity, d.member, &probe, &dropped_tables_);
      viewed_dirty_ = true;
      for (size_t i = before; i < dropped_tables_.size(); i++) {
        // Pending bits of a dropped table would resurrect some of its chunks.
        DropViewBitsOf(dropped_tables_[i]);
      }
      if (probe.nbits > 0) {
        uint32_t& last = view_chunks_[(uint64_t{probe.table_id} << 32) | probe.chunk];
        for (int i = 0; i < probe.nbits; i++) {
          view_bits_.push_back({probe.bits[i], last});
          last = static_cast<uint32_t>(view_bits_.size());
        }
      }
      break;
    }
  }
}

Status WindowApplier::Commit() {
  if (dirty_ && !sealed_) Seal();
  if (!sealed_) return Status::Ok();
  TALLY_RETURN_IF_ERROR(CommitSealed());
  FinishCommit();
  return Status::Ok();
}

void WindowApplier::Seal() {
  assert(dirty_ && !sealed_);
  batch_.Clear();
  // Each kind in key order: the memtable's skip list inserts a run of
  // ascending keys from where the previous insert ended (its splice) instead
  // of searching from the top for each one, and memtable inserts are most of
  // a window's cost.
  post_ops_.SortByKey();
  user_ops_.SortByKey();
  unread_ops_.SortByKey();
  likes_.SortByKey();
  follows_.SortByKey();
  event_ids_.SortByKey();
  if (hot_posts_ != nullptr && post_ops_.size() > 0) {
    // One pass: each post's ops go to the batch and its increments to the
    // hottest-posts sketch.
    auto hot = hot_posts_->Lock(base::SteadyMs());
    for (const auto& [id, ops] : post_ops_) {
      batch_.MergePostCounters(id, ops.data());
      uint64_t increments = 0;
      for (const store::CounterOp& op : ops) {
        if (op.add > 0) increments += static_cast<uint64_t>(op.add);
      }
      hot.Add(id, increments);
    }
  } else {
    for (const auto& [id, ops] : post_ops_) batch_.MergePostCounters(id, ops.data());
  }
  for (const auto& [id, ops] : user_ops_) batch_.MergeUserCounters(id, ops.data());
  for (const auto& [id, ops] : unread_ops_) batch_.MergeUnreadCounters(id, ops.data());
  for (const auto& [k, set] : likes_) {
    if (set)
      batch_.PutLike(k.first, k.second);
    else
      batch_.DeleteLike(k.first, k.second);
  }
  for (const auto& [k, set] : follows_) {
    if (set)
      batch_.PutFollow(k.first, k.second);
    else
      batch_.DeleteFollow(k.first, k.second);
  }
  for (const auto& [id, claim] : event_ids_) batch_.PutEventId(id, claim.ts, claim.copy);
  for (const auto& [id, title] : notices_) batch_.PutNotice(id, title);
  for (const auto& [user, ops] : notice_reads_) {
    batch_.SetNoticeRead(user, static_cast<uint64_t>(ops[0].add), ops[1].floor);
  }
  for (const auto& [channel, op] : red_dots_) batch_.MaxRedDot(channel, op.floor);
  for (const auto& [k, ts] : user_red_dots_) batch_.MaxUserRedDot(k.first, k.second, ts);
  for (const auto& [user, snap] : snapshots_) {
    batch_.PutFeedSnapshot(user, snap.first, snap.second.data(), snap.second.size());
  }
  view_chunks_.SortByKey();
  for (const auto& [key, last] : view_chunks_) {
    chunk_bits_.clear();
    for (uint32_t n = last; n != 0; n = view_bits_[n - 1].prev) {
      chunk_bits_.push_back(view_bits_[n - 1].bit);
    }
    batch_.SetViewBits(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key), chunk_bits_);
  }
  for (uint32_t t : dropped_tables_) batch_.DropViewTable(t);
  if (viewed_dirty_) batch_.PutViewedTables(viewed_);
  for (auto it = progress_.marks.begin(); it != progress_.marks.end();) {
    if (it->second.offset < 0) it = progress_.marks.erase(it);  // streams with nothing applied
    else ++it;
  }
  batch_.SetProgress(progress_);
  sealed_next_offset_ = progress_.next_deltas_offset;
  // The edges stay readable (EdgeSet) until the store has them.
  std::swap(likes_, sealed_likes_);
  std::swap(follows_, sealed_follows_);
  std::swap(event_ids_, sealed_event_ids_);
  std::swap(notices_, sealed_notices_);
  ClearWindow();
  sealed_ = true;
  sealed_landed_ = false;
}

Status WindowApplier::CommitSealed() {
  if (!sealed_ || sealed_landed_) return Status::Ok();
  return partition_->Commit(&batch_);
}

void WindowApplier::FinishCommit() {
  assert(sealed_);
  committed_offset_ = sealed_next_offset_;
  sealed_likes_.clear();
  sealed_follows_.clear();
  sealed_event_ids_.clear();
  sealed_notices_.clear();
  sealed_ = false;
  sealed_landed_ = false;
}

Status WindowApplier::RecoverFromFailedCommit() {
  TALLY_RETURN_IF_ERROR(partition_->Resume());
  auto stored = partition_->LoadProgress();
  if (!stored.ok()) return stored.status();
  // A sealed window's target offset is above what was stored before it; the
  // stored offset reaching it means the "failed" write is in the state.
  if (sealed_ && !sealed_landed_ && stored->next_deltas_offset == sealed_next_offset_) {
    TALLY_LOG_WARN(
        "applier",
        "{}/{}: the window up to offset {} was written despite the error; not applying it again",
        deltas_topic_, partition_->id(), sealed_next_offset_ - 1);
    sealed_landed_ = true;
  }
  return Status::Ok();
}

// Pending bits of a dropped table would resurrect some of its chunks. Rare
// (a table is dropped when the budget rolls over): the chunk map is rebuilt.
void WindowApplier::DropViewBitsOf(uint32_t table_id) {
  std::vector<std::pair<uint64_t, uint32_t>> keep;
  for (const auto& [key, last] : view_chunks_) {
    if (static_cast<uint32_t>(key >> 32) != table_id) keep.emplace_back(key, last);
  }
  view_chunks_.clear();
  for (const auto& [key, last] : keep) view_chunks_[key] = last;
}

void WindowApplier::ClearWindow() {
  post_ops_.clear();
  user_ops_.clear();
  unread_ops_.clear();
  likes_.clear();
  follows_.clear();
  event_ids_.clear();
  notices_.clear();
  notice_reads_.clear();
  red_dots_.clear();
  user_red_dots_.clear();
  snapshots_.clear();
  view_chunks_.clear();
  view_bits_.clear();
  dropped_tables_.clear();
  viewed_dirty_ = false;
  dirty_ = false;
}

}  // namespace tally::aggregator
