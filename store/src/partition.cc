// Partition: one partition's RocksDB. Commit writes a window and makes the
// read cache and the notice ids follow it; Resume recovers from a failed
// write; the point reads the applier asks of one partition.
#include <fmt/core.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

#include "base/log.h"
#include "counter_cache.h"
#include "keys.h"
#include "state_store_impl.h"
#include "store/state_store.h"
#include "write_health.h"

namespace tally::store {

using base::Result;
using base::Status;

Partition::Partition(uint32_t id, std::unique_ptr<Rep> rep) : id_(id), rep_(std::move(rep)) {}
Partition::~Partition() = default;

Status Partition::Rep::LoadNoticeIds(rocksdb::DB* db, uint32_t id) {
  auto ids = std::make_shared<NoticeIds>();
  const char lower[1] = {static_cast<char>(RecordKind::kNotice)};
  const char upper[1] = {static_cast<char>(RecordKind::kNotice) + 1};
  rocksdb::Slice upper_bound(upper, 1);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_bound;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek(rocksdb::Slice(lower, 1)); it->Valid(); it->Next()) {
    if (it->key().size() != 9) {
      return Status::Corruption(fmt::format("partition {}: malformed notice key", id));
    }
    ids->push_back(DecodeBigEndian64(it->key().data() + 1));
  }
  if (!it->status().ok())
    return FromRocks(it->status(), fmt::format("partition {}: listing notices", id));
  std::string count;
  rocksdb::Status s =
      db->Get(rocksdb::ReadOptions(),
              rocksdb::Slice(kNoticeCountKey.data(), kNoticeCountKey.size()), &count);
  if (!s.ok() && !s.IsNotFound())
    return FromRocks(s, fmt::format("partition {}: reading the notice count", id));
  notice_count_seen = s.ok() ? std::move(count) : std::string();
  notice_ids.store(std::move(ids));
  return Status::Ok();
}

namespace {
Result<bool> KeyExists(rocksdb::DB* db, const rocksdb::Slice& key, std::string_view what) {
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(), key, &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocks(s, what);
  return true;
}

// An edge key on the stack: the applier asks for one per like and follow.
rocksdb::Slice EdgeKey(RecordKind kind, uint64_t a, uint64_t b, char (&buf)[17]) {
  buf[0] = static_cast<char>(kind);
  for (int i = 0; i < 8; i++) {
    buf[1 + i] = static_cast<char>(a >> (56 - 8 * i));
    buf[9 + i] = static_cast<char>(b >> (56 - 8 * i));
  }
  return rocksdb::Slice(buf, sizeof(buf));
}
}  // namespace

Result<bool> Partition::HasLike(uint64_t post_id, uint64_t user_id) const {
  char buf[17];
  std::shared_ptr<rocksdb::DB> db = rep_->db.load();
  if (db == nullptr) return NotHeld(id_);
  return KeyExists(db.get(), EdgeKey(RecordKind::kLikeEdge, post_id, user_id, buf),
                   "reading like edge");
}

Result<bool> Partition::HasFollow(uint64_t user_id, uint64_t target_id) const {
  char buf[17];
  std::shared_ptr<rocksdb::DB> db = rep_->db.load();
  if (db == nullptr) return NotHeld(id_);
  return KeyExists(db.get(), EdgeKey(RecordKind::kFollowEdge, user_id, target_id, buf),
                   "reading follow edge");
}

Result<std::optional<Partition::EventIdRecord>> Partition::GetEventId(uint64_t event_id) const {
  char buf[9];
  buf[0] = static_cast<char>(RecordKind::kEventId);
  for (int i = 0; i < 8; i++) buf[1 + i] = static_cast<char>((event_id >> (56 - 8 * i)) & 0xff);
  std::string value;
  std::shared_ptr<rocksdb::DB> db = rep_->db.load();
  if (db == nullptr) return NotHeld(id_);
  rocksdb::Status st = db->Get(rocksdb::ReadOptions(), rocksdb::Slice(buf, 9), &value);
  if (st.IsNotFound()) return std::optional<EventIdRecord>();
  if (!st.ok()) return FromRocks(st, "reading event id");
  EventIdRecord r;
  size_t pos = 0;
  uint64_t ts = 0;
  if (!GetVarint64(value, &pos, &ts) || value.size() - pos != 8) {
    return Status::Corruption(fmt::format("partition {}: event id record does not decode", id_));
  }
  r.ts = static_cast<int64_t>(ts);
  for (int i = 0; i < 8; i++) r.copy |= uint64_t{static_cast<uint8_t>(value[pos + i])} << (8 * i);
  return std::optional<EventIdRecord>(r);
}

bool Partition::HasNotice(uint64_t notice_id) const {
  std::shared_ptr<const NoticeIds> ids = rep_->notice_ids.load();
  return ids != nullptr && std::binary_search(ids->begin(), ids->end(), notice_id);
}

Result<ViewedTables> Partition::LoadViewedTables(const ViewedOptions& options) const {
  ViewedTables t(options);
  std::string value;
  std::shared_ptr<rocksdb::DB> db = rep_->db.load();
  if (db == nullptr) return NotHeld(id_);
  rocksdb::Status s =
      db->Get(rocksdb::ReadOptions(), rocksdb::Slice(kViewedKey.data(), kViewedKey.size()), &value);
  if (s.IsNotFound()) return t;
  if (!s.ok()) return FromRocks(s, fmt::format("partition {}: reading viewed tables", id_));
  if (!t.Decode(value))
    return Status::Corruption(fmt::format("partition {}: viewed tables do not decode", id_));
  return t;
}

Result<bool> Partition::LoadGlobalOnly() const {
  std::shared_ptr<rocksdb::DB> db = rep_->db.load();
  if (db == nullptr) return NotHeld(id_);
  std::string value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(),
                              rocksdb::Slice(kGlobalOnlyKey.data(), kGlobalOnlyKey.size()), &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocks(s, fmt::format("partition {}: reading the global-only mark", id_));
  return true;
}

Result<Progress> Partition::LoadProgress() const {
  std::shared_lock<std::shared_mutex> committing;
  if (rep_->cache != nullptr) committing = std::shared_lock<std::shared_mutex>(rep_->commit_mu);
  std::string value;
  std::shared_ptr<rocksdb::DB> db = rep_->db.load();
  if (db == nullptr) return NotHeld(id_);
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(),
                              rocksdb::Slice(kProgressKey.data(), kProgressKey.size()), &value);
  if (s.IsNotFound()) return Progress();
  if (!s.ok()) return FromRocks(s, fmt::format("partition {}: reading progress", id_));
  Progress p;
  if (!DecodeProgress(value, &p)) {
    return Status::Corruption(fmt::format("partition {}: progress record does not decode", id_));
  }
  return p;
}

Status Partition::Commit(PartitionBatch* batch) {
  if (rep_->read_only) return Status::FailedPrecondition("store is read-only");
  // Held to the end: a ClosePartition racing this commit waits for it, so
  // the notice ids and the cache drops below never land after the close.
  std::shared_ptr<rocksdb::DB> db = rep_->db.load();
  if (db == nullptr) return NotHeld(id_);
  if (rep_->primary_closed) {
    return Status::Unavailable(
        fmt::format("partition {}: closed after a write error, not reopened yet", id_));
  }
  // Below the reserve nothing reaches RocksDB: a WAL write that fails is
  // the one error RocksDB 7.8 may not recover from by itself.
  if (rep_->reserve != nullptr) {
    if (Status full = rep_->reserve->Check(); !full.ok()) {
      rep_->health->OnCommit(full);
      return full;
    }
  }
  PartitionBatch::Rep& b = *batch->rep_;
  b.EncodePosts(PostPageBits(rep_->partitions));
  // The notice list with the batch's notices, and its size in the batch
  // (a read-only store reads the ids again when that record changes).
  std::shared_ptr<const NoticeIds> notices;
  if (!b.notices.empty()) {
    std::shared_ptr<const NoticeIds> old = rep_->notice_ids.load();
    if (old == nullptr) return NotHeld(id_);  // published before `db`, cleared after it
    std::sort(b.notices.begin(), b.notices.end());
    auto merged = std::make_shared<NoticeIds>();
    merged->reserve(old->size() + b.notices.size());
    std::set_union(old->begin(), old->end(), b.notices.begin(), b.notices.end(),
                   std::back_inserter(*merged));
    merged->erase(std::unique(merged->begin(), merged->end()), merged->end());
    if (!b.notice_count_put) {
      b.value.clear();
      PutVarint64(&b.value, merged->size());
      b.wb.Put(rocksdb::Slice(kNoticeCountKey.data(), kNoticeCountKey.size()), b.value);
      b.notice_count_put = true;
    }
    notices = std::move(merged);
  }
  std::unique_lock<std::shared_mutex> committing;
  if (rep_->cache != nullptr) committing = std::unique_lock<std::shared_mutex>(rep_->commit_mu);
  rocksdb::Status s = db->Write(rep_->write_options, &b.wb);
  // Before returning: whatever the caller publishes after Commit (applied
  // offsets, say) must not be seen beside a cached value from before it,
  // nor beside a notice list from before it. On a failed write nothing
  // changed, and dropping entries is harmless.
  if (s.ok() && notices != nullptr) rep_->notice_ids.store(std::move(notices));
  if (rep_->cache != nullptr) {
    rep_->cache->BeginInvalidate();
    for (const auto& [kind, id] : batch->rep_->counters) rep_->cache->Invalidate(kind, id);
    if (batch->rep_->red_dots) rep_->cache->InvalidateRedDots();
    if (batch->rep_->drop_cached) {
      const uint32_t self = id_, n = rep_->partitions;
      rep_->cache->ClearIf([self, n](uint64_t id) {
        return id != schemas::kGlobalEntity && schemas::PartitionOf(id, n) == self;
      });
    }
  }
  Status st = FromRocks(s, fmt::format("partition {}: committing window", id_));
  if (rep_->health) rep_->health->OnCommit(st);
  return st;
}

std::string Partition::WriteProblem() const {
  return rep_->health ? rep_->health->Problem() : std::string();
}

Status Partition::Resume() {
  if (rep_->read_only) return Status::FailedPrecondition("store is read-only");
  // Not while the control thread opens or closes the partition.
  std::lock_guard<std::mutex> control(rep_->control_mu);
  if (rep_->db.load() == nullptr) return NotHeld(id_);
  // A WAL write that ran out of space: nothing is reopened or written
  // until the disk has room again, or the partition would flap between
  // writing into what the reopen gave back and failing once more.
  if (rep_->health != nullptr && rep_->health->WalOutOfSpace() && rep_->reserve != nullptr) {
    if (Status room = rep_->reserve->CheckRoomAfterFull(); !room.ok()) {
      return Status::Unavailable(
          fmt::format("partition {}: a WAL write ran out of space; {}", id_, room.message()));
    }
  }
  if (!rep_->primary_closed) {
    // After a failed WAL write the instance is never written again (see
    // write_health.h): straight to the reopen below.
    const bool wal_failed = rep_->health != nullptr && rep_->health->WalWriteFailed();
    rocksdb::Status s =
        wal_failed ? rocksdb::Status::IOError("a WAL write failed") : rep_->db.load()->Resume();
    // A write that failed may have landed after all: the notice ids are
    // read again from what the database holds.
    if (s.ok()) return rep_->LoadNoticeIds(rep_->db.load().get(), id_);
    // A failed flush or MANIFEST write on a full disk is RocksDB's to
    // recover from: its SstFileManager polls the free space and resumes the
    // database once there is room, and Resume() answers Busy meanwhile.
    // Closing the database under that recovery would race it.
    if (!wal_failed &&
        (s.IsBusy() || s.IsNoSpace() || s.subcode() == rocksdb::Status::kSpaceLimit)) {
      return Status::Unavailable(
          fmt::format("partition {}: RocksDB resumes writing by itself once space is freed ({})",
                      id_, s.IsBusy() ? "recovering" : s.ToString()));
    }
    // RocksDB 7.8 treats a failed WAL write as unrecoverable for the open
    // instance (DB::Resume refuses it): the only way on is to close the
    // database and open it again, which replays the WAL as written.
    // Readers get a read-only instance meanwhile, so reads never stop.
    rocksdb::DB* ro = nullptr;
    rocksdb::Status rs = rocksdb::DB::OpenForReadOnly(rep_->options, rep_->path, &ro);
    if (!rs.ok()) {
      return FromRocks(
          s, fmt::format("partition {}: resuming writes (and a read-only instance: {})", id_,
                         rs.ToString()));
    }
    std::shared_ptr<rocksdb::DB> old = rep_->db.exchange(rep_->handoff->Share(ro));
    // The old instance closes (releasing its LOCK) when the last reader lets
    // go of it; an Open before that fails and is retried.
    old.reset();
    rep_->primary_closed = true;
    TALLY_LOG_WARN("store",
                   "partition {}: closed after an unrecoverable write error ({}); reads go to a "
                   "read-only instance until it reopens",
                   id_, s.ToString());
    TALLY_RETURN_IF_ERROR(rep_->LoadNoticeIds(ro, id_));
  }
  rocksdb::DB* raw = nullptr;
  TALLY_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(rep_->options, rep_->path, &raw),
                                  fmt::format("partition {}: reopening after a write error", id_)));
  rep_->db.store(rep_->handoff->Share(raw));
  rep_->primary_closed = false;
  if (rep_->health != nullptr) rep_->health->ClearWalWriteFailed();
  if (rep_->cache != nullptr) rep_->cache->Clear();
  TALLY_RETURN_IF_ERROR(rep_->LoadNoticeIds(raw, id_));
  TALLY_LOG_WARN("store", "partition {}: reopened for writing", id_);
  return Status::Ok();
}

}  // namespace tally::store
