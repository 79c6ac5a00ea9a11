// Clocks. Wall time for event time and logs, steady time for intervals.
// Thread model: pure functions, safe anywhere.
#pragma once

#include <chrono>
#include <cstdint>

namespace tally::base {

// Milliseconds since the Unix epoch.
inline int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// Milliseconds on a monotonic clock with an arbitrary origin.
inline int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tally::base
