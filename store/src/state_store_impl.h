// The private state of StateStore, Partition and PartitionBatch, shared by
// the files that implement them:
//
//   state_store_open.cc  the TALLY file, RocksDB's options, opening the partitions
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
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "counter_cache.h"
#include "schemas/delta.h"
#include "store/state_store.h"
#include "write_health.h"

namespace tally::store {

// The one conversion from rocksdb::Status.
base::Status FromRocks(const rocksdb::Status& s, std::string_view context);

// The directory of partition i under the state directory: "partition-NNN".
std::string PartitionDirName(uint32_t i);

// The name of the writer's current manifest: it changes whenever the writer
// opens the database (and when a manifest rolls over).
std::string ReadCurrentFile(const std::string& db_path);

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
  base::Status LoadNoticeIds(rocksdb::DB* db, uint32_t id);
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

struct StateStore::Rep {
  // Closes the partitions before what they use (the compaction filter, the
  // fault env, the cache, the disk reserve), also when Open() fails midway.
  ~Rep() { partitions.clear(); }

  StoreOptions options;
  std::string cluster;
  std::vector<std::unique_ptr<Partition>> partitions;
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
  Partition::Rep& GlobalPartition() const {
    return *partitions[schemas::PartitionOf(schemas::kGlobalEntity,
                                            static_cast<uint32_t>(partitions.size()))]
                ->rep_;
  }
  // The database of the partition that owns `entity`, held for the caller.
  std::shared_ptr<rocksdb::DB> DbOf(uint64_t entity) const {
    return partitions[schemas::PartitionOf(entity, static_cast<uint32_t>(partitions.size()))]
        ->rep_->db.load();
  }
};

}  // namespace tally::store
