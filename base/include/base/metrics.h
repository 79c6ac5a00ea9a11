// Process metrics, rendered in the Prometheus text format by GET /metrics.
//
// Metrics are registered once (by name and a fixed label set) and then
// updated lock-free from any thread. Registration returns a pointer owned by
// the registry that stays valid for the life of the process.
// Thread model: safe for concurrent use.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tally::base {

// Counters and histograms are striped: each thread adds to one of
// kMetricStripes cache lines, so threads that update the same metric on
// every request (the HTTP I/O threads) do not pass its cache line back and
// forth; reads sum the stripes.
inline constexpr size_t kMetricStripes = 4;
// The stripe of the calling thread (threads take them in turn).
size_t MetricStripe();

class Counter {
 public:
  void Inc(uint64_t n = 1) { cells_[MetricStripe()].v.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const {
    uint64_t sum = 0;
    for (const Cell& c : cells_) sum += c.v.load(std::memory_order_relaxed);
    return sum;
  }

 private:
  struct alignas(64) Cell {
    std::atomic<uint64_t> v{0};
  };
  Cell cells_[kMetricStripes];
};

class Gauge {
 public:
  void Set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
  void Add(int64_t d) { v_.fetch_add(d, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// Cumulative histogram over fixed upper bounds (seconds for latencies).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Snapshot of bucket counts (non-cumulative; last is +Inf), sum and count.
  void Snapshot(std::vector<uint64_t>* buckets, double* sum, uint64_t* count) const;

 private:
  // Stripe s holds the sum (micros) and the buckets at
  // cells_[s * stride_ ...], each stripe starting on its own cache line.
  std::vector<double> bounds_;
  size_t stride_;
  std::unique_ptr<std::atomic<uint64_t>[]> owned_;
  std::atomic<uint64_t>* cells_;
};

class MetricsRegistry {
 public:
  // The process-wide registry.
  static MetricsRegistry& Global();

  // `name` is a Prometheus metric name ("tally_router_events_total");
  // `labels` is "" or a rendered label set without braces
  // ('topic="tally.events",partition="3"'). The same (name, labels) returns
  // the same metric.
  Counter* GetCounter(const std::string& name, const std::string& help, const std::string& labels = "");
  Gauge* GetGauge(const std::string& name, const std::string& help, const std::string& labels = "");
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::string& labels = "",
                          std::vector<double> bounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                        0.05, 0.1, 0.25, 0.5, 1, 2.5});

  std::string RenderPrometheus() const;

  // The sum over every label set of the counters named `name`, leaving out
  // those whose labels contain `skip` (when not empty); 0 if there is none.
  // For a sampler reading totals once a second: takes the registry's mutex
  // and walks its entries.
  uint64_t CounterTotal(std::string_view name, std::string_view skip = {}) const;

  // The histograms named `name` (labels containing `skip` left out) merged:
  // their common bounds in *bounds, non-cumulative bucket counts (last is
  // +Inf) in *buckets, *count the observations. A histogram whose bounds
  // differ from the first one's is left out. Empty *bounds if none.
  void HistogramTotal(std::string_view name, std::string_view skip, std::vector<double>* bounds,
                      std::vector<uint64_t>* buckets, uint64_t* count) const;

 private:
  struct Entry {
    std::string name, help, labels;
    int type;  // 0 counter, 1 gauge, 2 histogram
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  Entry* FindOrAdd(const std::string& name, const std::string& help, const std::string& labels, int type);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

}  // namespace tally::base
