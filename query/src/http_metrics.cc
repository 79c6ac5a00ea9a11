#include "http_metrics.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <iterator>

#include "base/metrics.h"

namespace tally::query::internal {

namespace {

// Slot 0: unmatched; slot i + 1: Routes()[i].
constexpr int kRouteSlots = kRouteCount + 1;

constexpr int kStatusSlots[] = {200, 202, 304, 400, 401, 404, 405, 413, 429, 500, 501, 503, 504};
constexpr int kStatusSlotCount = static_cast<int>(std::size(kStatusSlots));

int StatusSlot(int status) {
  int fallback = 0;
  for (int i = 0; i < kStatusSlotCount; i++) {
    if (kStatusSlots[i] == status) return i;
    if (kStatusSlots[i] == 500) fallback = i;
  }
  return fallback;  // every status we answer is listed; anything else counts as 500
}

std::string_view RouteName(int slot) {
  return slot == 0 ? std::string_view("unmatched") : Routes()[static_cast<size_t>(slot - 1)].name;
}

struct HttpMetrics {
  std::atomic<base::Counter*> requests[kRouteSlots][kStatusSlotCount] = {};
  std::atomic<base::Histogram*> latency[kRouteSlots] = {};

  static HttpMetrics& Get() {
    static HttpMetrics* m = new HttpMetrics();  // never destroyed: used until exit
    return *m;
  }

  base::Counter* RequestCounter(int route, int status) {
    int slot = StatusSlot(status);
    base::Counter* c = requests[route][slot].load(std::memory_order_acquire);
    if (c == nullptr) {
      // Racing threads get the same pointer back from the registry.
      c = base::MetricsRegistry::Global().GetCounter(
          "tally_http_requests_total", "HTTP requests answered, by route and status code.",
          fmt::format("route=\"{}\",code=\"{}\"", RouteName(route), kStatusSlots[slot]));
      requests[route][slot].store(c, std::memory_order_release);
    }
    return c;
  }

  base::Histogram* Latency(int route) {
    base::Histogram* h = latency[route].load(std::memory_order_acquire);
    if (h == nullptr) {
      h = base::MetricsRegistry::Global().GetHistogram(
          "tally_http_request_duration_seconds",
          "Time to compute an HTTP answer (excluding socket I/O), by route.",
          fmt::format("route=\"{}\"", RouteName(route)),
          {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
           5});
      latency[route].store(h, std::memory_order_release);
    }
    return h;
  }
};

}  // namespace

int RouteSlot(const Route* route) {
  return route == nullptr ? 0 : static_cast<int>(route - Routes().data()) + 1;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void RecordRequest(int route_slot, int status, int64_t start_ns) {
  HttpMetrics& m = HttpMetrics::Get();
  m.RequestCounter(route_slot, status)->Inc();
  m.Latency(route_slot)->Observe(static_cast<double>(NowNs() - start_ns) / 1e9);
}

}  // namespace tally::query::internal
