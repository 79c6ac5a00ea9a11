#include "query/status_history.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <chrono>

#include "base/clock.h"
#include "base/metrics.h"
#include "query/watermarks.h"

namespace tally::query {

namespace {

// The status page's own requests (routes "status_...", "status") are left
// out of the HTTP rates: looking at the page must not change what it shows.
constexpr std::string_view kOwnRoutes = "route=\"status";

// Bucket-wise a - b (counters only grow; a reset reads as 0).
std::vector<uint64_t> Minus(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  std::vector<uint64_t> d(a.size(), 0);
  for (size_t i = 0; i < a.size(); i++) {
    const uint64_t before = i < b.size() ? b[i] : 0;
    d[i] = a[i] >= before ? a[i] - before : 0;
  }
  return d;
}

uint64_t Delta(uint64_t now, uint64_t before) { return now >= before ? now - before : 0; }

// The mean known lag of the samples in (end - 5 s, end]; false if none.
bool MeanLag(std::span<const StatusSample> samples, int64_t end_ms, double* mean) {
  double sum = 0;
  int n = 0;
  for (const StatusSample& s : samples) {
    if (s.lag < 0 || s.t_ms <= end_ms - 5000 || s.t_ms > end_ms) continue;
    sum += static_cast<double>(s.lag);
    n++;
  }
  if (n == 0) return false;
  *mean = sum / n;
  return true;
}

}  // namespace

double BucketQuantile(std::span<const double> bounds, std::span<const uint64_t> buckets, double q) {
  uint64_t total = 0;
  for (uint64_t b : buckets) total += b;
  if (total == 0 || bounds.empty()) return -1;
  const double rank = q * static_cast<double>(total);
  uint64_t below = 0;
  for (size_t i = 0; i < buckets.size(); i++) {
    if (buckets[i] == 0 || static_cast<double>(below + buckets[i]) < rank) {
      below += buckets[i];
      continue;
    }
    if (i >= bounds.size()) return bounds.back();  // the +Inf bucket
    const double lower = i == 0 ? 0 : bounds[i - 1];
    const double within = (rank - static_cast<double>(below)) / static_cast<double>(buckets[i]);
    return lower + (bounds[i] - lower) * std::clamp(within, 0.0, 1.0);
  }
  return bounds.back();
}

int64_t FreshnessMs(std::span<const PartitionOffsetsNow> now, std::span<const int64_t> times,
                    std::span<const int64_t> ends, int64_t now_ms) {
  const size_t n = now.size();
  int64_t worst = 0;
  for (size_t c = 0; c < n; c++) {
    const int64_t applied = now[c].applied;
    if (applied >= now[c].end) continue;  // everything published is visible
    // Walk back to the newest sample whose end the visible records reach:
    // the newest visible record came between it and the one after.
    double next_t = static_cast<double>(now_ms), next_end = static_cast<double>(now[c].end);
    double published = -1;
    for (size_t i = times.size(); i > 0; i--) {
      const int64_t end = ends[(i - 1) * n + c];
      if (end < 0) break;  // unknown: no older sample is comparable either
      const double t = static_cast<double>(times[i - 1]);
      if (end <= applied) {
        const double span = std::max(1.0, next_end - static_cast<double>(end));
        published = t + (next_t - t) * std::clamp((applied - end) / span, 0.0, 1.0);
        break;
      }
      next_t = t;
      next_end = static_cast<double>(end);
    }
    // Older than every sample: at least as old as the oldest; with no
    // sample before, nothing says how old.
    if (published < 0) {
      if (times.empty()) return -1;
      published = next_t;
    }
    worst = std::max(worst, static_cast<int64_t>(static_cast<double>(now_ms) - published));
  }
  return worst;
}

bool LagGrowing(std::span<const StatusSample> samples, int64_t now_ms, std::string* why) {
  double then = 0, mid = 0, now = 0;
  if (!MeanLag(samples, now_ms - 30000, &then) || !MeanLag(samples, now_ms - 15000, &mid) ||
      !MeanLag(samples, now_ms, &now)) {
    return false;
  }
  // Growth within the noise of a steady load (lag moves by a window's worth
  // from one sample to the next) is no alert: it must at least double, and
  // by 1,000 records.
  if (!(now > mid && mid > then && now - then >= std::max(1000.0, then))) return false;
  if (why != nullptr) {
    *why =
        fmt::format("lag has grown for 30 s: {:.0f} -> {:.0f} -> {:.0f} records", then, mid, now);
  }
  return true;
}

StatusHistory::StatusHistory(StatusHistoryOptions options)
    : options_(std::move(options)),
      ring_(std::max<size_t>(options_.samples, 1)),
      ring_lag_(ring_.size() * options_.max_partitions, -1),
      ring_end_(ring_.size() * options_.max_partitions, -1) {
  assert(options_.metrics != nullptr);
}

StatusHistory::~StatusHistory() {
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StatusHistory::Start() {
  assert(!thread_.joinable());
  thread_ = std::thread([this] { Run(); });
}

void StatusHistory::Run() {
  pthread_setname_np(pthread_self(), "tally-status");
  const auto interval = std::chrono::milliseconds(options_.interval_ms);
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> l(stop_mu_);
  while (!stop_) {
    l.unlock();
    SampleNow(base::WallMs());
    l.lock();
    // On a fixed schedule; a slow sample (a broker that does not answer)
    // skips the ticks it overran rather than sampling back to back.
    next += interval;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + interval;
    stop_cv_.wait_until(l, next, [this] { return stop_; });
  }
}

StatusHistory::Totals StatusHistory::ReadTotals(std::vector<double>* http_bounds,
                                                std::vector<double>* commit_bounds) const {
  base::MetricsRegistry& m = *options_.metrics;
  Totals t;
  t.routed = m.CounterTotal("tally_router_events_total");
  t.applied = m.CounterTotal("tally_applier_deltas_total");
  t.dead_letters = m.CounterTotal("tally_router_invalid_total");
  t.http = m.CounterTotal("tally_http_requests_total", kOwnRoutes);
  uint64_t count = 0;
  m.HistogramTotal("tally_http_request_duration_seconds", kOwnRoutes, http_bounds, &t.http_buckets,
                   &count);
  m.HistogramTotal("tally_applier_commit_seconds", {}, commit_bounds, &t.commit_buckets, &count);
  return t;
}

void StatusHistory::SampleNow(int64_t now_ms) {
  StatusSample s;
  s.t_ms = now_ms;
  std::vector<double> http_bounds, commit_bounds;
  Totals t = ReadTotals(&http_bounds, &commit_bounds);
  if (have_prev_ && now_ms > prev_ms_) {
    const double secs = static_cast<double>(now_ms - prev_ms_) / 1000.0;
    s.routed_per_s = static_cast<double>(Delta(t.routed, prev_.routed)) / secs;
    s.applied_per_s = static_cast<double>(Delta(t.applied, prev_.applied)) / secs;
    s.dead_letters_per_s = static_cast<double>(Delta(t.dead_letters, prev_.dead_letters)) / secs;
    s.http_per_s = static_cast<double>(Delta(t.http, prev_.http)) / secs;
    const double http_p99 =
        BucketQuantile(http_bounds, Minus(t.http_buckets, prev_.http_buckets), 0.99);
    const double commit_p99 =
        BucketQuantile(commit_bounds, Minus(t.commit_buckets, prev_.commit_buckets), 0.99);
    s.http_p99_ms = http_p99 < 0 ? -1 : http_p99 * 1000;
    s.commit_p99_ms = commit_p99 < 0 ? -1 : commit_p99 * 1000;
  }
  have_prev_ = true;
  prev_ms_ = now_ms;
  prev_ = std::move(t);

  std::vector<std::pair<std::string, int32_t>> columns;
  std::vector<int64_t> lags;
  std::vector<PartitionOffsetsNow> offsets;
  if (options_.watermarks != nullptr) {
    // A sample the broker cannot answer within its interval is unknown,
    // not late: the next one is due.
    auto report = options_.watermarks->Compute(base::SteadyMs() + options_.interval_ms);
    if (report.ok()) {
      s.lag = report->lag;
      for (const WatermarkRow& r : report->rows) {
        if (r.topic == options_.watermarks->deltas_topic()) continue;
        if (columns.size() >= options_.max_partitions) break;
        columns.emplace_back(r.topic, r.partition);
        lags.push_back(r.lag);
        offsets.push_back({r.applied_offset, r.end_offset});
      }
    }
  }

  std::lock_guard<std::mutex> l(mu_);
  const size_t slot = next_;
  const size_t width = options_.max_partitions;
  if (!columns.empty()) {
    // The partitions changed (added to a topic, or the first report): the
    // older columns no longer line up, so they read unknown.
    if (columns != partitions_) {
      std::fill(ring_lag_.begin(), ring_lag_.end(), -1);
      std::fill(ring_end_.begin(), ring_end_.end(), -1);
      partitions_ = std::move(columns);
    }
    // The samples before this one, oldest first, for the freshness.
    std::vector<int64_t> times, ends;
    times.reserve(count_);
    ends.reserve(count_ * offsets.size());
    for (size_t i = count_; i > 0; i--) {
      const size_t at = (slot + ring_.size() - i) % ring_.size();
      times.push_back(ring_[at].t_ms);
      ends.insert(ends.end(), ring_end_.begin() + static_cast<ptrdiff_t>(at * width),
                  ring_end_.begin() + static_cast<ptrdiff_t>(at * width + offsets.size()));
    }
    s.freshness_ms = FreshnessMs(offsets, times, ends, now_ms);
  }
  ring_[slot] = s;
  int64_t* lag_row = &ring_lag_[slot * width];
  int64_t* end_row = &ring_end_[slot * width];
  std::fill(lag_row, lag_row + width, -1);
  std::fill(end_row, end_row + width, -1);
  for (size_t c = 0; c < offsets.size(); c++) {
    lag_row[c] = lags[c];
    end_row[c] = offsets[c].end;
  }
  next_ = (next_ + 1) % ring_.size();
  count_ = std::min(count_ + 1, ring_.size());
}

StatusHistorySnapshot StatusHistory::Since(int64_t since_ms) const {
  StatusHistorySnapshot out;
  out.interval_ms = options_.interval_ms;
  std::lock_guard<std::mutex> l(mu_);
  const size_t first = (next_ + ring_.size() - count_) % ring_.size();
  std::vector<size_t> slots;
  for (size_t i = 0; i < count_; i++) {
    const size_t slot = (first + i) % ring_.size();
    if (ring_[slot].t_ms > since_ms) slots.push_back(slot);
  }
  out.samples.reserve(slots.size());
  for (size_t slot : slots) out.samples.push_back(ring_[slot]);
  for (size_t c = 0; c < partitions_.size(); c++) {
    PartitionLagSeries series{partitions_[c].first, partitions_[c].second, {}};
    series.lag.reserve(slots.size());
    for (size_t slot : slots) series.lag.push_back(ring_lag_[slot * options_.max_partitions + c]);
    out.partitions.push_back(std::move(series));
  }
  return out;
}

bool StatusHistory::LagGrowingNow(std::string* why) const {
  std::vector<StatusSample> recent;
  {
    std::lock_guard<std::mutex> l(mu_);
    // 35 s of samples are all the rule looks at.
    const size_t want =
        std::min(count_, static_cast<size_t>(35000 / std::max(1, options_.interval_ms) + 2));
    for (size_t i = want; i > 0; i--)
      recent.push_back(ring_[(next_ + ring_.size() - i) % ring_.size()]);
  }
  if (recent.empty()) return false;
  return LagGrowing(recent, recent.back().t_ms, why);
}

}  // namespace tally::query
