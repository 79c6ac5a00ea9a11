// Replay: rebuilds the state from the logs (SPEC section 2, "Rebuild").
//
// From tally.deltas (the default), the rebuilt state equals the live one
// exactly: the same deltas, in each partition's order, through the same
// WindowApplier and marks. With from_input, the router runs in-process over
// the input topics and feeds the appliers directly, for when the mapping of
// events to effects changed; deltas of different input partitions may then
// interleave differently from the live run. Neither writes to any topic or
// consumer group.
// Thread model: Replay() occupies the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"
#include "store/state_store.h"

namespace tally::aggregator {

struct ReplayProgress {
  uint64_t records_done = 0;
  uint64_t records_total = 0;
  double rate = 0;         // records per second since the start
  double eta_seconds = 0;  // 0 when unknown
  bool finished = false;
};

struct ReplayOptions {
  base::KafkaOptions kafka;
  std::string deltas_topic = std::string(base::kDeltasTopic);
  std::vector<std::string> input_topics = {std::string(base::kEventsTopic)};
  bool from_input = false;
  bool allow_partial = false;  // accept logs that no longer start at offset 0
  int commit_every_ms = 100;
  // Called about once a second, and once at the end. May be empty.
  std::function<void(const ReplayProgress&)> on_progress;
};

// Rebuilds into `store`, which must be empty (no progress in any partition).
// Reads every partition up to the high watermark it had when replay started,
// then returns OK. FailedPrecondition if the store is not empty or a log was
// truncated (low watermark > 0) and !allow_partial; Aborted if *stop became
// true first (what was applied is committed).
base::Status Replay(const ReplayOptions& options, store::StateStore* store, const std::atomic<bool>* stop);

}  // namespace tally::aggregator
