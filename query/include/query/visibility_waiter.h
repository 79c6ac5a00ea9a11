// VisibilityWaiter: waits until the records a request published are visible
// to reads, for POST /v1/events?wait=visible and the resets' ?wait=visible.
//
// It judges visibility by the view GET /v1/watermarks answers from
// (WatermarkSource: the router's committed offsets and deltas positions,
// the store's progress, the topics' ends), so it holds in `tally up` and in
// a `tally serve` beside a separate aggregator alike. One thread of its own
// computes that view back to back, every `poll_interval_ms`, while anyone
// waits (and sleeps otherwise), and wakes the waiters it shows visible.
//
// The rule (AdvanceVisibility): a record at (input partition p, offset o)
// is visible once input row p's applied_offset > o, which is the next
// offset whose effect is not yet visible (query/README.md). A follow or
// unfollow also derives the target's followers and unread follower in the
// target's deltas partition t; the applier publishes those, acknowledged,
// before it writes the window that applied the follow, so before the report
// that first shows the follow visible read the store, so below that
// report's end of t. The record is wholly visible once t's applied offset
// reaches that end.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"
#include "query/watermarks.h"

namespace tally::query {

// One published record a request waits for.
struct VisibilityTarget {
  int32_t partition = 0;           // input partition
  int64_t offset = 0;              // its offset there
  int32_t derived_partition = -1;  // deltas partition of its derived effects; -1: none
  int64_t derived_end = -1;        // set when the record shows: the end of that partition then
};

// Advances `targets` by what `report` shows (rows of `input_topic` and
// `deltas_topic`); true when every target is wholly visible. A target whose
// partition is not in the report stays not visible. Thread model: pure.
bool AdvanceVisibility(const WatermarkReport& report, std::string_view input_topic,
                       std::string_view deltas_topic, std::vector<VisibilityTarget>* targets);

class VisibilityWaiter {
 public:
  // `source` is borrowed and must outlive the waiter; `input_topic` is the
  // topic the targets' partitions belong to. Starts the polling thread.
  VisibilityWaiter(WatermarkSource* source, std::string input_topic, std::string deltas_topic,
                   int poll_interval_ms = 1);
  // Ends every wait (Aborted) and joins the thread.
  // The same over the views `compute` gives (a cluster's merged
  // watermarks); called on the waiter's thread only.
  VisibilityWaiter(std::function<base::Result<WatermarkReport>()> compute, std::string input_topic,
                   std::string deltas_topic, int poll_interval_ms = 1);
  ~VisibilityWaiter();
  VisibilityWaiter(const VisibilityWaiter&) = delete;
  VisibilityWaiter& operator=(const VisibilityWaiter&) = delete;

  // Blocks until every target is visible (OK; at once for none), or
  // `timeout_ms` passes (DeadlineExceeded, naming how many are not yet
  // visible and the last error of the view, if it failed), or the waiter is
  // destroyed (Aborted). Only views computed after the call began count.
  // Safe for concurrent use; each call blocks its own thread only.
  base::Status Wait(std::vector<VisibilityTarget> targets, int timeout_ms);

 private:
  struct Waiter {
    std::vector<VisibilityTarget> targets;
    uint64_t since = 0;  // only polls numbered above this count
    bool done = false;
  };

  void Poll();

  std::function<base::Result<WatermarkReport>()> compute_;
  const std::string input_topic_;
  const std::string deltas_topic_;
  const int poll_interval_ms_;
  std::mutex mu_;
  std::condition_variable wake_poller_;
  std::condition_variable wake_waiters_;
  std::list<Waiter*> waiters_;
  uint64_t polls_ = 0;       // polls started
  base::Status last_error_;  // of the last poll
  bool stopping_ = false;
  std::thread poller_;
};

}  // namespace tally::query
