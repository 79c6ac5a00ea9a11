// WaitFor: how a test waits for something another thread or process does,
// by polling a condition against a deadline instead of sleeping a fixed time
// to order events. Part of tally_testing.
//
// Thread model: safe for concurrent use; `condition` runs on the caller's
// thread.
#pragma once

#include <functional>

namespace tally::testing {

// Calls `condition` at once and then every 10 ms: true as soon as it holds,
// false once `timeout_ms` milliseconds have passed without it holding.
bool WaitFor(const std::function<bool()>& condition, int timeout_ms);

}  // namespace tally::testing
