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
// A store need not hold every partition: a cluster member holds those it
// owns or stands by for (StoreOptions::open_partitions, then
// OpenPartition/ClosePartition/DropPartition while it serves). A read or a
// write of a partition not held answers NotHeldError (IsNotHeld); reads that
// span partitions can instead fill what is held and list what is not
// (MissingPartitions, UnreadGaps), so the caller can ask the owners.
//
// Writers: only the applier thread that owns a partition (Commit).
// Readers: any thread, concurrently (the HTTP tier). The partitions held
// change on one control thread, concurrently with both. A store opened with
// read_only follows a running writer in another process (RocksDB secondary
// instance) and sees its writes, and which partitions it holds, after
// CatchUp(), which a thread of the store's own (tally-follow) calls every
// catch_up_interval_ms while it is open.
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
  // Which partitions Open() opens. nullopt (the default): every one, and in
  // an existing state each must exist (a missing one is damage). A list
  // (ids below the partition count, possibly none): those, a writable store
  // creating the ones missing (a member that newly holds a partition starts
  // it empty and replays its deltas), a read_only one opening those its
  // writer holds (and following the writer's opens and closes among them).
  // The TALLY file records the full partition count either way.
  std::optional<std::vector<uint32_t>> open_partitions;
};

// A read or write of a partition this store does not hold (never opened,
// closed or dropped): Unavailable, its message naming the partitions
// ("partition 5 is not held here", "partitions 3, 5 are not held here").
// The query tier maps it to 503 partition_moving, or asks the owners.
base::Status NotHeldError(std::span<const uint32_t> partitions);
// True if `st` is a NotHeldError (context may have been added in front).
bool IsNotHeld(const base::Status& st);
// The partitions a NotHeldError names, ascending; empty for any other status.
std::vector<uint32_t> NotHeldPartitions(const base::Status& st);

// What a read spanning partitions could not read here because this store
// does not hold them: the partitions, ascending, and for a batch the
// positions (in the ids given) of the ids not read, ascending: those the
// partitions own (while a partition closes, some of its ids may still be
// answered, from the read cache; they are not listed). Empty when
// everything was read.
struct MissingPartitions {
  std::vector<uint32_t> partitions;
  std::vector<size_t> positions;
  bool empty() const { return partitions.empty(); }
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

// What GetUnread could not count here because a partition it needs is not
// held. The notice count and the red dots need the partition of
// kGlobalEntity (every member of a cluster holds it, so this is a moment of
// a move); they are then 0 and empty in the view. The feed needs the
// partitions of the followees: the view's feed then sums only the followees
// read, and `feed_followees` lists the others with their post counts in the
// snapshot, so the caller can read their counts from their owners and add
// max(0, posts now - posts then) for each (the feed is that sum).
struct UnreadGaps {
  bool notice = false;
  bool red_dots = false;
  std::vector<std::pair<uint64_t, uint64_t>> feed_followees;  // ascending id
  std::vector<uint32_t> partitions;                           // missing, ascending
  bool empty() const { return partitions.empty(); }
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
  // Deletes every record but those of kGlobalEntity (the notice list and
  // the global red dots) and the event ids (which decide copies of global
  // events too), the "viewed" tables included; committed, the partition's
  // entries leave the read cache. For a cluster member that keeps only
  // the global entity of the partition of kGlobalEntity
  // (aggregator/README.md, "The global entity in a cluster").
  void DropAllButGlobal();
  // Deletes every event id record (PutEventId).
  void DropEventIds();
  // Records whether the partition holds only its global entity's records
  // (what DropAllButGlobal leaves, plus what a global-only applier adds).
  void SetGlobalOnly(bool global_only);

  size_t Count() const;
  void Clear();

 private:
  friend class Partition;
  friend class StateStore;  // ResetProgress of a partition not held
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

// One partition's RocksDB. Owned by StateStore, which has one for every
// partition of the state whether it holds it or not: the object lives as
// long as the store, its database comes and goes (StateStore::
// OpenPartition). While the partition is not held its reads, Commit,
// Resume and LoadProgress answer NotHeldError (HasNotice: false;
// WriteProblem: "").
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
  // lookup, no I/O; false if the partition is not held. Safe for concurrent
  // use.
  bool HasNotice(uint64_t notice_id) const;
  // The "viewed" table metadata of this partition (empty tables if none).
  base::Result<ViewedTables> LoadViewedTables(const ViewedOptions& options) const;

  // The progress last committed (zero Progress for a new partition).
  base::Result<Progress> LoadProgress() const;
  // Whether the partition holds only its global entity's records, as the
  // last SetGlobalOnly committed said (false for a new partition).
  base::Result<bool> LoadGlobalOnly() const;

  // Writes `batch` atomically (state and progress together); the read
  // cache and the notice ids follow it before it returns. On error nothing
  // of the batch is visible: NotHeldError if the partition is not held (a
  // ClosePartition racing the commit waits for it instead),
  // ResourceExhausted (writing nothing) while the disk has less than
  // StoreOptions::min_free_bytes free, or RocksDB's error. Only the owning
  // applier thread calls it.
  base::Status Commit(PartitionBatch* batch);

  // After a failed Commit(): RocksDB may have stopped accepting writes (its
  // background error state). A full disk (NoSpace, SpaceLimit) RocksDB
  // recovers from by itself once space is freed (its SstFileManager polls
  // the free space, then resumes the database): this only asks, and
  // answers Unavailable meanwhile. For an error RocksDB will not resume
  // from (an I/O error on a WAL write: a failing disk) it closes the
  // database and opens it again (readers use a read-only instance in
  // between). OK once it accepts writes again; the error while the cause
  // persists. Reads work throughout. NotHeldError if the partition is not
  // held. Applier thread only.
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
  // Opens (creating if allowed and missing) the partitions under
  // options.dir that options.open_partitions names (every one by default);
  // a read_only store starts its catch-up thread. InvalidArgument if the
  // directory was made with another partition count or open_partitions
  // names one beyond it; Corruption if its TALLY file or a database is
  // damaged; IOError if the directory cannot be used. The caller owns the
  // store.
  static base::Result<std::unique_ptr<StateStore>> Open(const StoreOptions& options);
  // Stops (and joins) the catch-up thread, then closes every partition.
  ~StateStore();

  // The partition count of the state (TALLY), held here or not.
  uint32_t partitions() const;
  const std::string& dir() const;
  const StoreOptions& options() const;
  // Borrowed; valid while the store lives, held or not. Precondition:
  // i < partitions().
  Partition* partition(uint32_t i);

  // The partitions held change at run time (a cluster member takes a
  // partition over, stands by for it, gives it away). These three run on
  // one control thread (calls are serialized), concurrently with reads on
  // any thread and with commits of the partitions that stay held; each
  // answers InvalidArgument for p >= partitions(), and FailedPrecondition
  // on a read_only store, which holds what its writer holds (CatchUp).
  // Writers record the set held in <state-dir>/HELD for their followers.
  //
  // Opens partition p, creating its database if it has none, with the
  // options of Open(), and loads its notice ids: once it returns, reads and
  // commits of p are served. OK if p is held already. ResourceExhausted
  // while the disk is below the reserve; RocksDB's error if it cannot open.
  base::Status OpenPartition(uint32_t p);
  // OpenPartition() of each of `ps`, several at once (an open mostly waits
  // for syncs), recording HELD once: a member taking many partitions at
  // once opens them in the time of a few. The first error, with the
  // partitions that did open held.
  base::Status OpenPartitions(const std::vector<uint32_t>& ps);
  // Stops serving p: reads and commits that start after this began answer
  // NotHeldError; those in flight finish first (this waits for them), then
  // the database is closed on this thread, so when it returns its files are
  // released and OpenPartition(p) may open it again. Its data stays on
  // disk. OK if p is not held.
  base::Status ClosePartition(uint32_t p);
  // ClosePartition(p), then deletes p's directory: a later OpenPartition(p)
  // starts empty. OK if p was not held or had no directory.
  base::Status DropPartition(uint32_t p);
  // Whether p is held (false for p >= partitions()). Safe for concurrent use;
  // an answer may be stale by the time the caller acts on it (a read then
  // answers NotHeldError).
  bool HoldsPartition(uint32_t p) const;
  // The partitions held, ascending. Safe for concurrent use.
  std::vector<uint32_t> HeldPartitions() const;

  // The cluster identity recorded in TALLY ("" if none yet).
  std::string recorded_cluster() const;
  // The cluster identity recorded in `dir`'s TALLY file without opening the
  // state: "" if none is recorded yet; NotFound if there is no TALLY file;
  // Corruption if it cannot be read.
  static base::Result<std::string> PeekRecordedCluster(const std::string& dir);
  // What the last writer of `dir` held, ascending, without opening the
  // state: HELD, or every partition of an older state without the file,
  // or none when there is no state (no TALLY file). Corruption if TALLY or
  // HELD cannot be read, or a partition they name has no directory. A cluster member opens these at
  // start, so a damaged copy stops it there as it stops a single process.
  static base::Result<std::vector<uint32_t>> PeekHeldPartitions(const std::string& dir);
  // Records `identity` in TALLY (atomically, by rename). Not for read_only.
  base::Status RecordCluster(const std::string& identity);

  // Reads, safe for concurrent use. Unknown ids read as zeros. A read of a
  // partition not held answers NotHeldError naming every partition it
  // needed and did not find.
  // Fills `out` (resized to ids.size()) in the order of `ids`, with one
  // batched MultiGet per partition touched. With `missing`: the ids of
  // partitions not held read as zeros and are listed there (their
  // partitions and positions), and the call answers OK.
  base::Status GetPostCounts(std::span<const uint64_t> ids, std::vector<PostCounts>* out,
                             MissingPartitions* missing = nullptr) const;
  base::Result<UserCounts> GetUserCounts(uint64_t user_id) const;
  base::Result<UnreadCounters> GetUnreadCounters(uint64_t user_id) const;
  base::Result<bool> IsLiked(uint64_t post_id, uint64_t user_id) const;
  // The user's followees in ascending id order.
  base::Result<std::vector<uint64_t>> GetFollowees(uint64_t user_id) const;
  // Everything of `GET /v1/users/{id}/unread`: the user's partition, the
  // partition of kGlobalEntity and the followees' partitions. With `gaps`,
  // only the user's partition must be held: what needs the others is left
  // out of the view and said in *gaps (cleared first).
  base::Result<UnreadView> GetUnread(uint64_t user_id, UnreadGaps* gaps = nullptr) const;
  // Its notice part: how many notices of the list have an id above the
  // user's last-read id, in whatever order they arrived (0 without a
  // last-read id). A binary search in memory beside one point read. Needs
  // the user's partition and that of kGlobalEntity.
  base::Result<int64_t> GetNoticeUnread(uint64_t user_id) const;
  // The user's snapshot (exists=false if the user never reset the feed).
  base::Result<FeedSnapshot> GetFeedSnapshot(uint64_t user_id) const;
  // The current post count of each of the user's followees, ascending id:
  // the snapshot a feed reset records. One MultiGet per partition. The
  // user's partition must be held; with `missing`, followees of partitions
  // not held read as 0 and are listed there (positions in the result).
  base::Result<std::vector<std::pair<uint64_t, uint64_t>>> CurrentFolloweePosts(
      uint64_t user_id, MissingPartitions* missing = nullptr) const;
  // The highest notice id in the list, 0 if there is none.
  base::Result<uint64_t> NewestNoticeId() const;
  // Membership filter: false only if (post, user) was never added to a
  // table that is still live; true may be wrong at about the configured rate.
  base::Result<bool> MaybeViewed(uint64_t post_id, uint64_t user_id) const;

  // Compacts every partition held fully (runs the purge of inactive users):
  // every table file there when it is called is rewritten into the last
  // level, merge operands folded.
  base::Status CompactAll();

  // Progress of every partition, indexed by partition; NotHeldError naming
  // those not held unless every one is.
  base::Result<std::vector<Progress>> LoadAllProgress() const;
  // Progress of the partitions held, by partition.
  base::Result<std::map<uint32_t, Progress>> LoadHeldProgress() const;

  // Why the store does not write now, in one line: its disk below the
  // reserve (StoreOptions::min_free_bytes), or a partition whose commits
  // fail; "" when it writes (and always for read_only stores). Safe for
  // concurrent use; one statvfs per call.
  std::string WriteProblem() const;

  // read_only stores: catch up with the writer's latest commits, the notice
  // ids included (read again when a commit added notices), and with the
  // partitions it holds (HELD; among options.open_partitions): opens those
  // it opened, closes those it closed or dropped (waiting for reads of
  // them, as ClosePartition does). A partition that fails does not stop the
  // others; the first failure is returned. No-op for writable stores.
  // The store's own thread calls it every catch_up_interval_ms; a caller
  // that must see the writer's latest (the watermarks) may call it too.
  // Safe for concurrent use: calls run one at a time.
  base::Status CatchUp();

  // Resets the progress (deltas offset 0, no marks) of every partition of
  // the state directory, keeping the counts: used when the state is
  // attached to a new log. Partitions not held but on disk are opened for
  // it briefly (not served meanwhile), so run it where OpenPartition would
  // run. Not for read_only.
  base::Status ResetProgress();

 private:
  // Every counter record read goes through here: the read cache, then one
  // MultiGet per partition for what it lacks. fill(i, values) for each of
  // `ids` (zeros for a record that does not exist) of a partition held; the
  // others NotHeldError, or, if `missing` is given, appended to it
  // (unsorted: callers Normalize).
  base::Status MultiGetCounters(char kind, int nfields, std::span<const uint64_t> ids,
                                const std::function<void(size_t, const int64_t*)>& fill,
                                MissingPartitions* missing = nullptr) const;
  // (user, post count) of each of `users`, in their order, through
  // MultiGetCounters (`missing` as there, cleared first and sorted).
  base::Result<std::vector<std::pair<uint64_t, uint64_t>>> PostCountsOf(
      std::vector<uint64_t> users, MissingPartitions* missing) const;
  // CatchUp() of one partition held: its writer's commits, or a fresh
  // secondary when the writer's manifest (`writer_current`) changed.
  base::Status CatchUpPartition(uint32_t p, const std::string& writer_current);
  // The catch-up thread of a read_only store: CatchUp() every
  // catch_up_interval_ms until the destructor stops it; failures are logged
  // (at most one line per 10 s).
  void FollowWriter();
  struct Rep;
  explicit StateStore(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace tally::store
