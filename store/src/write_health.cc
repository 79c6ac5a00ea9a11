#include "write_health.h"

#include <fmt/core.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

namespace tally::store {

namespace {
const char* ReasonName(rocksdb::BackgroundErrorReason reason) {
  switch (reason) {
    case rocksdb::BackgroundErrorReason::kFlush:
    case rocksdb::BackgroundErrorReason::kFlushNoWAL:
      return "a flush";
    case rocksdb::BackgroundErrorReason::kCompaction:
      return "a compaction";
    case rocksdb::BackgroundErrorReason::kWriteCallback:
      return "a write";
    case rocksdb::BackgroundErrorReason::kMemTable:
      return "a memtable insert";
    case rocksdb::BackgroundErrorReason::kManifestWrite:
    case rocksdb::BackgroundErrorReason::kManifestWriteNoWAL:
      return "a MANIFEST write";
  }
  return "a background job";
}

std::string Mib(uint64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}
}  // namespace

void WriteHealth::Set(std::string reason) {
  std::lock_guard<std::mutex> l(mu_);
  reason_ = std::move(reason);
  failing_.store(true, std::memory_order_release);
}

void WriteHealth::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  reason_.clear();
  failing_.store(false, std::memory_order_release);
}

void WriteHealth::OnCommit(const base::Status& st) {
  if (st.ok()) {
    if (failing_.load(std::memory_order_acquire)) Clear();
    return;
  }
  Set(st.message());
}

std::string WriteHealth::Problem() const {
  if (!failing_.load(std::memory_order_acquire)) return {};
  std::lock_guard<std::mutex> l(mu_);
  return reason_;
}

void WriteHealth::OnBackgroundError(rocksdb::BackgroundErrorReason reason,
                                    rocksdb::Status* bg_error) {
  // A failed compaction is retried by RocksDB and does not stop writes.
  if (bg_error == nullptr || bg_error->ok() ||
      reason == rocksdb::BackgroundErrorReason::kCompaction)
    return;
  // kWriteCallback: a WAL write or sync failed (the write path reports
  // nothing else under that reason).
  if (reason == rocksdb::BackgroundErrorReason::kWriteCallback) {
    if (bg_error->IsNoSpace()) wal_no_space_.store(true, std::memory_order_release);
    wal_write_failed_.store(true, std::memory_order_release);
  }
  Set(fmt::format("partition {}: RocksDB stopped writing after {} failed: {}", partition_,
                  ReasonName(reason), bg_error->ToString()));
}

void WriteHealth::OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason reason, rocksdb::Status,
                                       bool* auto_recovery) {
  if (reason == rocksdb::BackgroundErrorReason::kWriteCallback && auto_recovery != nullptr) {
    *auto_recovery = false;
  }
}

void WriteHealth::OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) {
  if (info.new_bg_error.ok()) Clear();
}

DiskReserve::DiskReserve(std::string dir, uint64_t min_free_bytes,
                         std::function<uint64_t()> free_bytes)
    : dir_(std::move(dir)), min_free_bytes_(min_free_bytes), free_bytes_(std::move(free_bytes)) {
  struct stat st;
  if (::stat(dir_.c_str(), &st) == 0) {
    known_ = true;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
}

base::Status DiskReserve::CheckSameDirectory() const {
  if (!known_) return base::Status::Ok();
  struct stat st;
  const bool same = ::stat(dir_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
  if (same) return base::Status::Ok();
  return base::Status::FailedPrecondition(fmt::format(
      "the state directory {} was removed or replaced since tally opened it: nothing more is "
      "written there (reads are served from what was open); stop tally and start it on the "
      "directory it should use",
      dir_));
}

base::Status DiskReserve::Check() const {
  TALLY_RETURN_IF_ERROR(CheckSameDirectory());
  if (min_free_bytes_ == 0) return base::Status::Ok();
  return CheckAtLeast(min_free_bytes_, "below the {} kept free (--min-free-mb)");
}

base::Status DiskReserve::CheckRoomAfterFull() const {
  if (min_free_bytes_ >= kRoomAfterFull) return Check();
  TALLY_RETURN_IF_ERROR(CheckSameDirectory());
  return CheckAtLeast(kRoomAfterFull, "less than the {} it must have before writing again");
}

base::Status DiskReserve::CheckAtLeast(uint64_t bytes, const char* what) const {
  uint64_t free = 0;
  if (free_bytes_) {
    free = free_bytes_();
  } else {
    struct statvfs st;
    if (::statvfs(dir_.c_str(), &st) != 0) return base::Status::Ok();
    free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }
  if (free >= bytes) return base::Status::Ok();
  return base::Status::ResourceExhausted(
      fmt::format("the disk of {} is full: {} free, {}; nothing is written until space is freed",
                  dir_, Mib(free), fmt::format(fmt::runtime(what), Mib(bytes))));
}

}  // namespace tally::store
