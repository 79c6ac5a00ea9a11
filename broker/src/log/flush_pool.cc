#include "log/flush_pool.h"

#include <algorithm>

namespace tally::broker {

FlushPool::FlushPool(int helpers) {
  for (int i = 0; i < helpers; i++) threads_.emplace_back([this] { Helper(); });
}

FlushPool::~FlushPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void FlushPool::Run(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  fn_ = &fn;
  n_ = n;
  next_ = 0;
  done_ = 0;
  round_++;
  // One helper a call beyond the caller's own.
  const size_t wake = std::min(threads_.size(), n - 1);
  if (wake == threads_.size()) {
    start_cv_.notify_all();
  } else {
    for (size_t i = 0; i < wake; i++) start_cv_.notify_one();
  }
  Work(lock);
  done_cv_.wait(lock, [this] { return done_ == n_; });
  fn_ = nullptr;
  n_ = 0;
  next_ = 0;
}

void FlushPool::Work(std::unique_lock<std::mutex>& lock) {
  while (next_ < n_) {
    const size_t i = next_++;
    const auto* fn = fn_;
    lock.unlock();
    (*fn)(i);
    lock.lock();
    if (++done_ == n_) done_cv_.notify_all();
  }
}

void FlushPool::Helper() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t seen = 0;
  while (true) {
    // A helper woken for a round that is already over finds nothing left
    // (next_ == n_) and waits for the next.
    start_cv_.wait(lock, [&] { return stop_ || (round_ != seen && next_ < n_); });
    if (stop_) return;
    seen = round_;
    Work(lock);
  }
}

}  // namespace tally::broker
