// InfoLog: RocksDB's info log (the LOG file of each partition) written so
// that a full disk loses log lines, never the process.
//
// RocksDB's own LOG writer ignores a failed append, and its next line then
// trips an assertion in the file writer (`sync_without_flush_called_`),
// which Debian's build of RocksDB 7.8 keeps: on a full disk the first log
// line that does not fit aborts the process, at open or on a background
// error. This logger appends each line with one write(2) and drops the
// line when the write fails. It keeps the file under a size, renaming a
// full LOG to LOG.old.
//
// Thread model: safe for concurrent use.
#pragma once

#include <rocksdb/env.h>

#include <cstdint>
#include <mutex>
#include <string>

namespace tally::store {

class InfoLog : public rocksdb::Logger {
 public:
  // Appends to `path` (created on the first line if its directory exists by
  // then); `max_bytes`: the size at which LOG becomes LOG.old.
  InfoLog(std::string path, uint64_t max_bytes,
          rocksdb::InfoLogLevel level = rocksdb::InfoLogLevel::INFO_LEVEL);
  ~InfoLog() override;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;

 private:
  rocksdb::Status CloseImpl() override;
  // Opens the file if it is not open; false if it cannot be. Requires mu_.
  bool EnsureOpen();

  const std::string path_;
  const uint64_t max_bytes_;
  std::mutex mu_;
  int fd_ = -1;        // guarded by mu_
  uint64_t size_ = 0;  // guarded by mu_
};

}  // namespace tally::store
