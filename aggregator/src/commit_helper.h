// CommitHelper: commits applier windows of several partitions at once.
// Internal to the aggregator (applier and replay).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cassert>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "store/state_store.h"

namespace tally::aggregator {

// Runs fn(0..n-1) on the helper threads ("tally-commit") while the caller
// goes on (Start, then Wait). Applier windows are committed this way: each
// partition is its own RocksDB, so the helpers fill several memtables at
// once, and the applier applies the next window while they write the last
// one; memtable inserts are most of the applier's time.
class CommitHelper {
 public:
  explicit CommitHelper(int helpers = 1) {
    for (int i = 0; i < helpers; i++) threads_.emplace_back([this] { Loop(); });
  }
  ~CommitHelper() {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Starts fn(0..n-1) on the helper threads and returns at once. One job at
  // a time: Wait() for it before the next Start().
  void Start(size_t n, std::function<void(size_t)> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      assert(busy_ == 0);
      started_fn_ = std::move(fn);
      fn_ = &started_fn_;
      n_ = n;
      next_.store(0);
      busy_ = threads_.size();
      round_++;
    }
    cv_.notify_all();
  }
  // True while a started job runs.
  bool Busy() {
    std::lock_guard<std::mutex> l(mu_);
    return busy_ != 0;
  }
  // Returns once the started job (if any) is done.
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return busy_ == 0; });
    fn_ = nullptr;
    started_fn_ = nullptr;
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
      if (--busy_ == 0) cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  std::function<void(size_t)> started_fn_;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  size_t busy_ = 0;  // helpers still working on this round
  bool quit_ = false;
  uint64_t round_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace tally::aggregator
