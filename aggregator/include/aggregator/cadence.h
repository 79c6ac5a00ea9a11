// How far apart a cluster member publishes and commits: the router's linger
// and the applier's window, stretched by the share of the partitions the
// member was given (aggregator/README.md, "Windows in a cluster, and at
// rest").
// Thread model: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tally::aggregator {

// `ms` times total/given, within [ms, max(ms, max_ms)]: a member given 1/k
// of the partitions waits k times as long, so k members send the broker as
// many messages a second as one. `ms` itself when given is 0 or all.
inline int StretchedByShare(int ms, int max_ms, int64_t total, int64_t given) {
  if (given <= 0 || total <= given) return ms;
  const int64_t stretched = static_cast<int64_t>(ms) * total / given;
  return static_cast<int>(std::clamp<int64_t>(stretched, ms, std::max(ms, max_ms)));
}

}  // namespace tally::aggregator
