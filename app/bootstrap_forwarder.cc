#include "bootstrap_forwarder.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <list>
#include <vector>

#include "base/log.h"

namespace tally::app {
namespace {

constexpr std::string_view kComponent = "broker";
constexpr size_t kBufferBytes = 64 * 1024;

// Parses "a.b.c.d" or "localhost" into a network-order address.
bool ParseIpv4(const std::string& host, uint32_t* out) {
  std::string h = host == "localhost" ? "127.0.0.1" : host;
  in_addr addr{};
  if (inet_pton(AF_INET, h.c_str(), &addr) != 1) return false;
  *out = addr.s_addr;
  return true;
}

// Parses "a.b.c.d:port".
bool ParseHostPort(const std::string& text, uint32_t* ip, uint16_t* port) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  int p = 0;
  const char* begin = text.data() + colon + 1;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, p);
  if (ec != std::errc() || ptr != end || p <= 0 || p > 65535) return false;
  *port = static_cast<uint16_t>(p);
  return ParseIpv4(text.substr(0, colon), ip);
}

void SetNoDelay(int fd) {
  // Kafka requests and responses are small and latency-bound: no Nagle.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Bytes read from one socket, not yet written to the other.
struct Direction {
  std::vector<char> buf = std::vector<char>(kBufferBytes);
  size_t start = 0;
  size_t end = 0;
  bool eof = false;  // the source socket ended; relay what is left, then close

  size_t pending() const { return end - start; }
  size_t space() const { return buf.size() - end; }
  // Moves unwritten bytes to the front once the tail is full.
  void Compact() {
    if (start == end) {
      start = end = 0;
    } else if (end == buf.size() && start > 0) {
      std::memmove(buf.data(), buf.data() + start, end - start);
      end -= start;
      start = 0;
    }
  }
};

struct Connection {
  int client = -1;
  int upstream = -1;
  bool connecting = true;  // non-blocking connect to upstream in progress
  bool dead = false;
  Direction up;    // client -> upstream
  Direction down;  // upstream -> client
  // Indexes into the pollfd array for this round; -1 when not polled.
  int client_slot = -1;
  int upstream_slot = -1;
};

// Reads what fits from `fd` into `d`. False on a socket error.
bool ReadInto(int fd, Direction* d) {
  d->Compact();
  while (d->space() > 0 && !d->eof) {
    ssize_t n = recv(fd, d->buf.data() + d->end, d->space(), 0);
    if (n > 0) {
      d->end += static_cast<size_t>(n);
    } else if (n == 0) {
      d->eof = true;
    } else if (errno == EINTR) {
      continue;
    } else {
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }
  return true;
}

// Writes what it can of `d` to `fd`. False on a socket error.
bool WriteFrom(int fd, Direction* d) {
  while (d->pending() > 0) {
    ssize_t n = send(fd, d->buf.data() + d->start, d->pending(), MSG_NOSIGNAL);
    if (n > 0) {
      d->start += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }
  d->Compact();
  return true;
}

}  // namespace

base::Result<std::unique_ptr<BootstrapForwarder>> BootstrapForwarder::Listen(
    const std::string& host, int port) {
  uint32_t ip = 0;
  if (!ParseIpv4(host, &ip)) {
    return base::Status::InvalidArgument(
        fmt::format("broker host '{}' is not an IPv4 address", host));
  }
  if (port <= 0 || port > 65535) {
    return base::Status::InvalidArgument(fmt::format("broker port {} is not in 1..65535", port));
  }
  std::string address = fmt::format("{}:{}", host, port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return base::Status::IOError(fmt::format("socket for {}: {}", address, std::strerror(errno)));
  }
  // Lets a restarted broker reuse the port while old connections linger in
  // TIME_WAIT; a live listener on the port still makes bind fail.
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = ip;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0 || listen(fd, 128) != 0) {
    int err = errno;
    close(fd);
    std::string hint = err == EADDRINUSE ? " (is another broker or Kafka running there?)" : "";
    return base::Status::IOError(
        fmt::format("cannot listen on {}: {}{}", address, std::strerror(err), hint));
  }
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    int err = errno;
    close(fd);
    return base::Status::Internal(fmt::format("eventfd: {}", std::strerror(err)));
  }
  return std::unique_ptr<BootstrapForwarder>(new BootstrapForwarder(fd, wake, address));
}

BootstrapForwarder::BootstrapForwarder(int listen_fd, int wake_fd, std::string address)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), address_(std::move(address)) {}

BootstrapForwarder::~BootstrapForwarder() { Stop(); }

base::Status BootstrapForwarder::Start(const std::string& upstream) {
  if (started_ || stopped_) {
    return base::Status::FailedPrecondition(
        fmt::format("forwarder on {} already started or stopped", address_));
  }
  uint32_t ip = 0;
  uint16_t port = 0;
  if (!ParseHostPort(upstream, &ip, &port)) {
    return base::Status::InvalidArgument(
        fmt::format("forwarder upstream '{}' is not IPv4:port", upstream));
  }
  started_ = true;
  thread_ = std::thread([this, ip, port] { Run(ip, port); });
  return base::Status::Ok();
}

void BootstrapForwarder::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    uint64_t one = 1;
    // The eventfd counter cannot overflow from one write; ignore EAGAIN.
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void BootstrapForwarder::Run(uint32_t upstream_ip, uint16_t upstream_port) {
  sockaddr_in upstream{};
  upstream.sin_family = AF_INET;
  upstream.sin_addr.s_addr = upstream_ip;
  upstream.sin_port = htons(upstream_port);

  std::list<Connection> conns;  // stable addresses while polling
  std::vector<pollfd> fds;

  // A broker that is down refuses every connection: one line when that
  // starts, one when it ends, not one per client retry.
  int refused = 0;
  auto upstream_failed = [&](int err) {
    if (refused++ == 0) {
      TALLY_LOG_WARN(kComponent, "forwarder {}: cannot connect to the broker: {}; closing "
                     "bootstrap connections until it answers", address_, std::strerror(err));
    }
  };
  auto upstream_ok = [&] {
    if (refused > 0) {
      TALLY_LOG_INFO(kComponent, "forwarder {}: the broker answers again ({} connections closed meanwhile)",
                     address_, refused);
      refused = 0;
    }
  };

  auto accept_all = [&] {
    for (;;) {
      int c = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          // EMFILE and the like: back off until a connection closes.
          TALLY_LOG_WARN(kComponent, "forwarder {}: accept: {}", address_, std::strerror(errno));
        }
        return;
      }
      int u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (u < 0) {
        TALLY_LOG_WARN(kComponent, "forwarder {}: socket: {}", address_, std::strerror(errno));
        close(c);
        continue;
      }
      SetNoDelay(c);
      SetNoDelay(u);
      Connection& conn = conns.emplace_back();
      conn.client = c;
      conn.upstream = u;
      if (connect(u, reinterpret_cast<sockaddr*>(&upstream), sizeof(upstream)) == 0) {
        conn.connecting = false;
        upstream_ok();
      } else if (errno != EINPROGRESS) {
        upstream_failed(errno);
        conn.dead = true;
      }
      connections_.fetch_add(1, std::memory_order_relaxed);
    }
  };

  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (Connection& c : conns) {
      short cev = 0;
      short uev = 0;
      if (c.connecting) {
        uev = POLLOUT;
      } else {
        if (!c.up.eof && c.up.space() > 0) cev |= POLLIN;
        if (c.down.pending() > 0) cev |= POLLOUT;
        if (!c.down.eof && c.down.space() > 0) uev |= POLLIN;
        if (c.up.pending() > 0) uev |= POLLOUT;
      }
      // Always polled, even with no interest, so that errors are seen.
      c.client_slot = static_cast<int>(fds.size());
      fds.push_back({c.client, cev, 0});
      c.upstream_slot = static_cast<int>(fds.size());
      fds.push_back({c.upstream, uev, 0});
    }
    int ready = poll(fds.data(), fds.size(), -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      TALLY_LOG_ERROR(kComponent, "forwarder {}: poll: {}; stopping", address_,
                      std::strerror(errno));
      break;
    }
    if (fds[0].revents) break;  // Stop()
    if (fds[1].revents & POLLIN) accept_all();

    for (Connection& c : conns) {
      if (c.client_slot < 0 || c.dead) continue;
      short cre = fds[c.client_slot].revents;
      short ure = fds[c.upstream_slot].revents;
      if (c.connecting) {
        if (ure & (POLLOUT | POLLERR | POLLHUP)) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(c.upstream, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            upstream_failed(err);
            c.dead = true;
            continue;
          }
          c.connecting = false;
          upstream_ok();
        }
        if (cre & POLLERR) c.dead = true;
        continue;
      }
      if ((cre | ure) & POLLERR) {
        c.dead = true;
        continue;
      }
      // POLLHUP without room to read means the peer is gone for good.
      if (((cre & POLLHUP) && !(fds[c.client_slot].events & POLLIN)) ||
          ((ure & POLLHUP) && !(fds[c.upstream_slot].events & POLLIN))) {
        c.dead = true;
        continue;
      }
      bool ok = true;
      if (cre & (POLLIN | POLLHUP)) ok = ok && ReadInto(c.client, &c.up);
      if (ure & (POLLIN | POLLHUP)) ok = ok && ReadInto(c.upstream, &c.down);
      // Write right away what was just read; poll only when a socket is full.
      if (ok && c.up.pending() > 0) ok = WriteFrom(c.upstream, &c.up);
      if (ok && c.down.pending() > 0) ok = WriteFrom(c.client, &c.down);
      if (!ok || (c.up.eof && c.up.pending() == 0) || (c.down.eof && c.down.pending() == 0)) {
        c.dead = true;
      }
    }
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->dead) {
        close(it->client);
        close(it->upstream);
        connections_.fetch_sub(1, std::memory_order_relaxed);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Connection& c : conns) {
    close(c.client);
    close(c.upstream);
  }
  connections_.store(0, std::memory_order_relaxed);
}

}  // namespace tally::app
