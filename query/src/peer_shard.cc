#include "peer_shard.h"

#include <fmt/core.h>
#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "base/log.h"
#include "http_response_reader.h"
#include "peer_request.h"

namespace tally::query::internal {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = PeerClient::Clock;

// A pooled connection idle this long is checked (one non-blocking peek)
// before it carries a request: the peer may have closed it meanwhile.
constexpr auto kCheckIdleAfter = std::chrono::seconds(1);
// How often idle connections are looked at (closed when idle too long or
// closed by the peer).
constexpr auto kSweepEvery = std::chrono::seconds(1);
constexpr size_t kReadBufferBytes = 16 << 10;

bool PeerClosed(const error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::connection_aborted;
}

struct Call;
struct Pool;

// One connection to a peer. Owned by its pool while idle, and by its
// request (and the handlers of its pending operations) while busy.
struct Conn {
  Conn(asio::io_context& io, Pool* p, const PeerClientOptions& o)
      : socket(io), pool(p), reader(o.max_body_bytes, o.max_header_bytes), in(kReadBufferBytes) {}
  tcp::socket socket;
  Pool* pool;  // outlives every connection (pools are never removed)
  HttpResponseReader reader;
  std::vector<char> in;  // bytes read and not yet parsed: [begin, end)
  size_t begin = 0;
  size_t end = 0;
  Clock::time_point idle_since{};
  uint64_t answered = 0;  // answers it carried; > 0: it came from the pool
  bool closed = false;    // closed, and no longer counted in pool->open
};

// The connections to one peer.
struct Pool {
  std::string peer;
  PeerAddress address;
  std::string bad;                          // why `peer` is unusable; "" if it is fine
  std::optional<tcp::endpoint> endpoint;    // a numeric host
  std::unique_ptr<tcp::resolver> resolver;  // a host name
  int open = 0;                             // connections not closed: idle, busy, connecting
  std::vector<std::shared_ptr<Conn>> idle;  // the most recently used last
  // Requests waiting for a connection: only while none is idle and `open`
  // is at the limit.
  std::deque<std::pair<std::shared_ptr<Call>, size_t>> waiting;
};

// One request of a call.
struct Op {
  PeerRequest request;
  std::string wire;  // the request as sent
  Pool* pool = nullptr;
  std::shared_ptr<Conn> conn;  // while connecting, sending or reading
  const char* phase = "before sending";
  int attempts = 0;   // sends begun
  bool sent = false;  // the current attempt's request was written whole
  bool done = false;
};

// One Get/GetAll/GetAllAsync: its requests, their answers, one deadline.
struct Call {
  explicit Call(asio::io_context& io) : timer(io) {}
  std::vector<Op> ops;
  std::vector<PeerResponse> results;
  size_t pending = 0;  // ops not done
  asio::steady_timer timer;
  PeerClient::Callback done;
  std::list<std::shared_ptr<Call>>::iterator self;  // in Loop::calls_, when registered
  bool registered = false;
};

}  // namespace

// Everything here runs on the shard's thread but the constructor, Post()
// and Stop().
class PeerShard::Loop {
 public:
  Loop(const PeerClientOptions& options, const std::string& extra, PeerCounters* counters)
      : options_(options),
        extra_(extra),
        counters_(*counters),
        io_(1),
        work_(asio::make_work_guard(io_)),
        sweep_(io_) {}

  void Start(int index) {
    thread_ = std::thread([this, index] {
      pthread_setname_np(pthread_self(),
                         fmt::format("tally-peers-{}", index).substr(0, 15).c_str());
      ArmSweep();
      for (;;) {
        try {
          io_.run();
          return;
        } catch (const std::exception& e) {  // a callback broke its promise
          TALLY_LOG_ERROR("peers", "peer client I/O thread: {}", e.what());
        }
      }
    });
  }

  void Post(std::vector<PeerRequest> requests, PeerClient::Deadline deadline,
            PeerClient::Callback done) {
    asio::post(io_,
               [this, requests = std::move(requests), deadline, done = std::move(done)]() mutable {
                 StartCall(std::move(requests), deadline, std::move(done));
               });
  }

  void Stop() {
    asio::post(io_, [this] { Shutdown(); });
    thread_.join();
  }

 private:
  using State = HttpResponseReader::State;

  void StartCall(std::vector<PeerRequest> requests, PeerClient::Deadline deadline,
                 PeerClient::Callback done) {
    auto call = std::make_shared<Call>(io_);
    const size_t n = requests.size();
    call->ops.resize(n);
    call->results.resize(n);
    for (size_t i = 0; i < n; i++) call->ops[i].request = std::move(requests[i]);
    call->pending = n;
    call->done = std::move(done);
    PeerCounters::Inc(counters_.requests, n);
    if (stopping_ || deadline <= Clock::now()) {
      PeerOutcome outcome = stopping_ ? PeerOutcome::kStopped : PeerOutcome::kTimedOut;
      const char* why = stopping_ ? "peer client stopped" : "deadline passed before sending";
      for (size_t i = 0; i < n; i++) Finish(call, i, outcome, why);
      return;
    }
    call->self = calls_.insert(calls_.end(), call);
    call->registered = true;
    call->timer.expires_at(deadline);
    call->timer.async_wait([this, call](error_code ec) {
      if (!ec) EndUnfinished(call, PeerOutcome::kTimedOut);
    });
    for (size_t i = 0; i < n; i++) {
      if (!call->ops[i].done) Dispatch(call, i);
    }
  }

  Pool* PoolFor(const std::string& peer) {
    auto it = pools_.find(peer);
    if (it != pools_.end()) return it->second.get();
    auto pool = std::make_unique<Pool>();
    pool->peer = peer;
    if (ParsePeer(peer, &pool->address, &pool->bad)) {
      error_code ec;
      auto ip = asio::ip::make_address(pool->address.host, ec);
      if (!ec) {
        pool->endpoint = tcp::endpoint(ip, static_cast<uint16_t>(std::stoi(pool->address.port)));
      } else {
        pool->resolver = std::make_unique<tcp::resolver>(io_);
      }
    }
    return pools_.emplace(peer, std::move(pool)).first->second.get();
  }

  void Dispatch(const std::shared_ptr<Call>& call, size_t i) {
    Op& op = call->ops[i];
    Pool* pool = PoolFor(op.request.peer);
    op.pool = pool;
    if (!pool->bad.empty()) return Finish(call, i, PeerOutcome::kInvalid, pool->bad);
    std::string bad = BuildRequest(pool->address, extra_, op.request, &op.wire);
    if (!bad.empty()) return Finish(call, i, PeerOutcome::kInvalid, bad);
    Acquire(pool, call, i);
  }

  // Sends request i on an idle connection, or a new one, or queues it until
  // one is free.
  void Acquire(Pool* pool, const std::shared_ptr<Call>& call, size_t i) {
    while (!pool->idle.empty()) {
      std::shared_ptr<Conn> conn = std::move(pool->idle.back());
      pool->idle.pop_back();
      if (Clock::now() - conn->idle_since >= kCheckIdleAfter && !StillOpen(*conn)) {
        PeerCounters::Inc(counters_.stale_closed);
        Close(conn.get(), /*serve_waiters=*/false);
        continue;
      }
      PeerCounters::Inc(counters_.reused);
      return Send(conn, call, i);
    }
    if (pool->open < options_.max_connections_per_peer) return Connect(pool, call, i);
    call->ops[i].phase = "waiting for a connection";
    pool->waiting.emplace_back(call, i);
  }

  // False if the peer has closed the idle `conn` (or sent bytes nobody
  // asked for).
  static bool StillOpen(Conn& conn) {
    char c;
    ssize_t n = ::recv(conn.socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  // Opens a connection (taking one of the pool's slots) for request i.
  void Connect(Pool* pool, const std::shared_ptr<Call>& call, size_t i) {
    pool->open++;
    PeerCounters::Inc(counters_.open);
    PeerCounters::Inc(counters_.connects);
    auto conn = std::make_shared<Conn>(io_, pool, options_);
    Op& op = call->ops[i];
    op.conn = conn;
    op.phase = "connecting";
    if (pool->endpoint) {
      conn->socket.async_connect(*pool->endpoint, [this, conn, call, i](error_code ec) {
        OnConnected(conn, call, i, ec);
      });
      return;
    }
    op.phase = "resolving the host";
    pool->resolver->async_resolve(
        pool->address.host, pool->address.port,
        [this, conn, call, i](error_code ec, tcp::resolver::results_type found) {
          if (call->ops[i].done || conn->closed) return Close(conn.get());
          if (ec) {
            Close(conn.get());
            return Finish(call, i, PeerOutcome::kConnectFailed,
                          fmt::format("resolving {}: {}", conn->pool->address.host, ec.message()));
          }
          call->ops[i].phase = "connecting";
          asio::async_connect(conn->socket, found,
                              [this, conn, call, i](error_code ec, const tcp::endpoint&) {
                                OnConnected(conn, call, i, ec);
                              });
        });
  }

  void OnConnected(const std::shared_ptr<Conn>& conn, const std::shared_ptr<Call>& call, size_t i,
                   error_code ec) {
    if (call->ops[i].done || conn->closed) return Close(conn.get());
    if (ec) {
      Close(conn.get());
      return Finish(call, i, PeerOutcome::kConnectFailed, "connect: " + ec.message());
    }
    error_code ignored;
    conn->socket.set_option(tcp::no_delay(true), ignored);
    Send(conn, call, i);
  }

  void Send(const std::shared_ptr<Conn>& conn, const std::shared_ptr<Call>& call, size_t i) {
    Op& op = call->ops[i];
    op.conn = conn;
    op.attempts++;
    op.sent = false;
    op.phase = "sending";
    conn->reader.Start(&call->results[i]);
    asio::async_write(conn->socket, asio::buffer(op.wire),
                      [this, conn, call, i](error_code ec, size_t) {
                        Op& op = call->ops[i];
                        if (op.done || conn->closed) return Close(conn.get());
                        if (ec) return Broken(conn, call, i, ec);
                        op.sent = true;
                        op.phase = "awaiting the answer";
                        Read(conn, call, i);
                      });
  }

  void Read(const std::shared_ptr<Conn>& conn, const std::shared_ptr<Call>& call, size_t i) {
    Conn& c = *conn;
    if (c.end == c.in.size()) {
      if (c.begin > 0) {
        std::memmove(c.in.data(), c.in.data() + c.begin, c.end - c.begin);
        c.end -= c.begin;
        c.begin = 0;
      } else {
        c.in.resize(c.in.size() * 2);  // a header longer than the buffer
      }
    }
    c.socket.async_read_some(
        asio::buffer(c.in.data() + c.end, c.in.size() - c.end),
        [this, conn, call, i](error_code ec, size_t n) { OnRead(conn, call, i, ec, n); });
  }

  void OnRead(const std::shared_ptr<Conn>& conn, const std::shared_ptr<Call>& call, size_t i,
              error_code ec, size_t n) {
    if (call->ops[i].done || conn->closed) return Close(conn.get());
    Conn& c = *conn;
    if (ec == asio::error::eof && c.reader.got_some()) {
      // An answer that ends with the connection, or one cut short.
      if (c.reader.FeedEof() != State::kDone) return Broken(conn, call, i, ec);
    } else if (ec) {
      return Broken(conn, call, i, ec);
    } else {
      c.end += n;
      size_t used = 0;
      State state = c.reader.Feed(std::string_view(c.in.data() + c.begin, c.end - c.begin), &used);
      c.begin += used;
      if (c.begin == c.end) c.begin = c.end = 0;
      if (state == State::kNeedMore) return Read(conn, call, i);
      if (state == State::kError) {
        Close(conn.get());
        return Finish(call, i, PeerOutcome::kFailed, "bad answer: " + c.reader.error());
      }
    }
    c.answered++;
    // Bytes beyond the answer were not asked for: the connection is not
    // clean, so it is not reused.
    const bool reuse = !ec && c.reader.keep_alive() && c.begin == c.end;
    call->ops[i].conn.reset();
    if (reuse) {
      Release(conn);
    } else {
      Close(conn.get());
    }
    Finish(call, i, PeerOutcome::kOk, "");
  }

  // The connection of request i failed before its answer was in. Sends it
  // again, once, on a fresh connection when that is safe and likely to
  // help: the peer closed the connection before answering, and either the
  // connection came from the pool (the peer closed it while idle) or the
  // request was not sent whole. A GET may be repeated either way.
  void Broken(const std::shared_ptr<Conn>& conn, const std::shared_ptr<Call>& call, size_t i,
              error_code ec) {
    Op& op = call->ops[i];
    const bool got_some = conn->reader.got_some();
    const bool retry = op.attempts == 1 && !got_some && PeerClosed(ec) &&
                       (conn->answered > 0 || !op.sent) && !stopping_;
    Close(conn.get(), /*serve_waiters=*/!retry);
    if (retry) {
      PeerCounters::Inc(counters_.retries);
      return Connect(op.pool, call, i);  // takes the slot just freed
    }
    std::string what =
        ec == asio::error::eof ? std::string("connection closed by the peer") : ec.message();
    Finish(call, i, PeerOutcome::kFailed,
           fmt::format("{} {}", what, got_some ? "within the answer" : "before an answer"));
  }

  // An answered connection goes back to the pool, or straight to a waiting
  // request.
  void Release(const std::shared_ptr<Conn>& conn) {
    Pool* pool = conn->pool;
    if (stopping_) return Close(conn.get());
    while (!pool->waiting.empty()) {
      auto [call, i] = std::move(pool->waiting.front());
      pool->waiting.pop_front();
      if (call->ops[i].done) continue;
      PeerCounters::Inc(counters_.reused);
      return Send(conn, call, i);
    }
    conn->idle_since = Clock::now();
    pool->idle.push_back(conn);
  }

  // Closes `conn` (cancelling its pending operations) and frees its slot;
  // with serve_waiters, a waiting request takes the slot.
  void Close(Conn* conn, bool serve_waiters = true) {
    if (conn->closed) return;
    conn->closed = true;
    error_code ignored;
    conn->socket.close(ignored);
    Pool* pool = conn->pool;
    pool->open--;
    counters_.open.fetch_sub(1, std::memory_order_relaxed);
    if (!serve_waiters || stopping_) return;
    while (!pool->waiting.empty() && pool->open < options_.max_connections_per_peer) {
      auto [call, i] = std::move(pool->waiting.front());
      pool->waiting.pop_front();
      if (!call->ops[i].done) Connect(pool, call, i);
    }
  }

  void Finish(const std::shared_ptr<Call>& call, size_t i, PeerOutcome outcome,
              std::string_view what) {
    Op& op = call->ops[i];
    if (op.done) return;
    op.done = true;
    op.conn.reset();
    PeerResponse& r = call->results[i];
    r.outcome = outcome;
    switch (outcome) {
      case PeerOutcome::kOk:
        PeerCounters::Inc(counters_.ok);
        break;
      case PeerOutcome::kTimedOut:
        PeerCounters::Inc(counters_.timed_out);
        break;
      case PeerOutcome::kConnectFailed:
        PeerCounters::Inc(counters_.connect_failed);
        break;
      case PeerOutcome::kFailed:
        PeerCounters::Inc(counters_.failed);
        break;
      case PeerOutcome::kInvalid:
      case PeerOutcome::kStopped:
        break;
    }
    if (outcome != PeerOutcome::kOk) {
      r.status = 0;
      r.headers.clear();
      r.body.clear();
      r.error = fmt::format("GET {}{}: {}", op.request.peer, op.request.target, what);
    }
    if (--call->pending == 0) Complete(call);
  }

  void Complete(std::shared_ptr<Call> call) {
    if (call->registered) {
      calls_.erase(call->self);
      call->registered = false;
    }
    call->timer.cancel();
    PeerClient::Callback done = std::move(call->done);
    try {
      done(std::move(call->results));
    } catch (const std::exception& e) {
      TALLY_LOG_ERROR("peers", "peer client callback threw: {}", e.what());
    }
  }

  // Ends every request of `call` not yet done (the deadline, or a stop):
  // their connections are closed, since an answer may still come on them.
  void EndUnfinished(std::shared_ptr<Call> call, PeerOutcome outcome) {
    std::vector<std::shared_ptr<Conn>> busy;
    std::vector<std::string> whats(call->ops.size());
    for (size_t i = 0; i < call->ops.size(); i++) {
      Op& op = call->ops[i];
      if (op.done) continue;
      if (op.conn) busy.push_back(op.conn);
      if (op.pool) {
        std::erase_if(op.pool->waiting, [&](const auto& w) { return w.first == call; });
      }
      whats[i] = fmt::format(
          "{} while {}",
          outcome == PeerOutcome::kStopped ? "peer client stopped" : "deadline passed", op.phase);
    }
    // Closed before the callers hear of it, so a caller sees the
    // connections gone (this call's waiters are out of the queues already:
    // a freed slot goes to another call).
    for (const auto& conn : busy) Close(conn.get());
    for (size_t i = 0; i < call->ops.size(); i++) {
      if (!call->ops[i].done) Finish(call, i, outcome, whats[i]);
    }
  }

  void ArmSweep() {
    sweep_.expires_after(kSweepEvery);
    sweep_.async_wait([this](error_code ec) {
      if (ec || stopping_) return;
      Sweep();
      ArmSweep();
    });
  }

  // Closes idle connections that were idle too long or that the peer closed.
  void Sweep() {
    const auto now = Clock::now();
    const auto max_idle = std::chrono::milliseconds(options_.idle_timeout_ms);
    for (auto& [peer, pool] : pools_) {
      std::erase_if(pool->idle, [&](const std::shared_ptr<Conn>& conn) {
        const auto idle_for = now - conn->idle_since;
        if (idle_for >= max_idle) {
          Close(conn.get(), false);
          return true;
        }
        if (idle_for >= kCheckIdleAfter && !StillOpen(*conn)) {
          PeerCounters::Inc(counters_.stale_closed);
          Close(conn.get(), false);
          return true;
        }
        return false;
      });
    }
  }

  void Shutdown() {
    stopping_ = true;
    sweep_.cancel();
    std::vector<std::shared_ptr<Call>> in_flight(calls_.begin(), calls_.end());
    for (auto& call : in_flight) EndUnfinished(call, PeerOutcome::kStopped);
    for (auto& [peer, pool] : pools_) {
      for (auto& conn : pool->idle) Close(conn.get(), false);
      pool->idle.clear();
      pool->waiting.clear();
      if (pool->resolver) pool->resolver->cancel();
    }
    work_.reset();  // run() returns once the cancelled operations have ended
  }

  const PeerClientOptions& options_;
  const std::string& extra_;
  PeerCounters& counters_;

  // Declared before everything that holds a socket or a timer, so
  // destroyed after all of them.
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::steady_timer sweep_;
  std::unordered_map<std::string, std::unique_ptr<Pool>> pools_;  // by peer as given
  std::list<std::shared_ptr<Call>> calls_;                        // in flight
  bool stopping_ = false;
  std::thread thread_;
};

PeerShard::PeerShard(const PeerClientOptions& options, const std::string& extra_headers,
                     PeerCounters* counters, int index)
    : loop_(std::make_unique<Loop>(options, extra_headers, counters)) {
  loop_->Start(index);
}

PeerShard::~PeerShard() = default;

void PeerShard::Post(std::vector<PeerRequest> requests, PeerClient::Deadline deadline,
                     PeerClient::Callback done) {
  loop_->Post(std::move(requests), deadline, std::move(done));
}

void PeerShard::Stop() { loop_->Stop(); }

}  // namespace tally::query::internal
