#include "store/state_store.h"

#include <fmt/core.h>
#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "base/log.h"
#include "counter_merge.h"
#include "keys.h"

namespace tally::store {

namespace fs = std::filesystem;
using base::Result;
using base::Status;

namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kMetaFile = "TALLY";

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

}  // namespace

// ---------------------------------------------------------------- PartitionBatch

struct PartitionBatch::Rep {
  rocksdb::WriteBatch wb;
  std::string key, value;
};

PartitionBatch::PartitionBatch() : rep_(std::make_unique<Rep>()) {}
PartitionBatch::~PartitionBatch() = default;

void PartitionBatch::MergePostCounters(uint64_t post_id, const CounterOp* ops) {
  EncodeKey(RecordKind::kPostCounters, post_id, &rep_->key);
  EncodeCounterOps(ops, schemas::kPostFieldCount, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
}
void PartitionBatch::MergeUserCounters(uint64_t user_id, const CounterOp* ops) {
  EncodeKey(RecordKind::kUserCounters, user_id, &rep_->key);
  EncodeCounterOps(ops, schemas::kUserFieldCount, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
}
void PartitionBatch::MergeUnreadCounters(uint64_t user_id, const CounterOp* ops) {
  EncodeKey(RecordKind::kUnreadCounters, user_id, &rep_->key);
  EncodeCounterOps(ops, schemas::kUnreadCounterKinds, &rep_->value);
  rep_->wb.Merge(rep_->key, rep_->value);
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
void PartitionBatch::DeleteFollow(uint64_t user_id, uint64_t target_id) {
  EncodeKey(RecordKind::kFollowEdge, user_id, target_id, &rep_->key);
  rep_->wb.Delete(rep_->key);
}
void PartitionBatch::SetProgress(const Progress& progress) {
  EncodeProgress(progress, &rep_->value);
  rep_->wb.Put(rocksdb::Slice(kProgressKey.data(), kProgressKey.size()), rep_->value);
}
size_t PartitionBatch::Count() const { return rep_->wb.Count(); }
void PartitionBatch::Clear() { rep_->wb.Clear(); }

// ---------------------------------------------------------------- Partition

struct Partition::Rep {
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::WriteOptions write_options;
  bool read_only = false;
};

Partition::Partition(uint32_t id, std::unique_ptr<Rep> rep) : id_(id), rep_(std::move(rep)) {}
Partition::~Partition() = default;

namespace {
Result<bool> KeyExists(rocksdb::DB* db, const std::string& key, std::string_view what) {
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(), key, &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocks(s, what);
  return true;
}
}  // namespace

Result<bool> Partition::HasLike(uint64_t post_id, uint64_t user_id) const {
  std::string key;
  EncodeKey(RecordKind::kLikeEdge, post_id, user_id, &key);
  return KeyExists(rep_->db.get(), key, "reading like edge");
}

Result<bool> Partition::HasFollow(uint64_t user_id, uint64_t target_id) const {
  std::string key;
  EncodeKey(RecordKind::kFollowEdge, user_id, target_id, &key);
  return KeyExists(rep_->db.get(), key, "reading follow edge");
}

Result<Progress> Partition::LoadProgress() const {
  std::string value;
  rocksdb::Status s = rep_->db->Get(rocksdb::ReadOptions(),
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
  return FromRocks(rep_->db->Write(rep_->write_options, &batch->rep_->wb),
                   fmt::format("partition {}: committing window", id_));
}

// ---------------------------------------------------------------- StateStore

struct StateStore::Rep {
  StoreOptions options;
  std::string cluster;
  std::vector<std::unique_ptr<Partition>> partitions;
  std::string secondary_dir;
  std::mutex catch_up_mu;
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

Result<std::unique_ptr<StateStore>> StateStore::Open(const StoreOptions& options) {
  if (options.partitions > 4096) {
    return Status::InvalidArgument(fmt::format("partition count {} out of range 1..4096", options.partitions));
  }
  auto rep = std::make_unique<Rep>();
  rep->options = options;
  std::error_code ec;
  const std::string& dir = options.dir;
  uint32_t recorded_partitions = 0;
  Status meta = ReadMetaFile(dir, &recorded_partitions, &rep->cluster);
  if (meta.code() == base::StatusCode::kNotFound) {
    if (options.partitions == 0) {
      return Status::NotFound(fmt::format("{} holds no tally state (no TALLY file)", dir));
    }
    if (options.read_only) {
      return Status::NotFound(fmt::format("{} holds no tally state (no TALLY file)", dir));
    }
    if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
      return Status::FailedPrecondition(
          fmt::format("{} is not empty and is not a tally state directory (no TALLY file)", dir));
    }
    fs::create_directories(dir, ec);
    if (ec) return Status::IOError(fmt::format("creating {}: {}", dir, ec.message()));
    TALLY_RETURN_IF_ERROR(WriteMetaFile(dir, options.partitions, ""));
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
  db_options.create_if_missing = !options.read_only;
  db_options.merge_operator = std::make_shared<CounterMergeOperator>();
  db_options.write_buffer_size = options.write_buffer_bytes;
  db_options.max_write_buffer_number = 3;
  db_options.max_background_jobs = 2;
  db_options.bytes_per_sync = 1 << 20;
  db_options.level_compaction_dynamic_level_bytes = true;
  db_options.keep_log_file_num = 2;
  db_options.max_log_file_size = 4 << 20;
  db_options.compression = rocksdb::kLZ4Compression;
  db_options.bottommost_compression = rocksdb::kZSTD;
  db_options.env = rocksdb::Env::Default();
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.format_version = 5;
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // Every partition shares the flush/compaction threads of one Env.
  db_options.env->SetBackgroundThreads(2, rocksdb::Env::LOW);
  db_options.env->SetBackgroundThreads(1, rocksdb::Env::HIGH);

  if (options.read_only) {
    db_options.max_open_files = -1;  // required by secondary instances
    std::random_device rd;
    rep->secondary_dir = fmt::format("{}/tally-secondary-{}-{:x}", fs::temp_directory_path().string(),
                                     ::getpid(), rd());
    fs::create_directories(rep->secondary_dir, ec);
    if (ec) return Status::IOError(fmt::format("creating {}: {}", rep->secondary_dir, ec.message()));
  }

  for (uint32_t i = 0; i < rep->options.partitions; i++) {
    std::string path = dir + "/" + PartitionDirName(i);
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s;
    if (options.read_only) {
      s = rocksdb::DB::OpenAsSecondary(db_options, path, rep->secondary_dir + "/" + PartitionDirName(i), &raw);
    } else {
      s = rocksdb::DB::Open(db_options, path, &raw);
    }
    if (!s.ok()) return FromRocks(s, fmt::format("opening {}", path));
    auto prep = std::make_unique<Partition::Rep>();
    prep->db.reset(raw);
    prep->read_only = options.read_only;
    prep->write_options.sync = options.sync_writes;
    rep->partitions.push_back(std::unique_ptr<Partition>(new Partition(i, std::move(prep))));
  }
  TALLY_LOG_INFO("store", "opened {} ({} partitions{}{})", dir, rep->options.partitions,
                 options.read_only ? ", read-only" : "",
                 rep->cluster.empty() ? "" : ", built from cluster " + rep->cluster);
  return std::unique_ptr<StateStore>(new StateStore(std::move(rep)));
}

uint32_t StateStore::partitions() const { return static_cast<uint32_t>(rep_->partitions.size()); }
const std::string& StateStore::dir() const { return rep_->options.dir; }
Partition* StateStore::partition(uint32_t i) { return rep_->partitions[i].get(); }
std::string StateStore::recorded_cluster() const { return rep_->cluster; }

Status StateStore::RecordCluster(const std::string& identity) {
  if (rep_->options.read_only) return Status::FailedPrecondition("store is read-only");
  TALLY_RETURN_IF_ERROR(WriteMetaFile(rep_->options.dir, partitions(), identity));
  rep_->cluster = identity;
  return Status::Ok();
}

Status StateStore::GetPostCounts(std::span<const uint64_t> ids, std::vector<PostCounts>* out) const {
  out->assign(ids.size(), PostCounts());
  const uint32_t n = partitions();
  // Group the ids by partition: one MultiGet per partition touched.
  std::vector<std::vector<size_t>> by_part(n);
  for (size_t i = 0; i < ids.size(); i++) {
    (*out)[i].post_id = ids[i];
    by_part[schemas::PartitionOf(ids[i], n)].push_back(i);
  }
  std::vector<std::string> keys;
  std::vector<rocksdb::Slice> slices;
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;
  for (uint32_t p = 0; p < n; p++) {
    const auto& idx = by_part[p];
    if (idx.empty()) continue;
    keys.resize(idx.size());
    slices.clear();
    for (size_t k = 0; k < idx.size(); k++) {
      EncodeKey(RecordKind::kPostCounters, ids[idx[k]], &keys[k]);
      slices.emplace_back(keys[k]);
    }
    values.clear();
    values.resize(idx.size());
    statuses.assign(idx.size(), rocksdb::Status());
    rocksdb::DB* db = rep_->partitions[p]->rep_->db.get();
    db->MultiGet(rocksdb::ReadOptions(), db->DefaultColumnFamily(), idx.size(), slices.data(),
                 values.data(), statuses.data());
    for (size_t k = 0; k < idx.size(); k++) {
      if (statuses[k].IsNotFound()) continue;
      if (!statuses[k].ok()) return FromRocks(statuses[k], fmt::format("reading post {}", ids[idx[k]]));
      int64_t v[schemas::kPostFieldCount];
      if (!DecodeCounters(std::string_view(values[k].data(), values[k].size()), v, schemas::kPostFieldCount)) {
        return Status::Corruption(fmt::format("post {}: counter record does not decode", ids[idx[k]]));
      }
      PostCounts& pc = (*out)[idx[k]];
      pc.like = v[0];
      pc.repost = v[1];
      pc.comment = v[2];
      pc.view = v[3];
    }
  }
  return Status::Ok();
}

namespace {
Status ReadCounters(rocksdb::DB* db, RecordKind kind, uint64_t id, int64_t* v, int n, const char* what) {
  std::string key;
  EncodeKey(kind, id, &key);
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), db->DefaultColumnFamily(), key, &value);
  for (int i = 0; i < n; i++) v[i] = 0;
  if (s.IsNotFound()) return Status::Ok();
  if (!s.ok()) return FromRocks(s, fmt::format("reading {} {}", what, id));
  if (!DecodeCounters(std::string_view(value.data(), value.size()), v, n)) {
    return Status::Corruption(fmt::format("{} {}: counter record does not decode", what, id));
  }
  return Status::Ok();
}
}  // namespace

Result<UserCounts> StateStore::GetUserCounts(uint64_t user_id) const {
  int64_t v[schemas::kUserFieldCount];
  rocksdb::DB* db = rep_->partitions[schemas::PartitionOf(user_id, partitions())]->rep_->db.get();
  TALLY_RETURN_IF_ERROR(ReadCounters(db, RecordKind::kUserCounters, user_id, v, schemas::kUserFieldCount, "user"));
  UserCounts uc;
  uc.user_id = user_id;
  uc.posts = v[0];
  uc.followers = v[1];
  uc.following = v[2];
  return uc;
}

Result<UnreadCounters> StateStore::GetUnreadCounters(uint64_t user_id) const {
  UnreadCounters uc;
  rocksdb::DB* db = rep_->partitions[schemas::PartitionOf(user_id, partitions())]->rep_->db.get();
  TALLY_RETURN_IF_ERROR(ReadCounters(db, RecordKind::kUnreadCounters, user_id, uc.counts,
                                     schemas::kUnreadCounterKinds, "unread of user"));
  return uc;
}

Result<bool> StateStore::IsLiked(uint64_t post_id, uint64_t user_id) const {
  return rep_->partitions[schemas::PartitionOf(post_id, partitions())]->HasLike(post_id, user_id);
}

Result<std::vector<uint64_t>> StateStore::GetFollowees(uint64_t user_id) const {
  std::string prefix;
  EncodeKey(RecordKind::kFollowEdge, user_id, &prefix);
  rocksdb::DB* db = rep_->partitions[schemas::PartitionOf(user_id, partitions())]->rep_->db.get();
  rocksdb::ReadOptions ro;
  std::string upper = prefix;
  // Upper bound: the prefix with its last byte incremented (ids are big-endian).
  int i = static_cast<int>(upper.size()) - 1;
  while (i >= 0 && static_cast<uint8_t>(upper[i]) == 0xff) upper[i--] = 0;
  if (i >= 0) upper[i] = static_cast<char>(static_cast<uint8_t>(upper[i]) + 1);
  rocksdb::Slice ub(upper);
  if (i >= 0) ro.iterate_upper_bound = &ub;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  std::vector<uint64_t> out;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    if (it->key().size() != prefix.size() + 8) {
      return Status::Corruption(fmt::format("user {}: malformed follow edge key", user_id));
    }
    out.push_back(DecodeBigEndian64(it->key().data() + prefix.size()));
  }
  if (!it->status().ok()) return FromRocks(it->status(), fmt::format("listing followees of {}", user_id));
  return out;
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

Status StateStore::CatchUp() {
  if (!rep_->options.read_only) return Status::Ok();
  std::lock_guard<std::mutex> l(rep_->catch_up_mu);
  for (const auto& p : rep_->partitions) {
    TALLY_RETURN_IF_ERROR(FromRocks(p->rep_->db->TryCatchUpWithPrimary(),
                                    fmt::format("partition {}: catching up", p->id())));
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
