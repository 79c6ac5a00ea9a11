// OffsetStore: the durable committed offsets of every consumer group, kept
// in `<log-dir>/__consumer_offsets/offsets.log` (format in offset_record.h)
// and in memory as the latest value per (group, topic, partition).
//
// Writes are appended at once (one write(2) per commit request) and become
// durable at the next Flush() (fdatasync), which the server's flusher thread
// calls: a group commit. Each Append returns a sequence number; the commit
// it carries is durable once DurableSequence() reaches it, and only then
// may it be acknowledged. With Options::sync false (`--log-flush-ms 0`) an
// append is durable as soon as it is written to the OS.
//
// At open the file is read whole: a record torn at the end (a crash in the
// middle of an append) is dropped and the file truncated, with a WARN; a bad
// record anywhere else refuses to open, naming the file and byte offset.
// When the file grows past Options::compact_ratio times its live size (and
// Options::compact_min_bytes), Append rewrites it with the latest record per
// key into a temporary file, fsyncs it and renames it over the old one.
//
// Thread model: externally synchronized (the server's network thread), except
// Flush() and DurableSequence(), which may run on another thread concurrently
// with everything else; Flush() holds no lock across fdatasync.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "group/offset_record.h"

namespace tally::broker {

struct OffsetStoreOptions {
  // fdatasync in Flush() before a write counts as durable. False: durable
  // once written to the OS (a killed process loses nothing, a power loss may).
  bool sync = true;
  // Compact when the file exceeds both compact_min_bytes and compact_ratio
  // times the size of its live records.
  uint64_t compact_min_bytes = 4 << 20;
  uint64_t compact_ratio = 4;
};

// A committed offset as OffsetFetch answers it.
struct CommittedOffset {
  int64_t offset = -1;
  int32_t leader_epoch = -1;
  std::string metadata;
  int64_t commit_timestamp_ms = 0;
};

class OffsetStore {
 public:
  // (topic, partition) -> committed offset, for one group.
  using GroupOffsets = std::map<std::pair<std::string, int32_t>, CommittedOffset>;

  // Opens (creating it and its directory if needed) the store under
  // `log_dir`/__consumer_offsets. Errors: kIOError if the file cannot be
  // created, read or repaired; kCorruption (naming the file and byte
  // offset) if a record before the last one is damaged or the magic is
  // wrong. Everything read is durable: DurableSequence() starts at 0 and
  // so does the sequence of appends.
  static base::Result<std::unique_ptr<OffsetStore>> Open(const std::filesystem::path& log_dir,
                                                         const OffsetStoreOptions& options = {});

  ~OffsetStore();
  OffsetStore(const OffsetStore&) = delete;
  OffsetStore& operator=(const OffsetStore&) = delete;

  // Appends `records` with one write and applies them to the in-memory
  // view (visible to Get at once, durable later). Returns the sequence
  // number that DurableSequence() must reach for them to be durable.
  // kIOError if the write failed (nothing applied; a partial write is cut
  // back) or if an earlier Flush failed (the store then refuses writes:
  // after a failed fdatasync the kernel's copy is in doubt).
  // May compact the file (logged on failure, never an error of the append).
  base::Result<uint64_t> Append(std::span<const OffsetRecord> records);

  // Makes every append completed before the call durable (fdatasync), then
  // publishes its sequence through DurableSequence(). kIOError if fdatasync
  // failed; the store then refuses appends. Any thread; concurrent with
  // the other methods, not with itself.
  base::Status Flush();

  // The highest sequence known durable. Any thread.
  uint64_t DurableSequence() const { return durable_seq_.load(std::memory_order_acquire); }
  // The sequence of the last append.
  uint64_t WrittenSequence() const { return written_seq_.load(std::memory_order_acquire); }
  // True once a Flush has failed: pending commits will never be durable.
  bool Failed() const { return failed_.load(std::memory_order_acquire); }

  // The committed offset of (group, topic, partition), or null. The pointer
  // is valid until the next Append.
  const CommittedOffset* Get(const std::string& group, const std::string& topic,
                             int32_t partition) const;
  // Every committed offset of `group`, or null if it has none. Valid until
  // the next Append.
  const GroupOffsets* ForGroup(const std::string& group) const;
  // Every group with at least one committed offset.
  const std::map<std::string, GroupOffsets>& groups() const { return groups_; }

  const std::filesystem::path& file_path() const { return path_; }
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t live_bytes() const { return live_bytes_; }

  // Rewrites the file with only the latest record per key now. Normally
  // done by Append; public for the server's shutdown and for tests.
  base::Status Compact();

 private:
  struct File;  // an open descriptor, closed when the last user lets go

  OffsetStore(std::filesystem::path dir, OffsetStoreOptions options);
  base::Status Load();
  void Apply(const OffsetRecord& record);

  const std::filesystem::path dir_;
  const std::filesystem::path path_;
  const OffsetStoreOptions options_;

  std::map<std::string, GroupOffsets> groups_;
  uint64_t file_bytes_ = 0;
  uint64_t live_bytes_ = 0;  // framed size of the latest record per key
  uint64_t next_seq_ = 0;

  // Guards file_ against the swap done by Compact while Flush reads it.
  std::mutex file_mu_;
  std::shared_ptr<File> file_;
  std::atomic<uint64_t> written_seq_{0};
  std::atomic<uint64_t> durable_seq_{0};
  std::atomic<bool> failed_{false};
};

}  // namespace tally::broker
