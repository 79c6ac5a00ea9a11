// PartitionLog: the log of one topic partition on disk, in
// `<log-dir>/<topic>-<partition>/`: a sequence of segments (segment.h), a
// `log-start-offset` checkpoint and `<offset>.snapshot` files of the
// idempotent-producer state (producer_state.h).
//
// Offsets: the log start offset (first readable), the log end offset (LEO:
// one past the last written record) and the high watermark (HW: one past the
// last record known durable). Batches are written to the OS with pwrite(2)
// at Append; the flusher thread calls Flush(), which fdatasyncs the files
// written since the last flush (and the directory after a segment roll) and
// only then moves the HW to the LEO it saw before syncing. Consumers read
// below the HW only; a produce request with acks != 0 is acknowledged once
// the HW passes its last offset. With log_flush_ms == 0 the HW follows the
// LEO at once (nothing is fdatasynced at append; a segment roll still syncs
// the closing segment).
//
// Open recovers: every batch of the last segment is checked and the file is
// truncated at the first torn or bad batch (a WARN line names the file,
// partition and offset); older segments are checked cheaply (segment.h) and
// any damage in them refuses to open, naming the file.
//
// Thread model: Open, Append, Read, ListOffsets, DeleteRecordsBefore,
// EnforceRetention, Compact and Close on the partition's owning thread
// (externally synchronized); Flush on one flusher thread, concurrently with
// them (it never holds a lock across fdatasync); high_watermark(),
// log_end_offset(), log_start_offset() and size_bytes() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "log/file_util.h"
#include "log/producer_state.h"
#include "log/segment.h"
#include "log/topic_config.h"

namespace tally::broker {

// How a PartitionLog behaves; LogManager fills it from its options and the
// topic's config.
struct PartitionLogOptions {
  TopicConfig config;
  int64_t index_interval_bytes = 4096;
  // 0: the HW follows the LEO at append (no group commit).
  int64_t log_flush_ms = 2;
  // Every write, truncate and fdatasync of log data goes through it; borrowed,
  // must outlive the log.
  FileOps* ops = DefaultFileOps();
  // Called after data or a directory entry was written that a flush has not
  // yet covered (LogManager wakes its flusher); quick, any thread; may be
  // empty.
  std::function<void()> on_dirty;
};

// The outcome of Append for a request that was not refused by a Status.
struct AppendResult {
  // kAppend: written at [base_offset, last_offset]. kDuplicate: written
  // earlier at [base_offset, last_offset], nothing written now (acknowledge
  // as success once the HW passes last_offset). kOutOfOrderSequence and
  // kInvalidEpoch: nothing written, offsets -1.
  ProducerVerdict verdict = ProducerVerdict::kAppend;
  int64_t base_offset = -1;
  int64_t last_offset = -1;
};

// A ListOffsets answer; {-1, -1} when no record matches.
struct OffsetAndTimestamp {
  int64_t offset = -1;
  int64_t timestamp = -1;
};

// ListOffsets' special timestamps, as Kafka's protocol defines them.
inline constexpr int64_t kListOffsetsLatest = -1;
inline constexpr int64_t kListOffsetsEarliest = -2;

class PartitionLog {
 public:
  // Opens (creating if needed) the partition directory `dir` and recovers it
  // (see above). `now_ms` is wall-clock time (segment.ms starts from it for
  // the active segment). kCorruption naming a file for damage outside the
  // active segment's tail; kIOError if the disk refuses.
  static base::Result<std::unique_ptr<PartitionLog>> Open(const std::filesystem::path& dir,
                                                          std::string topic, int32_t partition,
                                                          const PartitionLogOptions& options,
                                                          int64_t now_ms);
  ~PartitionLog();
  PartitionLog(const PartitionLog&) = delete;
  PartitionLog& operator=(const PartitionLog&) = delete;

  // Appends a produce request's record set for this partition: validates
  // every batch (SplitBatches), checks idempotent producers, rolls the
  // segment if needed, assigns offsets from the LEO by rewriting each batch's
  // base offset in `records` (hence mutable) and writes everything with one
  // pwrite. Errors, nothing written: kCorruption (CORRUPT_MESSAGE),
  // kResourceExhausted (MESSAGE_TOO_LARGE: a batch over max.message.bytes),
  // kIOError (KAFKA_STORAGE_ERROR: the write failed, the file is as it was,
  // the next Append tries again; or an earlier fdatasync failed). The
  // producer verdicts are in AppendResult. `now_ms`: wall-clock time.
  base::Result<AppendResult> Append(std::span<uint8_t> records, int64_t now_ms);

  // Whole batches starting at the one that holds `offset`, at least one
  // batch (even over max_bytes), then more while the total stays within
  // `max_bytes`, all below `max_offset` (pass high_watermark() for
  // consumers), from one segment. Empty if `offset` >= max_offset.
  // kOutOfRange (OFFSET_OUT_OF_RANGE) if `offset` is below the log start
  // offset or above the LEO. `stats`, if not null, receives the work done.
  base::Result<std::string> Read(int64_t offset, int64_t max_bytes, int64_t max_offset,
                                 ReadStats* stats = nullptr) const;

  // ListOffsets: kListOffsetsEarliest -> the log start offset,
  // kListOffsetsLatest -> the HW, else the first offset below the HW whose
  // timestamp is >= `timestamp`, with its timestamp ({-1, -1} if none).
  base::Result<OffsetAndTimestamp> ListOffsets(int64_t timestamp) const;

  // DeleteRecords: moves the log start offset to `offset` (-1: the HW),
  // persisted in the checkpoint file, and deletes the segments wholly
  // below it. Returns the new log start offset. kOutOfRange if `offset` is
  // above the HW or below -1.
  base::Result<int64_t> DeleteRecordsBefore(int64_t offset);

  // Retention for cleanup.policy=delete: deletes the oldest closed segments
  // whose largest timestamp is more than retention.ms before `now_ms`, then
  // while the partition stays over retention.bytes without them; never the
  // active segment. Returns how many segments were deleted.
  base::Result<int> EnforceRetention(int64_t now_ms);

  // Compaction for cleanup.policy=compact: rewrites each closed segment that
  // holds a record whose key appears again later in the closed segments,
  // keeping only the latest record per key (tombstones and null keys kept,
  // offsets unchanged; compressed and control batches kept whole). The new
  // file replaces the old one by rename. Does nothing if no segment closed
  // since the last pass. Returns how many records were removed.
  base::Result<int64_t> Compact();

  // Flusher thread: fdatasyncs what was written since the last call, then
  // moves the HW to the LEO seen at the start. A failed fdatasync keeps the
  // HW where it was, returns kIOError and makes every later Append and Flush
  // fail (the data's fate is unknown until a restart recovers the log).
  base::Status Flush();
  // True when a Flush() now would sync something: written since the last.
  bool flush_pending();

  // Flushes, writes the producer snapshot at the LEO and closes the files.
  // The log must not be used afterwards.
  base::Status Close();

  // Replaces the topic config (retention, segment size...), e.g. after
  // AlterConfigs.
  void SetConfig(const TopicConfig& config) { options_.config = config; }
  const TopicConfig& config() const { return options_.config; }

  int64_t high_watermark() const { return high_watermark_.load(std::memory_order_acquire); }
  int64_t log_end_offset() const { return log_end_offset_.load(std::memory_order_acquire); }
  int64_t log_start_offset() const { return log_start_offset_.load(std::memory_order_acquire); }
  // True once an fdatasync failed: appends fail until a restart.
  bool storage_failed() const { return sync_failed_.load(); }
  // Bytes of all segment files.
  int64_t size_bytes() const { return size_bytes_.load(std::memory_order_relaxed); }
  size_t segment_count() const { return segments_.size(); }
  // Base offset of the active (last) segment.
  int64_t active_segment_base() const { return segments_.rbegin()->first; }
  const std::string& topic() const { return topic_; }
  int32_t partition() const { return partition_; }
  const std::filesystem::path& dir() const { return dir_; }
  const ProducerStateTable& producer_state() const { return producers_; }

 private:
  PartitionLog(std::filesystem::path dir, std::string topic, int32_t partition,
               const PartitionLogOptions& options);

  base::Status Recover(int64_t now_ms);
  base::Status RebuildProducerState();
  base::Status Roll(int64_t now_ms);
  base::Status DeleteOldestSegment();
  base::Status WriteLogStartCheckpoint();
  base::Status WriteProducerSnapshot();
  // Records that `file` holds data up to offset `end` not yet fdatasynced.
  void MarkWritten(const std::shared_ptr<File>& file, int64_t end);
  // Records that the directory's entries changed (created, renamed, removed).
  void MarkDirDirty();
  void UpdateSizes();
  std::string Name() const;
  Segment& active() { return *segments_.rbegin()->second; }

  const std::filesystem::path dir_;
  const std::string topic_;
  const int32_t partition_;
  PartitionLogOptions options_;
  std::map<int64_t, std::unique_ptr<Segment>> segments_;  // by base offset
  ProducerStateTable producers_;
  int64_t compacted_before_ = -1;  // active base offset at the last Compact

  std::atomic<int64_t> log_start_offset_{0};
  std::atomic<int64_t> log_end_offset_{0};
  std::atomic<int64_t> high_watermark_{0};
  std::atomic<int64_t> size_bytes_{0};
  std::atomic<bool> sync_failed_{false};

  // Serializes Flush calls (the flusher's and one at Close or from a test)
  // so that none moves the HW past files another is still syncing. Only
  // flushers take it; it is held across fdatasync.
  std::mutex flush_serial_mu_;
  // Shared with the flusher thread; never held across a system call.
  std::mutex flush_mu_;
  std::vector<std::shared_ptr<File>> dirty_files_;  // guarded by flush_mu_
  bool dir_dirty_ = false;                          // guarded by flush_mu_
  int64_t written_end_ = 0;                         // guarded by flush_mu_
};

}  // namespace tally::broker
