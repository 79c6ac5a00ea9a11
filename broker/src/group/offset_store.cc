#include "group/offset_store.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "base/log.h"

namespace tally::broker {
namespace {

constexpr const char* kLog = "offsets";
constexpr const char* kDirName = "__consumer_offsets";
constexpr const char* kFileName = "offsets.log";
constexpr const char* kTempName = "offsets.log.tmp";

// The framed size of a record, as EncodeOffsetRecord writes it.
uint64_t FramedSize(const std::string& group, const std::string& topic,
                    const std::string& metadata) {
  return 8 + 1 + 2 + group.size() + 2 + topic.size() + 4 + 8 + 4 + 4 + metadata.size() + 8;
}

base::Status ErrnoStatus(std::string_view what, const std::filesystem::path& path, int err) {
  return base::Status::IOError(fmt::format("{} {}: {}", what, path.string(), std::strerror(err)));
}

// Writes all of data at the descriptor's position, resuming after EINTR and
// short writes.
base::Status WriteAll(int fd, const char* data, size_t n, const std::filesystem::path& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path, errno);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return base::Status::Ok();
}

base::Status SyncDir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync", dir, err);
  return base::Status::Ok();
}

}  // namespace

struct OffsetStore::File {
  explicit File(int fd_in) : fd(fd_in) {}
  ~File() {
    if (fd >= 0) ::close(fd);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  const int fd;
};

OffsetStore::OffsetStore(std::filesystem::path dir, OffsetStoreOptions options)
    : dir_(std::move(dir)), path_(dir_ / kFileName), options_(options) {}

OffsetStore::~OffsetStore() = default;

base::Result<std::unique_ptr<OffsetStore>> OffsetStore::Open(const std::filesystem::path& log_dir,
                                                             const OffsetStoreOptions& options) {
  std::filesystem::path dir = log_dir / kDirName;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return base::Status::IOError(fmt::format("create {}: {}", dir.string(), ec.message()));
  }
  // A temporary file is a compaction that did not reach its rename: the
  // file it was to replace is still whole.
  std::filesystem::remove(dir / kTempName, ec);
  std::unique_ptr<OffsetStore> store(new OffsetStore(dir, options));
  TALLY_RETURN_IF_ERROR(store->Load());
  return store;
}

base::Status OffsetStore::Load() {
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", path_, errno);
  auto file = std::make_shared<File>(fd);

  std::string data;
  char buf[64 * 1024];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", path_, errno);
    }
    if (r == 0) break;
    data.append(buf, static_cast<size_t>(r));
  }

  const std::string_view magic = internal::kOffsetFileMagic;
  size_t good_end = 0;  // where the valid content ends
  bool rewrite_header = false;
  const bool all_zeros = data.find_first_not_of('\0') == std::string::npos;
  if (data.size() < magic.size() || all_zeros) {
    // A new file, or one whose creation was cut short: only a prefix of
    // the magic, nothing, or zeros (a size that reached the disk before
    // the data) can be there.
    if (!all_zeros && magic.substr(0, data.size()) != data) {
      return base::Status::Corruption(
          fmt::format("{}: not an offsets file (bad magic)", path_.string()));
    }
    if (!data.empty()) {
      TALLY_LOG_WARN(kLog, "{}: torn header of {} bytes rewritten", path_.string(), data.size());
    }
    rewrite_header = true;
  } else if (std::string_view(data).substr(0, magic.size()) != magic) {
    return base::Status::Corruption(
        fmt::format("{}: not an offsets file (bad magic)", path_.string()));
  } else {
    size_t pos = magic.size();
    while (pos < data.size()) {
      OffsetRecord record;
      size_t size = 0;
      std::string why;
      auto outcome =
          internal::DecodeOffsetRecord(data.data() + pos, data.size() - pos, &record, &size, &why);
      if (outcome == internal::OffsetRecordDecode::kOk) {
        Apply(record);
        pos += size;
        continue;
      }
      // A record is torn, not damaged, when nothing valid can follow it:
      // it runs to the end of the file, or the rest of the file is zeros
      // (the size of a file grows before its data reaches the disk).
      bool torn = outcome == internal::OffsetRecordDecode::kTruncated;
      if (!torn && data.size() - pos >= 4) {
        uint32_t length = 0;
        for (int i = 3; i >= 0; i--) {
          length = (length << 8) | static_cast<uint8_t>(data[pos + static_cast<size_t>(i)]);
        }
        // Only a length that could be real: a wild one is damage.
        torn = length >= 4 && length <= internal::kMaxOffsetRecordLength &&
               data.size() - pos - 4 <= length;
      }
      if (!torn) {
        torn = data.find_first_not_of('\0', pos) == std::string::npos;
      }
      if (!torn) {
        return base::Status::Corruption(fmt::format("{}: damaged record at byte {} of {}: {}",
                                                    path_.string(), pos, data.size(),
                                                    why.empty() ? std::string("truncated") : why));
      }
      TALLY_LOG_WARN(kLog, "{}: dropped a record torn at byte {} ({} bytes at the end of the file)",
                     path_.string(), pos, data.size() - pos);
      break;
    }
    good_end = pos;
  }

  if (rewrite_header || good_end < data.size()) {
    size_t keep = rewrite_header ? 0 : good_end;
    if (::ftruncate(fd, static_cast<off_t>(keep)) != 0) {
      return ErrnoStatus("truncate", path_, errno);
    }
    if (::lseek(fd, static_cast<off_t>(keep), SEEK_SET) < 0) {
      return ErrnoStatus("seek", path_, errno);
    }
    if (rewrite_header) {
      TALLY_RETURN_IF_ERROR(WriteAll(fd, magic.data(), magic.size(), path_));
      good_end = magic.size();
    }
    if (::fdatasync(fd) != 0) return ErrnoStatus("fdatasync", path_, errno);
    if (rewrite_header) TALLY_RETURN_IF_ERROR(SyncDir(dir_));
  } else if (::lseek(fd, 0, SEEK_END) < 0) {
    return ErrnoStatus("seek", path_, errno);
  }
  file_bytes_ = good_end;
  file_ = std::move(file);
  return base::Status::Ok();
}

void OffsetStore::Apply(const OffsetRecord& record) {
  auto git = groups_.find(record.group);
  const auto key = std::make_pair(record.topic, record.partition);
  if (git != groups_.end()) {
    auto it = git->second.find(key);
    if (it != git->second.end()) {
      live_bytes_ -= FramedSize(record.group, record.topic, it->second.metadata);
      git->second.erase(it);
    }
  }
  if (record.deleted) {
    if (git != groups_.end() && git->second.empty()) groups_.erase(git);
    return;
  }
  if (git == groups_.end()) git = groups_.emplace(record.group, GroupOffsets{}).first;
  git->second[key] = CommittedOffset{record.offset, record.leader_epoch, record.metadata,
                                     record.commit_timestamp_ms};
  live_bytes_ += FramedSize(record.group, record.topic, record.metadata);
}

base::Result<uint64_t> OffsetStore::Append(std::span<const OffsetRecord> records) {
  if (failed_.load(std::memory_order_acquire)) {
    return base::Status::IOError(
        fmt::format("{}: an earlier fdatasync failed; refusing writes", path_.string()));
  }
  std::string buf;
  for (const OffsetRecord& r : records) internal::EncodeOffsetRecord(r, &buf);
  base::Status st = WriteAll(file_->fd, buf.data(), buf.size(), path_);
  if (!st.ok()) {
    // Cut a partial write back so the next append does not follow garbage.
    if (::ftruncate(file_->fd, static_cast<off_t>(file_bytes_)) != 0 ||
        ::lseek(file_->fd, static_cast<off_t>(file_bytes_), SEEK_SET) < 0) {
      failed_.store(true, std::memory_order_release);
    }
    return st;
  }
  file_bytes_ += buf.size();
  for (const OffsetRecord& r : records) Apply(r);
  const uint64_t seq = ++next_seq_;
  written_seq_.store(seq, std::memory_order_release);
  if (!options_.sync) durable_seq_.store(seq, std::memory_order_release);

  if (file_bytes_ > options_.compact_min_bytes &&
      file_bytes_ > options_.compact_ratio * std::max<uint64_t>(live_bytes_, 1)) {
    base::Status cst = Compact();
    if (!cst.ok()) TALLY_LOG_WARN(kLog, "compaction failed: {}", cst.ToString());
  }
  return seq;
}

base::Status OffsetStore::Flush() {
  std::shared_ptr<File> file;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(file_mu_);
    file = file_;
    seq = written_seq_.load(std::memory_order_acquire);
  }
  if (seq <= durable_seq_.load(std::memory_order_acquire)) return base::Status::Ok();
  if (::fdatasync(file->fd) != 0) {
    failed_.store(true, std::memory_order_release);
    return ErrnoStatus("fdatasync", path_, errno);
  }
  uint64_t cur = durable_seq_.load(std::memory_order_acquire);
  while (cur < seq && !durable_seq_.compare_exchange_weak(cur, seq, std::memory_order_acq_rel)) {
  }
  return base::Status::Ok();
}

base::Status OffsetStore::Compact() {
  const std::filesystem::path tmp = dir_ / kTempName;
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", tmp, errno);
  auto file = std::make_shared<File>(fd);
  std::string buf(internal::kOffsetFileMagic);
  for (const auto& [group, offsets] : groups_) {
    for (const auto& [key, value] : offsets) {
      internal::EncodeOffsetRecord(
          OffsetRecord{group, key.first, key.second, value.offset, value.leader_epoch,
                       value.metadata, value.commit_timestamp_ms, false},
          &buf);
    }
  }
  base::Status st = WriteAll(fd, buf.data(), buf.size(), tmp);
  if (st.ok() && ::fdatasync(fd) != 0) st = ErrnoStatus("fdatasync", tmp, errno);
  if (st.ok() && ::rename(tmp.c_str(), path_.c_str()) != 0) st = ErrnoStatus("rename", tmp, errno);
  if (!st.ok()) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return st;
  }
  // After the rename the new file is the store whatever happens next; a
  // failed directory sync only leaves the rename's durability in doubt.
  const uint64_t before = file_bytes_;
  {
    std::lock_guard<std::mutex> lock(file_mu_);
    file_ = std::move(file);
  }
  file_bytes_ = buf.size();
  TALLY_RETURN_IF_ERROR(SyncDir(dir_));
  // Everything written so far is in the new file, which is on disk.
  const uint64_t seq = written_seq_.load(std::memory_order_acquire);
  uint64_t cur = durable_seq_.load(std::memory_order_acquire);
  while (cur < seq && !durable_seq_.compare_exchange_weak(cur, seq, std::memory_order_acq_rel)) {
  }
  TALLY_LOG_DEBUG(kLog, "{}: compacted from {} to {} bytes", path_.string(), before, file_bytes_);
  return base::Status::Ok();
}

const CommittedOffset* OffsetStore::Get(const std::string& group, const std::string& topic,
                                        int32_t partition) const {
  auto git = groups_.find(group);
  if (git == groups_.end()) return nullptr;
  auto it = git->second.find(std::make_pair(topic, partition));
  return it == git->second.end() ? nullptr : &it->second;
}

const OffsetStore::GroupOffsets* OffsetStore::ForGroup(const std::string& group) const {
  auto git = groups_.find(group);
  return git == groups_.end() ? nullptr : &git->second;
}

}  // namespace tally::broker
