// Applier: the second stage of the aggregator. Consumes tally.deltas,
// coalesces each partition's deltas over a flush window and commits every
// window to that partition's RocksDB with its offsets (window_applier.h).
//
// The applier takes every partition of the state itself (no consumer group:
// the state directory holds all partitions and the HTTP tier answers from
// it) and starts each at the next offset stored in RocksDB. Two processes
// over two state directories are two complete replicas.
// Thread model: Run() occupies the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "aggregator/defaults.h"
#include "base/kafka.h"
#include "base/status.h"
#include "store/state_store.h"

namespace tally::aggregator {

struct ApplierOptions {
  base::KafkaOptions kafka;
  // Its consumer's group.id is "<group>-applier" (never joined).
  std::string group = std::string(base::kDefaultGroup);
  std::string deltas_topic = std::string(base::kDeltasTopic);
  int flush_ms = kDefaultFlushMs;  // window length once caught up (a backlog stretches it to 10x)
  size_t key_budget = kDefaultKeyBudget;  // a window is cut early when it touches this many keys
};

class Applier {
 public:
  // `store` must outlive the applier and have one partition per deltas partition.
  Applier(ApplierOptions options, store::StateStore* store);
  ~Applier();

  // Runs until *stop becomes true, then commits the last window. An error Status when the state cannot be written or the log
  // no longer holds what the state needs.
  base::Status Run(const std::atomic<bool>* stop);

 private:
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace tally::aggregator
