// FlushPool: runs the calls of one flush round side by side.
//
// fdatasync calls on different files that are in flight together share
// their device cache flushes (the block layer merges flush requests that
// overlap; on a journalling file system the journal commits them together
// too), so a round over 16 dirty partitions costs about one fdatasync
// instead of 16. On this project's test machine (virtio disk, ext4) a round
// of 16 took 64 ms one after another and 1.8-2.6 ms side by side
// (docs/performance-history.md, "The broker's flush").
//
// Thread model: Run() from one thread at a time (the log's flusher); the
// helper threads are internal and run only the function Run() was given.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tally::broker {

class FlushPool {
 public:
  // `helpers` threads beside the caller's (0: Run() calls everything on the
  // caller's thread).
  explicit FlushPool(int helpers);
  ~FlushPool();

  FlushPool(const FlushPool&) = delete;
  FlushPool& operator=(const FlushPool&) = delete;

  // Calls fn(i) once for every i in [0, n), on the caller's thread and as
  // many helpers as there are calls beyond the first; returns when every
  // call has returned.
  void Run(size_t n, const std::function<void(size_t)>& fn);

 private:
  void Helper();
  // Takes calls until none is left; `lock` holds mu_ on entry and exit.
  void Work(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  bool stop_ = false;                                // guarded by mu_
  uint64_t round_ = 0;                               // guarded by mu_
  const std::function<void(size_t)>* fn_ = nullptr;  // guarded by mu_
  size_t n_ = 0;                                     // guarded by mu_
  size_t next_ = 0;                                  // guarded by mu_
  size_t done_ = 0;                                  // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace tally::broker
