// HttpServer: the HTTP/1.1 transport of the query tier.
//
// Serves a QueryService from an epoll loop per I/O thread, over
// libhttp-parser (query/README.md, "The transport"). Every request goes to
// QueryService::Handle(), which does the routing. Connections are
// keep-alive. Pipelined requests, however many, are all answered, in order:
// a connection's requests are handled one at a time, and it is not read
// while answers it has not taken pile up, so a client that sends more waits
// in TCP.
//
// Threads: `threads` I/O threads each run a loop and answer the reads there
// (a few microseconds of RocksDB and fmt each). Requests that may
// wait for a broker (POST /v1/events, the resets, /v1/watermarks), and in a
// cluster the reads that may ask another member (QueryService::MayBlock),
// run on a separate pool of `blocking_threads`, so a slow broker or peer
// never stalls reads. The transport reads X-Tally-Forwarded into
// Request::forwarded and writes Response::member as X-Tally-Member.
//
// Limits: a body over max_body_bytes is answered 413 payload_too_large (the
// connection stays usable); a body announced or sent over
// max_readable_body_bytes is not read at all and the connection is closed
// without an answer, as are request lines and headers over their limits and
// bytes that are not HTTP. A connection that takes longer than
// read_timeout_ms to send a whole request (idle keep-alive included) is
// closed; beyond max_connections open connections, new ones wait in the
// listen backlog until one closes. With rate_limit_per_s > 0, each client
// address (IPv6: its /64) gets a token bucket; a request over it is
// answered 429 rate_limited with Retry-After.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tally::query {

class QueryService;

struct ServerOptions {
  std::string listen = "127.0.0.1:8080";     // HOST:PORT; port 0 picks a free one
  int threads = 2;                           // I/O threads (>= 1)
  // Threads for requests that may block (>= 1). A POST with ?wait=visible
  // holds one until its records are visible (tens of ms, at most
  // --visible-timeout-ms), so there are enough for many at once; a waiting
  // thread costs its stack and nothing else.
  int blocking_threads = 16;
  size_t max_body_bytes = 1 << 20;           // larger bodies: 413
  size_t max_readable_body_bytes = 4 << 20;  // larger bodies: connection closed unread
  size_t max_url_bytes = 16 << 10;
  size_t max_header_bytes = 8 << 10;  // per header field value
  size_t max_header_count = 100;
  int read_timeout_ms = 30000;         // idle keep-alive and slow request reads
  int write_timeout_ms = 10000;        // writing one answer
  int handle_timeout_ms = 30000;       // answering one request (publishes wait for acks)
  int shutdown_grace_ms = 10000;       // Stop(): longest wait for requests in flight
  // Stop(): called once the grace (within a process's stop, what is left
  // of base::kStopBudgetMs) has passed with requests still waiting on
  // something else (a publish the broker does not answer), to make them
  // end now; they answer 503. May be null.
  std::function<void()> abort_waits;
  size_t max_connections = 10000;      // open connections at once (>= 1)
  // Requests per second per client address; 0 = no limit. GET /healthz and
  // GET /metrics are never limited. rate_burst: bucket size (0 = one
  // second's worth, at least 1).
  double rate_limit_per_s = 0;
  double rate_burst = 0;
  // In a cluster: true for a request another member forwarded
  // (ClusterRouting::FromMember on its X-Tally-Forwarded and Authorization
  // values, called only when the former is present). Such a request is not
  // rate limited here: the limit applies once, at the member the client
  // reached. Null: every request is limited. Called on the I/O threads
  // concurrently; must be cheap.
  std::function<bool(std::string_view forwarded, std::string_view authorization)> from_member;
};

// The listening sockets of an HttpServer, taken before it serves. A
// process binds its port first of all, so that a taken port fails its start
// before it joins anything (a cluster member's consumer groups would
// otherwise see it join and leave). The sockets listen from Bind() on:
// connections made before the server serves wait in the listen backlog.
//
// Thread model: externally synchronized; HttpServer::Start takes it over.
class HttpListener {
 public:
  // Binds options.listen (port 0: a free one), one SO_REUSEPORT socket per
  // I/O thread (options.threads), after checking that no other socket
  // listens there. InvalidArgument for a malformed address or threads < 1;
  // Unavailable naming the address when it cannot be bound (port taken,
  // address not local). The caller owns the listener.
  static base::Result<std::unique_ptr<HttpListener>> Bind(const ServerOptions& options);
  // Closes the sockets no server took.
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // The port bound (useful with port 0).
  uint16_t port() const { return port_; }

 private:
  friend class HttpServer;
  HttpListener() = default;
  std::string listen_;    // options.listen as bound
  std::vector<int> fds_;  // one listening socket per I/O thread
  uint16_t port_ = 0;
};

class HttpServer {
 public:
  // Binds options.listen (HttpListener::Bind) and starts serving `service`
  // (borrowed; must outlive the server). InvalidArgument for a malformed
  // address or bad options; Unavailable naming the address when it cannot
  // be bound (port taken, address not local). The caller owns the server.
  static base::Result<std::unique_ptr<HttpServer>> Start(const ServerOptions& options,
                                                         QueryService* service);
  // The same on sockets bound before (HttpListener::Bind with the same
  // listen address and threads; else InvalidArgument), which the server
  // takes over whatever the outcome.
  static base::Result<std::unique_ptr<HttpServer>> Start(const ServerOptions& options,
                                                         QueryService* service,
                                                         std::unique_ptr<HttpListener> listener);
  // Stops (see Stop()).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops accepting connections, answers requests that arrive meanwhile on
  // open connections with 503, waits (up to shutdown_grace_ms) until every
  // request in flight has been answered, then closes every connection and
  // joins the threads. Idempotent; safe to call from any thread except the
  // server's own.
  void Stop();

  // The port actually bound (useful with port 0).
  uint16_t bound_port() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally::query
