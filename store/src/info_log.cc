#include "info_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace tally::store {

InfoLog::InfoLog(std::string path, uint64_t max_bytes, rocksdb::InfoLogLevel level)
    : rocksdb::Logger(level), path_(std::move(path)), max_bytes_(max_bytes) {}

InfoLog::~InfoLog() {
  std::lock_guard<std::mutex> l(mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

rocksdb::Status InfoLog::CloseImpl() {
  std::lock_guard<std::mutex> l(mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  return rocksdb::Status::OK();
}

bool InfoLog::EnsureOpen() {
  if (fd_ >= 0 && size_ < max_bytes_) return true;
  if (fd_ >= 0) {
    // Full: LOG becomes LOG.old (replacing the one before).
    ::close(fd_);
    fd_ = -1;
    (void)::rename(path_.c_str(), (path_ + ".old").c_str());
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return false;
  struct stat st;
  size_ = ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  return true;
}

void InfoLog::Logv(const char* format, va_list ap) {
  char buf[2048];
  struct timeval tv;
  ::gettimeofday(&tv, nullptr);
  struct tm t;
  ::localtime_r(&tv.tv_sec, &t);
  int n = std::snprintf(buf, sizeof(buf), "%04d/%02d/%02d-%02d:%02d:%02d.%06ld ", t.tm_year + 1900,
                        t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                        static_cast<long>(tv.tv_usec));
  if (n < 0) return;
  va_list copy;
  va_copy(copy, ap);
  int m = std::vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n) - 1, format, copy);
  va_end(copy);
  if (m < 0) return;
  size_t len = std::min(static_cast<size_t>(n + m), sizeof(buf) - 2);  // long lines are cut
  if (len == 0 || buf[len - 1] != '\n') buf[len++] = '\n';
  std::lock_guard<std::mutex> l(mu_);
  if (!EnsureOpen()) return;
  // One write per line; a line that does not fit (ENOSPC, EIO) is dropped.
  ssize_t w = ::write(fd_, buf, len);
  if (w > 0) size_ += static_cast<uint64_t>(w);
}

}  // namespace tally::store
