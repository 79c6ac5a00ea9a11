#include "log/partition_log.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include "base/log.h"

namespace tally::broker {

using base::Result;
using base::Status;

namespace {

constexpr char kLogStartCheckpoint[] = "log-start-offset";
constexpr size_t kSnapshotsKept = 2;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The offsets of the producer snapshots in `dir`, newest first.
Result<std::vector<int64_t>> ListSnapshots(const std::filesystem::path& dir) {
  Result<std::vector<DirEntry>> entries = ListDir(dir);
  if (!entries.ok()) return entries.status();
  std::vector<int64_t> snapshots;
  for (const DirEntry& entry : *entries) {
    int64_t offset;
    if (ParseOffsetFileName(entry.name, ".snapshot", &offset)) snapshots.push_back(offset);
  }
  std::sort(snapshots.rbegin(), snapshots.rend());
  return snapshots;
}

}  // namespace

PartitionLog::PartitionLog(std::filesystem::path dir, std::string topic, int32_t partition,
                           const PartitionLogOptions& options)
    : dir_(std::move(dir)), topic_(std::move(topic)), partition_(partition), options_(options) {}

PartitionLog::~PartitionLog() = default;

std::string PartitionLog::Name() const { return fmt::format("{}-{}", topic_, partition_); }

Result<std::unique_ptr<PartitionLog>> PartitionLog::Open(const std::filesystem::path& dir,
                                                         std::string topic, int32_t partition,
                                                         const PartitionLogOptions& options,
                                                         int64_t now_ms) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError(fmt::format("create {}: {}", dir.string(), ec.message()));
  std::unique_ptr<PartitionLog> log(new PartitionLog(dir, std::move(topic), partition, options));
  TALLY_RETURN_IF_ERROR(log->Recover(now_ms));
  return log;
}

Status PartitionLog::Recover(int64_t now_ms) {
  std::vector<int64_t> bases;
  std::vector<std::pair<int64_t, std::filesystem::path>> indexes;
  std::error_code ec;
  Result<std::vector<DirEntry>> entries = ListDir(dir_);
  if (!entries.ok()) return entries.status();
  for (const DirEntry& entry : *entries) {
    const std::string& name = entry.name;
    int64_t offset;
    if (EndsWith(name, ".cleaned") || EndsWith(name, kTempSuffix)) {
      // An unfinished compaction or atomic write: the original is intact.
      std::filesystem::remove(dir_ / name, ec);
    } else if (ParseOffsetFileName(name, ".log", &offset)) {
      bases.push_back(offset);
    } else if (ParseOffsetFileName(name, ".index", &offset) ||
               ParseOffsetFileName(name, ".timeindex", &offset)) {
      indexes.emplace_back(offset, dir_ / name);
    }
  }
  std::sort(bases.begin(), bases.end());
  for (const auto& [offset, path] : indexes) {
    // Left by a segment deleted between its files' unlinks.
    if (!std::binary_search(bases.begin(), bases.end(), offset)) std::filesystem::remove(path, ec);
  }

  int64_t checkpoint = 0;
  std::string text;
  Status st = ReadWholeFile(dir_ / kLogStartCheckpoint, &text);
  if (st.ok()) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    auto [ptr, perr] = std::from_chars(text.data(), text.data() + text.size(), checkpoint);
    if (perr != std::errc() || ptr != text.data() + text.size() || checkpoint < 0) {
      return Status::Corruption(
          fmt::format("{}: not an offset: \"{}\"", (dir_ / kLogStartCheckpoint).string(), text));
    }
  } else if (st.code() != base::StatusCode::kNotFound) {
    return st;
  }

  Segment::Options seg_options{options_.ops, options_.index_interval_bytes};
  if (bases.empty()) {
    Result<std::unique_ptr<Segment>> seg = Segment::Create(dir_, checkpoint, seg_options);
    if (!seg.ok()) return seg.status();
    segments_[checkpoint] = std::move(*seg);
    MarkDirDirty();
  }
  SegmentRecovery recovery;
  for (size_t i = 0; i < bases.size(); ++i) {
    bool last = i + 1 == bases.size();
    Result<std::unique_ptr<Segment>> seg =
        last ? Segment::OpenActive(dir_, bases[i], seg_options, &recovery)
             : Segment::OpenClosed(dir_, bases[i], seg_options);
    if (!seg.ok()) return seg.status().WithContext(fmt::format("partition {}", Name()));
    if (!segments_.empty() && bases[i] < segments_.rbegin()->second->next_offset()) {
      return Status::Corruption(fmt::format(
          "partition {}: {}: base offset {} is below the end {} of the segment before it", Name(),
          (*seg)->log_path().string(), bases[i], segments_.rbegin()->second->next_offset()));
    }
    segments_[bases[i]] = std::move(*seg);
  }
  Segment& act = active();
  act.set_created_ms(now_ms);
  int64_t leo = act.next_offset();
  int64_t start = std::clamp(std::max(checkpoint, segments_.begin()->first), int64_t{0}, leo);
  log_start_offset_.store(start);
  log_end_offset_.store(leo);
  high_watermark_.store(leo);
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    written_end_ = leo;
  }
  UpdateSizes();
  TALLY_RETURN_IF_ERROR(RebuildProducerState());
  if (recovery.truncated_bytes > 0) {
    TALLY_LOG_WARN("log",
                   "partition {}: {}: dropped a torn or bad batch at byte {} (offset {}, {} bytes "
                   "to the end): {}",
                   Name(), act.log_path().string(), recovery.valid_bytes, leo,
                   recovery.truncated_bytes, recovery.reason);
  } else {
    TALLY_LOG_DEBUG("log", "partition {}: opened {} segment(s), offsets [{}, {})", Name(),
                    segments_.size(), start, leo);
  }
  return Status::Ok();
}

Status PartitionLog::RebuildProducerState() {
  Result<std::vector<int64_t>> listed = ListSnapshots(dir_);
  if (!listed.ok()) return listed.status();
  const std::vector<int64_t>& snapshots = *listed;
  std::error_code ec;
  producers_.Clear();
  int64_t leo = log_end_offset();
  int64_t from = segments_.begin()->first;
  for (int64_t offset : snapshots) {
    std::filesystem::path path = dir_ / OffsetFileName(offset, ".snapshot");
    if (offset > leo) {
      // Taken past what recovery kept: it may hold batches that are gone.
      std::filesystem::remove(path, ec);
      continue;
    }
    Status st = producers_.LoadSnapshot(path);
    if (st.ok()) {
      from = offset;
      break;
    }
    TALLY_LOG_WARN("log", "partition {}: ignoring {}", Name(), st.ToString());
    producers_.Clear();
  }
  auto it = segments_.upper_bound(from);
  if (it != segments_.begin()) --it;
  for (; it != segments_.end(); ++it) {
    if (it->second->next_offset() <= from) continue;
    TALLY_RETURN_IF_ERROR(
        it->second->ForEachBatch([&](int64_t, const BatchHeader& h, std::span<const uint8_t>) {
          if (h.base_offset >= from && h.producer_id >= 0) {
            producers_.Record(h.producer_id, h.producer_epoch, h.base_sequence,
                              h.last_offset_delta + 1, h.base_offset);
          }
          return Status::Ok();
        }));
  }
  return Status::Ok();
}

void PartitionLog::MarkWritten(const std::shared_ptr<File>& file, int64_t end) {
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    if (std::find(dirty_files_.begin(), dirty_files_.end(), file) == dirty_files_.end()) {
      dirty_files_.push_back(file);
    }
    written_end_ = end;
  }
  if (options_.on_dirty) options_.on_dirty();
}

void PartitionLog::MarkDirDirty() {
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    dir_dirty_ = true;
  }
  if (options_.on_dirty) options_.on_dirty();
}

void PartitionLog::UpdateSizes() {
  int64_t total = 0;
  for (const auto& [base, seg] : segments_) total += seg->size();
  size_bytes_.store(total, std::memory_order_relaxed);
}

Status PartitionLog::WriteProducerSnapshot() {
  int64_t leo = log_end_offset();
  TALLY_RETURN_IF_ERROR(producers_.WriteSnapshot(dir_ / OffsetFileName(leo, ".snapshot")));
  MarkDirDirty();
  Result<std::vector<int64_t>> listed = ListSnapshots(dir_);
  if (!listed.ok()) return listed.status();
  const std::vector<int64_t>& snapshots = *listed;
  std::error_code ec;
  for (size_t i = kSnapshotsKept; i < snapshots.size(); ++i) {
    std::filesystem::remove(dir_ / OffsetFileName(snapshots[i], ".snapshot"), ec);
  }
  return Status::Ok();
}

Status PartitionLog::WriteLogStartCheckpoint() {
  TALLY_RETURN_IF_ERROR(WriteFileAtomically(dir_ / kLogStartCheckpoint,
                                            fmt::format("{}\n", log_start_offset()),
                                            /*sync_dir=*/false));
  MarkDirDirty();
  return Status::Ok();
}

Status PartitionLog::Roll(int64_t now_ms) {
  Segment& old = active();
  // A closed segment is trusted at open (only its tail is checked), so it
  // is made durable, indexes included, before the next one starts.
  if (options_.ops->Fdatasync(old.log_file()->fd()) != 0) {
    sync_failed_.store(true);
    return Status::IOError(fmt::format("partition {}: fdatasync {}: {}", Name(),
                                       old.log_path().string(), std::strerror(errno)));
  }
  TALLY_RETURN_IF_ERROR(old.WriteIndexFiles().WithContext(fmt::format("partition {}", Name())));
  TALLY_RETURN_IF_ERROR(WriteProducerSnapshot().WithContext(fmt::format("partition {}", Name())));
  int64_t leo = log_end_offset();
  Result<std::unique_ptr<Segment>> seg =
      Segment::Create(dir_, leo, Segment::Options{options_.ops, options_.index_interval_bytes});
  if (!seg.ok()) return seg.status().WithContext(fmt::format("partition {}", Name()));
  (*seg)->set_created_ms(now_ms);
  segments_[leo] = std::move(*seg);
  MarkDirDirty();
  return Status::Ok();
}

Result<AppendResult> PartitionLog::Append(std::span<uint8_t> records, int64_t now_ms) {
  if (sync_failed_.load()) {
    return Status::IOError(
        fmt::format("partition {}: an earlier fdatasync failed; restart to recover", Name()));
  }
  Result<std::vector<BatchView>> batches = SplitBatches(records);
  if (!batches.ok()) return batches.status().WithContext(fmt::format("partition {}", Name()));
  int64_t record_total = 0;
  for (const BatchView& b : *batches) {
    if (b.header.size() > options_.config.max_message_bytes) {
      return Status::ResourceExhausted(
          fmt::format("partition {}: batch of {} bytes is over max.message.bytes {}", Name(),
                      b.header.size(), options_.config.max_message_bytes));
    }
    record_total += b.header.last_offset_delta + 1;
  }

  // Producer checks for every batch before anything is written, so a request
  // is appended whole or not at all.
  std::optional<ProducerStateTable> scratch;
  if (batches->size() > 1) scratch = producers_;
  int64_t next = log_end_offset();
  for (const BatchView& b : *batches) {
    const BatchHeader& h = b.header;
    const ProducerStateTable& table = scratch ? *scratch : producers_;
    ProducerCheck c =
        table.Check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta + 1);
    if (c.verdict != ProducerVerdict::kAppend) {
      return AppendResult{c.verdict, c.base_offset, c.last_offset};
    }
    if (scratch) {
      scratch->Record(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta + 1,
                      next);
    }
    next += h.last_offset_delta + 1;
  }

  Segment* seg = &active();
  int64_t leo = log_end_offset();
  if (!seg->empty() &&
      (seg->size() + static_cast<int64_t>(records.size()) > options_.config.segment_bytes ||
       now_ms - seg->created_ms() >= options_.config.segment_ms ||
       leo + record_total - seg->base_offset() > INT32_MAX)) {
    TALLY_RETURN_IF_ERROR(Roll(now_ms));
    seg = &active();
  }
  if (seg->empty()) seg->set_created_ms(now_ms);

  std::vector<BatchHeader> headers;
  headers.reserve(batches->size());
  next = leo;
  for (const BatchView& b : *batches) {
    auto pos = static_cast<size_t>(b.bytes.data() - records.data());
    SetBaseOffset(records.subspan(pos), next);
    BatchHeader h = b.header;
    h.base_offset = next;
    headers.push_back(h);
    next = h.last_offset() + 1;
  }
  Status st = seg->Append(records, headers);
  if (!st.ok()) return st.WithContext(fmt::format("partition {} offset {}", Name(), leo));
  for (const BatchHeader& h : headers) {
    producers_.Record(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta + 1,
                      h.base_offset);
  }
  log_end_offset_.store(next, std::memory_order_release);
  size_bytes_.fetch_add(static_cast<int64_t>(records.size()), std::memory_order_relaxed);
  MarkWritten(seg->log_file(), next);
  if (options_.log_flush_ms == 0) high_watermark_.store(next, std::memory_order_release);
  return AppendResult{ProducerVerdict::kAppend, leo, next - 1};
}

Result<std::string> PartitionLog::Read(int64_t offset, int64_t max_bytes, int64_t max_offset,
                                       ReadStats* stats) const {
  int64_t start = log_start_offset();
  int64_t end = log_end_offset();
  if (offset < start || offset > end) {
    return Status::OutOfRange(
        fmt::format("partition {}: offset {} is outside [{}, {}]", Name(), offset, start, end));
  }
  if (offset >= max_offset) return std::string();
  auto it = segments_.upper_bound(offset);
  if (it != segments_.begin()) --it;
  for (; it != segments_.end(); ++it) {
    if (it->first >= max_offset) break;
    Result<std::string> r =
        it->second->Read(std::max(offset, it->first), max_bytes, max_offset, stats);
    if (!r.ok()) return r.status().WithContext(fmt::format("partition {}", Name()));
    // An empty answer means the offset lies in a gap a compaction left at
    // the segment's end: the next segment holds what follows.
    if (!r->empty()) return r;
  }
  return std::string();
}

Result<OffsetAndTimestamp> PartitionLog::ListOffsets(int64_t timestamp) const {
  if (timestamp == kListOffsetsEarliest) return OffsetAndTimestamp{log_start_offset(), -1};
  if (timestamp == kListOffsetsLatest) return OffsetAndTimestamp{high_watermark(), -1};
  int64_t start = log_start_offset();
  int64_t hw = high_watermark();
  for (const auto& [base, seg] : segments_) {
    if (seg->next_offset() <= start) continue;
    if (base >= hw) break;
    if (seg->max_timestamp() < timestamp) continue;
    auto found = seg->FindOffsetByTimestamp(timestamp, start, hw);
    if (!found.ok()) return found.status().WithContext(fmt::format("partition {}", Name()));
    if (found->has_value()) return OffsetAndTimestamp{(*found)->first, (*found)->second};
  }
  return OffsetAndTimestamp{};
}

Status PartitionLog::Flush() {
  std::lock_guard<std::mutex> serial(flush_serial_mu_);
  if (sync_failed_.load()) {
    return Status::IOError(fmt::format("partition {}: an earlier fdatasync failed", Name()));
  }
  std::vector<std::shared_ptr<File>> files;
  bool dir;
  int64_t target;
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    files.swap(dirty_files_);
    dir = dir_dirty_;
    dir_dirty_ = false;
    target = written_end_;
  }
  for (const auto& file : files) {
    if (options_.ops->Fdatasync(file->fd()) != 0) {
      // After a failed fdatasync the kernel may have dropped the dirty pages
      // and cleared the error: a retry could succeed without the data being
      // on disk. Stop here; a restart recovers from what is really there.
      int err = errno;
      sync_failed_.store(true);
      TALLY_LOG_ERROR("log",
                      "partition {}: fdatasync failed: {}; the partition stops taking writes",
                      Name(), std::strerror(err));
      return Status::IOError(
          fmt::format("partition {}: fdatasync: {}", Name(), std::strerror(err)));
    }
  }
  if (dir) {
    Status st = SyncDir(dir_);
    if (!st.ok()) {
      sync_failed_.store(true);
      return st.WithContext(fmt::format("partition {}", Name()));
    }
  }
  int64_t hw = high_watermark_.load();
  while (hw < target && !high_watermark_.compare_exchange_weak(hw, target)) {
  }
  return Status::Ok();
}

bool PartitionLog::flush_pending() {
  std::lock_guard<std::mutex> lock(flush_mu_);
  return !dirty_files_.empty() || dir_dirty_ || written_end_ > high_watermark_.load();
}

Status PartitionLog::Close() {
  // The snapshot first, so that the flush below also syncs its directory
  // entry.
  Status st = sync_failed_.load() || segments_.empty() ? Status::Ok() : WriteProducerSnapshot();
  Status flushed = Flush();
  segments_.clear();
  return st.ok() ? flushed : st;
}

}  // namespace tally::broker
