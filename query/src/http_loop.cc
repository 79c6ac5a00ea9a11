// HttpLoop: an epoll loop per I/O thread over libhttp-parser. Written for
// the cost of one small request on a keep-alive connection: one recv(), one
// parse, one send(), and an epoll_wait() shared with the other connections
// that were ready at once, as Redis's event loop does.
#include "http_loop.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>

namespace tally::query::internal {

namespace {

constexpr int kTickMs = 100;      // how often deadlines are checked
constexpr int kMaxEvents = 256;   // epoll events taken at once
constexpr int kAcceptBatch = 64;  // connections accepted per wakeup
// An answer buffer grown beyond this (a large batch) is freed once written.
constexpr size_t kKeptOutputCapacity = 1 << 20;

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The rate limiter's key of a peer.
ClientKey ClientOf(const sockaddr_storage& peer) {
  if (peer.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&peer);
    return ClientKey::FromIpv4(ntohl(in->sin_addr.s_addr));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&peer);
  std::array<uint8_t, 16> bytes;
  std::memcpy(bytes.data(), in6->sin6_addr.s6_addr, 16);
  return ClientKey::FromIpv6(bytes);
}

}  // namespace

HttpLoop::HttpLoop(HttpShared* shared, int listen_fd, size_t max_connections)
    : shared_(shared),
      options_(shared->options),
      listen_fd_(listen_fd),
      max_connections_(max_connections),
      read_buf_(new char[kReadBytes]) {
  http_parser_settings_init(&settings_);
  settings_.on_url = &HttpLoop::OnUrl;
  settings_.on_header_field = &HttpLoop::OnHeaderField;
  settings_.on_header_value = &HttpLoop::OnHeaderValue;
  settings_.on_headers_complete = &HttpLoop::OnHeadersComplete;
  settings_.on_body = &HttpLoop::OnBody;
  settings_.on_message_complete = &HttpLoop::OnMessageComplete;
}

HttpLoop::~HttpLoop() {
  for (auto& c : live_) ::close(c->fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

base::Status HttpLoop::Init() {
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

void HttpLoop::Command(std::atomic<bool>* flag) {
  flag->store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void HttpLoop::Post(std::shared_ptr<HttpJob> job, Response response) noexcept {
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
    shared_->jobs.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void HttpLoop::Run() noexcept {
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

void HttpLoop::OnWake() {
  uint64_t count;
  [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof(count));
  if (close_listener_.load(std::memory_order_acquire) && listen_fd_ >= 0) {
    ::close(listen_fd_);  // leaves the epoll set with it
    listen_fd_ = -1;
    listener_closed_.store(true, std::memory_order_release);
  }
  std::vector<std::pair<std::shared_ptr<HttpJob>, Response>> answers;
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
        // Consume() began the next message when it handed this one off.
        c->deadline_ms = now_ms_ + options_.read_timeout_ms;
        Drive(c);
      } catch (...) {
        Close(c);
      }
    }
    shared_->jobs.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void HttpLoop::SetAccepting(bool on) {
  if (on == accepting_ || listen_fd_ < 0) return;
  epoll_event ev{};
  ev.events = on ? static_cast<uint32_t>(EPOLLIN) : 0u;
  ev.data.ptr = nullptr;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  accepting_ = on;
}

void HttpLoop::Accept() {
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

HttpLoop::Conn* HttpLoop::Find(int fd, uint64_t serial) const {
  if (fd < 0 || static_cast<size_t>(fd) >= by_fd_.size()) return nullptr;
  Conn* c = by_fd_[static_cast<size_t>(fd)];
  return c != nullptr && c->serial == serial ? c : nullptr;
}

void HttpLoop::Close(Conn* c) {
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

void HttpLoop::CheckDeadlines() {
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

void HttpLoop::SetEvents(Conn* c) {
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

void HttpLoop::SetUnwritten(Conn* c) {
  const bool now = c->handling || c->Unsent() > 0;
  if (now == c->unwritten) return;
  c->unwritten = now;
  unwritten_.fetch_add(now ? 1 : -1, std::memory_order_acq_rel);
}

void HttpLoop::OnEvent(Conn* c, uint32_t events) {
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

bool HttpLoop::MayRead(const Conn* c) {
  return !c->handling && !c->close_after_write && c->Unsent() <= kMaxGatheredOutput;
}

bool HttpLoop::Drive(Conn* c) {
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

bool HttpLoop::Flush(Conn* c) {
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

}  // namespace tally::query::internal
