// Opening a state directory: its TALLY file (format, partition count,
// cluster) and HELD file (the partitions its writer holds), the RocksDB
// options every partition shares, and the partitions, opened concurrently.
#include <fmt/core.h>
#include <fmt/format.h>
#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/sst_file_manager.h>
#include <rocksdb/table.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/log.h"
#include "counter_cache.h"
#include "counter_merge.h"
#include "fault_file_system.h"
#include "info_log.h"
#include "keys.h"
#include "sorted_runs_rep.h"
#include "state_store_impl.h"
#include "store/state_store.h"
#include "write_health.h"

namespace tally::store {

namespace fs = std::filesystem;
using base::Result;
using base::Status;

namespace {

// 2: a post's counters in a page of posts (keys.h). A writer opens a state
// of format 1 (a record a post) and converts its partitions as it opens
// them; a read-only store asks for that first.
constexpr int kFormatVersion = 2;
constexpr int kOldestFormat = 1;
constexpr const char* kMetaFile = "TALLY";
// Partitions opened at once by StateStore::Open.
constexpr uint32_t kOpenThreads = 8;

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
  Decision FilterV2(int, const rocksdb::Slice& key, ValueType type, const rocksdb::Slice& value,
                    std::string*, std::string*) const override {
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
    if (kind != static_cast<char>(RecordKind::kNoticeRead) &&
        kind != static_cast<char>(RecordKind::kUserRedDot)) {
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

// Writes <dir>/<name> atomically: a reader sees the old file or the new one.
Status WriteJsonFile(const std::string& dir, const char* name, const nlohmann::json& j) {
  std::string tmp = dir + "/" + name + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(2) << "\n";
    f.flush();
    if (!f) return Status::IOError(fmt::format("writing {}", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, dir + "/" + name, ec);
  if (ec) return Status::IOError(fmt::format("renaming {}: {}", tmp, ec.message()));
  return Status::Ok();
}

Status WriteMetaFile(const std::string& dir, uint32_t partitions, const std::string& cluster) {
  return WriteJsonFile(
      dir, kMetaFile,
      {{"format", kFormatVersion}, {"partitions", partitions}, {"cluster", cluster}});
}

// True when `dir` holds nothing but partition-NNN directories: empty, or a
// state whose creation stopped before its TALLY file was written (its
// partitions hold nothing yet, as no writer got the store before TALLY;
// HELD may be there, written just before TALLY).
bool HoldsOnlyPartitionDirs(const std::string& dir, const std::vector<std::string>& side_files) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (std::find(side_files.begin(), side_files.end(), name) != side_files.end()) continue;
    if (name == kHeldFile || name == std::string(kHeldFile) + ".tmp") continue;
    if (!it->is_directory(ec) || name.size() < 13 || name.rfind("partition-", 0) != 0 ||
        name.find_first_not_of("0123456789", 10) != std::string::npos) {
      return false;
    }
  }
  return !ec;
}

Status ReadMetaFile(const std::string& dir, uint32_t* partitions, std::string* cluster,
                    int* format = nullptr) {
  std::string path = dir + "/" + kMetaFile;
  std::ifstream f(path);
  if (!f) return Status::NotFound(fmt::format("{} does not exist", path));
  try {
    nlohmann::json j = nlohmann::json::parse(f);
    if (!j.is_object() || !j.contains("format") || !j.contains("partitions")) {
      return Status::Corruption(fmt::format("{}: not a tally state file", path));
    }
    const int recorded = j["format"].is_number_integer() ? j["format"].get<int>() : 0;
    if (recorded < kOldestFormat || recorded > kFormatVersion) {
      return Status::Corruption(fmt::format("{}: unsupported format {}", path, j["format"].dump()));
    }
    if (format != nullptr) *format = recorded;
    *partitions = j["partitions"].get<uint32_t>();
    *cluster = j.value("cluster", "");
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format("{}: {}", path, e.what()));
  }
  return Status::Ok();
}

}  // namespace

Status WriteHeldFile(const std::string& dir, const std::vector<uint32_t>& held) {
  return WriteJsonFile(dir, kHeldFile, {{"held", held}});
}

Result<std::optional<std::vector<uint32_t>>> ReadHeldFile(const std::string& dir,
                                                          uint32_t partitions) {
  std::string path = dir + "/" + kHeldFile;
  std::ifstream f(path);
  if (!f) return std::optional<std::vector<uint32_t>>();
  std::vector<uint32_t> held;
  try {
    nlohmann::json j = nlohmann::json::parse(f);
    if (!j.is_object() || !j.contains("held") || !j["held"].is_array()) {
      return Status::Corruption(fmt::format("{}: not a list of held partitions", path));
    }
    held = j["held"].get<std::vector<uint32_t>>();
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format("{}: {}", path, e.what()));
  }
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  if (!held.empty() && held.back() >= partitions) {
    return Status::Corruption(fmt::format("{}: partition {} of {}", path, held.back(), partitions));
  }
  return std::optional<std::vector<uint32_t>>(std::move(held));
}

Result<std::string> StateStore::PeekRecordedCluster(const std::string& dir) {
  uint32_t partitions = 0;
  std::string cluster;
  TALLY_RETURN_IF_ERROR(ReadMetaFile(dir, &partitions, &cluster));
  return cluster;
}

Result<std::vector<uint32_t>> StateStore::PeekHeldPartitions(const std::string& dir) {
  uint32_t partitions = 0;
  std::string cluster;
  Status meta = ReadMetaFile(dir, &partitions, &cluster);
  if (meta.code() == base::StatusCode::kNotFound) return std::vector<uint32_t>{};
  TALLY_RETURN_IF_ERROR(meta);
  auto held = ReadHeldFile(dir, partitions);
  if (!held.ok()) return held.status();
  std::vector<uint32_t> out;
  if (held->has_value()) {
    out = std::move(**held);
  } else {
    for (uint32_t p = 0; p < partitions; p++) out.push_back(p);
  }
  // Opening these creates a missing one empty; here that is damage.
  for (uint32_t p : out) {
    std::error_code ec;
    const std::string path = (std::filesystem::path(dir) / PartitionDirName(p)).string();
    if (!std::filesystem::is_directory(path, ec)) {
      return Status::Corruption(fmt::format(
          "{} does not exist, but the state held partition {}: the state directory is damaged",
          path, p));
    }
  }
  return out;
}

Result<std::unique_ptr<StateStore>> StateStore::Open(const StoreOptions& options) {
  if (options.partitions > 4096) {
    return Status::InvalidArgument(
        fmt::format("partition count {} out of range 1..4096", options.partitions));
  }
  auto rep = std::make_unique<Rep>();
  rep->options = options;
  std::error_code ec;
  const std::string& dir = options.dir;
  uint32_t recorded_partitions = 0;
  // A new state: its partitions are created, then TALLY is written.
  bool create_meta = false;
  int format = kFormatVersion;
  Status meta = ReadMetaFile(dir, &recorded_partitions, &rep->cluster, &format);
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
  } else if (format < kFormatVersion) {
    if (options.read_only) {
      return Status::FailedPrecondition(fmt::format(
          "{} is a state of format {}, which this tally reads once it has converted it: "
          "start `tally up` or `tally aggregate` on it first",
          dir, format));
    }
    // Recorded first: the tally that wrote the old format must not open a
    // state some of whose partitions are converted already.
    TALLY_LOG_INFO("store",
                   "{} is a state of format {}: its post counters go into pages as its "
                   "partitions open (format {})",
                   dir, format, kFormatVersion);
    TALLY_RETURN_IF_ERROR(WriteMetaFile(dir, recorded_partitions, rep->cluster));
  }
  if (options.partitions == 0) {
    rep->options.partitions = recorded_partitions;  // "as recorded"
  } else if (recorded_partitions != options.partitions) {
    return Status::InvalidArgument(fmt::format(
        "{} was built with {} partitions, but tally.deltas has {}; use a fresh --state-dir", dir,
        recorded_partitions, options.partitions));
  }

  const uint32_t n = rep->options.partitions;
  // Which partitions to open.
  std::vector<bool> wanted(n, !options.open_partitions.has_value());
  if (options.open_partitions.has_value()) {
    for (uint32_t p : *options.open_partitions) {
      if (p >= n) {
        return Status::InvalidArgument(
            fmt::format("open_partitions names partition {}; {} has {}", p, dir, n));
      }
      wanted[p] = true;
    }
  }
  // Only a state created just now gets new databases: in an existing one, a
  // missing partition is damage to report, never an empty partition to
  // count from (that would serve wrong counts silently). Unless the caller
  // names the partitions: a cluster member opens those it now holds, and
  // one it never held starts empty and is replayed from the deltas' start.
  bool create_missing = !options.read_only && (create_meta || options.open_partitions.has_value());
  // Every partition opened, of a state that was a cluster member's (it has
  // HELD): the partitions it did not hold start empty and are applied from
  // the deltas' start, as a member's new ones are. One it held must be there.
  if (!options.read_only && !create_missing) {
    auto held = ReadHeldFile(dir, n);
    if (!held.ok()) return held.status();
    if (held->has_value() && (*held)->size() < n) {
      auto present = PeekHeldPartitions(dir);  // each held one has its directory
      if (!present.ok()) return present.status();
      std::vector<uint32_t> fresh;
      for (uint32_t p = 0; p < n; p++) {
        if (!std::binary_search((*held)->begin(), (*held)->end(), p)) fresh.push_back(p);
      }
      TALLY_LOG_INFO("store",
                     "{} was a cluster member's state, which held {} of {} partitions: {} {} {} "
                     "empty, to be applied from the start of tally.deltas",
                     dir, (*held)->size(), n, fresh.size() == 1 ? "partition" : "partitions",
                     fmt::join(fresh, ", "), fresh.size() == 1 ? "starts" : "start");
      create_missing = true;
    }
  }

  rocksdb::Options db_options;
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
  // The bottom level holds nearly all of a compacted state. A ZSTD
  // dictionary per file (16 KiB, trained on 1 MiB of its first 4 MiB)
  // saved another 0.5 B/post at 10M posts (10.2 against 10.7), but each
  // bottom-level compaction buffered and trained it in memory that the
  // allocator kept: the soak test's RSS rose ~12 MiB a minute with it.
  db_options.bottommost_compression = rocksdb::kZSTD;
  db_options.env = rocksdb::Env::Default();
  if (!options.fault_file.empty()) {
    rep->fault_env = rocksdb::NewCompositeEnv(
        std::make_shared<FaultFileSystem>(rocksdb::FileSystem::Default(), options.fault_file));
    db_options.env = rep->fault_env.get();
    TALLY_LOG_WARN("store",
                   "fault injection armed: every RocksDB write under {} fails while {} exists", dir,
                   options.fault_file);
  }
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options.block_cache_bytes);
  // Bloom, not Ribbon: a Ribbon filter is ~30 % smaller at the same ~1 %
  // false positives, but building one holds ~3x the memory, for a whole
  // output file at once (+200 MB in a compaction of 64 MB files).
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  // Larger blocks compress better (a block of 16 KiB holds ~800 counter
  // records); a point read that misses the block cache decompresses more.
  // No hash index in data blocks: it costs ~1.3 bytes a record, about a
  // tenth of a compacted state, to spare a binary search over a block's ~50
  // restart points, a cost within the benchmarks' noise.
  table.block_size = 16 << 10;
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.format_version = 5;
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  std::function<int64_t()> now = options.now_ms;
  if (!now) {
    now = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
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
    rep->secondary_dir = fmt::format("{}/tally-secondary-{}-{:x}",
                                     fs::temp_directory_path().string(), ::getpid(), rd());
    fs::create_directories(rep->secondary_dir, ec);
    if (ec)
      return Status::IOError(fmt::format("creating {}: {}", rep->secondary_dir, ec.message()));
  }

  rep->db_options = db_options;
  // Only the writer's process can keep a read cache exact: it sees every
  // commit. A secondary learns of them only as RocksDB files.
  if (!options.read_only && options.read_cache_bytes > 0) {
    rep->cache = std::make_unique<CounterCache>(options.read_cache_bytes);
  }
  if (!options.read_only) {
    rep->reserve = std::make_unique<DiskReserve>(dir, options.min_free_bytes, options.free_bytes);
  }
  // A Partition for every partition of the state, held or not: the objects
  // the applier and the readers use live as long as the store.
  for (uint32_t i = 0; i < n; i++) {
    auto prep = std::make_unique<Partition::Rep>();
    prep->handoff = DbHandoff::Make(fmt::format("partition {}", i));
    prep->read_only = options.read_only;
    prep->write_options.sync = options.sync_writes;
    prep->path = dir + "/" + PartitionDirName(i);
    prep->secondary_base = rep->secondary_dir + "/" + PartitionDirName(i);
    prep->cache = rep->cache.get();
    prep->partitions = n;
    if (!options.read_only) prep->health = std::make_shared<WriteHealth>(i);
    prep->reserve = rep->reserve.get();
    rep->partitions.push_back(std::unique_ptr<Partition>(new Partition(i, std::move(prep))));
  }
  rep->wanted = wanted;

  // A read-only store opens what its writer holds (HELD; every partition
  // without the file).
  std::optional<std::vector<uint32_t>> writer_held;
  if (options.read_only) {
    auto held = ReadHeldFile(dir, n);
    if (!held.ok()) return held.status();
    writer_held = std::move(held).value();
  }
  auto writer_holds = [](const std::optional<std::vector<uint32_t>>& held, uint32_t p) {
    return !held.has_value() || std::binary_search(held->begin(), held->end(), p);
  };
  std::vector<uint32_t> to_open;
  for (uint32_t i = 0; i < n; i++) {
    if (wanted[i] && writer_holds(writer_held, i)) to_open.push_back(i);
  }

  // Partitions open concurrently (OpenDbs). What that saves:
  // store/README.md.
  const size_t m = to_open.size();
  std::vector<Rep::Opened> opened = rep->OpenDbs(to_open, create_missing);
  Status failed;
  for (size_t k = 0; k < m && failed.ok(); k++) {
    if (opened[k].status.ok()) continue;
    // A writer may have closed (or dropped) it since HELD was read.
    if (writer_held.has_value()) {
      auto again = ReadHeldFile(dir, n);
      if (again.ok() && !writer_holds(*again, to_open[k])) continue;
    }
    failed = rep->OpenFailed(to_open[k], opened[k].status);
  }
  // Each database is owned by its partition from here (Publish), so a
  // failure closes the ones published (Rep's destructor).
  for (size_t k = 0; k < m; k++) {
    if (opened[k].db == nullptr) continue;
    if (!failed.ok()) {
      delete opened[k].db;
      continue;
    }
    failed = rep->Publish(to_open[k], opened[k].db, std::move(opened[k].options),
                          std::move(opened[k].current));
  }
  if (!failed.ok()) return failed;
  // HELD before TALLY: a follower that sees TALLY knows what to open.
  if (!options.read_only) {
    std::lock_guard<std::mutex> l(rep->control_mu);
    rep->RecordHeld();
  }
  if (create_meta) TALLY_RETURN_IF_ERROR(WriteMetaFile(dir, options.partitions, ""));
  const size_t held = rep->Held().size();
  TALLY_LOG_INFO("store", "opened {} ({} partitions{}{}{})", dir, n,
                 held == n ? "" : fmt::format(", {} held", held),
                 options.read_only ? ", read-only" : "",
                 rep->cluster.empty() ? "" : ", built from cluster " + rep->cluster);
  if (rep->reserve != nullptr) {
    if (Status full = rep->reserve->Check(); !full.ok()) {
      TALLY_LOG_WARN("store", "{}: reads are served, applying waits", full.message());
    }
  }
  std::unique_ptr<StateStore> store(new StateStore(std::move(rep)));
  if (options.read_only) {
    StateStore* s = store.get();
    s->rep_->follower = std::thread([s] { s->FollowWriter(); });
  }
  return store;
}

rocksdb::Options StateStore::Rep::PartitionOptions(uint32_t i, bool create_if_missing) const {
  const uint32_t n = static_cast<uint32_t>(partitions.size());
  rocksdb::Options o = db_options;
  o.create_if_missing = create_if_missing;
  // Partitions fill at about the same rate: with equal memtables they would
  // all flush within a second or two, and that burst (a core busy building
  // tables, then level-0 compactions) is what a reader waiting for fresh
  // counts saw as its worst latency. Memtable sizes from 0.5x to 1.5x the
  // configured one (the same total) spread the flushes out.
  o.write_buffer_size =
      static_cast<size_t>(static_cast<double>(db_options.write_buffer_size) *
                          (0.5 + (static_cast<double>(i) + 0.5) / static_cast<double>(n)));
  // Writable partitions: RocksDB's info log written so that a full disk
  // drops lines instead of aborting (info_log.h); RocksDB's recovery from a
  // full disk driven by an SstFileManager of their own (each polls the free
  // space and resumes its database; one shared by all would resume them one
  // at a time, 5 s apart), with the reserve as compaction headroom; and a
  // listener that tells WriteProblem() why writes stopped.
  if (!options.read_only) {
    auto log = std::make_shared<InfoLog>(options.dir + "/" + PartitionDirName(i) + "/LOG", 4 << 20);
    std::shared_ptr<rocksdb::SstFileManager> files(rocksdb::NewSstFileManager(db_options.env, log));
    // RocksDB's own recovery from a full disk waits for the same room
    // before it writes again (see DiskReserve::kRoomAfterFull).
    files->SetCompactionBufferSize(std::max(options.min_free_bytes, DiskReserve::kRoomAfterFull));
    o.info_log = std::move(log);
    o.sst_file_manager = std::move(files);
    o.listeners.push_back(partitions[i]->rep_->health);
  }
  return o;
}

rocksdb::Status StateStore::Rep::OpenDb(uint32_t i, bool create_if_missing, rocksdb::DB** db,
                                        rocksdb::Options* o, std::string* current) {
  Partition::Rep& r = *partitions[i]->rep_;
  *o = PartitionOptions(i, create_if_missing);
  if (options.read_only) {
    *current = ReadCurrentFile(r.path);
    return rocksdb::DB::OpenAsSecondary(*o, r.path,
                                        fmt::format("{}.{}", r.secondary_base, r.generation), db);
  }
  return rocksdb::DB::Open(*o, r.path, db);
}

std::vector<StateStore::Rep::Opened> StateStore::Rep::OpenDbs(const std::vector<uint32_t>& ps,
                                                              bool create_if_missing) {
  const size_t m = ps.size();
  std::vector<Opened> out(m);
  std::atomic<size_t> next{0};
  auto open_some = [&] {
    for (size_t k; (k = next.fetch_add(1)) < m;) {
      out[k].status =
          OpenDb(ps[k], create_if_missing, &out[k].db, &out[k].options, &out[k].current);
    }
  };
  std::vector<std::thread> openers;
  for (size_t t = 1; t < std::min<size_t>(m, kOpenThreads); t++) openers.emplace_back(open_some);
  open_some();
  for (auto& t : openers) t.join();
  return out;
}

Status StateStore::Rep::OpenFailed(uint32_t i, const rocksdb::Status& s) const {
  // Opening writes (a MANIFEST, an OPTIONS file, a WAL): on a full disk
  // say that first, and what to do.
  if (reserve != nullptr) {
    if (Status full = reserve->Check(); !full.ok() || s.IsNoSpace()) {
      return Status::ResourceExhausted(
          fmt::format("cannot open {}/{}: {}; free space on that disk and start again", options.dir,
                      PartitionDirName(i), full.ok() ? s.ToString() : full.message()));
    }
  }
  return FromRocks(s, fmt::format("opening {}/{}", options.dir, PartitionDirName(i)));
}

Status StateStore::RecordCluster(const std::string& identity) {
  if (rep_->options.read_only) return Status::FailedPrecondition("store is read-only");
  TALLY_RETURN_IF_ERROR(WriteMetaFile(rep_->options.dir, partitions(), identity));
  rep_->cluster = identity;
  return Status::Ok();
}

}  // namespace tally::store
