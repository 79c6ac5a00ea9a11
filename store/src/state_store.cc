#include "store/state_store.h"

#include <fmt/core.h>
#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/perf_level.h>
#include <rocksdb/sst_file_manager.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <shared_mutex>
#include <thread>

#include "base/log.h"
#include "counter_cache.h"
#include "counter_merge.h"
#include "fault_file_system.h"
#include "info_log.h"
#include "keys.h"
#include "sorted_runs_rep.h"
#include "write_health.h"

namespace tally::store {

namespace fs = std::filesystem;
using base::Result;
using base::Status;

namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kMetaFile = "TALLY";
// Partitions opened at once by StateStore::Open.
constexpr uint32_t kOpenThreads = 8;

// The one conversion from rocksdb::Status.
Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return Status::Ok();
  std::string msg = fmt::format("{}: {}", context, s.ToString());
  if (s.IsNotFound()) return Status::NotFound(std::move(msg));
  if (s.IsCorruption()) return Status::Corruption(std::move(msg));
  if (s.IsIOError()) return Status::IOError(std::move(msg));
  if (s.IsInvalidArgument() || s.IsNotSupported()) return Status::InvalidArgument(std::move(msg));
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return Status::Unavailable(std::move(msg));
  if (s.IsAborted() || s.IsShutdownInProgress()) return Status::Aborted(std::move(msg));
  return Status::Internal(std::move(msg));
}

std::string PartitionDirName(uint32_t i) { return fmt::format("partition-{:03d}", i); }

// The name of the writer's current manifest: it changes whenever the writer
// opens the database (and when a manifest rolls over).
std::string ReadCurrentFile(const std::string& db_path) {
  std::ifstream f(db_path + "/CURRENT");
  std::string name;
  std::getline(f, name);
  return name;
}

// Drops notice-read and user red-dot records whose last touch (event time)
// is older than the inactivity horizon: such users then read as new users.
// Drops event id records older than the dedup horizon.
// Merge operands are judged one by one: both fields of these records are
// "set" or "max" operations stamped with the event time, so an operand that
// is older than the horizon is dominated by any newer one, and dropping it
// changes nothing unless every operand (and the base value) is old.
class InactivePurgeFilter : public rocksdb::CompactionFilter {
 public:
  InactivePurgeFilter(int64_t inactive_ms, int64_t dedup_ms, std::function<int64_t()> now)
      : inactive_ms_(inactive_ms), dedup_ms_(dedup_ms), now_(std::move(now)) {}
  const char* Name() const override { return "tally.InactivePurge"; }
  Decision FilterV2(int, const rocksdb::Slice& key, ValueType type, const rocksdb::Slice& value, std::string*,
                    std::string*) const override {
    if (key.size() == 0) return Decision::kKeep;
    char kind = key[0];
    if (kind == static_cast<char>(RecordKind::kEventId)) {
      // An event id is remembered for --dedup-hours of its event time.
      size_t pos = 0;
      uint64_t ts = 0;
      std::string_view v(value.data(), value.size());
      if (type != ValueType::kValue || dedup_ms_ <= 0 || !GetVarint64(v, &pos, &ts))
        return Decision::kKeep;
      return static_cast<int64_t>(ts) < now_() - dedup_ms_ ? Decision::kRemove : Decision::kKeep;
    }
    if (inactive_ms_ <= 0) return Decision::kKeep;
    if (kind != static_cast<char>(RecordKind::kNoticeRead) && kind != static_cast<char>(RecordKind::kUserRedDot)) {
      return Decision::kKeep;
    }
    int64_t touched;
    std::string_view v(value.data(), value.size());
    if (type == ValueType::kValue) {
      int64_t c[2];
      if (!DecodeCounters(v, c, 2)) return Decision::kKeep;
      touched = c[1];
    } else if (type == ValueType::kMergeOperand) {
      CounterOp ops[2];
      if (!DecodeCounterOps(v, ops, 2)) return Decision::kKeep;
      touched = ops[1].floor;
    } else {
      return Decision::kKeep;
    }
    return touched < now_() - inactive_ms_ ? Decision::kRemove : Decision::kKeep;
  }

 private:
  int64_t inactive_ms_;
  int64_t dedup_ms_;
  std::function<int64_t()> now_;
};

}  // namespace

// ---------------------------------------------------------------- PartitionBatch

struct PartitionBatch::Rep {
  rocksdb::WriteBatch wb;
  std::string key, value;
  // The counter records merged, dropped from the read cache on commit.
  std::vector<std::pair<char, uint64_t>> counters;
  bool red_dots = false;  // a global red dot changed
  // The notice ids put, added to the partition's index on commit, and
  // whether the notice count record is in `wb` already (a retried commit
  // must not add it twice).
  std::vector<uint64_t> notices;
  bool notice_count_put = false;
};

PartitionBatch::PartitionBatch() : rep_(std::make_unique<Rep>()) {}
PartitionBatch::~PartitionBatch() = default;

void PartitionBatch::MergePostCounters(uint64_t post_id, const CounterOp* ops) {
  EncodeKey(RecordKind::kPostCounters, post_id, &rep_->key);
  EncodeCounterOps(ops, schemas::kPostFieldCount, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
  rep_->counters.emplace_back(static_cast<char>(RecordKind::kPostCounters), post_id);
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
}
void PartitionBatch::PutFeedSnapshot(uint64_t user_id, int64_t taken_ts,
                                     const std::pair<uint64_t, uint64_t>* followees, size_t n) {
  EncodeKey(RecordKind::kFeedSnapshot, user_id, &rep_->key);
  EncodeSnapshot(taken_ts, std::vector<std::pair<uint64_t, uint64_t>>(followees, followees + n), &rep_->value);
  rep_->wb.Put(rep_->key, rep_->value);
}
void PartitionBatch::SetViewBits(uint32_t table_id, uint32_t chunk, const std::vector<uint16_t>& bits) {
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
size_t PartitionBatch::Count() const { return rep_->wb.Count(); }
void PartitionBatch::Clear() {
  rep_->wb.Clear();
  rep_->counters.clear();
  rep_->red_dots = false;
  rep_->notices.clear();
  rep_->notice_count_put = false;
}

// ---------------------------------------------------------------- Partition

struct Partition::Rep {
  // Swapped whole when a read-only store reopens after its writer restarted;
  // readers hold what they loaded until they are done with it.
  std::atomic<std::shared_ptr<rocksdb::DB>> db;
  rocksdb::WriteOptions write_options;
  bool read_only = false;
  // Read-only stores: where the writer's database is, the secondary's own
  // directory, and the writer's CURRENT (its manifest) when last opened.
  std::string path;
  std::string secondary_base;
  std::string current;
  int generation = 0;
  // Writable stores: how to reopen after an unrecoverable write error, and
  // whether the writable instance is closed (a read-only one serves reads).
  rocksdb::Options options;
  bool primary_closed = false;
  // The store's read cache (borrowed; null when there is none).
  CounterCache* cache = nullptr;
  // The ids of the partition's notices, ascending (only the partition of
  // kGlobalEntity has any), so that "how many above x" is a binary search
  // in memory. Read from `db` when it is opened or replaced; a commit that
  // adds notices publishes a new vector after its write and before it
  // returns. Never changed in place: readers keep what they loaded.
  std::atomic<std::shared_ptr<const NoticeIds>> notice_ids;
  // Read-only stores: the notice count record when the ids were last read
  // (empty: none), so that CatchUp reads them again only after a commit
  // that added notices.
  std::string notice_count_seen;

  // Reads the notice ids (and the count record) from `db` into notice_ids.
  Status LoadNoticeIds(rocksdb::DB* db, uint32_t id);
  // With a cache: Commit() holds it across its write and the cache drop that
  // follows, LoadProgress() shared, so progress that says a window is
  // applied is never read while the cache may still serve a value from
  // before it (lag 0 and ?wait=visible promise the next read sees it).
  mutable std::shared_mutex commit_mu;
  // Writable stores: why writes fail (also in options.listeners), and the
  // store's free-space reserve (borrowed).
  std::shared_ptr<WriteHealth> health;
  const DiskReserve* reserve = nullptr;
};

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
  return KeyExists(rep_->db.load().get(), EdgeKey(RecordKind::kLikeEdge, post_id, user_id, buf),
                   "reading like edge");
}

Result<bool> Partition::HasFollow(uint64_t user_id, uint64_t target_id) const {
  char buf[17];
  return KeyExists(rep_->db.load().get(), EdgeKey(RecordKind::kFollowEdge, user_id, target_id, buf),
                   "reading follow edge");
}

Result<std::optional<Partition::EventIdRecord>> Partition::GetEventId(uint64_t event_id) const {
  char buf[9];
  buf[0] = static_cast<char>(RecordKind::kEventId);
  for (int i = 0; i < 8; i++) buf[1 + i] = static_cast<char>((event_id >> (56 - 8 * i)) & 0xff);
  std::string value;
  rocksdb::Status st = rep_->db.load()->Get(rocksdb::ReadOptions(), rocksdb::Slice(buf, 9), &value);
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
  return std::binary_search(ids->begin(), ids->end(), notice_id);
}

Result<ViewedTables> Partition::LoadViewedTables(const ViewedOptions& options) const {
  ViewedTables t(options);
  std::string value;
  rocksdb::Status s = rep_->db.load()->Get(rocksdb::ReadOptions(), rocksdb::Slice(kViewedKey.data(), kViewedKey.size()),
                                    &value);
  if (s.IsNotFound()) return t;
  if (!s.ok()) return FromRocks(s, fmt::format("partition {}: reading viewed tables", id_));
  if (!t.Decode(value)) return Status::Corruption(fmt::format("partition {}: viewed tables do not decode", id_));
  return t;
}

Result<Progress> Partition::LoadProgress() const {
  std::shared_lock<std::shared_mutex> committing;
  if (rep_->cache != nullptr) committing = std::shared_lock<std::shared_mutex>(rep_->commit_mu);
  std::string value;
  rocksdb::Status s = rep_->db.load()->Get(rocksdb::ReadOptions(),
                                    rocksdb::Slice(kProgressKey.data(), kProgressKey.size()), &value);
  if (s.IsNotFound()) return Progress();
  if (!s.ok()) return FromRocks(s, fmt::format("partition {}: reading progress", id_));
  Progress p;
  if (!DecodeProgress(value, &p)) {
    return Status::Corruption(fmt::format("partition {}: progress record does not decode", id_));
  }
  return p;
}

void DisablePerfCounters() { rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable); }

Status Partition::Commit(PartitionBatch* batch) {
  if (rep_->read_only) return Status::FailedPrecondition("store is read-only");
  if (rep_->primary_closed) {
    return Status::Unavailable(fmt::format("partition {}: closed after a write error, not reopened yet", id_));
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
  // The notice list with the batch's notices, and its size in the batch
  // (a read-only store reads the ids again when that record changes).
  std::shared_ptr<const NoticeIds> notices;
  if (!b.notices.empty()) {
    std::shared_ptr<const NoticeIds> old = rep_->notice_ids.load();
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
  rocksdb::Status s = rep_->db.load()->Write(rep_->write_options, &b.wb);
  // Before returning: whatever the caller publishes after Commit (applied
  // offsets, say) must not be seen beside a cached value from before it,
  // nor beside a notice list from before it. On a failed write nothing
  // changed, and dropping entries is harmless.
  if (s.ok() && notices != nullptr) rep_->notice_ids.store(std::move(notices));
  if (rep_->cache != nullptr) {
    rep_->cache->BeginInvalidate();
    for (const auto& [kind, id] : batch->rep_->counters) rep_->cache->Invalidate(kind, id);
    if (batch->rep_->red_dots) rep_->cache->InvalidateRedDots();
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
      return FromRocks(s, fmt::format("partition {}: resuming writes (and a read-only instance: {})", id_,
                                      rs.ToString()));
    }
    std::shared_ptr<rocksdb::DB> old = rep_->db.exchange(std::shared_ptr<rocksdb::DB>(ro));
    // The old instance closes (releasing its LOCK) when the last reader lets
    // go of it; an Open before that fails and is retried.
    old.reset();
    rep_->primary_closed = true;
    TALLY_LOG_WARN("store", "partition {}: closed after an unrecoverable write error ({}); reads go to a "
                   "read-only instance until it reopens", id_, s.ToString());
    TALLY_RETURN_IF_ERROR(rep_->LoadNoticeIds(ro, id_));
  }
  rocksdb::DB* raw = nullptr;
  TALLY_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(rep_->options, rep_->path, &raw),
                                  fmt::format("partition {}: reopening after a write error", id_)));
  rep_->db.store(std::shared_ptr<rocksdb::DB>(raw));
  rep_->primary_closed = false;
  if (rep_->health != nullptr) rep_->health->ClearWalWriteFailed();
  if (rep_->cache != nullptr) rep_->cache->Clear();
  TALLY_RETURN_IF_ERROR(rep_->LoadNoticeIds(raw, id_));
  TALLY_LOG_WARN("store", "partition {}: reopened for writing", id_);
  return Status::Ok();
}

// ---------------------------------------------------------------- StateStore

struct StateStore::Rep {
  StoreOptions options;
  std::string cluster;
  std::vector<std::unique_ptr<Partition>> partitions;
  std::string secondary_dir;
  std::mutex catch_up_mu;
  std::unique_ptr<InactivePurgeFilter> purge;
  rocksdb::Options db_options;  // kept to reopen read-only partitions
  std::unique_ptr<rocksdb::Env> fault_env;  // StoreOptions::fault_file; outlives the partitions
  std::unique_ptr<CounterCache> cache;  // StoreOptions::read_cache_bytes; outlives the partitions
  std::unique_ptr<DiskReserve> reserve;  // writable stores; outlives the partitions

  // The partition of kGlobalEntity: the notice list and the red dots.
  Partition::Rep& GlobalPartition() const {
    return *partitions[schemas::PartitionOf(schemas::kGlobalEntity,
                                            static_cast<uint32_t>(partitions.size()))]
                ->rep_;
  }
  // The database of the partition that owns `entity`, held for the caller.
  std::shared_ptr<rocksdb::DB> DbOf(uint64_t entity) const {
    return partitions[schemas::PartitionOf(entity, static_cast<uint32_t>(partitions.size()))]->rep_->db.load();
  }
};

StateStore::StateStore(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

StateStore::~StateStore() {
  rep_->partitions.clear();  // closes every DB before the secondary scratch dir goes
  if (!rep_->secondary_dir.empty()) {
    std::error_code ec;
    fs::remove_all(rep_->secondary_dir, ec);
  }
}

namespace {

Status WriteMetaFile(const std::string& dir, uint32_t partitions, const std::string& cluster) {
  nlohmann::json j = {{"format", kFormatVersion}, {"partitions", partitions}, {"cluster", cluster}};
  std::string tmp = dir + "/" + kMetaFile + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(2) << "\n";
    f.flush();
    if (!f) return Status::IOError(fmt::format("writing {}", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, dir + "/" + kMetaFile, ec);
  if (ec) return Status::IOError(fmt::format("renaming {}: {}", tmp, ec.message()));
  return Status::Ok();
}

// True when `dir` holds nothing but partition-NNN directories: empty, or a
// state whose creation stopped before its TALLY file was written (its
// partitions hold nothing yet, as no writer got the store before TALLY).
bool HoldsOnlyPartitionDirs(const std::string& dir, const std::vector<std::string>& side_files) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (std::find(side_files.begin(), side_files.end(), name) != side_files.end()) continue;
    if (!it->is_directory(ec) || name.size() < 13 || name.rfind("partition-", 0) != 0 ||
        name.find_first_not_of("0123456789", 10) != std::string::npos) {
      return false;
    }
  }
  return !ec;
}

Status ReadMetaFile(const std::string& dir, uint32_t* partitions, std::string* cluster) {
  std::string path = dir + "/" + kMetaFile;
  std::ifstream f(path);
  if (!f) return Status::NotFound(fmt::format("{} does not exist", path));
  try {
    nlohmann::json j = nlohmann::json::parse(f);
    if (!j.is_object() || !j.contains("format") || !j.contains("partitions")) {
      return Status::Corruption(fmt::format("{}: not a tally state file", path));
    }
    if (j["format"].get<int>() != kFormatVersion) {
      return Status::Corruption(fmt::format("{}: unsupported format {}", path, j["format"].dump()));
    }
    *partitions = j["partitions"].get<uint32_t>();
    *cluster = j.value("cluster", "");
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format("{}: {}", path, e.what()));
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> StateStore::PeekRecordedCluster(const std::string& dir) {
  uint32_t partitions = 0;
  std::string cluster;
  TALLY_RETURN_IF_ERROR(ReadMetaFile(dir, &partitions, &cluster));
  return cluster;
}

Result<std::unique_ptr<StateStore>> StateStore::Open(const StoreOptions& options) {
  if (options.partitions > 4096) {
    return Status::InvalidArgument(fmt::format("partition count {} out of range 1..4096", options.partitions));
  }
  auto rep = std::make_unique<Rep>();
  rep->options = options;
  std::error_code ec;
  const std::string& dir = options.dir;
  uint32_t recorded_partitions = 0;
  // A new state: its partitions are created, then TALLY is written.
  bool create_meta = false;
  Status meta = ReadMetaFile(dir, &recorded_partitions, &rep->cluster);
  if (meta.code() == base::StatusCode::kNotFound) {
    if (options.partitions == 0) {
      return Status::NotFound(fmt::format("{} holds no tally state (no TALLY file)", dir));
    }
    if (options.read_only) {
      return Status::NotFound(fmt::format("{} holds no tally state (no TALLY file)", dir));
    }
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
      return Status::FailedPrecondition(fmt::format("{} is not a directory", dir));
    }
    if (fs::exists(dir, ec) && !HoldsOnlyPartitionDirs(dir, options.side_files)) {
      return Status::FailedPrecondition(
          fmt::format("{} is not empty and is not a tally state directory (no TALLY file)", dir));
    }
    fs::create_directories(dir, ec);
    if (ec) return Status::IOError(fmt::format("creating {}: {}", dir, ec.message()));
    // TALLY is written once every partition exists (below): a reader that
    // sees it can open them all.
    create_meta = true;
    recorded_partitions = options.partitions;
  } else if (!meta.ok()) {
    return meta;
  }
  if (options.partitions == 0) {
    rep->options.partitions = recorded_partitions;  // "as recorded"
  } else if (recorded_partitions != options.partitions) {
    return Status::InvalidArgument(fmt::format(
        "{} was built with {} partitions, but tally.deltas has {}; use a fresh --state-dir",
        dir, recorded_partitions, options.partitions));
  }

  rocksdb::Options db_options;
  // Only a state created just now gets new databases: in an existing one, a
  // missing partition is damage to report, never an empty partition to
  // count from (that would serve wrong counts silently).
  // Databases are created only with a new state: a partition missing from
  // an existing one is damage to report, not an empty partition to serve.
  db_options.create_if_missing = !options.read_only && create_meta;
  // A record torn by a crash at the end of the WAL is dropped (it was never
  // acknowledged); a damaged record anywhere else fails the open instead of
  // silently dropping everything after it.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  db_options.merge_operator = std::make_shared<CounterMergeOperator>();
  db_options.write_buffer_size = options.write_buffer_bytes;
  db_options.max_write_buffer_number = 3;
  db_options.max_background_jobs = 2;
  db_options.bytes_per_sync = 1 << 20;
  db_options.level_compaction_dynamic_level_bytes = true;
  db_options.keep_log_file_num = 2;
  // RocksDB reserves 4 MiB for every new MANIFEST (fallocate), which a file
  // of a few KiB never uses: 64 MiB of a disk for 16 partitions, counted as
  // used by the free-space reserve.
  db_options.manifest_preallocation_size = 64 << 10;
  db_options.max_log_file_size = 4 << 20;
  // Point reads (a feed's followee counts are thousands of them) skip the
  // memtables that do not hold the key.
  db_options.memtable_whole_key_filtering = true;
  db_options.memtable_prefix_bloom_size_ratio = 0.05;
  if (options.memtable == StoreOptions::Memtable::kSortedRuns) {
    db_options.memtable_factory = std::make_shared<SortedRunsRepFactory>();
    db_options.allow_concurrent_memtable_write = false;  // one writer a partition anyway
  }
  db_options.compression = rocksdb::kLZ4Compression;
  db_options.bottommost_compression = rocksdb::kZSTD;
  db_options.env = rocksdb::Env::Default();
  if (!options.fault_file.empty()) {
    rep->fault_env = rocksdb::NewCompositeEnv(
        std::make_shared<FaultFileSystem>(rocksdb::FileSystem::Default(), options.fault_file));
    db_options.env = rep->fault_env.get();
    TALLY_LOG_WARN("store", "fault injection armed: every RocksDB write under {} fails while {} exists", dir,
                   options.fault_file);
  }
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.format_version = 5;
  // Point lookups find their key in a block by hash, not binary search.
  table.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
  table.data_block_hash_table_util_ratio = 0.75;
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  std::function<int64_t()> now = options.now_ms;
  if (!now) {
    now = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch()).count();
    };
  }
  rep->purge = std::make_unique<InactivePurgeFilter>(
      options.inactive_days * 86400000LL, options.dedup_hours * 3600000LL, std::move(now));
  db_options.compaction_filter = rep->purge.get();
  // Every partition shares the flush/compaction threads of one Env.
  db_options.env->SetBackgroundThreads(2, rocksdb::Env::LOW);
  db_options.env->SetBackgroundThreads(1, rocksdb::Env::HIGH);
  // RocksDB starts and joins this many threads to load table handlers on
  // every open (15 per partition with the default 16, even for an empty
  // one); partitions already open concurrently (kOpenThreads).
  db_options.max_file_opening_threads = 2;

  if (options.read_only) {
    db_options.max_open_files = -1;  // required by secondary instances
    // Each catch-up loads the handlers of new tables; with the default 16
    // threads RocksDB starts and joins that many threads every time.
    db_options.max_file_opening_threads = 1;
    std::random_device rd;
    rep->secondary_dir = fmt::format("{}/tally-secondary-{}-{:x}", fs::temp_directory_path().string(),
                                     ::getpid(), rd());
    fs::create_directories(rep->secondary_dir, ec);
    if (ec) return Status::IOError(fmt::format("creating {}: {}", rep->secondary_dir, ec.message()));
  }

  rep->db_options = db_options;
  // Only the writer's process can keep a read cache exact: it sees every
  // commit. A secondary learns of them only as RocksDB files.
  if (!options.read_only && options.read_cache_bytes > 0) {
    rep->cache = std::make_unique<CounterCache>(options.read_cache_bytes);
  }
  // Partitions open concurrently: an open is mostly waiting (creating a
  // database syncs its MANIFEST, CURRENT, OPTIONS and directory; reopening
  // one replays its WAL), and one at a time 16 new partitions took 280 ms of
  // every fresh start here.
  const uint32_t n = rep->options.partitions;
  // Writable partitions: RocksDB's info log written so that a full disk
  // drops lines instead of aborting (info_log.h); RocksDB's recovery from a
  // full disk driven by an SstFileManager of their own (each polls the free
  // space and resumes its database; one shared by all would resume them one
  // at a time, 5 s apart), with the reserve as compaction headroom; and a
  // listener that tells WriteProblem() why writes stopped.
  std::vector<std::shared_ptr<rocksdb::Logger>> info_logs(n);
  std::vector<std::shared_ptr<rocksdb::SstFileManager>> file_managers(n);
  std::vector<std::shared_ptr<WriteHealth>> healths(n);
  if (!options.read_only) {
    rep->reserve = std::make_unique<DiskReserve>(dir, options.min_free_bytes, options.free_bytes);
    for (uint32_t i = 0; i < n; i++) {
      info_logs[i] = std::make_shared<InfoLog>(dir + "/" + PartitionDirName(i) + "/LOG", 4 << 20);
      file_managers[i].reset(rocksdb::NewSstFileManager(db_options.env, info_logs[i]));
      file_managers[i]->SetCompactionBufferSize(options.min_free_bytes);
      healths[i] = std::make_shared<WriteHealth>(i);
    }
  }
  // Partitions fill at about the same rate: with equal memtables they would
  // all flush within a second or two, and that burst (a core busy building
  // tables, then level-0 compactions) is what a reader waiting for fresh
  // counts saw as its worst latency. Memtable sizes from 0.5x to 1.5x the
  // configured one (the same total) spread the flushes out.
  auto partition_options = [&](uint32_t i) {
    rocksdb::Options o = db_options;
    o.write_buffer_size =
        static_cast<size_t>(static_cast<double>(db_options.write_buffer_size) *
                            (0.5 + (static_cast<double>(i) + 0.5) / static_cast<double>(n)));
    if (!options.read_only) {
      o.info_log = info_logs[i];
      o.sst_file_manager = file_managers[i];
      o.listeners.push_back(healths[i]);
    }
    return o;
  };
  std::vector<rocksdb::DB*> raws(n, nullptr);
  std::vector<rocksdb::Status> opened(n);
  std::vector<std::string> currents(n);
  std::atomic<uint32_t> next{0};
  auto open_some = [&] {
    for (uint32_t i; (i = next.fetch_add(1)) < n;) {
      std::string path = dir + "/" + PartitionDirName(i);
      if (options.read_only) {
        currents[i] = ReadCurrentFile(path);
        opened[i] = rocksdb::DB::OpenAsSecondary(
            partition_options(i), path, rep->secondary_dir + "/" + PartitionDirName(i) + ".0",
            &raws[i]);
      } else {
        opened[i] = rocksdb::DB::Open(partition_options(i), path, &raws[i]);
      }
    }
  };
  {
    std::vector<std::thread> openers;
    for (uint32_t t = 1; t < std::min<uint32_t>(n, kOpenThreads); t++)
      openers.emplace_back(open_some);
    open_some();
    for (auto& t : openers) t.join();
  }
  for (uint32_t i = 0; i < n; i++) {
    if (opened[i].ok()) continue;
    for (rocksdb::DB* db : raws) delete db;  // the ones that did open; null otherwise
    // Opening writes (a MANIFEST, an OPTIONS file, a WAL): on a full disk
    // say that first, and what to do.
    if (rep->reserve != nullptr) {
      if (Status full = rep->reserve->Check(); !full.ok() || opened[i].IsNoSpace()) {
        return Status::ResourceExhausted(
            fmt::format("cannot open {}/{}: {}; free space on that disk and start again", dir,
                        PartitionDirName(i), full.ok() ? opened[i].ToString() : full.message()));
      }
    }
    return FromRocks(opened[i], fmt::format("opening {}/{}", dir, PartitionDirName(i)));
  }
  for (uint32_t i = 0; i < n; i++) {
    std::string path = dir + "/" + PartitionDirName(i);
    auto prep = std::make_unique<Partition::Rep>();
    prep->db.store(std::shared_ptr<rocksdb::DB>(raws[i]));
    prep->read_only = options.read_only;
    prep->write_options.sync = options.sync_writes;
    prep->path = path;
    prep->options = partition_options(i);
    prep->secondary_base = rep->secondary_dir + "/" + PartitionDirName(i);
    prep->current = std::move(currents[i]);
    prep->cache = rep->cache.get();
    TALLY_RETURN_IF_ERROR(prep->LoadNoticeIds(raws[i], i));
    prep->health = healths[i];
    prep->reserve = rep->reserve.get();
    rep->partitions.push_back(std::unique_ptr<Partition>(new Partition(i, std::move(prep))));
  }
  if (create_meta) TALLY_RETURN_IF_ERROR(WriteMetaFile(dir, options.partitions, ""));
  TALLY_LOG_INFO("store", "opened {} ({} partitions{}{})", dir, rep->options.partitions,
                 options.read_only ? ", read-only" : "",
                 rep->cluster.empty() ? "" : ", built from cluster " + rep->cluster);
  if (rep->reserve != nullptr) {
    if (Status full = rep->reserve->Check(); !full.ok()) {
      TALLY_LOG_WARN("store", "{}: reads are served, applying waits", full.message());
    }
  }
  return std::unique_ptr<StateStore>(new StateStore(std::move(rep)));
}

uint32_t StateStore::partitions() const { return static_cast<uint32_t>(rep_->partitions.size()); }
const std::string& StateStore::dir() const { return rep_->options.dir; }
const StoreOptions& StateStore::options() const { return rep_->options; }
Partition* StateStore::partition(uint32_t i) { return rep_->partitions[i].get(); }
std::string StateStore::recorded_cluster() const { return rep_->cluster; }

Status StateStore::RecordCluster(const std::string& identity) {
  if (rep_->options.read_only) return Status::FailedPrecondition("store is read-only");
  TALLY_RETURN_IF_ERROR(WriteMetaFile(rep_->options.dir, partitions(), identity));
  rep_->cluster = identity;
  return Status::Ok();
}

// Reads the counter records of `kind` for `ids`, one MultiGet per partition
// touched (ids are grouped by their partition, as Weibo batches per cache
// node), and calls fill(i, values) for each ids[i] that has a record.
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
                                    const std::function<void(size_t, const int64_t*)>& fill) const {
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
  std::sort(misses.begin(), misses.end(),
            [](const Miss& a, const Miss& b) { return a.partition < b.partition; });
  std::vector<std::string> keys(misses.size());
  std::vector<rocksdb::Slice> slices(misses.size());
  std::vector<rocksdb::PinnableSlice> values(misses.size());
  std::vector<rocksdb::Status> statuses(misses.size());
  for (size_t k = 0; k < misses.size(); k++) {
    EncodeKey(static_cast<RecordKind>(kind), ids[misses[k].index], &keys[k]);
    slices[k] = keys[k];
  }
  for (size_t begin = 0, end = 0; begin < misses.size(); begin = end) {
    const uint32_t p = misses[begin].partition;
    for (end = begin; end < misses.size() && misses[end].partition == p; end++) {
    }
    std::shared_ptr<rocksdb::DB> db_ref = rep_->partitions[p]->rep_->db.load();
    rocksdb::DB* db = db_ref.get();
    db->MultiGet(rocksdb::ReadOptions(), db->DefaultColumnFamily(), end - begin,
                 slices.data() + begin, values.data() + begin, statuses.data() + begin);
  }
  for (size_t k = 0; k < misses.size(); k++) {
    const uint64_t id = ids[misses[k].index];
    if (statuses[k].IsNotFound()) {
      std::fill(v, v + nfields, 0);
    } else if (!statuses[k].ok()) {
      return FromRocks(statuses[k], fmt::format("reading the {} of {}", CounterKindName(kind), id));
    } else if (!DecodeCounters(std::string_view(values[k].data(), values[k].size()), v, nfields)) {
      return Status::Corruption(
          fmt::format("the {} of {} do not decode", CounterKindName(kind), id));
    }
    if (cache != nullptr) cache->Fill(kind, id, v, nfields, misses[k].lease);
    fill(misses[k].index, v);
  }
  return Status::Ok();
}

Status StateStore::GetPostCounts(std::span<const uint64_t> ids, std::vector<PostCounts>* out) const {
  out->assign(ids.size(), PostCounts());
  for (size_t i = 0; i < ids.size(); i++) (*out)[i].post_id = ids[i];
  return MultiGetCounters(static_cast<char>(RecordKind::kPostCounters), schemas::kPostFieldCount, ids,
                          [out](size_t i, const int64_t* v) {
                            PostCounts& pc = (*out)[i];
                            pc.like = v[0];
                            pc.repost = v[1];
                            pc.comment = v[2];
                            pc.view = v[3];
                          });
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
Status ReadCounters(rocksdb::DB* db, RecordKind kind, uint64_t id, int64_t* v, int n, const char* what,
                    bool* found = nullptr) {
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
  std::string prefix;
  EncodeKey(RecordKind::kFollowEdge, user_id, &prefix);
  std::shared_ptr<rocksdb::DB> db_ref = rep_->DbOf(user_id);
  rocksdb::DB* db = db_ref.get();
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

Result<uint64_t> StateStore::NewestNoticeId() const {
  std::shared_ptr<const NoticeIds> ids = rep_->GlobalPartition().notice_ids.load();
  return ids->empty() ? 0 : ids->back();
}

Result<int64_t> StateStore::GetNoticeUnread(uint64_t user_id) const {
  std::shared_ptr<rocksdb::DB> udb = rep_->DbOf(user_id);
  int64_t read[2];
  bool has_read = false;
  TALLY_RETURN_IF_ERROR(ReadCounters(udb.get(), RecordKind::kNoticeRead, user_id, read, 2,
                                     "notice read of user", &has_read));
  if (!has_read) return 0;
  // Every notice in the list with an id above the last read one, whenever
  // it arrived: the list is a set of ids, not a sequence.
  std::shared_ptr<const NoticeIds> ids = rep_->GlobalPartition().notice_ids.load();
  return static_cast<int64_t>(
      ids->end() - std::upper_bound(ids->begin(), ids->end(), static_cast<uint64_t>(read[0])));
}

Result<UnreadView> StateStore::GetUnread(uint64_t user_id) const {
  UnreadView view;
  auto counters = GetUnreadCounters(user_id);
  if (!counters.ok()) return counters.status();
  view.counters = *counters;
  std::shared_ptr<rocksdb::DB> udb_ref = rep_->DbOf(user_id);
  rocksdb::DB* udb = udb_ref.get();
  std::shared_ptr<rocksdb::DB> gdb_ref = rep_->DbOf(schemas::kGlobalEntity);
  rocksdb::DB* gdb = gdb_ref.get();

  auto notice = GetNoticeUnread(user_id);
  if (!notice.ok()) return notice.status();
  view.notice = *notice;

  // Red dots: every channel with a global time; shown when the user's click is older or absent.
  std::map<std::string, int64_t> mine;
  {
    std::string prefix;
    EncodeKey(RecordKind::kUserRedDot, user_id, &prefix);
    PrefixScan it(udb, prefix);
    for (; it.Valid(); it.Next()) {
      int64_t v[2];
      if (!DecodeCounters(std::string_view(it.value().data(), it.value().size()), v, 2)) {
        return Status::Corruption("user red dot does not decode");
      }
      mine[std::string(it.key().data() + prefix.size(), it.key().size() - prefix.size())] = v[0];
    }
    if (!it.status().ok()) return FromRocks(it.status(), "listing red dots");
  }
  {
    CounterCache* cache = rep_->cache.get();
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
    for (const auto& [channel, dot_ts] : *dots) {
      auto m = mine.find(channel);
      view.red_dots.emplace_back(channel, m == mine.end() || m->second < dot_ts);
    }
  }

  // Feed: sum over followees in both the snapshot and the current set.
  auto snap = GetFeedSnapshot(user_id);
  if (!snap.ok()) return snap.status();
  if (snap->exists && !snap->followees.empty()) {
    auto now = CurrentFolloweePosts(user_id);
    if (!now.ok()) return now.status();
    size_t i = 0, j = 0;
    const auto& a = snap->followees;
    const auto& b = *now;
    while (i < a.size() && j < b.size()) {
      if (a[i].first < b[j].first) {
        i++;
      } else if (b[j].first < a[i].first) {
        j++;
      } else {
        if (b[j].second > a[i].second) view.feed += static_cast<int64_t>(b[j].second - a[i].second);
        i++;
        j++;
      }
    }
  }
  return view;
}

Result<FeedSnapshot> StateStore::GetFeedSnapshot(uint64_t user_id) const {
  std::string key;
  EncodeKey(RecordKind::kFeedSnapshot, user_id, &key);
  std::shared_ptr<rocksdb::DB> db_ref = rep_->DbOf(user_id);
  rocksdb::DB* db = db_ref.get();
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

Result<std::vector<std::pair<uint64_t, uint64_t>>> StateStore::CurrentFolloweePosts(uint64_t user_id) const {
  auto followees = GetFollowees(user_id);
  if (!followees.ok()) return followees.status();
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(followees->size());
  for (uint64_t f : *followees) out.emplace_back(f, 0);
  TALLY_RETURN_IF_ERROR(MultiGetCounters(static_cast<char>(RecordKind::kUserCounters), schemas::kUserFieldCount,
                                         *followees, [&out](size_t i, const int64_t* v) {
                                           out[i].second = static_cast<uint64_t>(v[0]);
                                         }));
  return out;
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
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(), key, &chunk);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocks(s, "reading viewed chunk");
  return ViewedTables::TestBits(probe, std::string_view(chunk.data(), chunk.size()));
}

Status StateStore::CompactAll() {
  if (rep_->options.read_only) return Status::FailedPrecondition("store is read-only");
  for (const auto& p : rep_->partitions) {
    rocksdb::CompactRangeOptions o;
    o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    TALLY_RETURN_IF_ERROR(FromRocks(p->rep_->db.load()->CompactRange(o, nullptr, nullptr),
                                    fmt::format("partition {}: compacting", p->id())));
  }
  return Status::Ok();
}

Result<std::vector<Progress>> StateStore::LoadAllProgress() const {
  std::vector<Progress> out;
  out.reserve(partitions());
  for (const auto& p : rep_->partitions) {
    auto pr = p->LoadProgress();
    if (!pr.ok()) return pr.status();
    out.push_back(std::move(pr).value());
  }
  return out;
}

std::string StateStore::WriteProblem() const {
  if (rep_->reserve == nullptr) return {};
  if (Status full = rep_->reserve->Check(); !full.ok()) return full.message();
  for (const auto& p : rep_->partitions) {
    if (std::string problem = p->WriteProblem(); !problem.empty()) return problem;
  }
  return {};
}

Status StateStore::CatchUp() {
  if (!rep_->options.read_only) return Status::Ok();
  std::lock_guard<std::mutex> l(rep_->catch_up_mu);
  for (const auto& p : rep_->partitions) {
    Partition::Rep& r = *p->rep_;
    // A writer that reopened (after a crash, say) recovered its WAL into a
    // new SST file, while this secondary may hold the same WAL replayed in
    // its memtable: catching up would count those merges twice. So when the
    // writer's manifest changed, open a fresh secondary instead (readers
    // still holding the old one finish with it). Checked before and after
    // catching up, so a reopen racing the catch-up is seen at once.
    bool reopen = ReadCurrentFile(r.path) != r.current;
    if (!reopen) {
      TALLY_RETURN_IF_ERROR(FromRocks(r.db.load()->TryCatchUpWithPrimary(),
                                      fmt::format("partition {}: catching up", p->id())));
      reopen = ReadCurrentFile(r.path) != r.current;
    }
    if (!reopen) {
      // The notice ids are read again only when a commit added notices:
      // every such commit rewrites the count record.
      std::string count;
      rocksdb::Status s =
          r.db.load()->Get(rocksdb::ReadOptions(),
                           rocksdb::Slice(kNoticeCountKey.data(), kNoticeCountKey.size()), &count);
      if (!s.ok() && !s.IsNotFound()) {
        return FromRocks(s, fmt::format("partition {}: reading the notice count", p->id()));
      }
      if (!s.ok()) count.clear();
      if (count != r.notice_count_seen)
        TALLY_RETURN_IF_ERROR(r.LoadNoticeIds(r.db.load().get(), p->id()));
      continue;
    }
    std::string current = ReadCurrentFile(r.path);
    rocksdb::DB* raw = nullptr;
    std::string secondary = fmt::format("{}.{}", r.secondary_base, ++r.generation);
    TALLY_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenAsSecondary(rep_->db_options, r.path, secondary, &raw),
                                    fmt::format("partition {}: reopening after its writer restarted", p->id())));
    r.db.store(std::shared_ptr<rocksdb::DB>(raw));
    r.current = std::move(current);
    TALLY_RETURN_IF_ERROR(r.LoadNoticeIds(raw, p->id()));
    TALLY_LOG_INFO("store", "partition {}: its writer reopened the database; following it afresh", p->id());
  }
  return Status::Ok();
}

Status StateStore::ResetProgress() {
  if (rep_->options.read_only) return Status::FailedPrecondition("store is read-only");
  for (const auto& p : rep_->partitions) {
    PartitionBatch b;
    b.SetProgress(Progress());
    TALLY_RETURN_IF_ERROR(p->Commit(&b));
  }
  return Status::Ok();
}

}  // namespace tally::store
