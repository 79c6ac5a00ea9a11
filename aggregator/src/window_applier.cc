#include "aggregator/window_applier.h"

#include <fmt/core.h>

#include <algorithm>

namespace tally::aggregator {

using base::Status;
using schemas::Delta;
using schemas::DeltaOp;
using store::CounterOp;

WindowApplier::WindowApplier(store::Partition* partition, std::string deltas_topic, uint32_t partitions)
    : partition_(partition), deltas_topic_(std::move(deltas_topic)), partitions_(partitions) {}

Status WindowApplier::Load() {
  auto p = partition_->LoadProgress();
  if (!p.ok()) return p.status();
  progress_ = std::move(p).value();
  return Status::Ok();
}

size_t WindowApplier::pending_keys() const {
  return post_ops_.size() + user_ops_.size() + unread_ops_.size() + likes_.size() + follows_.size();
}

base::Result<bool> WindowApplier::EdgeSet(Edges* overlay, bool like, uint64_t a, uint64_t b) {
  auto it = overlay->find({a, b});
  if (it != overlay->end()) return it->second;
  return like ? partition_->HasLike(a, b) : partition_->HasFollow(a, b);
}

Status WindowApplier::ApplyBatch(std::string_view bytes, int64_t offset,
                                 std::vector<schemas::DeltaBatchBuilder>* derived) {
  progress_.next_deltas_offset = offset + 1;
  dirty_ = true;
  Status st = reader_.Open(bytes);
  if (!st.ok()) return st.WithContext(fmt::format("{}/{} offset {}", deltas_topic_, partition_->id(), offset));
  // Resolve each stream of the batch to its mark once.
  stream_marks_.clear();
  for (const auto& s : reader_.streams()) stream_marks_.push_back(&progress_.marks[s]);
  // Decode fully first: a corrupt batch must not be half applied.
  // (Batches are small; the reader is cheap to rerun.)
  Delta d;
  uint64_t n = 0;
  while (reader_.Next(&d)) n++;
  if (!reader_.status().ok()) {
    // Drop marks the lookup above may have created for this batch's streams.
    for (auto it = progress_.marks.begin(); it != progress_.marks.end();) {
      if (it->second.offset < 0) it = progress_.marks.erase(it);
      else ++it;
    }
    return reader_.status().WithContext(fmt::format("{}/{} offset {}", deltas_topic_, partition_->id(), offset));
  }
  (void)reader_.Open(bytes);
  uint32_t derived_index = 0;
  while (reader_.Next(&d)) {
    store::SourceMark* mark = stream_marks_[d.source.stream];
    if (mark->Covers(d.source.offset, d.source.effect)) {
      stats_.duplicates++;
      continue;
    }
    ApplyOne(d, &derived_index, offset, derived, &st);
    if (!st.ok()) return st;  // a store read failed: the window is unusable, caller restarts
    *mark = store::SourceMark{d.source.offset, d.source.effect, d.source.ts};
    progress_.max_event_ts = std::max(progress_.max_event_ts, d.source.ts);
    stats_.applied++;
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
      auto cur = EdgeSet(&likes_, true, d.entity, d.member);
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
      auto cur = EdgeSet(&follows_, false, d.entity, d.member);
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
    case DeltaOp::kNoticeRead:
    case DeltaOp::kRedDotPublish:
    case DeltaOp::kRedDotRead:
    case DeltaOp::kFeedSnapshot:
      // Logged in tally.deltas already; their state (notice list, red dots,
      // feed snapshots) is not kept yet, see README "Status".
      break;
  }
}

Status WindowApplier::Commit() {
  if (!dirty_) return Status::Ok();
  batch_.Clear();
  for (const auto& [id, ops] : post_ops_) batch_.MergePostCounters(id, ops.data());
  for (const auto& [id, ops] : user_ops_) batch_.MergeUserCounters(id, ops.data());
  for (const auto& [id, ops] : unread_ops_) batch_.MergeUnreadCounters(id, ops.data());
  for (const auto& [k, set] : likes_) {
    if (set) batch_.PutLike(k.first, k.second);
    else batch_.DeleteLike(k.first, k.second);
  }
  for (const auto& [k, set] : follows_) {
    if (set) batch_.PutFollow(k.first, k.second);
    else batch_.DeleteFollow(k.first, k.second);
  }
  for (auto it = progress_.marks.begin(); it != progress_.marks.end();) {
    if (it->second.offset < 0) it = progress_.marks.erase(it);  // streams with nothing applied
    else ++it;
  }
  batch_.SetProgress(progress_);
  TALLY_RETURN_IF_ERROR(partition_->Commit(&batch_));
  post_ops_.clear();
  user_ops_.clear();
  unread_ops_.clear();
  likes_.clear();
  follows_.clear();
  dirty_ = false;
  return Status::Ok();
}

}  // namespace tally::aggregator
