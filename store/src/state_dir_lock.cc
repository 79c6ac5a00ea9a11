#include "store/state_dir_lock.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tally::store {

namespace {

// The pid holding a flock on the file with `st`'s device and inode, from
// /proc/locks ("1: FLOCK  ADVISORY  WRITE 1234 fe:00:10952952 0 EOF"); -1
// when none is listed or the file cannot be read.
long FlockHolder(const struct stat& st) {
  std::ifstream in("/proc/locks");
  const std::string id =
      fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev), st.st_ino);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string n, kind, mode, access, pid, file;
    if (!(fields >> n >> kind >> mode >> access >> pid >> file)) continue;
    if (kind != "FLOCK" || file != id) continue;  // "->" lines are waiters: kind is "->"
    char* end = nullptr;
    long p = std::strtol(pid.c_str(), &end, 10);
    if (end != pid.c_str() && *end == '\0' && p > 0) return p;
  }
  return -1;
}

}  // namespace

base::Result<std::unique_ptr<StateDirLock>> StateDirLock::Acquire(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return std::unique_ptr<StateDirLock>();  // opening the state reports why
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
    return std::unique_ptr<StateDirLock>(new StateDirLock(fd));
  const int err = errno;
  struct stat st {};
  long holder = ::fstat(fd, &st) == 0 ? FlockHolder(st) : -1;
  ::close(fd);
  if (err != EWOULDBLOCK) {
    return base::Status::IOError(
        fmt::format("cannot lock state directory {}: {}", dir, std::strerror(err)));
  }
  return base::Status::FailedPrecondition(fmt::format(
      "state directory {} is in use by another tally process ({}); stop it first, or give this "
      "one another --state-dir",
      dir, holder > 0 ? fmt::format("pid {}", holder) : std::string("pid unknown")));
}

StateDirLock::~StateDirLock() { ::close(fd_); }

}  // namespace tally::store
