// PeerClient: how a cluster member reads from the others (SPEC section 6).
//
// A member answers every request; for partitions it does not own it asks
// the owner with the same HTTP API (SPEC section 4), marked as forwarded by
// a header the caller names (PeerClientOptions::extra_headers) so the owner
// never forwards it again. This sits on the serving path, so it is built to
// be cheap: keep-alive HTTP/1.1 connections, pooled per peer and reused, so
// there is no connect per request; every request is bounded by a deadline
// (connecting, waiting for a free connection, writing and reading alike);
// a batch to several peers goes out in parallel (GetAll). Only GET is
// spoken: reads are idempotent, which is what makes the one transparent
// retry below safe.
//
// Connections: at most max_connections_per_peer per peer and I/O thread,
// opened on demand; a request that finds them all busy waits for one
// (within its deadline). An answered request leaves its connection in the
// pool unless the answer said "Connection: close". A pooled connection the
// peer has closed (its idle timeout; a restart) is dropped when noticed:
// connections idle a second or more are checked (one non-blocking peek)
// every second and before use. A request whose connection the peer closes
// before any byte of an answer, when that connection came from the pool or
// the request was not yet written whole, is sent again, once, on a new
// connection (stats().retries). Nothing else is retried: the caller decides
// what a failure means. Idle connections are closed after idle_timeout_ms,
// below the server's own (--idle-timeout-ms, 30 s), so the peer rarely
// closes one under us.
//
// Threads: the client owns its I/O threads (io_threads, default one, named
// "tally-peers-N"), each running a private Boost.Asio io_context on which
// its connections, timers and pools live (no locks on the request path
// beyond the hand-over). A call goes to one of them, in turn. Get() and
// GetAll() hand their requests over and block the calling thread until the
// answers are in or the deadline passes; GetAllAsync() does not block and
// calls back on the I/O thread, so an HTTP handler can forward a request
// without holding its own thread for the round trip. An I/O thread only
// moves bytes and parses answers; what that costs, and how many requests
// one thread moves, is measured in query/README.md ("Remote reads").
//
// Thread model: safe for concurrent use from any number of threads. Stop()
// (or the destructor) may run while other threads are inside Get(): they
// return kStopped at once; the object must not be destroyed while another
// thread may still call into it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tally::query {

// Header fields to send, in order: {name, value}.
using PeerHeaders = std::vector<std::pair<std::string, std::string>>;

struct PeerClientOptions {
  // I/O threads (>= 1), each with its own connections; calls are spread
  // over them in turn.
  int io_threads = 1;
  // Connections open at once to one peer (>= 1), idle or busy, per I/O
  // thread. A peer's server handles one request at a time per connection,
  // so this is also the most requests in flight to one peer; more wait for
  // a connection.
  int max_connections_per_peer = 8;
  // An idle pooled connection is closed after this long (>= 1). Below the
  // server's read timeout (--idle-timeout-ms, 30 s by default) the client
  // closes first and does not race the server's close.
  int idle_timeout_ms = 20000;
  // Largest answer accepted: body (after chunked decoding) and header
  // block. A larger one fails the request (kFailed) and its connection.
  uint64_t max_body_bytes = 8 << 20;
  uint32_t max_header_bytes = 64 << 10;
  // Sent with every request, after Host and before the request's own
  // headers: the cluster's "forwarded" mark, for one.
  PeerHeaders extra_headers;
};

enum class PeerOutcome {
  kOk,             // a whole answer arrived, whatever its HTTP status
  kTimedOut,       // the deadline passed first (the peer may still act on it)
  kConnectFailed,  // no connection could be made: refused, unreachable, name not found
  kFailed,         // the connection broke, or the answer was not HTTP or too large
  kInvalid,        // a malformed peer address, target or header; nothing sent
  kStopped,        // the client was stopped first
};

// "ok", "timed_out", "connect_failed", "failed", "invalid", "stopped".
const char* PeerOutcomeName(PeerOutcome outcome);

struct PeerRequest {
  std::string peer;    // base URL, "http://HOST:PORT" ("http://HOST" is port 80)
  std::string target;  // origin form: "/v1/posts/counts?ids=1,2"
  PeerHeaders headers;
};

// One answer. Every field but `outcome` and `error` is empty unless
// outcome is kOk.
struct PeerResponse {
  PeerOutcome outcome = PeerOutcome::kStopped;
  std::string error;  // one line saying what went wrong (peer and target included); "" if kOk
  int status = 0;     // the HTTP status
  // The header fields as received, each "Name: value\r\n" (no status line).
  std::string headers;
  std::string body;  // decoded (chunked answers arrive whole)

  bool ok() const { return outcome == PeerOutcome::kOk; }
  // The value of the first field named `name` (case-insensitive), without
  // surrounding blanks; "" if absent. Views into `headers`.
  std::string_view Header(std::string_view name) const;
  // OK for kOk (whatever the HTTP status), else DeadlineExceeded (kTimedOut),
  // Unavailable (kConnectFailed, kFailed), InvalidArgument (kInvalid) or
  // Aborted (kStopped), with `error` as the message.
  base::Status ToStatus() const;
};

// Counters since the client started, for metrics and tests.
struct PeerClientStats {
  uint64_t requests = 0;          // requests taken (each request of a GetAll counts)
  uint64_t ok = 0;                // answered (any HTTP status)
  uint64_t timed_out = 0;         // outcome kTimedOut
  uint64_t connect_failed = 0;    // outcome kConnectFailed
  uint64_t failed = 0;            // outcome kFailed
  uint64_t connects = 0;          // connections opened (attempts, failed ones included)
  uint64_t reused = 0;            // requests sent on a pooled connection
  uint64_t retries = 0;           // requests sent again on a new connection (the one retry)
  uint64_t stale_closed = 0;      // idle pooled connections found closed by the peer
  uint64_t open_connections = 0;  // now, idle or busy or connecting
};

class PeerClient {
 public:
  using Clock = std::chrono::steady_clock;
  using Deadline = Clock::time_point;
  using Callback = std::function<void(std::vector<PeerResponse>)>;

  // Starts the I/O thread. InvalidArgument for bad options (a bad
  // extra_headers field included).
  static base::Result<std::unique_ptr<PeerClient>> Start(PeerClientOptions options);
  // Stops (see Stop()).
  ~PeerClient();
  PeerClient(const PeerClient&) = delete;
  PeerClient& operator=(const PeerClient&) = delete;

  // GET `target` from `peer` with `headers` (after the options'
  // extra_headers). Returns by `deadline` (its outcome kTimedOut if the
  // answer was not in; a past deadline sends nothing): connecting, waiting
  // for a pooled connection, writing and reading are all bounded by it. A
  // refused connection fails at once. Any HTTP status is an answer (kOk).
  // Safe for concurrent use; blocks the caller.
  PeerResponse Get(std::string_view peer, std::string_view target, const PeerHeaders& headers,
                   Deadline deadline);

  // Sends every request at once, to as many peers as they name (in
  // parallel, within each peer's connection limit), and returns their
  // answers in the order asked once all are in or the deadline has passed
  // (each unanswered one kTimedOut; the answered ones are kept). A dead peer
  // costs its own requests only. Safe for concurrent use; blocks the caller.
  std::vector<PeerResponse> GetAll(std::vector<PeerRequest> requests, Deadline deadline);

  // GetAll without blocking: `done` gets the answers, in the order asked,
  // exactly once, on the client's I/O thread (so it must be quick and must
  // not block or call Stop()), or on the calling thread before this returns
  // when the client is stopped or `requests` is empty. Safe for concurrent
  // use.
  void GetAllAsync(std::vector<PeerRequest> requests, Deadline deadline, Callback done);

  // Ends every request in flight (kStopped), closes every connection and
  // joins the I/O thread; later calls answer kStopped at once. Idempotent;
  // safe from any thread but the client's own (a GetAllAsync callback).
  void Stop();

  // A snapshot of the counters. Safe for concurrent use.
  PeerClientStats stats() const;

  // A deadline `ms` milliseconds from now.
  static Deadline In(int64_t ms) { return Clock::now() + std::chrono::milliseconds(ms); }

 private:
  struct Impl;
  explicit PeerClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally::query
