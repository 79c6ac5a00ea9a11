#include "base/metrics.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <set>

namespace tally::base {

size_t MetricStripe() {
  static std::atomic<size_t> next{0};
  thread_local const size_t stripe = next.fetch_add(1, std::memory_order_relaxed) % kMetricStripes;
  return stripe;
}

namespace {
constexpr size_t kCellsPerLine = 64 / sizeof(std::atomic<uint64_t>);
}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      // sum, then bounds + 1 buckets, rounded up to whole cache lines.
      stride_((bounds_.size() + 2 + kCellsPerLine - 1) / kCellsPerLine * kCellsPerLine),
      owned_(new std::atomic<uint64_t>[stride_ * kMetricStripes + kCellsPerLine]) {
  // The first whole cache line of the allocation.
  uintptr_t p = reinterpret_cast<uintptr_t>(owned_.get());
  p = (p + 63) & ~uintptr_t{63};
  cells_ = reinterpret_cast<std::atomic<uint64_t>*>(p);
  for (size_t i = 0; i < stride_ * kMetricStripes + kCellsPerLine; i++) owned_[i].store(0);
}

void Histogram::Observe(double v) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::atomic<uint64_t>* stripe = cells_ + MetricStripe() * stride_;
  stripe[0].fetch_add(static_cast<uint64_t>(v * 1e6), std::memory_order_relaxed);
  stripe[1 + i].fetch_add(1, std::memory_order_relaxed);
}

void Histogram::Snapshot(std::vector<uint64_t>* buckets, double* sum, uint64_t* count) const {
  buckets->assign(bounds_.size() + 1, 0);
  // The count is the buckets' sum, so the two always agree.
  uint64_t n = 0, micros = 0;
  for (size_t s = 0; s < kMetricStripes; s++) {
    const std::atomic<uint64_t>* stripe = cells_ + s * stride_;
    micros += stripe[0].load(std::memory_order_relaxed);
    for (size_t i = 0; i <= bounds_.size(); i++) {
      const uint64_t b = stripe[1 + i].load(std::memory_order_relaxed);
      (*buckets)[i] += b;
      n += b;
    }
  }
  *sum = static_cast<double>(micros) / 1e6;
  *count = n;
}

MetricsRegistry& MetricsRegistry::Global() {
  static MetricsRegistry* r = new MetricsRegistry();
  return *r;
}

MetricsRegistry::Entry* MetricsRegistry::FindOrAdd(const std::string& name, const std::string& help,
                                                   const std::string& labels, int type) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : entries_) {
    if (e->name == name && e->labels == labels) return e.get();
  }
  auto e = std::make_unique<Entry>();
  e->name = name;
  e->help = help;
  e->labels = labels;
  e->type = type;
  entries_.push_back(std::move(e));
  return entries_.back().get();
}

Counter* MetricsRegistry::GetCounter(const std::string& name, const std::string& help,
                                     const std::string& labels) {
  Entry* e = FindOrAdd(name, help, labels, 0);
  std::lock_guard<std::mutex> l(mu_);
  if (!e->counter) e->counter = std::make_unique<Counter>();
  return e->counter.get();
}

Gauge* MetricsRegistry::GetGauge(const std::string& name, const std::string& help,
                                 const std::string& labels) {
  Entry* e = FindOrAdd(name, help, labels, 1);
  std::lock_guard<std::mutex> l(mu_);
  if (!e->gauge) e->gauge = std::make_unique<Gauge>();
  return e->gauge.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name, const std::string& help,
                                         const std::string& labels, std::vector<double> bounds) {
  Entry* e = FindOrAdd(name, help, labels, 2);
  std::lock_guard<std::mutex> l(mu_);
  if (!e->histogram) e->histogram = std::make_unique<Histogram>(std::move(bounds));
  return e->histogram.get();
}

uint64_t MetricsRegistry::CounterTotal(std::string_view name, std::string_view skip) const {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t sum = 0;
  for (const auto& e : entries_) {
    if (e->type != 0 || e->name != name || !e->counter) continue;
    if (!skip.empty() && e->labels.find(skip) != std::string::npos) continue;
    sum += e->counter->value();
  }
  return sum;
}

void MetricsRegistry::HistogramTotal(std::string_view name, std::string_view skip,
                                     std::vector<double>* bounds, std::vector<uint64_t>* buckets,
                                     uint64_t* count) const {
  bounds->clear();
  buckets->clear();
  *count = 0;
  std::vector<uint64_t> b;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& e : entries_) {
    if (e->type != 2 || e->name != name || !e->histogram) continue;
    if (!skip.empty() && e->labels.find(skip) != std::string::npos) continue;
    if (bounds->empty()) {
      *bounds = e->histogram->bounds();
      buckets->assign(bounds->size() + 1, 0);
    } else if (*bounds != e->histogram->bounds()) {
      continue;
    }
    double sum = 0;
    uint64_t n = 0;
    e->histogram->Snapshot(&b, &sum, &n);
    for (size_t i = 0; i < b.size() && i < buckets->size(); i++) (*buckets)[i] += b[i];
    *count += n;
  }
}

std::string MetricsRegistry::RenderPrometheus() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<const Entry*> sorted;
  for (const auto& e : entries_) sorted.push_back(e.get());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Entry* a, const Entry* b) { return a->name < b->name; });
  std::string out;
  std::set<std::string> described;
  static const char* kTypes[] = {"counter", "gauge", "histogram"};
  for (const Entry* e : sorted) {
    if (described.insert(e->name).second) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", e->name, e->help, e->name, kTypes[e->type]);
    }
    std::string braces = e->labels.empty() ? "" : "{" + e->labels + "}";
    if (e->type == 0) {
      out += fmt::format("{}{} {}\n", e->name, braces, e->counter->value());
    } else if (e->type == 1) {
      out += fmt::format("{}{} {}\n", e->name, braces, e->gauge->value());
    } else {
      std::vector<uint64_t> b;
      double sum;
      uint64_t count;
      e->histogram->Snapshot(&b, &sum, &count);
      uint64_t cum = 0;
      std::string sep = e->labels.empty() ? "" : e->labels + ",";
      for (size_t i = 0; i < e->histogram->bounds().size(); i++) {
        cum += b[i];
        out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", e->name, sep, e->histogram->bounds()[i], cum);
      }
      cum += b.back();
      out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", e->name, sep, cum);
      out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", e->name, braces, sum, e->name, braces, count);
    }
  }
  return out;
}

}  // namespace tally::base
