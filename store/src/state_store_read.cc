// StateStore's reads: counter records through the read cache and one
// MultiGet per partition, edges, feed snapshots, the viewed filters and the
// unread view of a user.
#include <fmt/core.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "counter_cache.h"
#include "keys.h"
#include "state_store_impl.h"
#include "store/state_store.h"
#include "unread_math.h"

namespace tally::store {

using base::Result;
using base::Status;

namespace {
// For error messages.
const char* CounterKindName(char kind) {
  switch (static_cast<RecordKind>(kind)) {
    case RecordKind::kPostCounters:
      return "post counters";
    case RecordKind::kUserCounters:
      return "user counters";
    case RecordKind::kUnreadCounters:
      return "unread counters";
    default:
      return "counters";
  }
}
}  // namespace

Status StateStore::MultiGetCounters(char kind, int nfields, std::span<const uint64_t> ids,
                                    const std::function<void(size_t, const int64_t*)>& fill,
                                    MissingPartitions* missing) const {
  const uint32_t n = partitions();
  CounterCache* cache = rep_->cache.get();
  int64_t v[8];
  // What the cache does not hold, as (partition, index in ids, lease), in
  // partition order for one MultiGet each.
  struct Miss {
    uint32_t partition;
    uint32_t index;
    uint64_t lease;
  };
  std::vector<Miss> misses;  // no allocation when everything is cached
  for (size_t i = 0; i < ids.size(); i++) {
    uint64_t lease = 0;
    if (cache != nullptr && cache->Lookup(kind, ids[i], v, nfields, &lease)) {
      fill(i, v);
      continue;
    }
    misses.push_back(Miss{schemas::PartitionOf(ids[i], n), static_cast<uint32_t>(i), lease});
  }
  if (misses.empty()) return Status::Ok();
  // By partition, for one MultiGet each, and by id within it, so that the
  // posts of one page (keys.h) are next to each other: a page is read once
  // for all the posts asked of it (`read` maps a miss to its key).
  std::sort(misses.begin(), misses.end(), [&ids](const Miss& a, const Miss& b) {
    return a.partition != b.partition ? a.partition < b.partition : ids[a.index] < ids[b.index];
  });
  const bool paged = kind == static_cast<char>(RecordKind::kPostCounters);
  const int page_bits = PostPageBits(n);
  std::vector<std::string> keys;
  std::vector<size_t> read(misses.size());
  std::string key;
  for (size_t k = 0; k < misses.size(); k++) {
    if (paged) {
      EncodePostPageKey(ids[misses[k].index], page_bits, &key);
    } else {
      EncodeKey(static_cast<RecordKind>(kind), ids[misses[k].index], &key);
    }
    if (keys.empty() || keys.back() != key || misses[k].partition != misses[k - 1].partition) {
      keys.push_back(key);
    }
    read[k] = keys.size() - 1;
  }
  std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
  std::vector<rocksdb::PinnableSlice> values(keys.size());
  std::vector<rocksdb::Status> statuses(keys.size());
  // Partitions not held, ascending (allocated only when there are some). A
  // record of one is never in the cache: a close drops them all.
  std::vector<uint32_t> not_held;
  for (size_t begin = 0, end = 0; begin < misses.size(); begin = end) {
    const uint32_t p = misses[begin].partition;
    for (end = begin; end < misses.size() && misses[end].partition == p; end++) {
    }
    std::shared_ptr<rocksdb::DB> db_ref = rep_->partitions[p]->rep_->db.load();
    rocksdb::DB* db = db_ref.get();
    if (db == nullptr) {
      not_held.push_back(p);
      continue;
    }
    const size_t first = read[begin], count = read[end - 1] + 1 - first;
    db->MultiGet(rocksdb::ReadOptions(), db->DefaultColumnFamily(), count, slices.data() + first,
                 values.data() + first, statuses.data() + first);
  }
  if (!not_held.empty()) {
    if (missing == nullptr) return NotHeldError(not_held);
    missing->partitions.insert(missing->partitions.end(), not_held.begin(), not_held.end());
  }
  for (size_t k = 0; k < misses.size(); k++) {
    const uint64_t id = ids[misses[k].index];
    if (!not_held.empty() &&
        std::binary_search(not_held.begin(), not_held.end(), misses[k].partition)) {
      missing->positions.push_back(misses[k].index);
      continue;
    }
    const rocksdb::Status& status = statuses[read[k]];
    const rocksdb::PinnableSlice& value = values[read[k]];
    if (status.IsNotFound()) {
      std::fill(v, v + nfields, 0);
    } else if (!status.ok()) {
      return FromRocks(status, fmt::format("reading the {} of {}", CounterKindName(kind), id));
    } else if (paged ? !FindInPostPage(std::string_view(value.data(), value.size()),
                                       PostSlot(id, page_bits), v)
                     : !DecodeCounters(std::string_view(value.data(), value.size()), v, nfields)) {
      return Status::Corruption(
          fmt::format("the {} of {} do not decode", CounterKindName(kind), id));
    }
    if (cache != nullptr) cache->Fill(kind, id, v, nfields, misses[k].lease);
    fill(misses[k].index, v);
  }
  return Status::Ok();
}

Status StateStore::GetPostCounts(std::span<const uint64_t> ids, std::vector<PostCounts>* out,
                                 MissingPartitions* missing) const {
  out->assign(ids.size(), PostCounts());
  for (size_t i = 0; i < ids.size(); i++) (*out)[i].post_id = ids[i];
  if (missing != nullptr) *missing = MissingPartitions();
  Status st = MultiGetCounters(
      static_cast<char>(RecordKind::kPostCounters), schemas::kPostFieldCount, ids,
      [out](size_t i, const int64_t* v) {
        PostCounts& pc = (*out)[i];
        pc.like = v[0];
        pc.repost = v[1];
        pc.comment = v[2];
        pc.view = v[3];
      },
      missing);
  if (missing != nullptr) Normalize(missing);
  return st;
}

namespace {
// An iterator over the records under `prefix`, positioned at the first.
// Bounded, so a scan stops at the prefix's last record instead of stepping
// into the next one in every memtable and level.
class PrefixScan {
 public:
  PrefixScan(rocksdb::DB* db, std::string_view prefix) : prefix_(prefix), upper_(prefix) {
    // The upper bound: the prefix with its last byte below 0xff incremented.
    int i = static_cast<int>(upper_.size()) - 1;
    while (i >= 0 && static_cast<uint8_t>(upper_[i]) == 0xff) i--;
    rocksdb::ReadOptions ro;
    if (i >= 0) {
      upper_.resize(static_cast<size_t>(i) + 1);
      upper_[i] = static_cast<char>(static_cast<uint8_t>(upper_[i]) + 1);
      bound_ = upper_;
      ro.iterate_upper_bound = &bound_;
    }
    it_.reset(db->NewIterator(ro));
    it_->Seek(prefix_);
  }
  PrefixScan(const PrefixScan&) = delete;  // it_ points into upper_
  PrefixScan& operator=(const PrefixScan&) = delete;
  bool Valid() const { return it_->Valid() && it_->key().starts_with(prefix_); }
  void Next() { it_->Next(); }
  rocksdb::Slice key() const { return it_->key(); }
  rocksdb::Slice value() const { return it_->value(); }
  rocksdb::Status status() const { return it_->status(); }

 private:
  std::string prefix_, upper_;
  rocksdb::Slice bound_;  // into upper_; outlives it_, which points at it
  std::unique_ptr<rocksdb::Iterator> it_;
};

// Reads a counter record of a kind the read cache does not hold (counter
// records go through MultiGetCounters) into v[0..n); zeros if there is
// none. *found, when given, says whether there was one.
Status ReadCounters(rocksdb::DB* db, RecordKind kind, uint64_t id, int64_t* v, int n,
                    const char* what, bool* found = nullptr) {
  std::string key;
  EncodeKey(kind, id, &key);
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(), key, &value);
  for (int i = 0; i < n; i++) v[i] = 0;
  if (found) *found = s.ok();
  if (!s.ok() && !s.IsNotFound()) return FromRocks(s, fmt::format("reading {} {}", what, id));
  if (s.ok() && !DecodeCounters(std::string_view(value.data(), value.size()), v, n)) {
    return Status::Corruption(fmt::format("{} {}: counter record does not decode", what, id));
  }
  return Status::Ok();
}

// The user's followees, ascending, from the database of the user's partition.
Result<std::vector<uint64_t>> ReadFollowees(rocksdb::DB* db, uint64_t user_id) {
  std::string prefix;
  EncodeKey(RecordKind::kFollowEdge, user_id, &prefix);
  PrefixScan it(db, prefix);
  std::vector<uint64_t> out;
  for (; it.Valid(); it.Next()) {
    if (it.key().size() != prefix.size() + 8) {
      return Status::Corruption(fmt::format("user {}: malformed follow edge key", user_id));
    }
    out.push_back(DecodeBigEndian64(it.key().data() + prefix.size()));
  }
  if (!it.status().ok())
    return FromRocks(it.status(), fmt::format("listing followees of {}", user_id));
  return out;
}

// The user's feed snapshot, from the database of the user's partition.
Result<FeedSnapshot> ReadSnapshot(rocksdb::DB* db, uint64_t user_id) {
  std::string key;
  EncodeKey(RecordKind::kFeedSnapshot, user_id, &key);
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(), key, &value);
  FeedSnapshot snap;
  if (s.IsNotFound()) return snap;
  if (!s.ok()) return FromRocks(s, fmt::format("reading feed snapshot of {}", user_id));
  if (!DecodeSnapshot(std::string_view(value.data(), value.size()), &snap)) {
    return Status::Corruption(fmt::format("user {}: feed snapshot does not decode", user_id));
  }
  return snap;
}

// The user's red-dot click times into *clicks (channel -> time); lowers
// *oldest_touch to the oldest "last touched" time among them.
Status ReadClicks(rocksdb::DB* db, uint64_t user_id, std::map<std::string, int64_t>* clicks,
                  int64_t* oldest_touch) {
  std::string prefix;
  EncodeKey(RecordKind::kUserRedDot, user_id, &prefix);
  PrefixScan it(db, prefix);
  for (; it.Valid(); it.Next()) {
    int64_t v[2];
    if (!DecodeCounters(std::string_view(it.value().data(), it.value().size()), v, 2)) {
      return Status::Corruption("user red dot does not decode");
    }
    (*clicks)[std::string(it.key().data() + prefix.size(), it.key().size() - prefix.size())] = v[0];
    *oldest_touch = std::min(*oldest_touch, v[1]);
  }
  if (!it.status().ok()) return FromRocks(it.status(), "listing red dots");
  return Status::Ok();
}
}  // namespace

Result<UserCounts> StateStore::GetUserCounts(uint64_t user_id) const {
  UserCounts uc;
  uc.user_id = user_id;
  TALLY_RETURN_IF_ERROR(
      MultiGetCounters(static_cast<char>(RecordKind::kUserCounters), schemas::kUserFieldCount,
                       std::span<const uint64_t>(&user_id, 1), [&uc](size_t, const int64_t* v) {
                         uc.posts = v[0];
                         uc.followers = v[1];
                         uc.following = v[2];
                       }));
  return uc;
}

Result<UnreadCounters> StateStore::GetUnreadCounters(uint64_t user_id) const {
  UnreadCounters uc;
  TALLY_RETURN_IF_ERROR(
      MultiGetCounters(static_cast<char>(RecordKind::kUnreadCounters), schemas::kUnreadCounterKinds,
                       std::span<const uint64_t>(&user_id, 1), [&uc](size_t, const int64_t* v) {
                         std::copy(v, v + schemas::kUnreadCounterKinds, uc.counts);
                       }));
  return uc;
}

Result<bool> StateStore::IsLiked(uint64_t post_id, uint64_t user_id) const {
  return rep_->partitions[schemas::PartitionOf(post_id, partitions())]->HasLike(post_id, user_id);
}

Result<std::vector<uint64_t>> StateStore::GetFollowees(uint64_t user_id) const {
  std::shared_ptr<rocksdb::DB> db = rep_->DbOf(user_id);
  if (db == nullptr) return NotHeld(schemas::PartitionOf(user_id, partitions()));
  return ReadFollowees(db.get(), user_id);
}

Result<uint64_t> StateStore::NewestNoticeId() const {
  std::shared_ptr<const NoticeIds> ids = rep_->GlobalPartition().notice_ids.load();
  if (ids == nullptr) return NotHeld(rep_->GlobalId());
  return ids->empty() ? 0 : ids->back();
}

namespace {
// The partitions of `a` and `b` that are not held (`a_held`, `b_held`), as
// a NotHeldError.
Status NotHeldOf(uint32_t a, bool a_held, uint32_t b, bool b_held) {
  std::vector<uint32_t> parts;
  if (!a_held) parts.push_back(a);
  if (!b_held && (a_held || b != a)) parts.push_back(b);
  std::sort(parts.begin(), parts.end());
  return NotHeldError(parts);
}
}  // namespace

Result<int64_t> StateStore::GetNoticeUnread(uint64_t user_id) const {
  std::shared_ptr<rocksdb::DB> udb = rep_->DbOf(user_id);
  std::shared_ptr<const NoticeIds> ids = rep_->GlobalPartition().notice_ids.load();
  if (udb == nullptr || ids == nullptr) {
    return NotHeldOf(schemas::PartitionOf(user_id, partitions()), udb != nullptr, rep_->GlobalId(),
                     ids != nullptr);
  }
  int64_t read[2];
  bool has_read = false;
  TALLY_RETURN_IF_ERROR(ReadCounters(udb.get(), RecordKind::kNoticeRead, user_id, read, 2,
                                     "notice read of user", &has_read));
  return NoticesAbove(
      *ids, has_read ? std::optional<uint64_t>(static_cast<uint64_t>(read[0])) : std::nullopt);
}

namespace {
// What an unread view reads of a user's own records besides the unread
// counters: the last-read notice id, whether there are red-dot clicks, and
// whether there is a feed snapshot with followees. Most users have none of
// them, and each is a RocksDB read (the clicks a prefix scan), so the read
// cache keeps this summary under its own kind, dropped by every commit that
// writes one of those records (PartitionBatch) like a counter record. The
// clicks and the snapshot themselves are read only when the summary says
// they exist.
struct UnreadSummary {
  bool has_notice_read = false;
  uint64_t notice_read = 0;
  bool has_clicks = false;
  bool has_feed = false;  // a snapshot with followees
  // The oldest "last touched" time of the notice-read and click records
  // (INT64_MAX without any): once it falls behind the purge horizon, the
  // compaction filter may remove a record the summary counts, so the summary
  // is then not used.
  int64_t oldest_touch = INT64_MAX;
};
constexpr int64_t kHasNoticeRead = 1, kHasClicks = 2, kHasFeed = 4;  // summary flags

// Records last touched before this time (ms) may be purged by the
// compaction filter (StoreOptions::inactive_days) from now on.
int64_t PurgeHorizonMs(const StoreOptions& o) {
  if (o.inactive_days <= 0) return INT64_MIN;
  const int64_t now = o.now_ms ? o.now_ms()
                               : std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
  return now - o.inactive_days * 86400000LL;
}
}  // namespace

Result<UnreadView> StateStore::GetUnread(uint64_t user_id, UnreadGaps* gaps) const {
  // Without `gaps` every gap is an error, naming every partition missing.
  UnreadGaps own_gaps;
  if (gaps == nullptr) gaps = &own_gaps;
  *gaps = UnreadGaps();
  const uint32_t user_partition = schemas::PartitionOf(user_id, partitions());
  const uint32_t global_partition = rep_->GlobalId();
  std::shared_ptr<rocksdb::DB> udb_ref = rep_->DbOf(user_id);
  rocksdb::DB* udb = udb_ref.get();
  std::shared_ptr<rocksdb::DB> gdb_ref = rep_->DbOf(schemas::kGlobalEntity);
  rocksdb::DB* gdb = gdb_ref.get();
  std::shared_ptr<const NoticeIds> ids = rep_->GlobalPartition().notice_ids.load();
  const bool global_held = gdb != nullptr && ids != nullptr;
  if (udb == nullptr) return NotHeldOf(user_partition, false, global_partition, global_held);
  if (!global_held) {
    gaps->notice = gaps->red_dots = true;
    gaps->partitions.push_back(global_partition);
  }

  UnreadView view;
  auto counters = GetUnreadCounters(user_id);
  if (!counters.ok()) return counters.status();
  view.counters = *counters;

  // The summary of the user's other records, from the read cache if it
  // holds one that no purge can have made wrong; else from RocksDB, reading
  // the clicks and the snapshot on the way.
  CounterCache* cache = rep_->cache.get();
  UnreadSummary summary;
  std::map<std::string, int64_t> mine;  // the user's click times, by channel
  std::optional<FeedSnapshot> snap;     // read here on a miss
  {
    int64_t v[CounterCache::kMaxFields];
    uint64_t lease = 0;
    bool hit = cache != nullptr && cache->Lookup(kUnreadSummaryKind, user_id, v, 4, &lease);
    if (hit && v[3] < PurgeHorizonMs(rep_->options)) {
      hit = false;
      lease = 0;  // never filled: it would be as old
    }
    if (hit) {
      summary.has_notice_read = (v[0] & kHasNoticeRead) != 0;
      summary.has_clicks = (v[0] & kHasClicks) != 0;
      summary.has_feed = (v[0] & kHasFeed) != 0;
      summary.notice_read = static_cast<uint64_t>(v[1]);
      summary.oldest_touch = v[3];
    } else {
      int64_t read[2];
      TALLY_RETURN_IF_ERROR(ReadCounters(udb, RecordKind::kNoticeRead, user_id, read, 2,
                                         "notice read of user", &summary.has_notice_read));
      if (summary.has_notice_read) {
        summary.notice_read = static_cast<uint64_t>(read[0]);
        summary.oldest_touch = read[1];
      }
      TALLY_RETURN_IF_ERROR(ReadClicks(udb, user_id, &mine, &summary.oldest_touch));
      summary.has_clicks = !mine.empty();
      auto read_snap = ReadSnapshot(udb, user_id);
      if (!read_snap.ok()) return read_snap.status();
      summary.has_feed = read_snap->exists && !read_snap->followees.empty();
      snap = std::move(read_snap).value();
      if (cache != nullptr && lease != 0 && summary.oldest_touch >= PurgeHorizonMs(rep_->options)) {
        const int64_t fill[4] = {
            (summary.has_notice_read ? kHasNoticeRead : 0) | (summary.has_clicks ? kHasClicks : 0) |
                (summary.has_feed ? kHasFeed : 0),
            static_cast<int64_t>(summary.notice_read), 0, summary.oldest_touch};
        cache->Fill(kUnreadSummaryKind, user_id, fill, 4, lease);
      }
    }
    if (hit && summary.has_clicks) {
      int64_t ignored = INT64_MAX;
      TALLY_RETURN_IF_ERROR(ReadClicks(udb, user_id, &mine, &ignored));
    }
  }

  if (global_held) {
    view.notice =
        NoticesAbove(*ids, summary.has_notice_read ? std::optional<uint64_t>(summary.notice_read)
                                                   : std::nullopt);
  }

  // Red dots: the user's click times, then the global times (the read cache
  // holds those), which decide together (RedDotsShown).
  if (global_held) {
    uint64_t lease = 0;
    std::shared_ptr<const CounterCache::RedDots> dots;
    if (cache != nullptr) dots = cache->LookupRedDots(&lease);
    if (dots == nullptr) {
      auto read = std::make_shared<CounterCache::RedDots>();
      std::string prefix(1, static_cast<char>(RecordKind::kRedDot));
      std::unique_ptr<rocksdb::Iterator> it(gdb->NewIterator(rocksdb::ReadOptions()));
      for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
        int64_t v[1];
        if (!DecodeCounters(std::string_view(it->value().data(), it->value().size()), v, 1)) {
          return Status::Corruption("red dot does not decode");
        }
        read->emplace_back(std::string(it->key().data() + 1, it->key().size() - 1), v[0]);
      }
      if (!it->status().ok()) return FromRocks(it->status(), "listing red dots");
      if (cache != nullptr) cache->FillRedDots(read, lease);
      dots = std::move(read);
    }
    view.red_dots = RedDotsShown(*dots, mine);
  }

  // Feed: the current post counts are read only for a snapshot that has
  // followees (FeedUnread of any other is 0). A followee whose partition is
  // not held adds nothing here (its count reads as 0, below any snapshot's):
  // the gap lists it with its count in the snapshot.
  if (summary.has_feed && !snap.has_value()) {
    auto read_snap = ReadSnapshot(udb, user_id);
    if (!read_snap.ok()) return read_snap.status();
    snap = std::move(read_snap).value();
  }
  if (snap.has_value() && snap->exists && !snap->followees.empty()) {
    MissingPartitions missing;
    auto followees = ReadFollowees(udb, user_id);
    if (!followees.ok()) return followees.status();
    auto now = PostCountsOf(std::move(followees).value(), &missing);
    if (!now.ok()) return now.status();
    view.feed = FeedUnread(*snap, *now);
    if (!missing.empty()) {
      gaps->partitions.insert(gaps->partitions.end(), missing.partitions.begin(),
                              missing.partitions.end());
      // Those followees of the snapshot (both lists ascend by id).
      auto s = snap->followees.begin();
      for (size_t pos : missing.positions) {
        const uint64_t f = (*now)[pos].first;
        while (s != snap->followees.end() && s->first < f) ++s;
        if (s != snap->followees.end() && s->first == f) gaps->feed_followees.push_back(*s);
      }
    }
  }
  if (!gaps->partitions.empty()) {
    std::sort(gaps->partitions.begin(), gaps->partitions.end());
    gaps->partitions.erase(std::unique(gaps->partitions.begin(), gaps->partitions.end()),
                           gaps->partitions.end());
    if (gaps == &own_gaps) return NotHeldError(gaps->partitions);
  }
  return view;
}

Result<FeedSnapshot> StateStore::GetFeedSnapshot(uint64_t user_id) const {
  std::shared_ptr<rocksdb::DB> db = rep_->DbOf(user_id);
  if (db == nullptr) return NotHeld(schemas::PartitionOf(user_id, partitions()));
  return ReadSnapshot(db.get(), user_id);
}

Result<std::vector<std::pair<uint64_t, uint64_t>>> StateStore::PostCountsOf(
    std::vector<uint64_t> users, MissingPartitions* missing) const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(users.size());
  for (uint64_t u : users) out.emplace_back(u, 0);
  if (missing != nullptr) *missing = MissingPartitions();
  TALLY_RETURN_IF_ERROR(MultiGetCounters(
      static_cast<char>(RecordKind::kUserCounters), schemas::kUserFieldCount, users,
      [&out](size_t i, const int64_t* v) { out[i].second = static_cast<uint64_t>(v[0]); },
      missing));
  if (missing != nullptr) Normalize(missing);
  return out;
}

Result<std::vector<std::pair<uint64_t, uint64_t>>> StateStore::CurrentFolloweePosts(
    uint64_t user_id, MissingPartitions* missing) const {
  std::shared_ptr<rocksdb::DB> udb = rep_->DbOf(user_id);
  if (udb == nullptr) return NotHeld(schemas::PartitionOf(user_id, partitions()));
  auto followees = ReadFollowees(udb.get(), user_id);
  if (!followees.ok()) return followees.status();
  return PostCountsOf(std::move(followees).value(), missing);
}

Result<bool> StateStore::MaybeViewed(uint64_t post_id, uint64_t user_id) const {
  Partition* p = rep_->partitions[schemas::PartitionOf(post_id, partitions())].get();
  auto tables = p->LoadViewedTables(rep_->options.viewed);
  if (!tables.ok()) return tables.status();
  ViewProbe probe;
  if (!tables->Locate(post_id, user_id, &probe)) return false;
  std::string key;
  EncodeViewChunkKey(probe.table_id, probe.chunk, &key);
  rocksdb::PinnableSlice chunk;
  std::shared_ptr<rocksdb::DB> db = p->rep_->db.load();
  if (db == nullptr) return NotHeld(p->id());
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(), key, &chunk);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocks(s, "reading viewed chunk");
  return ViewedTables::TestBits(probe, std::string_view(chunk.data(), chunk.size()));
}

}  // namespace tally::store
