#include "db_handoff.h"

#include <chrono>

#include "base/log.h"

namespace tally::store {

std::shared_ptr<DbHandoff> DbHandoff::Make(std::string what) {
  return std::shared_ptr<DbHandoff>(new DbHandoff(std::move(what)));
}

std::shared_ptr<rocksdb::DB> DbHandoff::Share(rocksdb::DB* db) {
  // The deleter keeps the handoff alive: a reader may let go of an instance
  // after its partition was replaced.
  return std::shared_ptr<rocksdb::DB>(
      db, [self = shared_from_this()](rocksdb::DB* d) { self->Release(d); });
}

void DbHandoff::Release(rocksdb::DB* db) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (awaited_ == db) {
      arrived_ = true;
      cv_.notify_all();
      return;
    }
  }
  delete db;
}

rocksdb::Status DbHandoff::CloseWhenReleased(std::shared_ptr<rocksdb::DB> db) {
  rocksdb::DB* raw = db.get();
  {
    std::lock_guard<std::mutex> l(mu_);
    awaited_ = raw;
    arrived_ = false;
  }
  // If this was the last reference, Release runs here and now; otherwise on
  // the reader that lets go last (the shared_ptr's count is decremented
  // with acquire-release ordering, so every read of the instance happens
  // before the deleter, and the mutex carries that to this thread).
  db.reset();
  {
    std::unique_lock<std::mutex> l(mu_);
    const auto start = std::chrono::steady_clock::now();
    while (!cv_.wait_for(l, std::chrono::seconds(5), [this] { return arrived_; })) {
      TALLY_LOG_WARN(
          "store", "{}: closing waits for reads that hold it ({} s so far)", what_,
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
              .count());
    }
    awaited_ = nullptr;
    arrived_ = false;
  }
  rocksdb::Status s = raw->Close();
  delete raw;
  return s;
}

}  // namespace tally::store
