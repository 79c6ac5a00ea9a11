// StateStore: tally's partitioned state in RocksDB.
//
// One RocksDB instance per tally.deltas partition, under
// <state-dir>/partition-NNN, so a partition can move between machines. Keys
// are "<kind byte><entity id big-endian>[<member id big-endian>]"; counter
// records are packed varints updated through a merge operator (see
// counter_op.h); the applier's progress (the next deltas offset and one mark
// per source stream) lives under reserved keys and is written in the same
// WriteBatch as the state it produced. <state-dir>/TALLY records the format,
// the partition count and the Kafka cluster the state was built from.
//
// Writers: only the applier thread that owns a partition (Commit).
// Readers: any thread, concurrently (the HTTP tier). A store opened with
// read_only follows a running writer in another process (RocksDB secondary
// instance) and sees its writes after CatchUp(), which a thread of the
// store's own (tally-follow) calls every catch_up_interval_ms while it is
// open.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "schemas/delta.h"
#include "schemas/event.h"
#include "store/counter_op.h"
#include "store/viewed_tables.h"

namespace tally::store {

struct StoreOptions {
  std::string dir = "./data";
  uint32_t partitions = 16;  // 0: as recorded in an existing state directory
  uint64_t block_cache_bytes = 256ull << 20;  // shared by all partitions
  uint64_t write_buffer_bytes = 8ull << 20;   // memtable size per partition
  // How a memtable keeps its entries: sorted runs (store/src/sorted_runs_rep.h,
  // made for the applier's sorted windows) or RocksDB's skip list.
  enum class Memtable { kSortedRuns, kSkipList };
  Memtable memtable = Memtable::kSortedRuns;
  // Decoded post, user and unread counters read recently, in front of
  // RocksDB (store/src/counter_cache.h); 0: none. Writable stores only.
  uint64_t read_cache_bytes = 0;
  bool read_only = false;                      // secondary instance (tally serve)
  // Read-only stores: a thread of the store's own calls CatchUp() this
  // often, from Open until the store is destroyed (never a request:
  // catching up reads the writer's manifest and WAL, which must not stall
  // an answer). > 0.
  int catch_up_interval_ms = 50;
  // Files others keep in the directory beside the state (the embedded
  // broker's record, app/broker_process.h): a new state may be created in a
  // directory that holds only these.
  std::vector<std::string> side_files;
  bool sync_writes = false;                    // fsync the WAL on every commit
  ViewedOptions viewed;                        // budget is per partition
  // Notice and red-dot records of users untouched (by event time) for
  // longer than this are dropped by compaction; <= 0 keeps them forever.
  int64_t inactive_days = 30;
  // How long an event id is remembered (SPEC section 1, --dedup-hours):
  // records of event ids whose event time is older than this (by the wall
  // clock) are dropped by compaction.
  int64_t dedup_hours = 24;
  // Clock of the purge, ms since the epoch; empty: the wall clock.
  std::function<int64_t()> now_ms;
  // Free space the state's disk must keep: while less is free no window is
  // written (Commit answers ResourceExhausted and writes nothing), so
  // tally's own writes never drive RocksDB into a full disk; RocksDB's
  // compactions keep it as headroom too. 0: no reserve.
  uint64_t min_free_bytes = 256ull << 20;
  // Tests: the free bytes of the state's disk; empty: statvfs(dir).
  std::function<uint64_t()> free_bytes;
  // Fault drills and tests only: when not empty, every RocksDB write (WAL,
  // SST, MANIFEST) fails with an IOError while this file exists, as on a full
  // disk (store/src/fault_file_system.h). Reads are untouched.
  std::string fault_file;
};

struct PostCounts {
  uint64_t post_id = 0;
  int64_t like = 0, repost = 0, comment = 0, view = 0;
};

struct UserCounts {
  uint64_t user_id = 0;
  int64_t posts = 0, followers = 0, following = 0;
};

// The six plain unread counters, indexed by schemas::UnreadKind.
struct UnreadCounters {
  int64_t counts[schemas::kUnreadCounterKinds] = {0, 0, 0, 0, 0, 0};
};

// A user's unread state as SPEC section 3 defines it.
struct UnreadView {
  UnreadCounters counters;
  int64_t notice = 0;
  int64_t feed = 0;
  std::vector<std::pair<std::string, bool>> red_dots;  // every channel with a global time, by name
};

// A user's feed snapshot: followee -> their post count at the last reset.
struct FeedSnapshot {
  bool exists = false;
  int64_t taken_ts = 0;
  std::vector<std::pair<uint64_t, uint64_t>> followees;  // ascending id
};

// The ids of a partition's notices, ascending.
using NoticeIds = std::vector<uint64_t>;

// The highest (offset, effect) applied from one source stream, and the event
// time of that delta.
struct SourceMark {
  int64_t offset = -1;
  uint32_t effect = 0;
  int64_t ts = 0;
  // True if (offset, effect) is at or below this mark: already applied.
  bool Covers(int64_t o, uint32_t e) const { return o < offset || (o == offset && e <= effect); }
};

// What a partition has applied. Persisted atomically with the state.
struct Progress {
  int64_t next_deltas_offset = 0;  // next tally.deltas offset of this partition to consume
  int64_t max_event_ts = 0;        // largest event time applied
  std::map<schemas::SourceStream, SourceMark> marks;
};

// The changes of one window to one partition, committed as one WriteBatch.
// Thread model: externally synchronized.
class PartitionBatch {
 public:
  PartitionBatch();
  ~PartitionBatch();
  PartitionBatch(const PartitionBatch&) = delete;
  PartitionBatch& operator=(const PartitionBatch&) = delete;

  // Counter merges; `ops` has kPostFieldCount / kUserFieldCount /
  // kUnreadCounterKinds entries, identity entries leave a field unchanged.
  void MergePostCounters(uint64_t post_id, const CounterOp* ops);
  void MergeUserCounters(uint64_t user_id, const CounterOp* ops);
  void MergeUnreadCounters(uint64_t user_id, const CounterOp* ops);
  void PutLike(uint64_t post_id, uint64_t user_id);
  void DeleteLike(uint64_t post_id, uint64_t user_id);
  void PutFollow(uint64_t user_id, uint64_t target_id);
  void DeleteFollow(uint64_t user_id, uint64_t target_id);
  // Records that the copy `copy` (a fingerprint of the record that carried
  // it) of the event with id hash `event_id`, of event time `ts`, was applied
  // in this partition.
  void PutEventId(uint64_t event_id, int64_t ts, uint64_t copy);
  // Adds notice `notice_id` to the partition's notice list (a set of ids;
  // putting an id again replaces its title).
  void PutNotice(uint64_t notice_id, std::string_view title);
  // The user's last-read notice id := notice_id; touched := max(touched, ts).
  void SetNoticeRead(uint64_t user_id, uint64_t notice_id, int64_t ts);
  // Global dot time of `channel` := max(itself, ts).
  void MaxRedDot(std::string_view channel, int64_t ts);
  // The user's click time on `channel` := max(itself, ts).
  void MaxUserRedDot(uint64_t user_id, std::string_view channel, int64_t ts);
  // Replaces the user's feed snapshot. `followees` need not be sorted.
  void PutFeedSnapshot(uint64_t user_id, int64_t taken_ts, const std::pair<uint64_t, uint64_t>* followees,
                       size_t n);
  // Sets bits of one chunk of a "viewed" table (OR, by merge).
  void SetViewBits(uint32_t table_id, uint32_t chunk, const std::vector<uint16_t>& bits);
  // Deletes every chunk of a dropped "viewed" table.
  void DropViewTable(uint32_t table_id);
  // Records the "viewed" table metadata of the partition.
  void PutViewedTables(const ViewedTables& tables);
  // Records the progress this batch reaches; call once per batch.
  void SetProgress(const Progress& progress);

  size_t Count() const;
  void Clear();

 private:
  friend class Partition;
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

// One partition's RocksDB. Owned by StateStore.
class Partition {
 public:
  ~Partition();
  uint32_t id() const { return id_; }

  // Point reads. Safe for concurrent use. IOError/Corruption on failure.
  base::Result<bool> HasLike(uint64_t post_id, uint64_t user_id) const;
  base::Result<bool> HasFollow(uint64_t user_id, uint64_t target_id) const;
  // The copy of event `event_id` this partition applied (PutEventId), if
  // it remembers one.
  struct EventIdRecord {
    int64_t ts = 0;
    uint64_t copy = 0;
  };
  base::Result<std::optional<EventIdRecord>> GetEventId(uint64_t event_id) const;

  // Whether notice `notice_id` is in the partition's notice list as
  // committed (only the partition of kGlobalEntity has one): an in-memory
  // lookup, no I/O. Safe for concurrent use.
  bool HasNotice(uint64_t notice_id) const;
  // The "viewed" table metadata of this partition (empty tables if none).
  base::Result<ViewedTables> LoadViewedTables(const ViewedOptions& options) const;

  // The progress last committed (zero Progress for a new partition).
  base::Result<Progress> LoadProgress() const;

  // Writes `batch` atomically (state and progress together); the read
  // cache and the notice ids follow it before it returns. On error nothing
  // of the batch is visible: ResourceExhausted (writing nothing) while the
  // disk has less than StoreOptions::min_free_bytes free, or RocksDB's
  // error. Only the owning applier thread calls it.
  base::Status Commit(PartitionBatch* batch);

  // After a failed Commit(): RocksDB may have stopped accepting writes (its
  // background error state). A full disk (NoSpace, SpaceLimit) RocksDB
  // recovers from by itself once space is freed (its SstFileManager polls
  // the free space, then resumes the database): this only asks, and
  // answers Unavailable meanwhile. For an error RocksDB will not resume
  // from (an I/O error on a WAL write: a failing disk) it closes the
  // database and opens it again (readers use a read-only instance in
  // between). OK once it accepts writes again; the error while the cause
  // persists. Reads work throughout. Applier thread only.
  base::Status Resume();

  // "" while the partition writes; else why its last commit failed or why
  // RocksDB stopped its writes. Safe for concurrent use.
  std::string WriteProblem() const;

 private:
  friend class StateStore;
  struct Rep;
  Partition(uint32_t id, std::unique_ptr<Rep> rep);
  uint32_t id_;
  std::unique_ptr<Rep> rep_;
};

// RocksDB keeps per-thread performance counters (every key comparison,
// block read, ...) unless a thread turns them off: its default PerfLevel is
// kEnableCount. tally reads none of them, and on the applier's memtable
// inserts they cost ~15% of the CPU. Each thread that reads or writes the
// state calls this once, when it starts.
void DisablePerfCounters();

class StateStore {
 public:
  // Opens (creating if allowed and missing) every partition under
  // options.dir; a read_only store starts its catch-up thread. InvalidArgument
  // if the directory was made with another partition count; Corruption if
  // its TALLY file or a database is damaged; IOError if the directory cannot
  // be used. The caller owns the store.
  static base::Result<std::unique_ptr<StateStore>> Open(const StoreOptions& options);
  // Stops (and joins) the catch-up thread, then closes every partition.
  ~StateStore();

  uint32_t partitions() const;
  const std::string& dir() const;
  const StoreOptions& options() const;
  // Borrowed; valid while the store lives. Precondition: i < partitions().
  Partition* partition(uint32_t i);

  // The cluster identity recorded in TALLY ("" if none yet).
  std::string recorded_cluster() const;
  // The cluster identity recorded in `dir`'s TALLY file without opening the
  // state: "" if none is recorded yet; NotFound if there is no TALLY file;
  // Corruption if it cannot be read.
  static base::Result<std::string> PeekRecordedCluster(const std::string& dir);
  // Records `identity` in TALLY (atomically, by rename). Not for read_only.
  base::Status RecordCluster(const std::string& identity);

  // Reads, safe for concurrent use. Unknown ids read as zeros.
  // Fills `out` (resized to ids.size()) in the order of `ids`, with one
  // batched MultiGet per partition touched.
  base::Status GetPostCounts(std::span<const uint64_t> ids, std::vector<PostCounts>* out) const;
  base::Result<UserCounts> GetUserCounts(uint64_t user_id) const;
  base::Result<UnreadCounters> GetUnreadCounters(uint64_t user_id) const;
  base::Result<bool> IsLiked(uint64_t post_id, uint64_t user_id) const;
  // The user's followees in ascending id order.
  base::Result<std::vector<uint64_t>> GetFollowees(uint64_t user_id) const;
  // Everything of `GET /v1/users/{id}/unread`.
  base::Result<UnreadView> GetUnread(uint64_t user_id) const;
  // Its notice part: how many notices of the list have an id above the
  // user's last-read id, in whatever order they arrived (0 without a
  // last-read id). A binary search in memory beside one point read.
  base::Result<int64_t> GetNoticeUnread(uint64_t user_id) const;
  // The user's snapshot (exists=false if the user never reset the feed).
  base::Result<FeedSnapshot> GetFeedSnapshot(uint64_t user_id) const;
  // The current post count of each of the user's followees, ascending id:
  // the snapshot a feed reset records. One MultiGet per partition.
  base::Result<std::vector<std::pair<uint64_t, uint64_t>>> CurrentFolloweePosts(uint64_t user_id) const;
  // The highest notice id in the list, 0 if there is none.
  base::Result<uint64_t> NewestNoticeId() const;
  // Membership filter: false only if (post, user) was never added to a
  // table that is still live; true may be wrong at about the configured rate.
  base::Result<bool> MaybeViewed(uint64_t post_id, uint64_t user_id) const;

  // Compacts every partition fully (runs the purge of inactive users).
  base::Status CompactAll();

  // Progress of every partition, indexed by partition.
  base::Result<std::vector<Progress>> LoadAllProgress() const;

  // Why the store does not write now, in one line: its disk below the
  // reserve (StoreOptions::min_free_bytes), or a partition whose commits
  // fail; "" when it writes (and always for read_only stores). Safe for
  // concurrent use; one statvfs per call.
  std::string WriteProblem() const;

  // read_only stores: catch up with the writer's latest commits, the notice
  // ids included (read again when a commit added notices). No-op otherwise.
  // The store's own thread calls it every catch_up_interval_ms; a caller
  // that must see the writer's latest (the watermarks) may call it too.
  // Safe for concurrent use: calls run one at a time.
  base::Status CatchUp();

  // Resets every partition's progress (deltas offset 0, no marks) keeping
  // the counts: used when the state is attached to a new log. Not for read_only.
  base::Status ResetProgress();

 private:
  // Every counter record read goes through here: the read cache, then one
  // MultiGet per partition for what it lacks. fill(i, values) for each of
  // `ids` (zeros for a record that does not exist).
  base::Status MultiGetCounters(char kind, int nfields, std::span<const uint64_t> ids,
                                const std::function<void(size_t, const int64_t*)>& fill) const;
  // The catch-up thread of a read_only store: CatchUp() every
  // catch_up_interval_ms until the destructor stops it; failures are logged
  // (at most one line per 10 s).
  void FollowWriter();
  struct Rep;
  explicit StateStore(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace tally::store
