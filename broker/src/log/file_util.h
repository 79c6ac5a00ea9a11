// Files of the broker's log: an owned file descriptor, the small interface
// through which every write and sync of log data goes (so tests can inject
// ENOSPC, EIO or a failed fdatasync, as LevelDB's ErrorEnv does), and
// helpers for whole small files written atomically (checkpoints, configs,
// snapshots).
// Thread model: FileOps implementations must be safe for concurrent use (the
// flusher thread syncs while the owning thread writes); File is safe to share
// between threads (fd() is immutable).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tally::broker {

// The system calls that change log files. Each returns what the system call
// returns and sets errno the same way.
class FileOps {
 public:
  virtual ~FileOps() = default;
  virtual ssize_t Pwrite(int fd, const void* buf, size_t n, off_t offset);
  virtual int Fdatasync(int fd);
  virtual int Ftruncate(int fd, off_t length);
};

// The FileOps that calls the kernel; a process-wide object, never null.
FileOps* DefaultFileOps();

// An open file descriptor, closed at destruction.
class File {
 public:
  explicit File(int fd) : fd_(fd) {}
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

// Writes all `n` bytes at `offset` through `ops`, retrying short writes and
// EINTR. On failure it truncates the file back to `offset` (the caller's
// end of valid data) so no partial bytes stay, and returns kIOError naming
// `what` and errno (ENOSPC, EIO...).
base::Status WriteAllAt(FileOps* ops, int fd, const void* data, size_t n, off_t offset,
                        std::string_view what);

// Reads exactly `n` bytes at `offset`; kIOError on a read error, kCorruption
// if the file ends first.
base::Status ReadExactlyAt(int fd, void* data, size_t n, off_t offset, std::string_view what);

// Opens (O_CREAT if `create`) a file for reading and writing; kIOError.
base::Result<int> OpenFile(const std::filesystem::path& path, bool create);

// fsyncs a directory so created, renamed and removed entries are durable.
base::Status SyncDir(const std::filesystem::path& dir);

// The suffix of the temporary file WriteFileAtomically writes first: '~'
// never appears in a topic name, so the file of a topic named "x.tmp" is
// never taken for a leftover, and the name stays short.
inline constexpr std::string_view kTempSuffix = "~tmp";

// Writes `contents` to `<path>~tmp`, fdatasyncs it and renames it over
// `path`; with `sync_dir` also fsyncs the parent directory.
base::Status WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                                 bool sync_dir);

// Reads a whole (small) file; kNotFound if it does not exist.
base::Status ReadWholeFile(const std::filesystem::path& path, std::string* out);

// The names in `dir` (not "." and ".."), with whether each is a directory.
// kIOError if it cannot be read. Unlike std::filesystem's iterators it never
// throws.
struct DirEntry {
  std::string name;
  bool is_dir = false;
};
base::Result<std::vector<DirEntry>> ListDir(const std::filesystem::path& dir);

// "<20-digit zero-padded offset><ext>", as Kafka names segment files.
std::string OffsetFileName(int64_t offset, std::string_view ext);

// Parses a name made by OffsetFileName with extension `ext`; false if not one.
bool ParseOffsetFileName(std::string_view name, std::string_view ext, int64_t* offset);

}  // namespace tally::broker
