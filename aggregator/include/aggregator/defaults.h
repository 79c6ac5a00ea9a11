// The aggregator's defaults that more than one place states: the options
// structs (RouterOptions, ApplierOptions) and the flags of `tally up` and
// `tally aggregate` take them from here, so --help and a library user see
// the same value. The consumer group's default, base::kDefaultGroup, stands
// in base/kafka.h beside the topic names.
// Thread model: constants only.
#pragma once

#include <cstddef>
#include <string_view>

namespace tally::aggregator {

// Applier window once caught up, milliseconds (--flush-ms); a backlog
// stretches it to 10x.
inline constexpr int kDefaultFlushMs = 20;

// The longest a cluster member given a share of the partitions stretches
// the router's linger and the applier's window to (StretchedByShare in
// cadence.h; RouterOptions::max_linger_ms, ApplierOptions::max_flush_ms).
inline constexpr int kDefaultMaxStretchedMs = 60;

// An applier window is cut early when it touches this many keys (--key-budget).
inline constexpr size_t kDefaultKeyBudget = 200000;

}  // namespace tally::aggregator
