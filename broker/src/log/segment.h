// Segment: one file of a partition's log and its two sparse indexes, as
// Kafka lays them out in `<log-dir>/<topic>-<partition>/`:
//   <base>.log        record batches exactly as the producers framed them,
//                     base offsets assigned, back to back;
//   <base>.index      (relative offset uint32, file position uint32), one
//                     entry each time index_interval_bytes of batches have
//                     been appended since the last entry, pointing at the
//                     start of a batch (relative to the segment's base);
//   <base>.timeindex  (max timestamp so far int64, relative offset uint32),
//                     an entry when an offset-index entry is added and the
//                     timestamp grew, plus a last one when the segment closes.
// <base> is the 20-digit base offset; integers are big-endian. The active
// (last) segment keeps its indexes in memory only and rebuilds them from its
// data at open; a segment writes its index files when it is closed (roll),
// through a temporary file and rename, so an index file on disk is whole or
// absent. A missing index of a closed segment is rebuilt from its data.
//
// Finding a position is a binary search of the in-memory index and a scan of
// at most index_interval_bytes plus one batch, whatever the segment's length.
//
// Thread model: externally synchronized (the partition's owning thread);
// log_file() may be handed to the flusher thread, which only fdatasyncs it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "log/file_util.h"
#include "log/record_batch.h"

namespace tally::broker {

// How much work finding and reading a position took: tests assert that it
// stays bounded as the log grows.
struct ReadStats {
  int64_t index_probes = 0;     // index entries compared in binary searches
  int64_t headers_scanned = 0;  // batch headers read to walk from an index entry
  int64_t bytes_read = 0;       // bytes read from the segment file
};

// An .index entry: the batch at `position` has base offset base + relative.
struct OffsetIndexEntry {
  uint32_t relative_offset;
  uint32_t position;
};

// A .timeindex entry: every batch before offset base + relative has
// timestamps <= `timestamp`.
struct TimeIndexEntry {
  int64_t timestamp;
  uint32_t relative_offset;
};

// What recovery of an active segment found.
struct SegmentRecovery {
  int64_t valid_bytes = 0;      // bytes of whole, valid batches kept
  int64_t truncated_bytes = 0;  // bytes dropped after them
  std::string reason;           // why the first dropped batch was refused; "" if none
};

class Segment {
 public:
  struct Options {
    FileOps* ops = DefaultFileOps();  // borrowed; outlives the segment
    int64_t index_interval_bytes = 4096;
  };

  // Creates an empty segment at `<dir>/<base>.log` (or at `log_path` if not
  // empty, for a segment being rewritten). kIOError if it cannot be created.
  static base::Result<std::unique_ptr<Segment>> Create(const std::filesystem::path& dir,
                                                       int64_t base_offset, const Options& options,
                                                       const std::filesystem::path& log_path = {});

  // Opens a closed (not last) segment without reading all of it: loads and
  // checks its index files (rebuilding a missing one from the data), checks
  // its first batch and walks from the last index entry to the end, checking
  // the last batch's CRC. Any damage (a size that is not whole batches, an
  // index pointing outside the file, offsets out of order) is kCorruption
  // naming the file.
  static base::Result<std::unique_ptr<Segment>> OpenClosed(const std::filesystem::path& dir,
                                                           int64_t base_offset,
                                                           const Options& options);

  // Opens the active (last) segment: checks every batch (size, order of
  // offsets, CRC), truncates the file at the first torn or bad one, rebuilds
  // the indexes in memory and fdatasyncs what it kept. *recovery says what
  // was dropped. kIOError if the file cannot be read or truncated.
  static base::Result<std::unique_ptr<Segment>> OpenActive(const std::filesystem::path& dir,
                                                           int64_t base_offset,
                                                           const Options& options,
                                                           SegmentRecovery* recovery);

  // Appends whole batches, back to back in `bytes`, with one write; their
  // base offsets are already set and `headers` are their parsed headers, in
  // order. On a write failure the file is left as it was and the result is
  // kIOError. Precondition: headers[0].base_offset >= next_offset().
  base::Status Append(std::span<const uint8_t> bytes, std::span<const BatchHeader> headers);

  // Writes <base>.index and <base>.timeindex from memory (temporary file,
  // fdatasync, rename), adding the final time-index entry first. Called when
  // the segment stops being the active one.
  base::Status WriteIndexFiles();

  // Finds the first batch whose last offset is >= `offset`: its position and
  // header, or nullopt if every batch of this segment ends before `offset`.
  base::Result<std::optional<std::pair<int64_t, BatchHeader>>> FindBatch(int64_t offset,
                                                                         ReadStats* stats) const;

  // Returns whole batches starting at the one holding `offset`: at least that
  // batch (even if larger than max_bytes), then more while the total stays
  // within `max_bytes` and their base offset is below `max_offset`. Empty if
  // no batch of this segment at or after `offset` starts below `max_offset`.
  base::Result<std::string> Read(int64_t offset, int64_t max_bytes, int64_t max_offset,
                                 ReadStats* stats) const;

  // The first offset in [min_offset, max_offset) whose record timestamp is
  // >= `timestamp`, with that timestamp; nullopt if none. For a compressed
  // batch the answer is the batch's base offset and max timestamp.
  base::Result<std::optional<std::pair<int64_t, int64_t>>> FindOffsetByTimestamp(
      int64_t timestamp, int64_t min_offset, int64_t max_offset) const;

  // Calls fn(position, header, bytes) for every batch in order; stops at the
  // first non-OK status fn returns and returns it.
  template <typename Fn>
  base::Status ForEachBatch(Fn&& fn) const;

  // Reads the batch at `position` with header `header` whole.
  base::Status ReadBatch(int64_t position, const BatchHeader& header, std::string* out) const;

  // Removes the segment's files. The object must not be used afterwards,
  // except for destruction.
  base::Status RemoveFiles();

  // Renames the log file to the canonical <base>.log (after a rewrite).
  base::Status RenameToCanonical();

  int64_t base_offset() const { return base_offset_; }
  // One past the last offset of the last batch; base_offset() when empty.
  int64_t next_offset() const { return next_offset_; }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Largest batch max timestamp; -1 if empty.
  int64_t max_timestamp() const { return max_timestamp_; }
  // Steady time of the first append (or of the open) for segment.ms.
  int64_t created_ms() const { return created_ms_; }
  void set_created_ms(int64_t ms) { created_ms_ = ms; }
  const std::shared_ptr<File>& log_file() const { return log_; }
  const std::filesystem::path& log_path() const { return log_path_; }
  std::filesystem::path IndexPath() const;
  std::filesystem::path TimeIndexPath() const;
  size_t index_entries() const { return index_.size(); }

 private:
  Segment(std::filesystem::path dir, int64_t base_offset, const Options& options)
      : dir_(std::move(dir)), base_offset_(base_offset), options_(options) {}

  // Updates sizes, offsets, timestamps and the in-memory indexes for a batch
  // appended (or found at recovery) at `position`.
  void Track(int64_t position, const BatchHeader& header);
  // Position to start scanning from for `offset` (index binary search).
  int64_t LookupPosition(int64_t offset, ReadStats* stats) const;
  base::Status ReadHeaderAt(int64_t position, BatchHeader* header) const;
  base::Status LoadIndexFiles(bool* rebuilt);
  base::Status RebuildIndexesByScan();

  std::filesystem::path dir_;
  std::filesystem::path log_path_;
  int64_t base_offset_;
  Options options_;
  std::shared_ptr<File> log_;
  int64_t size_ = 0;
  int64_t next_offset_ = 0;
  int64_t max_timestamp_ = -1;
  uint32_t max_timestamp_rel_ = 0;
  int64_t bytes_since_index_ = 0;
  int64_t created_ms_ = 0;
  std::vector<OffsetIndexEntry> index_;
  std::vector<TimeIndexEntry> time_index_;
};

template <typename Fn>
base::Status Segment::ForEachBatch(Fn&& fn) const {
  int64_t pos = 0;
  std::string buf;
  while (pos < size_) {
    BatchHeader h;
    TALLY_RETURN_IF_ERROR(ReadHeaderAt(pos, &h));
    TALLY_RETURN_IF_ERROR(ReadBatch(pos, h, &buf));
    TALLY_RETURN_IF_ERROR(
        fn(pos, h,
           std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf.data()), buf.size())));
    pos += h.size();
  }
  return base::Status::Ok();
}

}  // namespace tally::broker
