// EventRouter: turns one validated event into the deltas it causes, each
// keyed by the entity it touches and bound for that entity's partition of
// tally.deltas (SPEC section 1's effect table).
//
// Deterministic: the same event at the same source coordinates always gives
// the same deltas with the same effect indexes, which is what lets the
// applier recognise a delta re-sent by a restarted router.
// Thread model: externally synchronized; one per router thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "schemas/delta.h"
#include "schemas/event.h"

namespace tally::aggregator {

class EventRouter {
 public:
  // Precondition: partitions > 0 (the partition count of tally.deltas).
  explicit EventRouter(uint32_t partitions);

  // Appends the effects of `event`, read from (topic, partition) at `offset`,
  // to builders[PartitionOf(entity)]. `builders` has one builder per deltas
  // partition. Returns the number of deltas appended (0 for events whose
  // effects are all no-ops).
  uint32_t Route(const schemas::Event& event, std::string_view topic, int32_t partition,
                 int64_t offset, std::vector<schemas::DeltaBatchBuilder>* builders);

  uint32_t partitions() const { return partitions_; }

 private:
  uint32_t partitions_;
  std::vector<uint64_t> scratch_;  // mention targets, deduplicated
};

}  // namespace tally::aggregator
