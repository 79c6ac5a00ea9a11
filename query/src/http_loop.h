// HttpLoop: one I/O thread of the HTTP transport (HttpServer, query/README.md
// "The transport"): its listening socket, its connections and its epoll
// set, over libhttp-parser. HttpShared is what the loops of one server
// share; HttpJob a request handed to another thread. Internal to query/:
// src/http_server.cc starts and stops the loops.
//
// Thread model: a loop and its connections belong to its thread. Other
// threads reach a loop only through Post() (an answer computed elsewhere),
// CloseListener() and Quit(), which queue under a mutex or set an atomic and
// write the loop's eventfd, and through unwritten(). An HttpJob is written
// by the loop before it is handed off and read-only afterwards but for
// `close`, set by the one thread that posts its answer. HttpShared's
// atomics are touched by every thread; the rest is set before the loops run.
#pragma once

#include <http_parser.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/metrics.h"
#include "base/status.h"
#include "query/http_server.h"
#include "query/query_service.h"
#include "rate_limiter.h"

namespace tally::query::internal {

class HttpLoop;

// A request handed to another thread (one that may block), with its own
// copy of everything Request points into: the connection may be closed
// (its deadline, its peer) before the answer comes.
struct HttpJob {
  HttpLoop* loop = nullptr;
  int fd = -1;
  uint64_t serial = 0;  // the connection's, to tell it from a later one on fd
  bool close = false;   // answer with Connection: close
  std::string target, body, authorization, forwarded, if_none_match;
  Request request;
};

// What the loops of one server share. The server owns it, and stops every
// loop and joins the blocking pool before it goes.
struct HttpShared {
  ServerOptions options;
  QueryService* service = nullptr;
  // Requests handed to another thread whose answer a loop has not yet
  // taken (or dropped with its connection).
  std::atomic<int64_t> jobs{0};
  // Of those, reads handed to the peer client (ForwardAsync) whose
  // callback has not yet run: it may still post to the blocking pool.
  std::atomic<int64_t> forwards{0};
  std::atomic<bool> stopping{false};          // requests are answered 503 and close
  std::unique_ptr<RateLimiter> rate_limiter;  // null: no --rate-limit
  base::Counter* rate_limited_total = nullptr;
  std::unique_ptr<boost::asio::thread_pool> blocking_pool;

  // Answers `job` with QueryService::Handle() (on the blocking pool).
  void ProcessBlocking(const std::shared_ptr<HttpJob>& job) noexcept;
};

// One I/O thread: its listening socket, its connections and its epoll set.
// Everything here runs on the loop's thread but Post(), CloseListener(),
// Quit() and the atomics they and StopNow() touch.
class HttpLoop {
 public:
  HttpLoop(HttpShared* shared, int listen_fd, size_t max_connections);
  ~HttpLoop();

  base::Status Init();
  void Run() noexcept;

  // From any thread: the answer to `job`, to be written on its connection.
  void Post(std::shared_ptr<HttpJob> job, Response response) noexcept;
  // From any thread: stop accepting (and close the listening socket).
  void CloseListener() { Command(&close_listener_); }
  bool listener_closed() const { return listener_closed_.load(std::memory_order_acquire); }
  // From any thread: return from Run() soon.
  void Quit() { Command(&quit_); }

  // Connections with an answer not yet fully written, or handed off.
  int64_t unwritten() const { return unwritten_.load(std::memory_order_acquire); }

 private:
  static constexpr size_t kReadBytes = 64 << 10;  // one recv(), into the loop's buffer
  // Answers to pipelined requests gather up to this size before they are
  // written; beyond it a connection reads no more requests until they are.
  static constexpr size_t kMaxGatheredOutput = 256 << 10;

  struct Conn {
    HttpLoop* loop = nullptr;
    int fd = -1;
    uint64_t serial = 0;
    size_t live_index = 0;
    uint32_t events = 0;    // registered with epoll
    bool handling = false;  // a request handed off; nothing read until its answer
    bool close_after_write = false;
    bool stalled = false;    // the socket took not all of `out`
    bool unwritten = false;  // counted in HttpLoop::unwritten_
    int64_t deadline_ms = 0;
    sockaddr_storage peer{};
    internal::ClientKey client;

    // The request being read (reused, so that their capacity stays).
    http_parser parser;
    bool complete = false;
    bool headers_done = false;  // what follows are a chunked body's trailers
    bool last_was_value = true;
    int fields = 0;
    size_t value_bytes = 0;
    std::string* value = nullptr;  // the kept header whose value is being read
    unsigned seen = 0;             // kept headers seen (bits), the first one counts
    std::string url, body, field, authorization, forwarded, if_none_match, expect;
    std::string transfer_encoding;  // every Transfer-Encoding line, joined by ','
    // The header section's lines as read (ScanHeaderLines): obs-fold is
    // found here, since http_parser joins a folded line to the one before.
    bool head_scanned = false;  // the empty line that ends it was seen
    bool at_line_start = true;
    bool folded = false;  // a header line began with a space or tab
    int lines = 0;        // non-empty lines so far (the request line counts)
    size_t line_bytes = 0;
    // Set by OnHeadersComplete: the answer the headers alone decide (the
    // parser is paused there); the body is never read, the connection
    // closes after it.
    std::optional<Response> refusal;

    std::string pending;  // read, not parsed: after a request was handed off
    std::string out;      // answers not yet written
    size_t out_pos = 0;
    size_t Unsent() const { return out.size() - out_pos; }
  };

  static int OnUrl(http_parser* p, const char* at, size_t n);
  static int OnHeaderField(http_parser* p, const char* at, size_t n);
  static int OnHeaderValue(http_parser* p, const char* at, size_t n);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, size_t n);
  static int OnMessageComplete(http_parser* p);
  // The string a header whose name was just read is kept in; null for the
  // headers tally does not read (and for a repeat of one it does).
  static std::string* KeptHeader(Conn* c);
  // Follows the header section's lines through [data, data+n).
  static void ScanHeaderLines(Conn* c, const char* data, size_t n);
  // The answer the request's headers decide before its body is read, if
  // any: obs-fold (400), a transfer coding other than chunked (501), and,
  // for Expect: 100-continue, whatever QueryService::RefusalByHeaders says.
  std::optional<Response> RefuseByHeaders(Conn* c);

  void Command(std::atomic<bool>* flag);
  void Accept();
  void SetAccepting(bool on);
  void OnEvent(Conn* c, uint32_t events);
  void OnWake();
  void CheckDeadlines();

  void BeginMessage(Conn* c);
  // Parses [data, data+n) and answers the requests it completes, until
  // one is handed off, the connection is to close, or answers pile up;
  // what is left then goes to c->pending.
  void Consume(Conn* c, const char* data, size_t n);
  void Dispatch(Conn* c, bool keep_alive);
  void HandOff(Conn* c, const Request& request, bool keep_alive);
  void Answer(Conn* c, const Response& r, bool close);
  // Parses what is pending while it may, writes, and registers the events
  // the connection now waits for. False: the connection was closed.
  bool Drive(Conn* c);
  bool Flush(Conn* c);
  // True while the connection takes more requests: none handed off, not
  // closing, not too many answers waiting to be written.
  static bool MayRead(const Conn* c);
  void SetEvents(Conn* c);
  void SetUnwritten(Conn* c);
  void Close(Conn* c);
  Conn* Find(int fd, uint64_t serial) const;

  HttpShared* const shared_;
  const ServerOptions& options_;
  int listen_fd_;
  const size_t max_connections_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  bool accepting_ = true;
  int64_t now_ms_ = 0;
  int64_t next_tick_ms_ = 0;
  uint64_t next_serial_ = 1;
  http_parser_settings settings_{};
  std::unique_ptr<char[]> read_buf_;

  std::vector<std::unique_ptr<Conn>> live_;
  std::vector<Conn*> by_fd_;
  std::vector<std::unique_ptr<Conn>> closed_;  // freed after the events of one wait
  std::atomic<int64_t> unwritten_{0};

  std::atomic<bool> close_listener_{false};
  std::atomic<bool> listener_closed_{false};
  std::atomic<bool> quit_{false};
  std::mutex mu_;
  std::vector<std::pair<std::shared_ptr<HttpJob>, Response>> answers_;  // guarded by mu_
  base::LogLimiter accept_log_{3, 60000};
};

}  // namespace tally::query::internal
