// The HTTP tier's request metrics: tally_http_requests_total{route,code}
// and tally_http_request_duration_seconds{route}, by the route names of the
// route table (routes.h; "unmatched" for a path no route has). Registered
// on first use and cached, so recording is a few relaxed atomic operations.
// Internal to query/.
//
// Thread model: safe for concurrent use.
#pragma once

#include <cstdint>

#include "routes.h"

namespace tally::query::internal {

// A monotonic clock in nanoseconds, for request durations.
int64_t NowNs();

// The metrics slot of `route`: 0 for null (unmatched), else 1 + its row.
int RouteSlot(const Route* route);

// Counts one answer of the route in `route_slot` with HTTP `status`, and
// the time since `start_ns` (NowNs()). May throw std::bad_alloc the first
// time a series is registered.
void RecordRequest(int route_slot, int status, int64_t start_ns);

}  // namespace tally::query::internal
