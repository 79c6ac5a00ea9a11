// WriteHealth: whether a partition can write now, and why not, for the
// store's WriteProblem() (GET /healthz).
//
// Two sources: tally's own commits (a failed Partition::Commit sets the
// reason, the next one that succeeds clears it) and RocksDB's background
// error handling, which this listens to: a flush or a WAL write that fails
// stops the database's writes (OnBackgroundError) until RocksDB recovers by
// itself (OnErrorRecoveryEnd; for a full disk its SstFileManager polls the
// free space and resumes) or tally reopens the database.
//
// Except after a failed WAL write: RocksDB 7.8's recovery from it switches
// to a new WAL file only if the memtable held something, and otherwise the
// next write goes to the WAL writer that failed, which trips an assertion
// in its file writer (`sync_without_flush_called_`, kept in Debian's
// build): the process aborts. So this listener turns RocksDB's automatic
// recovery off for that one case (OnErrorRecoveryBegin) and marks the
// partition (WalWriteFailed()): Partition::Resume() then never writes to
// that instance again, it reopens the database.
//
// DiskReserve: the free space a state keeps on its disk (StoreOptions::
// min_free_bytes). Below it no window is written, so RocksDB is not driven
// into a full disk by tally's own writes.
//
// Thread model: safe for concurrent use. The listener callbacks run on
// RocksDB's threads with its mutex held: they only set a string.
#pragma once

#include <rocksdb/listener.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "base/status.h"

namespace tally::store {

class WriteHealth : public rocksdb::EventListener {
 public:
  explicit WriteHealth(uint32_t partition) : partition_(partition) {}

  const char* Name() const override { return "tally.WriteHealth"; }

  // After a commit: `st` OK clears the reason, else becomes it.
  void OnCommit(const base::Status& st);
  // "" when the partition writes; else why it does not.
  std::string Problem() const;

  // True after a WAL write failed, until ClearWalWriteFailed() (a reopen);
  // WalOutOfSpace() when it failed for want of space (ENOSPC).
  bool WalWriteFailed() const { return wal_write_failed_.load(std::memory_order_acquire); }
  bool WalOutOfSpace() const { return wal_no_space_.load(std::memory_order_acquire); }
  void ClearWalWriteFailed() {
    wal_write_failed_.store(false, std::memory_order_release);
    wal_no_space_.store(false, std::memory_order_release);
  }
  // Forgets everything: the partition was closed, or opened afresh.
  void Reset() {
    Clear();
    ClearWalWriteFailed();
  }

  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* bg_error) override;
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason reason, rocksdb::Status bg_error,
                            bool* auto_recovery) override;
  void OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& info) override;

 private:
  void Set(std::string reason);
  void Clear();

  const uint32_t partition_;
  std::atomic<bool> failing_{false};
  std::atomic<bool> wal_write_failed_{false};
  std::atomic<bool> wal_no_space_{false};
  mutable std::mutex mu_;
  std::string reason_;  // guarded by mu_
};

class DiskReserve {
 public:
  // `dir`: a directory on the disk to watch. `min_free_bytes` 0: no reserve.
  // `free_bytes`: tests' stand-in for statvfs(dir); empty: statvfs.
  DiskReserve(std::string dir, uint64_t min_free_bytes, std::function<uint64_t()> free_bytes);

  // OK while at least the reserve is free (or the free space cannot be
  // read: then RocksDB's own errors say what is wrong); ResourceExhausted
  // naming the directory, the free space and the reserve otherwise.
  // FailedPrecondition, first, when `dir` is no longer the directory it
  // was at construction (removed, or replaced by another): the open
  // databases would go on writing into files nobody can see any more.
  base::Status Check() const;
  // The same against max(reserve, kRoomAfterFull): what a database that
  // ran out of space waits for before it is written again (see
  // Partition::Resume).
  base::Status CheckRoomAfterFull() const;

  // A window's WAL record, a new WAL, MANIFEST and OPTIONS file fit in it
  // with room to spare. Without it a disk full to the last byte would
  // take, and at once fill again, the few KiB a reopen gives back (an old
  // WAL's preallocation), and the partition would flap between writing
  // and failing.
  static constexpr uint64_t kRoomAfterFull = 1 << 20;

 private:
  base::Status CheckAtLeast(uint64_t bytes, const char* what) const;
  base::Status CheckSameDirectory() const;

  std::string dir_;
  // The directory's identity at construction; known_ false if it could
  // not be read (then it is not checked).
  bool known_ = false;
  uint64_t dev_ = 0;
  uint64_t ino_ = 0;
  uint64_t min_free_bytes_;
  std::function<uint64_t()> free_bytes_;
};

}  // namespace tally::store
