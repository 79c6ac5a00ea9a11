#include "query/visibility_waiter.h"

#include <fmt/core.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>

namespace tally::query {

bool AdvanceVisibility(const WatermarkReport& report, std::string_view input_topic,
                       std::string_view deltas_topic, std::vector<VisibilityTarget>* targets) {
  // applied_offset per input partition; (applied, end) per deltas partition.
  auto row = [&](std::string_view topic, int32_t partition) -> const WatermarkRow* {
    for (const WatermarkRow& r : report.rows) {
      if (r.partition == partition && r.topic == topic) return &r;
    }
    return nullptr;
  };
  bool all = true;
  for (VisibilityTarget& t : *targets) {
    if (t.derived_end < 0) {
      const WatermarkRow* in = row(input_topic, t.partition);
      if (in == nullptr || in->applied_offset <= t.offset) {
        all = false;
        continue;
      }
      if (t.derived_partition < 0) {
        t.derived_end = 0;  // nothing derived: visible
        continue;
      }
      const WatermarkRow* d = row(deltas_topic, t.derived_partition);
      if (d == nullptr) {
        all = false;
        continue;
      }
      t.derived_end = d->end_offset;
    }
    if (t.derived_partition >= 0) {
      const WatermarkRow* d = row(deltas_topic, t.derived_partition);
      if (d == nullptr || d->applied_offset < t.derived_end) all = false;
    }
  }
  return all;
}

VisibilityWaiter::VisibilityWaiter(WatermarkSource* source, std::string input_topic,
                                   std::string deltas_topic, int poll_interval_ms)
    : VisibilityWaiter([source] { return source->Compute(); }, std::move(input_topic),
                       std::move(deltas_topic), poll_interval_ms) {}

VisibilityWaiter::VisibilityWaiter(std::function<base::Result<WatermarkReport>()> compute,
                                   std::string input_topic, std::string deltas_topic,
                                   int poll_interval_ms)
    : compute_(std::move(compute)),
      input_topic_(std::move(input_topic)),
      deltas_topic_(std::move(deltas_topic)),
      poll_interval_ms_(std::max(poll_interval_ms, 0)) {
  poller_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tally-visible");
    Poll();
  });
}

VisibilityWaiter::~VisibilityWaiter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_poller_.notify_all();
  wake_waiters_.notify_all();
  poller_.join();
  // Waiters still inside Wait() return Aborted; the caller must not destroy
  // the waiter while requests use it (the HTTP server stops first).
}

base::Status VisibilityWaiter::Wait(std::vector<VisibilityTarget> targets, int timeout_ms) {
  if (targets.empty()) return base::Status::Ok();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Waiter w;
  w.targets = std::move(targets);
  std::unique_lock<std::mutex> lock(mu_);
  w.since = polls_;
  waiters_.push_back(&w);
  auto self = std::prev(waiters_.end());
  wake_poller_.notify_one();
  wake_waiters_.wait_until(lock, deadline, [&] { return w.done || stopping_; });
  waiters_.erase(self);
  if (w.done) return base::Status::Ok();
  if (stopping_) return base::Status::Aborted("stopping");
  return base::Status::DeadlineExceeded(fmt::format(
      "not all {} records visible after {} ms{}{}", w.targets.size(), timeout_ms,
      last_error_.ok() ? "" : "; watermarks: ", last_error_.ok() ? "" : last_error_.message()));
}

void VisibilityWaiter::Poll() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_poller_.wait(lock, [&] { return stopping_ || !waiters_.empty(); });
    if (stopping_) break;
    const uint64_t poll = ++polls_;
    lock.unlock();
    base::Result<WatermarkReport> report = compute_();
    lock.lock();
    last_error_ = report.ok() ? base::Status::Ok() : report.status();
    bool woke = false;
    if (report.ok()) {
      for (Waiter* w : waiters_) {
        if (w->done || w->since >= poll) continue;
        if (AdvanceVisibility(*report, input_topic_, deltas_topic_, &w->targets)) {
          w->done = true;
          woke = true;
        }
      }
    }
    if (woke) wake_waiters_.notify_all();
    // A view that failed (a broker away) is asked again less eagerly.
    const int pause_ms = report.ok() ? poll_interval_ms_ : std::max(poll_interval_ms_, 50);
    if (pause_ms > 0) {
      wake_poller_.wait_for(lock, std::chrono::milliseconds(pause_ms), [&] { return stopping_; });
    }
  }
}

}  // namespace tally::query
