// DbHandoff: how a partition's RocksDB instance is shared with its readers,
// and how it is closed without stopping them.
//
// Readers load the instance from the partition's atomic shared_ptr and hold
// it for the length of one read; whoever replaces or removes it cannot
// delete it under them. So the instance goes when its last holder lets go:
//
//   - replaced (a read-only store following its writer's reopen, a writable
//     one reopening after a write error): the last holder deletes it, as
//     before, wherever it is;
//   - closed (ClosePartition): the closing thread waits until every other
//     holder has let go, then closes and deletes the instance itself. A
//     reader never pays for a close (waiting for RocksDB's background jobs,
//     closing files), and when ClosePartition returns the database's files
//     and its LOCK are released, so it can be opened again at once.
//
// Thread model: safe for concurrent use. CloseWhenReleased may be called by
// one thread at a time per handoff (the partition's control lock).
#pragma once

#include <rocksdb/db.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

namespace tally::store {

class DbHandoff : public std::enable_shared_from_this<DbHandoff> {
 public:
  // `what` names the database in log lines ("partition 3").
  static std::shared_ptr<DbHandoff> Make(std::string what);

  // Owns `db`: a shared_ptr whose last holder deletes it, unless a
  // CloseWhenReleased is waiting for it. `db` non-null.
  std::shared_ptr<rocksdb::DB> Share(rocksdb::DB* db);

  // `db`: a reference that no longer sits where readers load it from (the
  // caller took it out of the atomic slot), made by Share. Waits until it is
  // the last reference (logging every 5 s while readers hold it), then
  // closes and deletes the database on the calling thread. The status of
  // RocksDB's Close (the database is deleted either way).
  rocksdb::Status CloseWhenReleased(std::shared_ptr<rocksdb::DB> db);

 private:
  explicit DbHandoff(std::string what) : what_(std::move(what)) {}
  // The deleter of every shared_ptr made by Share.
  void Release(rocksdb::DB* db);

  const std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  rocksdb::DB* awaited_ = nullptr;  // guarded by mu_: the instance CloseWhenReleased waits for
  bool arrived_ = false;            // guarded by mu_: its last holder let go
};

}  // namespace tally::store
