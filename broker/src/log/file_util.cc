#include "log/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tally::broker {

using base::Result;
using base::Status;

ssize_t FileOps::Pwrite(int fd, const void* buf, size_t n, off_t offset) {
  return ::pwrite(fd, buf, n, offset);
}
int FileOps::Fdatasync(int fd) { return ::fdatasync(fd); }
int FileOps::Ftruncate(int fd, off_t length) { return ::ftruncate(fd, length); }

FileOps* DefaultFileOps() {
  static FileOps ops;
  return &ops;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

Status WriteAllAt(FileOps* ops, int fd, const void* data, size_t n, off_t offset,
                  std::string_view what) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ops->Pwrite(fd, p + done, n - done, offset + static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = w < 0 ? errno : ENOSPC;
      // Leave the file as it was: a later append writes at `offset` again,
      // and recovery never sees half a batch written before the failure.
      if (done > 0) (void)ops->Ftruncate(fd, offset);
      return Status::IOError(fmt::format("write {}: {}", what, std::strerror(err)));
    }
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status ReadExactlyAt(int fd, void* data, size_t n, off_t offset, std::string_view what) {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, offset + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::IOError(fmt::format("read {}: {}", what, std::strerror(errno)));
    if (r == 0) {
      return Status::Corruption(
          fmt::format("read {}: file ends at byte {}", what, offset + static_cast<off_t>(done)));
    }
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

Result<int> OpenFile(const std::filesystem::path& path, bool create) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
  if (fd < 0) {
    return Status::IOError(fmt::format("open {}: {}", path.string(), std::strerror(errno)));
  }
  return fd;
}

Status SyncDir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return Status::IOError(fmt::format("open {}: {}", dir.string(), std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return Status::IOError(fmt::format("fsync {}: {}", dir.string(), std::strerror(err)));
  return Status::Ok();
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                           bool sync_dir) {
  std::filesystem::path tmp = path;
  tmp += kTempSuffix;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::IOError(fmt::format("open {}: {}", tmp.string(), std::strerror(errno)));
  File file(fd);
  TALLY_RETURN_IF_ERROR(
      WriteAllAt(DefaultFileOps(), fd, contents.data(), contents.size(), 0, tmp.string()));
  if (::fdatasync(fd) != 0) {
    return Status::IOError(fmt::format("fdatasync {}: {}", tmp.string(), std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError(fmt::format("rename {}: {}", tmp.string(), std::strerror(errno)));
  }
  if (sync_dir) return SyncDir(path.parent_path());
  return Status::Ok();
}

Status ReadWholeFile(const std::filesystem::path& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(fmt::format("{} does not exist", path.string()));
    return Status::IOError(fmt::format("open {}: {}", path.string(), std::strerror(errno)));
  }
  File file(fd);
  out->clear();
  char buf[8192];
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return Status::IOError(fmt::format("read {}: {}", path.string(), std::strerror(errno)));
    if (r == 0) break;
    out->append(buf, static_cast<size_t>(r));
  }
  return Status::Ok();
}

Result<std::vector<DirEntry>> ListDir(const std::filesystem::path& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    return Status::IOError(fmt::format("list {}: {}", dir.string(), std::strerror(errno)));
  std::vector<DirEntry> out;
  while (true) {
    errno = 0;
    struct dirent* e = ::readdir(d);
    if (e == nullptr) break;
    std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    DirEntry entry{std::string(name), false};
    if (e->d_type == DT_DIR) {
      entry.is_dir = true;
    } else if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      entry.is_dir = ::stat((dir / entry.name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    out.push_back(std::move(entry));
  }
  int err = errno;
  ::closedir(d);
  if (err != 0)
    return Status::IOError(fmt::format("list {}: {}", dir.string(), std::strerror(err)));
  return out;
}

std::string OffsetFileName(int64_t offset, std::string_view ext) {
  return fmt::format("{:020d}{}", offset, ext);
}

bool ParseOffsetFileName(std::string_view name, std::string_view ext, int64_t* offset) {
  if (name.size() != 20 + ext.size() || name.substr(20) != ext) return false;
  int64_t v = 0;
  for (size_t i = 0; i < 20; ++i) {
    char c = name[i];
    if (c < '0' || c > '9') return false;
    if (v > (INT64_MAX - (c - '0')) / 10) return false;
    v = v * 10 + (c - '0');
  }
  *offset = v;
  return true;
}

}  // namespace tally::broker
