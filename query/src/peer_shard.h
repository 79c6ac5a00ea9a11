// PeerShard: one I/O thread of PeerClient with everything that lives on it:
// a Boost.Asio io_context, the connection pools (one per peer) and the
// calls in flight. PeerClient hands each call to one shard; a shard's state
// is touched by its own thread only, so it takes no locks.
//
// Thread model: Post() and Stop() are safe for concurrent use from any
// thread but the shard's own; the rest runs on the shard's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "query/peer_client.h"

namespace tally::query::internal {

// The counters behind PeerClient::stats(), shared by the shards.
struct PeerCounters {
  std::atomic<uint64_t> requests{0}, ok{0}, timed_out{0}, connect_failed{0}, failed{0};
  std::atomic<uint64_t> connects{0}, reused{0}, retries{0}, stale_closed{0}, open{0};
  static void Inc(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
};

class PeerShard {
 public:
  // Starts the shard's thread, named "tally-peers-<index>". `options`,
  // `extra_headers` (options.extra_headers as sent, checked) and `counters`
  // are borrowed and must outlive the shard.
  PeerShard(const PeerClientOptions& options, const std::string& extra_headers,
            PeerCounters* counters, int index);
  // Precondition: Stop() has returned.
  ~PeerShard();
  PeerShard(const PeerShard&) = delete;
  PeerShard& operator=(const PeerShard&) = delete;

  // Hands a call (at least one request) to the shard's thread; `done` gets
  // its answers there, exactly once. Must not be called once Stop() has
  // begun (PeerClient makes sure).
  void Post(std::vector<PeerRequest> requests, PeerClient::Deadline deadline,
            PeerClient::Callback done);

  // Ends every call posted before it (kStopped), closes every connection
  // and joins the thread. Call once.
  void Stop();

 private:
  class Loop;
  std::unique_ptr<Loop> loop_;
};

}  // namespace tally::query::internal
