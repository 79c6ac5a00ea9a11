// PartitionBatch: the changes of one window to one partition, encoded into
// one rocksdb::WriteBatch as they are added.
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "counter_cache.h"
#include "keys.h"
#include "state_store_impl.h"
#include "store/state_store.h"

namespace tally::store {

PartitionBatch::PartitionBatch() : rep_(std::make_unique<Rep>()) {}
PartitionBatch::~PartitionBatch() = default;

void PartitionBatch::MergePostCounters(uint64_t post_id, const CounterOp* ops) {
  Rep::PostOps& p = rep_->posts.emplace_back();
  p.id = post_id;
  std::copy(ops, ops + schemas::kPostFieldCount, p.ops);
  rep_->counters.emplace_back(static_cast<char>(RecordKind::kPostCounters), post_id);
}

void PartitionBatch::Rep::EncodePosts(int page_bits) {
  if (posts.empty()) return;
  // By id, the ops of one post in the order they were added.
  std::stable_sort(posts.begin(), posts.end(),
                   [](const PostOps& a, const PostOps& b) { return a.id < b.id; });
  std::vector<PagedPostOps> page;
  for (size_t i = 0; i < posts.size();) {
    const uint64_t first = posts[i].id;
    page.clear();
    for (; i < posts.size() && (posts[i].id >> page_bits) == (first >> page_bits); i++) {
      const uint64_t slot = PostSlot(posts[i].id, page_bits);
      if (page.empty() || page.back().slot != slot) page.emplace_back().slot = slot;
      for (int f = 0; f < schemas::kPostFieldCount; f++) page.back().ops[f].Then(posts[i].ops[f]);
    }
    EncodePostPageKey(first, page_bits, &key);
    EncodePostPageOps(page.data(), page.size(), &value);
    wb.Merge(key, value);
  }
  posts.clear();  // in `wb` now: a retried commit must not add them again
}
void PartitionBatch::MergeUserCounters(uint64_t user_id, const CounterOp* ops) {
  EncodeKey(RecordKind::kUserCounters, user_id, &rep_->key);
  EncodeCounterOps(ops, schemas::kUserFieldCount, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
  rep_->counters.emplace_back(static_cast<char>(RecordKind::kUserCounters), user_id);
}
void PartitionBatch::MergeUnreadCounters(uint64_t user_id, const CounterOp* ops) {
  EncodeKey(RecordKind::kUnreadCounters, user_id, &rep_->key);
  EncodeCounterOps(ops, schemas::kUnreadCounterKinds, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
  rep_->counters.emplace_back(static_cast<char>(RecordKind::kUnreadCounters), user_id);
}
void PartitionBatch::PutLike(uint64_t post_id, uint64_t user_id) {
  EncodeKey(RecordKind::kLikeEdge, post_id, user_id, &rep_->key);
  rep_->wb.Put(rep_->key, rocksdb::Slice());
}
void PartitionBatch::DeleteLike(uint64_t post_id, uint64_t user_id) {
  EncodeKey(RecordKind::kLikeEdge, post_id, user_id, &rep_->key);
  rep_->wb.Delete(rep_->key);
}
void PartitionBatch::PutFollow(uint64_t user_id, uint64_t target_id) {
  EncodeKey(RecordKind::kFollowEdge, user_id, target_id, &rep_->key);
  rep_->wb.Put(rep_->key, rocksdb::Slice());
}
void PartitionBatch::PutEventId(uint64_t event_id, int64_t ts, uint64_t copy) {
  EncodeKey(RecordKind::kEventId, event_id, &rep_->key);
  rep_->value.clear();
  PutVarint64(&rep_->value, static_cast<uint64_t>(std::max<int64_t>(ts, 0)));
  for (int i = 0; i < 8; i++) rep_->value.push_back(static_cast<char>((copy >> (8 * i)) & 0xff));
  rep_->wb.Put(rep_->key, rep_->value);
}
void PartitionBatch::DeleteFollow(uint64_t user_id, uint64_t target_id) {
  EncodeKey(RecordKind::kFollowEdge, user_id, target_id, &rep_->key);
  rep_->wb.Delete(rep_->key);
}
void PartitionBatch::PutNotice(uint64_t notice_id, std::string_view title) {
  EncodeKey(RecordKind::kNotice, notice_id, &rep_->key);
  rep_->value.clear();
  // Where states written before kept the notice's ordinal, read by nothing
  // now: the layout stays, so both read the same.
  PutVarint64(&rep_->value, 0);
  rep_->value.append(title);
  rep_->wb.Put(rep_->key, rep_->value);
  rep_->notices.push_back(notice_id);
}
void PartitionBatch::SetNoticeRead(uint64_t user_id, uint64_t notice_id, int64_t ts) {
  EncodeKey(RecordKind::kNoticeRead, user_id, &rep_->key);
  CounterOp ops[2] = {CounterOp{true, static_cast<int64_t>(notice_id), 0}, CounterOp{false, 0, ts}};
  EncodeCounterOps(ops, 2, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
  rep_->counters.emplace_back(kUnreadSummaryKind, user_id);
}
void PartitionBatch::MaxRedDot(std::string_view channel, int64_t ts) {
  rep_->key.assign(1, static_cast<char>(RecordKind::kRedDot));
  rep_->key.append(channel);
  CounterOp op{false, 0, ts};
  EncodeCounterOps(&op, 1, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
  rep_->red_dots = true;
}
void PartitionBatch::MaxUserRedDot(uint64_t user_id, std::string_view channel, int64_t ts) {
  EncodeKey(RecordKind::kUserRedDot, user_id, &rep_->key);
  rep_->key.append(channel);
  CounterOp ops[2] = {CounterOp{false, 0, ts}, CounterOp{false, 0, ts}};
  EncodeCounterOps(ops, 2, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
  rep_->counters.emplace_back(kUnreadSummaryKind, user_id);
}
void PartitionBatch::PutFeedSnapshot(uint64_t user_id, int64_t taken_ts,
                                     const std::pair<uint64_t, uint64_t>* followees, size_t n) {
  EncodeKey(RecordKind::kFeedSnapshot, user_id, &rep_->key);
  EncodeSnapshot(taken_ts, std::vector<std::pair<uint64_t, uint64_t>>(followees, followees + n),
                 &rep_->value);
  rep_->wb.Put(rep_->key, rep_->value);
  rep_->counters.emplace_back(kUnreadSummaryKind, user_id);
}
void PartitionBatch::SetViewBits(uint32_t table_id, uint32_t chunk,
                                 const std::vector<uint16_t>& bits) {
  EncodeViewChunkKey(table_id, chunk, &rep_->key);
  EncodeBitOperand(bits, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
}
void PartitionBatch::DropViewTable(uint32_t table_id) {
  std::string begin, end;
  EncodeViewChunkKey(table_id, 0, &begin);
  EncodeViewChunkKey(table_id + 1, 0, &end);
  rep_->wb.DeleteRange(begin, end);
}
void PartitionBatch::PutViewedTables(const ViewedTables& tables) {
  rep_->wb.Put(rocksdb::Slice(kViewedKey.data(), kViewedKey.size()), tables.Encode());
}
void PartitionBatch::SetProgress(const Progress& progress) {
  EncodeProgress(progress, &rep_->value);
  rep_->wb.Put(rocksdb::Slice(kProgressKey.data(), kProgressKey.size()), rep_->value);
}
void PartitionBatch::DropAllButGlobal() {
  // Everything but what a global-only partition holds (keys.h): the
  // ranges between the kept kinds, so that a record kind added later is
  // dropped too unless it is added here. Of the meta records, the "viewed"
  // tables go (a new applier starts them again); the progress, the notice
  // count and the mark stay.
  constexpr char kKept[] = {static_cast<char>(RecordKind::kNotice),
                            static_cast<char>(RecordKind::kRedDot),
                            static_cast<char>(RecordKind::kEventId)};
  static_assert(kKept[0] < kKept[1] && kKept[1] < kKept[2], "kept kinds in key order");
  static_assert(static_cast<char>(RecordKind::kMeta) == '\0', "meta records sort first");
  char from = '\x01';
  for (char kept : kKept) {
    rep_->wb.DeleteRange(rocksdb::Slice(&from, 1), rocksdb::Slice(&kept, 1));
    from = static_cast<char>(kept + 1);
  }
  const char end = '\x7f';  // past every kind (ASCII letters)
  rep_->wb.DeleteRange(rocksdb::Slice(&from, 1), rocksdb::Slice(&end, 1));
  rep_->wb.Delete(rocksdb::Slice(kViewedKey.data(), kViewedKey.size()));
  rep_->posts.clear();  // merged before the drop: they go with it
  rep_->drop_cached = true;
}
void PartitionBatch::DropEventIds() {
  const char from = static_cast<char>(RecordKind::kEventId);
  const char to = static_cast<char>(from + 1);
  rep_->wb.DeleteRange(rocksdb::Slice(&from, 1), rocksdb::Slice(&to, 1));
}
void PartitionBatch::SetGlobalOnly(bool global_only) {
  const rocksdb::Slice key(kGlobalOnlyKey.data(), kGlobalOnlyKey.size());
  if (global_only) {
    rep_->wb.Put(key, rocksdb::Slice());
  } else {
    rep_->wb.Delete(key);
  }
}
size_t PartitionBatch::Count() const { return rep_->wb.Count() + rep_->posts.size(); }
void PartitionBatch::Clear() {
  rep_->wb.Clear();
  rep_->posts.clear();
  rep_->counters.clear();
  rep_->red_dots = false;
  rep_->drop_cached = false;
  rep_->notices.clear();
  rep_->notice_count_put = false;
}

}  // namespace tally::store
