// StatusHistory: the last 15 minutes of the pipeline, one sample a second,
// for the status page (GET /, GET /v1/status/history).
//
// A sample holds the rates of the process's own metrics over the second
// before it (events routed, deltas applied, dead letters, HTTP requests
// other than the status page's own; p99 of HTTP answers and of window
// commits, from the histograms' bucket counts) and the watermark view
// (total lag, per-input-partition lag, freshness). Samples live in a ring
// of fixed size in the process: no outside database, and memory fixed at
// start (~100 bytes plus 4 per partition per sample).
//
// Freshness is how far reads are behind the input, in milliseconds: 0 when
// every input partition has lag 0, else, over the partitions that have lag,
// the longest time since their newest visible record was published. When
// that was is estimated from the end offsets of the samples before (the
// record published between two samples, at a steady rate between them), so
// it needs neither event times (which producers set as they like) nor
// anything beyond the watermark view; its error is below one interval.
//
// Thread model: Start() runs one thread (`tally-status`) that takes a sample
// per interval and sleeps otherwise; every other method is safe for
// concurrent use. The watermark source and the metrics registry it reads
// are borrowed and must outlive it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tally::base {
class MetricsRegistry;
}

namespace tally::query {

class WatermarkSource;
struct WatermarkReport;

struct StatusHistoryOptions {
  int interval_ms = 1000;
  size_t samples = 900;  // 15 minutes at one a second
  // Optional: lag and freshness come from it (one Compute() a sample); null:
  // they read -1 (unknown).
  WatermarkSource* watermarks = nullptr;
  // Required. The metrics the rates come from.
  base::MetricsRegistry* metrics = nullptr;
  // Per-partition lag is kept for the first this many input partitions.
  size_t max_partitions = 64;
};

struct StatusSample {
  int64_t t_ms = 0;  // wall clock, milliseconds since the epoch
  double routed_per_s = 0;
  double applied_per_s = 0;  // deltas applied (an event has one or more)
  double dead_letters_per_s = 0;
  double http_per_s = 0;      // requests answered, the status page's own left out
  double http_p99_ms = -1;    // -1: no request in the interval
  double commit_p99_ms = -1;  // window commits; -1: none in the interval
  int64_t lag = -1;           // -1: unknown (no watermarks, or the broker did not answer)
  int64_t freshness_ms = -1;  // -1: unknown
};

// One input partition's lag, a value per sample (-1: unknown).
struct PartitionLagSeries {
  std::string topic;
  int32_t partition = 0;
  std::vector<int64_t> lag;
};

struct StatusHistorySnapshot {
  int interval_ms = 1000;
  std::vector<StatusSample> samples;           // oldest first
  std::vector<PartitionLagSeries> partitions;  // each aligned with `samples`
};

// The quantile q (0..1) of the observations counted in `buckets`
// (non-cumulative, last +Inf) under `bounds`, interpolated linearly within
// its bucket (as Prometheus's histogram_quantile); -1 with no observation.
// An observation in the +Inf bucket reads as the last bound.
double BucketQuantile(std::span<const double> bounds, std::span<const uint64_t> buckets, double q);

// One input partition now: the next offset not visible, the log's end.
struct PartitionOffsetsNow {
  int64_t applied = 0;
  int64_t end = 0;
};

// The freshness at `now_ms` (see the top of this file) of the partitions
// `now`, given earlier samples: times[i] (oldest first) and ends[i * n + c],
// the end offset of partition c at sample i (-1: unknown), n = now.size().
// A partition whose newest visible record is older than every sample reads
// as old as the oldest sample; -1 (unknown) when a partition has lag and
// there is no sample before.
int64_t FreshnessMs(std::span<const PartitionOffsetsNow> now, std::span<const int64_t> times,
                    std::span<const int64_t> ends, int64_t now_ms);

// Whether the lag has grown for the last 30 s of `samples` (oldest first,
// ending at now_ms): the mean lag of the 5 s ending now, of the 5 s ending
// 15 s ago and of the 5 s ending 30 s ago each exceed the one before, and
// the lag at least doubled, by 1,000 records or more. Samples of unknown lag
// are left out; a window without a sample is no growth. On true, *why says
// from what to what.
bool LagGrowing(std::span<const StatusSample> samples, int64_t now_ms, std::string* why);

class StatusHistory {
 public:
  // Takes no sample yet; Start() begins sampling. Precondition:
  // options.metrics != nullptr.
  explicit StatusHistory(StatusHistoryOptions options);
  // Stops the thread (if started) and joins it.
  ~StatusHistory();
  StatusHistory(const StatusHistory&) = delete;
  StatusHistory& operator=(const StatusHistory&) = delete;

  // Starts the sampling thread: a sample every interval_ms. Once.
  void Start();

  // Takes one sample at wall time `now_ms` (the rates cover the time since
  // the previous one; the first sample has rates 0). The sampling thread
  // calls it; tests may instead of Start().
  void SampleNow(int64_t now_ms);

  // The samples taken after `since_ms` (wall clock; 0: all), oldest first.
  StatusHistorySnapshot Since(int64_t since_ms) const;

  // LagGrowing() over the samples kept, at the newest one's time.
  bool LagGrowingNow(std::string* why) const;

 private:
  void Run();
  // The metric totals a sample's rates are differences of.
  struct Totals {
    uint64_t routed = 0, applied = 0, dead_letters = 0, http = 0;
    std::vector<uint64_t> http_buckets, commit_buckets;
  };
  Totals ReadTotals(std::vector<double>* http_bounds, std::vector<double>* commit_bounds) const;

  const StatusHistoryOptions options_;

  mutable std::mutex mu_;
  std::vector<StatusSample> ring_;  // capacity options_.samples
  std::vector<int64_t> ring_lag_;   // samples x max_partitions, per ring slot
  std::vector<int64_t> ring_end_;   // the same layout: end offsets (freshness)
  size_t next_ = 0;                 // the ring slot the next sample takes
  size_t count_ = 0;                // samples held
  std::vector<std::pair<std::string, int32_t>> partitions_;  // the per-partition columns

  // Confined to the sampling thread (or the test calling SampleNow).
  bool have_prev_ = false;
  int64_t prev_ms_ = 0;
  Totals prev_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tally::query
