// PartitionLog's cleanup: DeleteRecords, retention and compaction. They run
// on the partition's owning thread, as Append does, and never touch the
// active segment.
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/log.h"
#include "log/compression.h"
#include "log/partition_log.h"

namespace tally::broker {

using base::Result;
using base::Status;

Status PartitionLog::DeleteOldestSegment() {
  auto it = segments_.begin();
  // The log file goes first: a crash between the unlinks leaves index files
  // without a log, which the next open removes.
  TALLY_RETURN_IF_ERROR(it->second->RemoveFiles().WithContext(fmt::format("partition {}", Name())));
  segments_.erase(it);
  MarkDirDirty();
  int64_t start = std::max(log_start_offset(), segments_.begin()->first);
  log_start_offset_.store(start, std::memory_order_release);
  UpdateSizes();
  return Status::Ok();
}

Result<int64_t> PartitionLog::DeleteRecordsBefore(int64_t offset) {
  int64_t hw = high_watermark();
  if (offset == -1) offset = hw;
  if (offset < 0 || offset > hw) {
    return Status::OutOfRange(fmt::format(
        "partition {}: cannot delete records before {}: high watermark is {}", Name(), offset, hw));
  }
  if (offset > log_start_offset()) {
    log_start_offset_.store(offset, std::memory_order_release);
    TALLY_RETURN_IF_ERROR(
        WriteLogStartCheckpoint().WithContext(fmt::format("partition {}", Name())));
  }
  while (segments_.size() > 1 && std::next(segments_.begin())->first <= log_start_offset()) {
    TALLY_RETURN_IF_ERROR(DeleteOldestSegment());
  }
  return log_start_offset();
}

Result<int> PartitionLog::EnforceRetention(int64_t now_ms) {
  int deleted = 0;
  const TopicConfig& config = options_.config;
  // Segments wholly below a log start offset moved by DeleteRecords.
  while (segments_.size() > 1 && std::next(segments_.begin())->first <= log_start_offset()) {
    TALLY_RETURN_IF_ERROR(DeleteOldestSegment());
    ++deleted;
  }
  if (!config.cleanup_delete) return deleted;
  if (config.retention_ms >= 0) {
    while (segments_.size() > 1 &&
           now_ms - segments_.begin()->second->max_timestamp() > config.retention_ms) {
      TALLY_RETURN_IF_ERROR(DeleteOldestSegment());
      ++deleted;
    }
  }
  if (config.retention_bytes >= 0) {
    int64_t excess = size_bytes() - config.retention_bytes;
    while (segments_.size() > 1 && excess >= segments_.begin()->second->size()) {
      excess -= segments_.begin()->second->size();
      TALLY_RETURN_IF_ERROR(DeleteOldestSegment());
      ++deleted;
    }
  }
  if (deleted > 0) {
    TALLY_LOG_INFO("log", "partition {}: retention deleted {} segment(s); log start offset {}",
                   Name(), deleted, log_start_offset());
  }
  return deleted;
}

namespace {

std::string KeyOf(const Record& r) {
  return std::string(reinterpret_cast<const char*>(r.key->data()), r.key->size());
}

// The records of a batch for compaction: nullopt when they cannot be read
// (a control batch, a codec not built in, data that does not decompress),
// and the batch is then kept whole. `storage` holds decompressed bytes the
// iterator borrows.
std::optional<RecordIterator> RecordsOf(const BatchHeader& h, std::span<const uint8_t> bytes,
                                        std::string* storage) {
  if (h.is_control()) return std::nullopt;
  if (h.compression() == Compression::kNone) return RecordIterator(bytes, h);
  Result<std::string> records = BatchRecordsUncompressed(h, bytes);
  if (!records.ok()) return std::nullopt;
  *storage = std::move(*records);
  return RecordIterator(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(storage->data()), storage->size()),
      h.record_count);
}

// Calls fn(record) for every record of the batch; false if they cannot be
// read (see RecordsOf). A malformed record inside a batch whose CRC holds is
// kept whole too: the cleaner never drops what it cannot read.
template <typename Fn>
bool ForEachRecord(const BatchHeader& h, std::span<const uint8_t> bytes, std::string* storage,
                   Fn&& fn) {
  std::optional<RecordIterator> it = RecordsOf(h, bytes, storage);
  if (!it) return false;
  Record r;
  while (true) {
    Result<bool> more = it->Next(&r);
    if (!more.ok()) return false;
    if (!*more) return true;
    fn(r);
  }
}

}  // namespace

Result<int64_t> PartitionLog::Compact() {
  if (!options_.config.cleanup_compact || segments_.size() < 2) return int64_t{0};
  int64_t active_base = segments_.rbegin()->first;
  if (active_base == compacted_before_) return int64_t{0};

  // Pass 1: the last offset of every key in the closed segments. A batch
  // whose records cannot be read is kept whole, and so is any older record
  // of a key it may hold.
  std::unordered_map<std::string, int64_t> latest;
  std::vector<int64_t> closed;
  std::string storage;
  for (const auto& [base, seg] : segments_) {
    if (base == active_base) break;
    closed.push_back(base);
    TALLY_RETURN_IF_ERROR(seg->ForEachBatch(
        [&](int64_t, const BatchHeader& h, std::span<const uint8_t> bytes) -> Status {
          ForEachRecord(h, bytes, &storage, [&](const Record& r) {
            if (r.key.has_value()) latest[KeyOf(r)] = h.base_offset + r.offset_delta;
          });
          return Status::Ok();
        }));
  }
  auto superseded = [&latest](const BatchHeader& h, const Record& r) {
    if (!r.key.has_value()) return false;
    auto it = latest.find(KeyOf(r));
    return it != latest.end() && it->second > h.base_offset + r.offset_delta;
  };

  // Pass 2: rewrite each segment that holds a superseded record.
  int64_t removed_total = 0;
  Segment::Options seg_options{options_.ops, options_.index_interval_bytes};
  for (int64_t base : closed) {
    Segment& old = *segments_[base];
    int64_t removable = 0;
    TALLY_RETURN_IF_ERROR(old.ForEachBatch(
        [&](int64_t, const BatchHeader& h, std::span<const uint8_t> bytes) -> Status {
          ForEachRecord(h, bytes, &storage, [&](const Record& r) {
            if (superseded(h, r)) ++removable;
          });
          return Status::Ok();
        }));
    if (removable == 0) continue;

    std::filesystem::path cleaned = old.log_path();
    cleaned += ".cleaned";
    Result<std::unique_ptr<Segment>> fresh = Segment::Create(dir_, base, seg_options, cleaned);
    if (!fresh.ok()) return fresh.status().WithContext(fmt::format("partition {}", Name()));
    Segment& seg = **fresh;
    TALLY_RETURN_IF_ERROR(old.ForEachBatch([&](int64_t, const BatchHeader& h,
                                               std::span<const uint8_t> bytes) -> Status {
      std::string kept;
      int32_t kept_count = 0;
      bool readable = ForEachRecord(h, bytes, &storage, [&](const Record& r) {
        if (superseded(h, r)) return;
        kept.append(reinterpret_cast<const char*>(r.raw.data()), r.raw.size());
        ++kept_count;
      });
      if (!readable || kept_count == h.record_count) {
        return seg.Append(bytes, std::span<const BatchHeader>(&h, 1));
      }
      if (kept_count == 0) return Status::Ok();
      // Same base offset, lastOffsetDelta, timestamps and producer
      // fields: offsets keep their meaning, only the records shrink. The
      // survivors of a compressed batch are written uncompressed.
      BatchHeader nh = h;
      nh.record_count = kept_count;
      nh.attributes = static_cast<int16_t>(h.attributes & ~int16_t{7});
      std::string batch = batch_encoding::BuildBatch(nh, kept);
      nh.batch_length = static_cast<int32_t>(batch.size() - kBatchLogOverhead);
      return seg.Append(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(batch.data()), batch.size()),
          std::span<const BatchHeader>(&nh, 1));
    }));
    // The swap: the new log is durable under its temporary name; the old
    // indexes go (a missing index is rebuilt at open), then one rename
    // replaces the log, then the new indexes are written whole.
    if (options_.ops->Fdatasync(seg.log_file()->fd()) != 0) {
      return Status::IOError(fmt::format("partition {}: fdatasync {}: {}", Name(), cleaned.string(),
                                         std::strerror(errno)));
    }
    for (const auto& path : {old.IndexPath(), old.TimeIndexPath()}) {
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return Status::IOError(fmt::format("unlink {}: {}", path.string(), std::strerror(errno)));
      }
    }
    TALLY_RETURN_IF_ERROR(seg.RenameToCanonical());
    TALLY_RETURN_IF_ERROR(SyncDir(dir_));
    TALLY_RETURN_IF_ERROR(seg.WriteIndexFiles());
    TALLY_RETURN_IF_ERROR(SyncDir(dir_));
    segments_[base] = std::move(*fresh);
    removed_total += removable;
  }
  compacted_before_ = active_base;
  UpdateSizes();
  if (removed_total > 0) {
    TALLY_LOG_INFO("log", "partition {}: compaction removed {} superseded record(s)", Name(),
                   removed_total);
  }
  return removed_total;
}

}  // namespace tally::broker
