// The private state of StateStore, Partition and PartitionBatch, shared by
// the files that implement them:
//
//   state_store_open.cc  the TALLY file, RocksDB's options, opening the partitions
//   state_store_partitions.cc  the partitions held: opening and closing one at
//                        run time, the HELD file, the not-held status
//   format1.cc           converting a partition of a format 1 state on open
//   partition_batch.cc   PartitionBatch: one window's changes as one WriteBatch
//   partition.cc         Partition: Commit (the read cache and the notice ids
//                        follow it), Resume, a partition's point reads
//   state_store_read.cc  StateStore's reads: counters through the read cache and
//                        MultiGet, the unread view
//   state_store.cc       the rest of StateStore: catch-up with a writer and
//                        the thread that runs it, compaction, progress,
//                        write health
//
// Thread model: as state_store.h says of each class; the fields that
// threads share say what guards them.
#pragma once

#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "counter_cache.h"
#include "db_handoff.h"
#include "schemas/delta.h"
#include "store/state_store.h"
#include "write_health.h"

namespace tally::store {

// The one conversion from rocksdb::Status.
base::Status FromRocks(const rocksdb::Status& s, std::string_view context);

// The directory of partition i under the state directory: "partition-NNN".
std::string PartitionDirName(uint32_t i);

// The name of the writer's current manifest: it changes whenever the writer
// opens the database (and when a manifest rolls over). "" if there is none
// (no database there).
std::string ReadCurrentFile(const std::string& db_path);

// NotHeldError of one partition.
base::Status NotHeld(uint32_t partition);
// Sorts missing->partitions (dropping repeats) and missing->positions.
void Normalize(MissingPartitions* missing);

// <state-dir>/HELD: the partitions a writer holds, for its followers. Written
// (atomically, by rename) by a writable store when it opens and whenever
// the set changes; nullopt when there is no such file (a state written
// before it existed: every partition is held). Corruption if it does not
// parse or names a partition >= `partitions`.
inline constexpr const char* kHeldFile = "HELD";
base::Status WriteHeldFile(const std::string& dir, const std::vector<uint32_t>& held);
base::Result<std::optional<std::vector<uint32_t>>> ReadHeldFile(const std::string& dir,
                                                                uint32_t partitions);

struct PartitionBatch::Rep {
  rocksdb::WriteBatch wb;
  std::string key, value;
  // Post counter ops, merged into `wb` by Commit (EncodePosts), one
  // operand a page: the page of a post depends on the partition count,
  // which the partition knows and the batch does not.
  struct PostOps {
    uint64_t id;
    CounterOp ops[schemas::kPostFieldCount];
  };
  std::vector<PostOps> posts;
  void EncodePosts(int page_bits);
  // The counter records merged, dropped from the read cache on commit.
  std::vector<std::pair<char, uint64_t>> counters;
  bool red_dots = false;  // a global red dot changed
  bool drop_cached = false;  // DropAllButGlobal: every cached record of the partition goes
  // The notice ids put, added to the partition's index on commit, and
  // whether the notice count record is in `wb` already (a retried commit
  // must not add it twice).
  std::vector<uint64_t> notices;
  bool notice_count_put = false;
};

struct Partition::Rep {
  // Null while the partition is not held. Swapped whole when a read-only
  // store reopens after its writer restarted; readers hold what they loaded
  // until they are done with it. Made by `handoff`, which closes it when it
  // goes (db_handoff.h).
  std::atomic<std::shared_ptr<rocksdb::DB>> db;
  std::shared_ptr<DbHandoff> handoff;
  // HoldsPartition(): set after `db` is published, cleared before it is
  // taken away. Reads do not look at it; they find `db` (and notice_ids)
  // null.
  std::atomic<bool> held{false};
  // Held by whatever replaces or removes `db` other than a read-only
  // store's catch-up: StateStore's OpenPartition/ClosePartition (control
  // thread) and Resume (applier thread), which also guards `options`.
  std::mutex control_mu;
  rocksdb::WriteOptions write_options;
  bool read_only = false;
  // Read-only stores: where the writer's database is, the secondary's own
  // directory, and the writer's CURRENT (its manifest) when last opened.
  std::string path;
  std::string secondary_base;
  std::string current;
  int generation = 0;
  // Writable stores: how to reopen after an unrecoverable write error
  // (guarded by control_mu), and whether the writable instance is closed
  // (a read-only one serves reads).
  rocksdb::Options options;
  std::atomic<bool> primary_closed{false};
  // The store's read cache (borrowed; null when there is none).
  CounterCache* cache = nullptr;
  uint32_t partitions = 0;  // of the state (which ids are this partition's)
  // The ids of the partition's notices, ascending (only the partition of
  // kGlobalEntity has any), so that "how many above x" is a binary search
  // in memory. Read from `db` when it is opened or replaced; a commit that
  // adds notices publishes a new vector after its write and before it
  // returns. Never changed in place: readers keep what they loaded. Null
  // while the partition is not held (set before `db` is published, cleared
  // after the database closed).
  std::atomic<std::shared_ptr<const NoticeIds>> notice_ids;
  // Read-only stores: the notice count record when the ids were last read
  // (empty: none), so that CatchUp reads them again only after a commit
  // that added notices.
  std::string notice_count_seen;

  // Reads the notice ids (and the count record) from `db` into notice_ids.
  base::Status LoadNoticeIds(rocksdb::DB* db, uint32_t id);
  // With a cache: Commit() holds it across its write and the cache drop that
  // follows, LoadProgress() shared, so progress that says a window is
  // applied is never read while the cache may still serve a value from
  // before it (lag 0 and ?wait=visible promise the next read sees it).
  mutable std::shared_mutex commit_mu;
  // Writable stores: why writes fail (also in options.listeners; one for
  // the partition's life, reset when it opens or closes), and the store's
  // free-space reserve (borrowed).
  std::shared_ptr<WriteHealth> health;
  const DiskReserve* reserve = nullptr;
};

struct StateStore::Rep {
  // Closes the partitions before what they use (the compaction filter, the
  // fault env, the cache, the disk reserve), also when Open() fails midway.
  ~Rep() { partitions.clear(); }

  StoreOptions options;
  std::string cluster;
  // One for every partition of the state, held or not.
  std::vector<std::unique_ptr<Partition>> partitions;
  // Read-only stores: the partitions to follow (options.open_partitions).
  std::vector<bool> wanted;
  // OpenPartition/ClosePartition/DropPartition/ResetProgress one at a time,
  // and with them the HELD file.
  std::mutex control_mu;
  std::string secondary_dir;
  // Serializes CatchUp(): the follower thread below and other callers (the
  // query tier's watermarks) catch up one at a time.
  std::mutex catch_up_mu;
  std::unique_ptr<rocksdb::CompactionFilter> purge;  // the partitions' compaction filter
  rocksdb::Options db_options;                       // kept to reopen read-only partitions
  std::unique_ptr<rocksdb::Env> fault_env;  // StoreOptions::fault_file; outlives the partitions
  std::unique_ptr<CounterCache> cache;   // StoreOptions::read_cache_bytes; outlives the partitions
  std::unique_ptr<DiskReserve> reserve;  // writable stores; outlives the partitions

  // Read-only stores: the thread that calls CatchUp() every
  // options.catch_up_interval_ms (FollowWriter), stopped and joined before
  // the partitions close.
  std::mutex follow_mu;
  std::condition_variable follow_cv;
  bool stopping = false;  // guarded by follow_mu
  std::thread follower;

  // The partition of kGlobalEntity: the notice list and the red dots.
  uint32_t GlobalId() const {
    return schemas::PartitionOf(schemas::kGlobalEntity, static_cast<uint32_t>(partitions.size()));
  }
  Partition::Rep& GlobalPartition() const { return *partitions[GlobalId()]->rep_; }
  // The database of the partition that owns `entity`, held for the caller;
  // null if the partition is not held.
  std::shared_ptr<rocksdb::DB> DbOf(uint64_t entity) const {
    return partitions[schemas::PartitionOf(entity, static_cast<uint32_t>(partitions.size()))]
        ->rep_->db.load();
  }

  // The RocksDB options of partition i (db_options with the partition's
  // memtable size; for writable stores its info log, SstFileManager and
  // WriteHealth listener).
  rocksdb::Options PartitionOptions(uint32_t i, bool create_if_missing) const;
  // Opens partition i's database (writable: DB::Open; read-only: a new
  // secondary instance, *current set to the writer's manifest). The caller
  // owns *db; *options what it was opened with.
  rocksdb::Status OpenDb(uint32_t i, bool create_if_missing, rocksdb::DB** db,
                         rocksdb::Options* options, std::string* current);
  // OpenDb of each of `ps` on up to 8 threads (an open is mostly waiting:
  // creating a database syncs its MANIFEST, CURRENT, OPTIONS and
  // directory; reopening one replays its WAL). Each result at its index.
  struct Opened {
    rocksdb::DB* db = nullptr;
    rocksdb::Status status;
    rocksdb::Options options;
    std::string current;
  };
  std::vector<Opened> OpenDbs(const std::vector<uint32_t>& ps, bool create_if_missing);
  // The status of a failed OpenDb of partition i, said as Open() says it
  // (a full disk first).
  base::Status OpenFailed(uint32_t i, const rocksdb::Status& s) const;
  // Makes `db` (opened by OpenDb, owned from here on) partition i's: reads
  // its notice ids, then publishes it to readers. Requires the partition's
  // control_mu (writable) or catch_up_mu (read-only), and that it is not held.
  base::Status Publish(uint32_t i, rocksdb::DB* db, rocksdb::Options options, std::string current);
  // Takes partition i's database away from readers, waits for those that
  // hold it, and closes it on this thread; drops what the store kept of it
  // (notice ids, cached records, write health). Requires what Publish does.
  void Unpublish(uint32_t i);
  // The partitions held, ascending.
  std::vector<uint32_t> Held() const;
  // Writable stores: records Held() in HELD for followers (a failure is
  // logged: followers then lag until the next write). Requires control_mu.
  void RecordHeld();
};

}  // namespace tally::store
