// The HTTP/1.1 transport: an epoll loop per I/O thread over libhttp-parser
// (the parser of Node.js before llhttp, and of RESTinio). Written for the
// cost of one small request on a keep-alive connection: one recv(), one
// parse, one send(), and an epoll_wait() shared with the other connections
// that were ready at once, as Redis's event loop does.
#include "query/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fmt/format.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstring>
#include <iterator>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/metrics.h"
#include "base/shutdown.h"
#include "http_wire.h"
#include "query/cluster_routing.h"
#include "query/query_service.h"
#include "rate_limiter.h"
#include "routes.h"
#include "store/state_store.h"

namespace tally::query {

namespace {

constexpr size_t kReadBytes = 64 << 10;  // one recv(), into the loop's buffer
constexpr int kTickMs = 100;             // how often deadlines are checked
constexpr int kMaxEvents = 256;          // epoll events taken at once
constexpr int kAcceptBatch = 64;         // connections accepted per wakeup
constexpr size_t kMaxFieldNameBytes = 1024;
// Answers to pipelined requests gather up to this size before they are
// written; beyond it a connection reads no more requests until they are.
constexpr size_t kMaxGatheredOutput = 256 << 10;
// An answer buffer grown beyond this (a large batch) is freed once written.
constexpr size_t kKeptOutputCapacity = 1 << 20;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// The rate limiter's key and the printed address of a peer.
internal::ClientKey ClientOf(const sockaddr_storage& peer) {
  if (peer.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&peer);
    return internal::ClientKey::FromIpv4(ntohl(in->sin_addr.s_addr));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&peer);
  std::array<uint8_t, 16> bytes;
  std::memcpy(bytes.data(), in6->sin6_addr.s6_addr, 16);
  return internal::ClientKey::FromIpv6(bytes);
}

std::string AddressText(const sockaddr_storage& peer) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

// A listening socket on `address`:`port` (0: any free one), SO_REUSEPORT
// when `share`: each I/O thread listens on the port with a socket of its
// own, and the kernel spreads the connections over them.
base::Result<int> Listen(const boost::asio::ip::address& address, uint16_t port, bool share) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (address.is_v4()) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    const auto bytes = address.to_v4().to_bytes();
    std::memcpy(&in->sin_addr, bytes.data(), bytes.size());
    len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    const auto v6 = address.to_v6();
    const auto bytes = v6.to_bytes();
    std::memcpy(&in6->sin6_addr, bytes.data(), bytes.size());
    in6->sin6_scope_id = v6.scope_id();
    len = sizeof(sockaddr_in6);
  }
  const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return base::Status::Unavailable(fmt::format("socket: {}", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (share) ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int e = errno;
    ::close(fd);
    return base::Status::Unavailable(std::strerror(e));
  }
  if (share && ::listen(fd, SOMAXCONN) != 0) {
    const int e = errno;
    ::close(fd);
    return base::Status::Unavailable(std::strerror(e));
  }
  return fd;
}

uint16_t LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

class Loop;

// A request handed to another thread (one that may block), with its own
// copy of everything Request points into: the connection may be closed
// (its deadline, its peer) before the answer comes.
struct Job {
  Loop* loop = nullptr;
  int fd = -1;
  uint64_t serial = 0;  // the connection's, to tell it from a later one on fd
  bool close = false;   // answer with Connection: close
  std::string target, body, authorization, forwarded, if_none_match;
  Request request;
};

// The server's shared state (HttpServer::Impl is private to it).
struct Server {
  ServerOptions options;
  QueryService* service = nullptr;

  // Requests handed to another thread whose answer the loop has not yet
  // taken (or dropped with its connection).
  std::atomic<int64_t> jobs{0};
  // Of those, reads handed to the peer client (ForwardAsync) whose
  // callback has not yet run: it may still post to the blocking pool.
  std::atomic<int64_t> forwards{0};
  std::atomic<bool> stopping{false};
  std::atomic<uint16_t> port{0};

  std::unique_ptr<internal::RateLimiter> rate_limiter;  // null: no --rate-limit
  base::Counter* rate_limited_total = nullptr;

  std::vector<std::unique_ptr<Loop>> loops;
  std::unique_ptr<boost::asio::thread_pool> blocking_pool;
  std::vector<std::thread> threads;
  std::mutex stop_mu;
  bool stopped = false;  // guarded by stop_mu

  ~Server();
  void StopNow();
  // Answers `job` with QueryService::Handle() (on the blocking pool).
  void ProcessBlocking(const std::shared_ptr<Job>& job) noexcept;
  int64_t Unwritten() const;
};

// One I/O thread: its listening socket, its connections and its epoll set.
// Everything here runs on the loop's thread but Post(), Wake() and the
// atomics.
class Loop {
 public:
  Loop(Server* impl, int listen_fd, size_t max_connections);
  ~Loop();

  base::Status Init();
  void Run() noexcept;

  // From any thread: the answer to `job`, to be written on its connection.
  void Post(std::shared_ptr<Job> job, Response response) noexcept;
  // From any thread: stop accepting (and close the listening socket).
  void CloseListener() { Command(&close_listener_); }
  bool listener_closed() const { return listener_closed_.load(std::memory_order_acquire); }
  // From any thread: return from Run() soon.
  void Quit() { Command(&quit_); }

  // Connections with an answer not yet fully written, or handed off.
  int64_t unwritten() const { return unwritten_.load(std::memory_order_acquire); }

 private:
  struct Conn {
    Loop* loop = nullptr;
    int fd = -1;
    uint64_t serial = 0;
    size_t live_index = 0;
    uint32_t events = 0;    // registered with epoll
    bool handling = false;  // a request handed off; nothing read until its answer
    bool close_after_write = false;
    bool stalled = false;    // the socket took not all of `out`
    bool unwritten = false;  // counted in Loop::unwritten_
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
  bool MayRead(const Conn* c) const {
    return !c->handling && !c->close_after_write && c->Unsent() <= kMaxGatheredOutput;
  }
  void SetEvents(Conn* c);
  void SetUnwritten(Conn* c);
  void Close(Conn* c);
  Conn* Find(int fd, uint64_t serial) const;

  Server* const impl_;
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
  std::vector<std::pair<std::shared_ptr<Job>, Response>> answers_;  // guarded by mu_
  base::LogLimiter accept_log_{3, 60000};
};

Loop::Loop(Server* impl, int listen_fd, size_t max_connections)
    : impl_(impl),
      options_(impl->options),
      listen_fd_(listen_fd),
      max_connections_(max_connections),
      read_buf_(new char[kReadBytes]) {
  http_parser_settings_init(&settings_);
  settings_.on_url = &Loop::OnUrl;
  settings_.on_header_field = &Loop::OnHeaderField;
  settings_.on_header_value = &Loop::OnHeaderValue;
  settings_.on_headers_complete = &Loop::OnHeadersComplete;
  settings_.on_body = &Loop::OnBody;
  settings_.on_message_complete = &Loop::OnMessageComplete;
}

Loop::~Loop() {
  for (auto& c : live_) ::close(c->fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

base::Status Loop::Init() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return base::Status::Unavailable(fmt::format("http: epoll: {}", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &wake_fd_;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    return base::Status::Unavailable(fmt::format("http: epoll: {}", std::strerror(errno)));
  }
  ev.data.ptr = nullptr;  // the listening socket
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) != 0) {
    return base::Status::Unavailable(fmt::format("http: epoll: {}", std::strerror(errno)));
  }
  return base::Status::Ok();
}

void Loop::Command(std::atomic<bool>* flag) {
  flag->store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void Loop::Post(std::shared_ptr<Job> job, Response response) noexcept {
  try {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was_empty = answers_.empty();
      answers_.emplace_back(std::move(job), std::move(response));
    }
    if (was_empty) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    }
  } catch (...) {
    // Out of memory: the answer is lost, and the connection is closed by
    // its handle deadline.
    impl_->jobs.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void Loop::Run() noexcept {
  epoll_event events[kMaxEvents];
  now_ms_ = SteadyNowMs();
  next_tick_ms_ = now_ms_ + kTickMs;
  while (!quit_.load(std::memory_order_acquire)) {
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, kTickMs);
    now_ms_ = SteadyNowMs();
    bool woken = false;
    for (int i = 0; i < n; i++) {
      void* ptr = events[i].data.ptr;
      if (ptr == nullptr) {
        Accept();
      } else if (ptr == &wake_fd_) {
        woken = true;
      } else {
        Conn* c = static_cast<Conn*>(ptr);
        if (c->fd >= 0) OnEvent(c, events[i].events);
      }
    }
    // After the events: a connection an answer closes may be one of them.
    if (woken) OnWake();
    if (now_ms_ >= next_tick_ms_) {
      CheckDeadlines();
      next_tick_ms_ = now_ms_ + kTickMs;
    }
    closed_.clear();
  }
}

void Loop::OnWake() {
  uint64_t count;
  [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof(count));
  if (close_listener_.load(std::memory_order_acquire) && listen_fd_ >= 0) {
    ::close(listen_fd_);  // leaves the epoll set with it
    listen_fd_ = -1;
    listener_closed_.store(true, std::memory_order_release);
  }
  std::vector<std::pair<std::shared_ptr<Job>, Response>> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    answers.swap(answers_);
  }
  for (auto& [job, response] : answers) {
    Conn* c = Find(job->fd, job->serial);
    if (c != nullptr && c->handling) {
      try {
        c->handling = false;
        Answer(c, response, job->close);
        BeginMessage(c);
        c->deadline_ms = now_ms_ + options_.read_timeout_ms;
        Drive(c);
      } catch (...) {
        Close(c);
      }
    }
    impl_->jobs.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void Loop::SetAccepting(bool on) {
  if (on == accepting_ || listen_fd_ < 0) return;
  epoll_event ev{};
  ev.events = on ? static_cast<uint32_t>(EPOLLIN) : 0u;
  ev.data.ptr = nullptr;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  accepting_ = on;
}

void Loop::Accept() {
  for (int i = 0; i < kAcceptBatch && listen_fd_ >= 0; i++) {
    if (live_.size() >= max_connections_) {
      // The rest wait in the listen backlog until a connection closes.
      SetAccepting(false);
      return;
    }
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of file descriptors (or memory): accepting again at once would
      // spin; the next tick tries again.
      TALLY_LOG_WARN_LIMITED(accept_log_, "http", "cannot accept a connection: {}",
                             std::strerror(errno));
      SetAccepting(false);
      return;
    }
    try {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto owned = std::make_unique<Conn>();
      Conn* c = owned.get();
      c->loop = this;
      c->fd = fd;
      c->serial = next_serial_++;
      c->peer = peer;
      c->client = ClientOf(peer);
      BeginMessage(c);
      c->deadline_ms = now_ms_ + options_.read_timeout_ms;
      if (static_cast<size_t>(fd) >= by_fd_.size()) by_fd_.resize(static_cast<size_t>(fd) + 64);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = c;
      if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        continue;
      }
      c->events = EPOLLIN;
      c->live_index = live_.size();
      live_.push_back(std::move(owned));
      by_fd_[static_cast<size_t>(fd)] = c;
    } catch (...) {
      ::close(fd);
      return;
    }
  }
}

Loop::Conn* Loop::Find(int fd, uint64_t serial) const {
  if (fd < 0 || static_cast<size_t>(fd) >= by_fd_.size()) return nullptr;
  Conn* c = by_fd_[static_cast<size_t>(fd)];
  return c != nullptr && c->serial == serial ? c : nullptr;
}

void Loop::Close(Conn* c) {
  if (c->fd < 0) return;
  ::close(c->fd);  // leaves the epoll set with it
  by_fd_[static_cast<size_t>(c->fd)] = nullptr;
  c->fd = -1;
  if (c->unwritten) unwritten_.fetch_sub(1, std::memory_order_acq_rel);
  const size_t i = c->live_index;
  std::unique_ptr<Conn> owned = std::move(live_[i]);
  if (i + 1 != live_.size()) {
    live_[i] = std::move(live_.back());
    live_[i]->live_index = i;
  }
  live_.pop_back();
  closed_.push_back(std::move(owned));  // events of this wait may still name it
  if (!accepting_ && live_.size() < max_connections_) SetAccepting(true);
}

void Loop::CheckDeadlines() {
  if (!accepting_ && live_.size() < max_connections_) SetAccepting(true);
  for (size_t i = 0; i < live_.size();) {
    Conn* c = live_[i].get();
    if (now_ms_ >= c->deadline_ms) {
      Close(c);  // moves the last connection to i
    } else {
      i++;
    }
  }
}

void Loop::SetEvents(Conn* c) {
  uint32_t want = 0;
  if (c->Unsent() > 0) {
    want = EPOLLOUT;
  } else if (MayRead(c)) {
    want = EPOLLIN;
  }
  if (want == c->events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = c;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev);
  c->events = want;
}

void Loop::SetUnwritten(Conn* c) {
  const bool now = c->handling || c->Unsent() > 0;
  if (now == c->unwritten) return;
  c->unwritten = now;
  unwritten_.fetch_add(now ? 1 : -1, std::memory_order_acq_rel);
}

void Loop::OnEvent(Conn* c, uint32_t events) {
  try {
    if ((events & EPOLLOUT) != 0) {
      if (!Drive(c)) return;
    }
    if ((events & EPOLLIN) != 0) {
      const ssize_t n = ::recv(c->fd, read_buf_.get(), kReadBytes, 0);
      if (n == 0) {
        Close(c);  // the peer is gone (or sent half a request and left)
        return;
      }
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) Close(c);
        return;
      }
      if (c->pending.empty() && MayRead(c)) {
        Consume(c, read_buf_.get(), static_cast<size_t>(n));
      } else {
        c->pending.append(read_buf_.get(), static_cast<size_t>(n));
      }
      Drive(c);
      return;
    }
    if ((events & (EPOLLHUP | EPOLLERR)) != 0 && (events & EPOLLOUT) == 0) Close(c);
  } catch (...) {
    // Only allocation can fail above: this connection goes, others stay.
    Close(c);
  }
}

bool Loop::Drive(Conn* c) {
  for (;;) {
    if (!c->pending.empty() && MayRead(c)) {
      std::string input = std::move(c->pending);
      c->pending.clear();
      Consume(c, input.data(), input.size());
    }
    if (!Flush(c)) return false;
    if (c->pending.empty() || !MayRead(c) || c->Unsent() > 0) break;
  }
  SetEvents(c);
  SetUnwritten(c);
  return true;
}

bool Loop::Flush(Conn* c) {
  while (c->out_pos < c->out.size()) {
    const ssize_t n =
        ::send(c->fd, c->out.data() + c->out_pos, c->out.size() - c->out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!c->stalled) {
        c->stalled = true;
        c->deadline_ms = now_ms_ + options_.write_timeout_ms;
      }
      return true;
    }
    Close(c);  // the peer is gone
    return false;
  }
  if (c->out.capacity() > kKeptOutputCapacity) {
    std::string().swap(c->out);
  } else {
    c->out.clear();
  }
  c->out_pos = 0;
  if (c->stalled) {
    c->stalled = false;
    if (!c->handling) c->deadline_ms = now_ms_ + options_.read_timeout_ms;
  }
  if (c->close_after_write && !c->handling) {
    Close(c);
    return false;
  }
  return true;
}

void Loop::BeginMessage(Conn* c) {
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  c->complete = false;
  c->headers_done = false;
  c->last_was_value = true;
  c->fields = 0;
  c->value_bytes = 0;
  c->value = nullptr;
  c->seen = 0;
  c->url.clear();
  c->body.clear();
  c->field.clear();
  c->authorization.clear();
  c->forwarded.clear();
  c->if_none_match.clear();
  c->expect.clear();
}

void Loop::Consume(Conn* c, const char* data, size_t n) {
  while (n > 0) {
    const size_t used = http_parser_execute(&c->parser, &settings_, data, n);
    data += used;
    n -= used;
    if (c->complete) {
      const bool keep_alive = http_should_keep_alive(&c->parser) != 0 && c->parser.upgrade == 0;
      Dispatch(c, keep_alive);
      BeginMessage(c);
      c->deadline_ms = now_ms_ + options_.read_timeout_ms;
      if (!MayRead(c)) {
        if (!c->close_after_write) c->pending.assign(data, n);
        return;
      }
      continue;
    }
    if (HTTP_PARSER_ERRNO(&c->parser) != HPE_OK) {
      // Bytes that are not HTTP, or a request over a limit HTTP cannot
      // answer without reading it: the answers before it are written, then
      // the connection is closed.
      c->close_after_write = true;
      return;
    }
  }
}

// ---- http_parser callbacks: the request's parts, and the limits ----

std::string* Loop::KeptHeader(Conn* c) {
  if (c->headers_done) return nullptr;  // trailers are not headers
  static constexpr std::string_view kNames[] = {"authorization", kForwardedHeader, "if-none-match",
                                                "expect"};
  std::string* const kept[] = {&c->authorization, &c->forwarded, &c->if_none_match, &c->expect};
  for (unsigned i = 0; i < std::size(kNames); i++) {
    if ((c->seen & (1u << i)) == 0 && EqualsIgnoringCase(c->field, kNames[i])) {
      c->seen |= 1u << i;
      return kept[i];
    }
  }
  return nullptr;
}

int Loop::OnUrl(http_parser* p, const char* at, size_t n) {
  Conn* c = static_cast<Conn*>(p->data);
  if (c->url.size() + n > c->loop->options_.max_url_bytes) return -1;
  c->url.append(at, n);
  return 0;
}

int Loop::OnHeaderField(http_parser* p, const char* at, size_t n) {
  Conn* c = static_cast<Conn*>(p->data);
  if (c->last_was_value) {
    if (static_cast<size_t>(c->fields) >= c->loop->options_.max_header_count) return -1;
    c->field.assign(at, n);
    c->last_was_value = false;
  } else {
    c->field.append(at, n);
  }
  return c->field.size() > kMaxFieldNameBytes ? -1 : 0;
}

int Loop::OnHeaderValue(http_parser* p, const char* at, size_t n) {
  Conn* c = static_cast<Conn*>(p->data);
  if (!c->last_was_value) {
    c->last_was_value = true;
    c->fields++;
    c->value_bytes = 0;
    c->value = KeptHeader(c);
  }
  c->value_bytes += n;
  if (c->value_bytes >= c->loop->options_.max_header_bytes) return -1;
  if (c->value != nullptr) c->value->append(at, n);
  return 0;
}

int Loop::OnHeadersComplete(http_parser* p) {
  Conn* c = static_cast<Conn*>(p->data);
  c->headers_done = true;
  if (p->content_length != ULLONG_MAX && p->content_length > 0) {
    // Not read at all: the connection is closed without an answer.
    if (p->content_length > c->loop->options_.max_readable_body_bytes) return -1;
    c->body.reserve(std::min<size_t>(p->content_length, kReadBytes));
  }
  // A client that waits for leave to send its body (curl does, for large
  // ones) gets it at once rather than after its own timeout.
  if (!c->expect.empty() && p->http_major == 1 && p->http_minor >= 1 &&
      EqualsIgnoringCase(c->expect, "100-continue")) {
    c->out.append(kContinue);
  }
  return 0;
}

int Loop::OnBody(http_parser* p, const char* at, size_t n) {
  Conn* c = static_cast<Conn*>(p->data);
  if (c->body.size() + n > c->loop->options_.max_readable_body_bytes) return -1;
  c->body.append(at, n);
  return 0;
}

int Loop::OnMessageComplete(http_parser* p) {
  // Stop here: the request is answered before the next one is parsed.
  http_parser_pause(p, 1);
  static_cast<Conn*>(p->data)->complete = true;
  return 0;
}

// ---- answering ----

void Loop::Dispatch(Conn* c, bool keep_alive) {
  const std::string_view method = http_method_str(static_cast<http_method>(c->parser.method));
  if (impl_->stopping.load(std::memory_order_acquire)) {
    Answer(
        c,
        Response{
            503, kJsonContentType, RenderErrorBody("unavailable", "server is shutting down"), {}},
        /*close=*/true);
    return;
  }
  if (impl_->rate_limiter && !internal::ExemptFromRateLimit(method, c->url)) {
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
    if (const int64_t wait_ms = impl_->rate_limiter->Acquire(c->client, now_ns); wait_ms > 0) {
      impl_->rate_limited_total->Inc();
      Response r{
          429,
          kJsonContentType,
          RenderErrorBody("rate_limited",
                          fmt::format("over {} requests/s from {}; retry in {} ms",
                                      options_.rate_limit_per_s, AddressText(c->peer), wait_ms)),
          {}};
      r.retry_after_s = static_cast<int>((wait_ms + 999) / 1000);
      Answer(c, r, !keep_alive);
      return;
    }
  }
  Request request{method, c->url, c->body, false, c->authorization, c->forwarded};
  request.if_none_match = c->if_none_match;
  if (impl_->service->MayBlock(request)) {
    HandOff(c, request, keep_alive);
    return;
  }
  if (request.body.size() > options_.max_body_bytes) {
    request.body = {};
    request.body_too_large = true;
  }
  request.must_not_block = true;  // an I/O thread
  Answer(c, impl_->service->Handle(request), !keep_alive);
}

void Loop::HandOff(Conn* c, const Request& request, bool keep_alive) {
  auto job = std::make_shared<Job>();
  job->loop = this;
  job->fd = c->fd;
  job->serial = c->serial;
  job->close = !keep_alive;
  job->target = std::move(c->url);
  job->body = std::move(c->body);
  job->authorization = std::move(c->authorization);
  job->forwarded = std::move(c->forwarded);
  job->if_none_match = std::move(c->if_none_match);
  job->request =
      Request{request.method, job->target, job->body, false, job->authorization, job->forwarded};
  job->request.if_none_match = job->if_none_match;

  Server* impl = impl_;
  c->handling = true;
  c->deadline_ms = now_ms_ + options_.handle_timeout_ms;
  impl->jobs.fetch_add(1, std::memory_order_acq_rel);
  // A read other members answer (every read ForwardAsync takes may block):
  // handed to the peer client's thread, whose callback posts the answer
  // here; if a member asked does not answer, the blocking pool goes around
  // it.
  impl->forwards.fetch_add(1, std::memory_order_acq_rel);
  bool taken = false;
  try {
    taken = impl->service->ForwardAsync(job->request, [impl, job](
                                                          std::optional<Response> answer) noexcept {
      if (answer) {
        job->loop->Post(job, std::move(*answer));
      } else {
        try {
          boost::asio::post(*impl->blocking_pool,
                            [impl, job]() noexcept { impl->ProcessBlocking(job); });
        } catch (...) {
          job->close = true;
          job->loop->Post(
              job,
              Response{500, kJsonContentType, RenderErrorBody("internal", "out of memory"), {}});
        }
      }
      impl->forwards.fetch_sub(1, std::memory_order_acq_rel);
    });
    if (!taken) {
      impl->forwards.fetch_sub(1, std::memory_order_acq_rel);
      // Off the I/O threads: a publish waits for the broker's acks, a read
      // in a cluster may wait for another member.
      boost::asio::post(*impl->blocking_pool,
                        [impl, job]() noexcept { impl->ProcessBlocking(job); });
    }
  } catch (...) {
    if (!taken) {
      impl->forwards.fetch_sub(1, std::memory_order_acq_rel);
      impl->jobs.fetch_sub(1, std::memory_order_acq_rel);
      c->handling = false;
    }
    throw;
  }
}

void Loop::Answer(Conn* c, const Response& r, bool close) {
  // Appended piece by piece: fmt's format strings were 3 % of an I/O
  // thread's time answering single reads.
  std::string& out = c->out;
  const auto header = [&out](std::string_view name, std::string_view value) {
    out.append(name).append(": ").append(value).append("\r\n");
  };
  out.append("HTTP/1.1 ")
      .append(fmt::format_int(r.status).c_str())
      .append(" ")
      .append(internal::ReasonPhrase(r.status))
      .append("\r\n");
  header("Date", internal::HttpDate());
  header("Content-Type", r.content_type);
  if (!r.allow.empty()) header("Allow", r.allow);
  if (r.retry_after_s > 0) header("Retry-After", fmt::format_int(r.retry_after_s).c_str());
  if (!r.member.empty()) header(kMemberHeader, r.member);
  if (!r.etag.empty()) header("ETag", r.etag);
  if (!r.cache_control.empty()) header("Cache-Control", r.cache_control);
  if (r.unauthorized) header("WWW-Authenticate", "Bearer realm=\"tally\"");
  header("Connection", close ? "close" : "keep-alive");
  header("Content-Length", fmt::format_int(r.body.size()).c_str());
  out.append("\r\n").append(r.body);
  if (close) c->close_after_write = true;
}

// ---- the server ----

Server::~Server() { StopNow(); }

void Server::ProcessBlocking(const std::shared_ptr<Job>& job) noexcept {
  try {
    Request request = job->request;
    if (request.body.size() > options.max_body_bytes) {
      request.body = {};
      request.body_too_large = true;
    }
    job->loop->Post(job, service->Handle(request));
  } catch (...) {
    job->close = true;
    job->loop->Post(
        job, Response{500, kJsonContentType, RenderErrorBody("internal", "out of memory"), {}});
  }
}

int64_t Server::Unwritten() const {
  int64_t n = 0;
  for (const auto& loop : loops) n += loop->unwritten();
  return n;
}

void Server::StopNow() {
  std::lock_guard<std::mutex> lock(stop_mu);
  if (stopped) return;
  stopped = true;
  if (loops.empty()) return;  // Start() failed before running anything
  stopping.store(true, std::memory_order_release);

  // 1. Stop accepting: each loop closes its listening socket.
  for (auto& loop : loops) loop->CloseListener();
  const auto close_deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.shutdown_grace_ms);
  for (auto& loop : loops) {
    while (!loop->listener_closed() && std::chrono::steady_clock::now() < close_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!loop->listener_closed()) {
      TALLY_LOG_WARN("http", "closing a listener timed out; stopping anyway");
    }
  }

  // 2. Let the requests in flight be answered and written (requests that
  //    still arrive on open connections get 503 and Connection: close).
  const int grace_ms = base::StopBudgetLeftMs(options.shutdown_grace_ms);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while ((jobs.load(std::memory_order_acquire) > 0 || Unwritten() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (int64_t left = std::max(jobs.load(), Unwritten()); left > 0) {
    TALLY_LOG_WARN("http", "{} requests still in flight after {} ms; closing their connections",
                   left, grace_ms);
    if (options.abort_waits) options.abort_waits();
  }

  // 3. Reads handed to the peer client end by their deadline (the client
  //    calls back exactly once, answered or not), and may still hand one to
  //    the blocking pool. Then publishing jobs finish (bounded by the
  //    publisher's delivery timeout) while the loops still run to take
  //    their answers.
  while (forwards.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  blocking_pool->join();
  // 4. Stop the loops, then close every connection.
  for (auto& loop : loops) loop->Quit();
  for (std::thread& t : threads) t.join();
  threads.clear();
  loops.clear();
  blocking_pool.reset();
}

}  // namespace

struct HttpServer::Impl : Server {};

base::Result<std::unique_ptr<HttpServer>> HttpServer::Start(const ServerOptions& options,
                                                            QueryService* service) {
  if (service == nullptr) return base::Status::InvalidArgument("http: no query service");
  if (options.threads < 1 || options.blocking_threads < 1) {
    return base::Status::InvalidArgument("http: threads and blocking_threads must be >= 1");
  }
  if (options.max_readable_body_bytes < options.max_body_bytes) {
    return base::Status::InvalidArgument("http: max_readable_body_bytes < max_body_bytes");
  }
  if (options.max_connections < 1 || options.read_timeout_ms < 1 || options.write_timeout_ms < 1 ||
      options.handle_timeout_ms < 1 || options.max_header_count < 1 ||
      options.max_header_bytes < 1 || options.rate_limit_per_s < 0 || options.rate_burst < 0) {
    return base::Status::InvalidArgument(
        "http: max_connections, timeouts and header limits must be positive, rate limits not "
        "negative");
  }
  boost::asio::ip::address address;
  uint16_t port = 0;
  TALLY_RETURN_IF_ERROR(internal::ParseListen(options.listen, &address, &port));

  auto impl = std::make_unique<Impl>();
  Impl* self = impl.get();
  self->options = options;
  self->service = service;
  if (options.rate_limit_per_s > 0) {
    double burst = options.rate_burst > 0 ? options.rate_burst : options.rate_limit_per_s;
    self->rate_limiter =
        std::make_unique<internal::RateLimiter>(options.rate_limit_per_s, burst < 1 ? 1 : burst);
  }
  self->rate_limited_total = base::MetricsRegistry::Global().GetCounter(
      "tally_http_rate_limited_total", "HTTP requests answered 429 by --rate-limit");

  // SO_REUSEPORT would also let another process bind the port and take a
  // share of the connections: first make sure nobody listens there.
  if (port != 0) {
    auto probe = Listen(address, port, /*share=*/false);
    if (!probe.ok()) {
      return base::Status::Unavailable(
          fmt::format("http: cannot listen on {}: {}", options.listen, probe.status().message()));
    }
    ::close(*probe);
  }

  const size_t per_loop_connections =
      std::max<size_t>(1, (options.max_connections + static_cast<size_t>(options.threads) - 1) /
                              static_cast<size_t>(options.threads));
  for (int i = 0; i < options.threads; i++) {
    // The first loop may bind port 0; the others join the port it got.
    auto fd = Listen(address, i == 0 ? port : self->port.load(), /*share=*/true);
    if (!fd.ok()) {
      self->loops.clear();
      return base::Status::Unavailable(
          fmt::format("http: cannot listen on {}: {}", options.listen, fd.status().message()));
    }
    if (i == 0) self->port.store(LocalPort(*fd));
    self->loops.push_back(std::make_unique<Loop>(self, *fd, per_loop_connections));
    if (base::Status s = self->loops.back()->Init(); !s.ok()) {
      self->loops.clear();
      return s;
    }
  }
  self->blocking_pool = std::make_unique<boost::asio::thread_pool>(options.blocking_threads);
  for (int i = 0; i < options.threads; i++) {
    Loop* loop = self->loops[static_cast<size_t>(i)].get();
    self->threads.emplace_back([loop, i] {
      pthread_setname_np(pthread_self(), fmt::format("tally-http-{}", i).substr(0, 15).c_str());
      store::DisablePerfCounters();  // handlers read the state on this thread
      loop->Run();
    });
  }
  TALLY_LOG_INFO("http", "serving on {}:{} with {} I/O threads", address.to_string(),
                 self->port.load(), options.threads);
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() { impl_->StopNow(); }

uint16_t HttpServer::bound_port() const { return impl_->port.load(); }

}  // namespace tally::query
