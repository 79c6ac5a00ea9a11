#include "log/segment.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "base/log.h"
#include "log/compression.h"

namespace tally::broker {

using base::Result;
using base::Status;

namespace {

constexpr size_t kIndexEntrySize = 8;
constexpr size_t kTimeIndexEntrySize = 12;
constexpr size_t kScanChunk = 1 << 20;

// Sequential reads of a segment file through a large buffer, for the scans
// of recovery and index rebuilds.
class ChunkReader {
 public:
  ChunkReader(int fd, int64_t file_size, std::string what)
      : fd_(fd), file_size_(file_size), what_(std::move(what)) {}

  // The bytes [pos, pos + n), which the caller knows lie inside the file.
  Result<std::span<const uint8_t>> Get(int64_t pos, size_t n) {
    if (pos < buf_start_ ||
        pos + static_cast<int64_t>(n) > buf_start_ + static_cast<int64_t>(buf_.size())) {
      size_t want = std::max(n, kScanChunk);
      want = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(want), file_size_ - pos));
      buf_.resize(want);
      Status st = ReadExactlyAt(fd_, buf_.data(), want, pos, what_);
      if (!st.ok()) return st;
      buf_start_ = pos;
    }
    return std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(buf_.data()) + (pos - buf_start_), n);
  }

 private:
  int fd_;
  int64_t file_size_;
  std::string what_;
  std::string buf_;
  int64_t buf_start_ = 0;
};

Result<int64_t> FileSize(int fd, const std::filesystem::path& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return Status::IOError(fmt::format("stat {}: {}", path.string(), std::strerror(errno)));
  }
  return static_cast<int64_t>(st.st_size);
}

}  // namespace

std::filesystem::path Segment::IndexPath() const {
  return dir_ / OffsetFileName(base_offset_, ".index");
}
std::filesystem::path Segment::TimeIndexPath() const {
  return dir_ / OffsetFileName(base_offset_, ".timeindex");
}

Result<std::unique_ptr<Segment>> Segment::Create(const std::filesystem::path& dir,
                                                 int64_t base_offset, const Options& options,
                                                 const std::filesystem::path& log_path) {
  std::unique_ptr<Segment> seg(new Segment(dir, base_offset, options));
  seg->log_path_ = log_path.empty() ? dir / OffsetFileName(base_offset, ".log") : log_path;
  int fd = ::open(seg->log_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::IOError(
        fmt::format("create {}: {}", seg->log_path_.string(), std::strerror(errno)));
  }
  seg->log_ = std::make_shared<File>(fd);
  seg->next_offset_ = base_offset;
  return seg;
}

void Segment::Track(int64_t position, const BatchHeader& h) {
  auto rel = [this](int64_t offset) { return static_cast<uint32_t>(offset - base_offset_); };
  if (position > 0 && bytes_since_index_ >= options_.index_interval_bytes) {
    index_.push_back(OffsetIndexEntry{rel(h.base_offset), static_cast<uint32_t>(position)});
    // Every batch before this one has a timestamp <= max_timestamp_, so a
    // search for a later timestamp can start here.
    if (time_index_.empty() || max_timestamp_ > time_index_.back().timestamp) {
      time_index_.push_back(TimeIndexEntry{max_timestamp_, rel(h.base_offset)});
    }
    bytes_since_index_ = 0;
  }
  bytes_since_index_ += h.size();
  if (h.max_timestamp > max_timestamp_ || size_ == 0) {
    max_timestamp_ = h.max_timestamp;
    max_timestamp_rel_ = rel(h.base_offset);
  }
  next_offset_ = h.last_offset() + 1;
  size_ = position + h.size();
}

Status Segment::Append(std::span<const uint8_t> bytes, std::span<const BatchHeader> headers) {
  TALLY_RETURN_IF_ERROR(
      WriteAllAt(options_.ops, log_->fd(), bytes.data(), bytes.size(), size_, log_path_.string()));
  for (const BatchHeader& h : headers) Track(size_, h);
  return Status::Ok();
}

Status Segment::WriteIndexFiles() {
  if (size_ > 0 && (time_index_.empty() || max_timestamp_ > time_index_.back().timestamp)) {
    time_index_.push_back(
        TimeIndexEntry{max_timestamp_, static_cast<uint32_t>(next_offset_ - base_offset_)});
  }
  std::string buf(index_.size() * kIndexEntrySize, '\0');
  auto* p = reinterpret_cast<uint8_t*>(buf.data());
  for (const OffsetIndexEntry& e : index_) {
    StoreBe32(p, e.relative_offset);
    StoreBe32(p + 4, e.position);
    p += kIndexEntrySize;
  }
  TALLY_RETURN_IF_ERROR(WriteFileAtomically(IndexPath(), buf, /*sync_dir=*/false));
  buf.assign(time_index_.size() * kTimeIndexEntrySize, '\0');
  p = reinterpret_cast<uint8_t*>(buf.data());
  for (const TimeIndexEntry& e : time_index_) {
    StoreBe64(p, static_cast<uint64_t>(e.timestamp));
    StoreBe32(p + 8, e.relative_offset);
    p += kTimeIndexEntrySize;
  }
  return WriteFileAtomically(TimeIndexPath(), buf, /*sync_dir=*/false);
}

int64_t Segment::LookupPosition(int64_t offset, ReadStats* stats) const {
  if (offset <= base_offset_ || index_.empty()) return 0;
  uint64_t rel = static_cast<uint64_t>(offset - base_offset_);
  // The last entry whose relative offset is <= rel.
  size_t lo = 0, hi = index_.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (stats != nullptr) stats->index_probes++;
    if (index_[mid].relative_offset <= rel) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo == 0 ? 0 : index_[lo - 1].position;
}

Status Segment::ReadHeaderAt(int64_t position, BatchHeader* header) const {
  uint8_t buf[kBatchHeaderSize];
  if (position + static_cast<int64_t>(kBatchHeaderSize) > size_) {
    return Status::Corruption(fmt::format("{}: batch header at byte {} runs past the end ({})",
                                          log_path_.string(), position, size_));
  }
  TALLY_RETURN_IF_ERROR(ReadExactlyAt(log_->fd(), buf, sizeof(buf), position, log_path_.string()));
  Result<BatchHeader> h = ParseBatchHeader(std::span<const uint8_t>(buf, sizeof(buf)));
  if (!h.ok()) {
    return h.status().WithContext(fmt::format("{} byte {}", log_path_.string(), position));
  }
  if (position + h->size() > size_) {
    return Status::Corruption(fmt::format("{}: batch at byte {} of {} bytes runs past the end ({})",
                                          log_path_.string(), position, h->size(), size_));
  }
  *header = *h;
  return Status::Ok();
}

Status Segment::ReadBatch(int64_t position, const BatchHeader& header, std::string* out) const {
  out->resize(static_cast<size_t>(header.size()));
  return ReadExactlyAt(log_->fd(), out->data(), out->size(), position, log_path_.string());
}

Result<std::optional<std::pair<int64_t, BatchHeader>>> Segment::FindBatch(int64_t offset,
                                                                          ReadStats* stats) const {
  int64_t pos = LookupPosition(offset, stats);
  while (pos < size_) {
    BatchHeader h;
    TALLY_RETURN_IF_ERROR(ReadHeaderAt(pos, &h));
    if (stats != nullptr) {
      stats->headers_scanned++;
      stats->bytes_read += static_cast<int64_t>(kBatchHeaderSize);
    }
    if (h.last_offset() >= offset) return std::optional(std::make_pair(pos, h));
    pos += h.size();
  }
  return std::optional<std::pair<int64_t, BatchHeader>>();
}

Result<std::string> Segment::Read(int64_t offset, int64_t max_bytes, int64_t max_offset,
                                  ReadStats* stats) const {
  auto found = FindBatch(offset, stats);
  if (!found.ok()) return found.status();
  std::string out;
  if (!found->has_value()) return out;
  auto [pos, first] = **found;
  if (first.base_offset >= max_offset) return out;
  int64_t n = std::min(std::max(max_bytes, first.size()), size_ - pos);
  out.resize(static_cast<size_t>(n));
  TALLY_RETURN_IF_ERROR(ReadExactlyAt(log_->fd(), out.data(), out.size(), pos, log_path_.string()));
  if (stats != nullptr) stats->bytes_read += n;
  const auto* p = reinterpret_cast<const uint8_t*>(out.data());
  int64_t end = 0;
  while (end + static_cast<int64_t>(kBatchHeaderSize) <= n) {
    Result<BatchHeader> h =
        ParseBatchHeader(std::span<const uint8_t>(p + end, static_cast<size_t>(n - end)));
    if (!h.ok()) {
      return h.status().WithContext(fmt::format("{} byte {}", log_path_.string(), pos + end));
    }
    if (end + h->size() > n || h->base_offset >= max_offset) break;
    if (end > 0 && end + h->size() > max_bytes) break;
    end += h->size();
  }
  out.resize(static_cast<size_t>(end));
  return out;
}

Result<std::optional<std::pair<int64_t, int64_t>>> Segment::FindOffsetByTimestamp(
    int64_t timestamp, int64_t min_offset, int64_t max_offset) const {
  using Found = std::optional<std::pair<int64_t, int64_t>>;
  if (size_ == 0 || max_timestamp_ < timestamp) return Found();
  // The last entry whose timestamp is below the target: nothing before its
  // offset can match.
  auto it = std::lower_bound(time_index_.begin(), time_index_.end(), timestamp,
                             [](const TimeIndexEntry& e, int64_t ts) { return e.timestamp < ts; });
  int64_t pos = 0;
  if (it != time_index_.begin())
    pos = LookupPosition(base_offset_ + std::prev(it)->relative_offset, nullptr);
  std::string buf;
  while (pos < size_) {
    BatchHeader h;
    TALLY_RETURN_IF_ERROR(ReadHeaderAt(pos, &h));
    if (h.base_offset >= max_offset) return Found();
    if (h.max_timestamp >= timestamp && h.last_offset() >= min_offset) {
      // With LogAppendTime every record carries the batch's max timestamp.
      bool log_append_time = (h.attributes & 0x08) != 0;
      if (log_append_time) {
        return Found(std::make_pair(std::max(h.base_offset, min_offset), h.max_timestamp));
      }
      TALLY_RETURN_IF_ERROR(ReadBatch(pos, h, &buf));
      std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(buf.data()), buf.size());
      std::string records;
      std::optional<RecordIterator> walk;
      if (h.compression() == Compression::kNone) {
        walk.emplace(bytes, h);
      } else {
        Result<std::string> unpacked = BatchRecordsUncompressed(h, bytes);
        if (!unpacked.ok()) {
          // Records unreadable here: the batch is the finest answer.
          return Found(std::make_pair(std::max(h.base_offset, min_offset), h.max_timestamp));
        }
        records = std::move(*unpacked);
        walk.emplace(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(records.data()),
                                              records.size()),
                     h.record_count);
      }
      Record r;
      while (true) {
        Result<bool> more = walk->Next(&r);
        if (!more.ok()) {
          // Uncompressed records were checked at append; a producer's
          // compressed payload was not, so it falls back to the batch.
          if (h.compression() != Compression::kNone) {
            return Found(std::make_pair(std::max(h.base_offset, min_offset), h.max_timestamp));
          }
          return more.status().WithContext(fmt::format("{} byte {}", log_path_.string(), pos));
        }
        if (!*more) break;
        int64_t ts = h.base_timestamp + r.timestamp_delta;
        int64_t offset = h.base_offset + r.offset_delta;
        if (ts >= timestamp && offset >= min_offset) {
          if (offset >= max_offset) return Found();
          return Found(std::make_pair(offset, ts));
        }
      }
    }
    pos += h.size();
  }
  return Found();
}

Result<std::unique_ptr<Segment>> Segment::OpenActive(const std::filesystem::path& dir,
                                                     int64_t base_offset, const Options& options,
                                                     SegmentRecovery* recovery) {
  std::unique_ptr<Segment> seg(new Segment(dir, base_offset, options));
  seg->log_path_ = dir / OffsetFileName(base_offset, ".log");
  seg->next_offset_ = base_offset;
  Result<int> fd = OpenFile(seg->log_path_, /*create=*/false);
  if (!fd.ok()) return fd.status();
  seg->log_ = std::make_shared<File>(*fd);
  Result<int64_t> file_size = FileSize(*fd, seg->log_path_);
  if (!file_size.ok()) return file_size.status();
  ChunkReader reader(*fd, *file_size, seg->log_path_.string());
  int64_t pos = 0;
  std::string reason;
  while (pos < *file_size) {
    int64_t left = *file_size - pos;
    if (left < static_cast<int64_t>(kBatchHeaderSize)) {
      reason = fmt::format("torn batch header ({} bytes)", left);
      break;
    }
    Result<std::span<const uint8_t>> hb = reader.Get(pos, kBatchHeaderSize);
    if (!hb.ok()) return hb.status();
    Result<BatchHeader> h = ParseBatchHeader(*hb);
    if (!h.ok()) {
      reason = h.status().message();
      break;
    }
    if (h->size() > left) {
      reason = fmt::format("torn batch: {} bytes of {}", left, h->size());
      break;
    }
    if (h->base_offset < seg->next_offset_ || h->last_offset() - base_offset > INT32_MAX) {
      reason = fmt::format("base offset {} out of order (expected >= {})", h->base_offset,
                           seg->next_offset_);
      break;
    }
    Result<std::span<const uint8_t>> bytes = reader.Get(pos, static_cast<size_t>(h->size()));
    if (!bytes.ok()) return bytes.status();
    if (ComputeBatchCrc(*bytes) != h->crc) {
      reason = "CRC mismatch";
      break;
    }
    seg->Track(pos, *h);
    pos += h->size();
  }
  recovery->valid_bytes = pos;
  recovery->truncated_bytes = *file_size - pos;
  recovery->reason = reason;
  if (pos < *file_size && options.ops->Ftruncate(*fd, pos) != 0) {
    return Status::IOError(
        fmt::format("truncate {} to {}: {}", seg->log_path_.string(), pos, std::strerror(errno)));
  }
  // What a killed process left in the page cache becomes durable before the
  // high watermark is set to it.
  if (options.ops->Fdatasync(*fd) != 0) {
    return Status::IOError(
        fmt::format("fdatasync {}: {}", seg->log_path_.string(), std::strerror(errno)));
  }
  seg->size_ = pos;
  return seg;
}

Status Segment::RebuildIndexesByScan() {
  index_.clear();
  time_index_.clear();
  int64_t file_size = size_;
  size_ = 0;
  max_timestamp_ = -1;
  bytes_since_index_ = 0;
  next_offset_ = base_offset_;
  ChunkReader reader(log_->fd(), file_size, log_path_.string());
  int64_t pos = 0;
  while (pos < file_size) {
    auto bad = [&](std::string_view why) {
      return Status::Corruption(fmt::format("{}: byte {}: {}", log_path_.string(), pos, why));
    };
    if (file_size - pos < static_cast<int64_t>(kBatchHeaderSize)) {
      return bad("file size is not whole batches");
    }
    Result<std::span<const uint8_t>> hb = reader.Get(pos, kBatchHeaderSize);
    if (!hb.ok()) return hb.status();
    Result<BatchHeader> h = ParseBatchHeader(*hb);
    if (!h.ok()) return bad(h.status().message());
    if (h->size() > file_size - pos) return bad("file size is not whole batches");
    if (h->base_offset < next_offset_) return bad("base offsets out of order");
    Result<std::span<const uint8_t>> bytes = reader.Get(pos, static_cast<size_t>(h->size()));
    if (!bytes.ok()) return bytes.status();
    if (ComputeBatchCrc(*bytes) != h->crc) return bad("CRC mismatch");
    Track(pos, *h);
    pos += h->size();
  }
  return Status::Ok();
}

Status Segment::LoadIndexFiles(bool* rebuilt) {
  *rebuilt = false;
  std::string buf;
  Status st = ReadWholeFile(IndexPath(), &buf);
  std::string tbuf;
  Status tst = st.ok() ? ReadWholeFile(TimeIndexPath(), &tbuf) : st;
  if (st.code() == base::StatusCode::kNotFound || tst.code() == base::StatusCode::kNotFound) {
    TALLY_LOG_INFO("log", "rebuilding the indexes of {} from its data", log_path_.string());
    TALLY_RETURN_IF_ERROR(RebuildIndexesByScan());
    *rebuilt = true;
    return WriteIndexFiles();
  }
  TALLY_RETURN_IF_ERROR(st);
  TALLY_RETURN_IF_ERROR(tst);
  auto bad = [](const std::filesystem::path& path, std::string_view why) {
    return Status::Corruption(fmt::format("{}: {}", path.string(), why));
  };
  if (buf.size() % kIndexEntrySize != 0) return bad(IndexPath(), "size is not whole entries");
  const auto* p = reinterpret_cast<const uint8_t*>(buf.data());
  index_.clear();
  for (size_t i = 0; i < buf.size(); i += kIndexEntrySize) {
    OffsetIndexEntry e{LoadBe32(p + i), LoadBe32(p + i + 4)};
    if (e.position >= size_) return bad(IndexPath(), "an entry points outside the log file");
    if (!index_.empty() && (e.relative_offset <= index_.back().relative_offset ||
                            e.position <= index_.back().position)) {
      return bad(IndexPath(), "entries out of order");
    }
    index_.push_back(e);
  }
  if (tbuf.size() % kTimeIndexEntrySize != 0) {
    return bad(TimeIndexPath(), "size is not whole entries");
  }
  p = reinterpret_cast<const uint8_t*>(tbuf.data());
  time_index_.clear();
  for (size_t i = 0; i < tbuf.size(); i += kTimeIndexEntrySize) {
    TimeIndexEntry e{static_cast<int64_t>(LoadBe64(p + i)), LoadBe32(p + i + 8)};
    if (!time_index_.empty() && e.timestamp <= time_index_.back().timestamp) {
      return bad(TimeIndexPath(), "entries out of order");
    }
    time_index_.push_back(e);
  }
  return Status::Ok();
}

Result<std::unique_ptr<Segment>> Segment::OpenClosed(const std::filesystem::path& dir,
                                                     int64_t base_offset, const Options& options) {
  std::unique_ptr<Segment> seg(new Segment(dir, base_offset, options));
  seg->log_path_ = dir / OffsetFileName(base_offset, ".log");
  seg->next_offset_ = base_offset;
  Result<int> fd = OpenFile(seg->log_path_, /*create=*/false);
  if (!fd.ok()) return fd.status();
  seg->log_ = std::make_shared<File>(*fd);
  Result<int64_t> file_size = FileSize(*fd, seg->log_path_);
  if (!file_size.ok()) return file_size.status();
  if (*file_size > std::numeric_limits<uint32_t>::max()) {
    return Status::Corruption(fmt::format("{}: larger than 4 GiB", seg->log_path_.string()));
  }
  seg->size_ = *file_size;
  bool rebuilt = false;
  TALLY_RETURN_IF_ERROR(seg->LoadIndexFiles(&rebuilt));
  if (rebuilt || seg->size_ == 0) return seg;
  auto bad = [&seg](int64_t pos, std::string_view why) {
    return Status::Corruption(fmt::format("{}: byte {}: {}", seg->log_path_.string(), pos, why));
  };
  BatchHeader first;
  Status st = seg->ReadHeaderAt(0, &first);
  if (!st.ok()) return bad(0, st.message());
  if (first.base_offset < base_offset)
    return bad(0, "first batch before the segment's base offset");
  // Walk from the last index entry to the end: the file must end exactly
  // after a whole batch.
  int64_t pos = seg->index_.empty() ? 0 : seg->index_.back().position;
  int64_t prev_last = base_offset - 1;
  BatchHeader last = first;
  int64_t last_pos = 0;
  bool at_entry = !seg->index_.empty();
  while (pos < seg->size_) {
    BatchHeader h;
    st = seg->ReadHeaderAt(pos, &h);
    if (!st.ok()) return bad(pos, fmt::format("size is not whole batches: {}", st.message()));
    if (at_entry && h.base_offset != base_offset + seg->index_.back().relative_offset) {
      return bad(pos, "the index does not match the batch it points at");
    }
    at_entry = false;
    if (h.base_offset <= prev_last) return bad(pos, "base offsets out of order");
    prev_last = h.last_offset();
    last = h;
    last_pos = pos;
    pos += h.size();
  }
  std::string bytes;
  TALLY_RETURN_IF_ERROR(seg->ReadBatch(last_pos, last, &bytes));
  if (ComputeBatchCrc(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                               bytes.size())) != last.crc) {
    return bad(last_pos, "CRC mismatch in the last batch");
  }
  seg->next_offset_ = last.last_offset() + 1;
  seg->max_timestamp_ =
      seg->time_index_.empty() ? last.max_timestamp : seg->time_index_.back().timestamp;
  return seg;
}

Status Segment::RemoveFiles() {
  for (const auto& path : {log_path_, IndexPath(), TimeIndexPath()}) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::IOError(fmt::format("unlink {}: {}", path.string(), std::strerror(errno)));
    }
  }
  return Status::Ok();
}

Status Segment::RenameToCanonical() {
  std::filesystem::path target = dir_ / OffsetFileName(base_offset_, ".log");
  if (::rename(log_path_.c_str(), target.c_str()) != 0) {
    return Status::IOError(fmt::format("rename {}: {}", log_path_.string(), std::strerror(errno)));
  }
  log_path_ = target;
  return Status::Ok();
}

}  // namespace tally::broker
