// CommitHelper: commits applier windows of several partitions at once.
// Internal to the aggregator (applier and replay).
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "store/state_store.h"

namespace tally::aggregator {

// Runs fn(0..n-1) on the calling thread and one helper thread ("tally-commit")
// and returns once all calls have. Applier windows are committed this way:
// each partition is its own RocksDB, so two memtables fill at once, and the
// memtable inserts are most of the applier's time.
class CommitHelper {
 public:
  CommitHelper() : thread_([this] { Loop(); }) {}
  ~CommitHelper() {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void Run(size_t n, const std::function<void(size_t)>& fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      helper_busy_ = true;
      round_++;
    }
    cv_.notify_all();
    Work();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !helper_busy_; });
    fn_ = nullptr;
  }

 private:
  void Work() {
    for (size_t i; (i = next_.fetch_add(1)) < n_;) (*fn_)(i);
  }
  void Loop() {
    pthread_setname_np(pthread_self(), "tally-commit");
    store::DisablePerfCounters();
    uint64_t seen = 0;
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return quit_ || round_ != seen; });
      if (quit_) return;
      seen = round_;
      l.unlock();
      Work();
      l.lock();
      helper_busy_ = false;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  bool helper_busy_ = false;
  bool quit_ = false;
  uint64_t round_ = 0;
  std::thread thread_;
};

}  // namespace tally::aggregator
