// HttpServer: starts an HttpLoop (http_loop.h) per I/O thread, each on its
// own listening socket of one port, and stops them in order.
#include "query/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/metrics.h"
#include "base/shutdown.h"
#include "http_loop.h"
#include "http_wire.h"
#include "rate_limiter.h"
#include "store/state_store.h"

namespace tally::query {

namespace {

// A listening socket on `address`:`port` (0: any free one), SO_REUSEPORT
// when `share`: each I/O thread listens on the port with a socket of its
// own, and the kernel spreads the connections over them. Without `share`
// (a probe) the socket is bound, not listening.
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

}  // namespace

// What a server owns: the state its loops share, the loops and their
// threads.
struct HttpServer::Impl {
  internal::HttpShared shared;
  std::atomic<uint16_t> port{0};
  std::vector<std::unique_ptr<internal::HttpLoop>> loops;
  std::vector<std::thread> threads;
  std::mutex stop_mu;
  bool stopped = false;  // guarded by stop_mu

  ~Impl() { StopNow(); }
  void StopNow();
  // Connections of every loop with an answer handed off or not written.
  int64_t Unwritten() const;
};

int64_t HttpServer::Impl::Unwritten() const {
  int64_t n = 0;
  for (const auto& loop : loops) n += loop->unwritten();
  return n;
}

void HttpServer::Impl::StopNow() {
  std::lock_guard<std::mutex> lock(stop_mu);
  if (stopped) return;
  stopped = true;
  if (loops.empty()) return;  // Start() failed before running anything
  shared.stopping.store(true, std::memory_order_release);

  // 1. Stop accepting: each loop closes its listening socket.
  for (auto& loop : loops) loop->CloseListener();
  const auto close_deadline = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(shared.options.shutdown_grace_ms);
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
  const int grace_ms = base::StopBudgetLeftMs(shared.options.shutdown_grace_ms);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while ((shared.jobs.load(std::memory_order_acquire) > 0 || Unwritten() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (int64_t left = std::max(shared.jobs.load(), Unwritten()); left > 0) {
    TALLY_LOG_WARN("http", "{} requests still in flight after {} ms; closing their connections",
                   left, grace_ms);
    if (shared.options.abort_waits) shared.options.abort_waits();
  }

  // 3. Reads handed to the peer client end by their deadline (the client
  //    calls back exactly once, answered or not), and may still hand one to
  //    the blocking pool. Then publishing jobs finish (bounded by the
  //    publisher's delivery timeout) while the loops still run to take
  //    their answers.
  while (shared.forwards.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  shared.blocking_pool->join();
  // 4. Stop the loops, then close every connection.
  for (auto& loop : loops) loop->Quit();
  for (std::thread& t : threads) t.join();
  threads.clear();
  loops.clear();
  shared.blocking_pool.reset();
}

base::Result<std::unique_ptr<HttpListener>> HttpListener::Bind(const ServerOptions& options) {
  if (options.threads < 1) return base::Status::InvalidArgument("http: threads must be >= 1");
  boost::asio::ip::address address;
  uint16_t port = 0;
  TALLY_RETURN_IF_ERROR(internal::ParseListen(options.listen, &address, &port));
  std::unique_ptr<HttpListener> listener(new HttpListener());
  listener->listen_ = options.listen;
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
  for (int i = 0; i < options.threads; i++) {
    // The first socket may bind port 0; the others join the port it got.
    auto fd = Listen(address, i == 0 ? port : listener->port_, /*share=*/true);
    if (!fd.ok()) {
      return base::Status::Unavailable(
          fmt::format("http: cannot listen on {}: {}", options.listen, fd.status().message()));
    }
    listener->fds_.push_back(*fd);
    if (i == 0) listener->port_ = LocalPort(*fd);
  }
  return listener;
}

HttpListener::~HttpListener() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

base::Result<std::unique_ptr<HttpServer>> HttpServer::Start(const ServerOptions& options,
                                                            QueryService* service) {
  auto listener = HttpListener::Bind(options);
  if (!listener.ok()) return listener.status();
  return Start(options, service, std::move(listener).value());
}

base::Result<std::unique_ptr<HttpServer>> HttpServer::Start(
    const ServerOptions& options, QueryService* service, std::unique_ptr<HttpListener> listener) {
  if (service == nullptr) return base::Status::InvalidArgument("http: no query service");
  if (options.threads < 1 || options.blocking_threads < 1) {
    return base::Status::InvalidArgument("http: threads and blocking_threads must be >= 1");
  }
  if (listener == nullptr || listener->listen_ != options.listen ||
      listener->fds_.size() != static_cast<size_t>(options.threads)) {
    return base::Status::InvalidArgument(fmt::format(
        "http: no listener bound for {} with {} threads", options.listen, options.threads));
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
  internal::HttpShared& shared = self->shared;
  shared.options = options;
  shared.service = service;
  if (options.rate_limit_per_s > 0) {
    double burst = options.rate_burst > 0 ? options.rate_burst : options.rate_limit_per_s;
    shared.rate_limiter =
        std::make_unique<internal::RateLimiter>(options.rate_limit_per_s, burst < 1 ? 1 : burst);
  }
  shared.rate_limited_total = base::MetricsRegistry::Global().GetCounter(
      "tally_http_rate_limited_total", "HTTP requests answered 429 by --rate-limit");

  self->port.store(listener->port_);
  const size_t per_loop_connections =
      std::max<size_t>(1, (options.max_connections + static_cast<size_t>(options.threads) - 1) /
                              static_cast<size_t>(options.threads));
  for (int i = 0; i < options.threads; i++) {
    // The loop owns its socket from here on.
    const int fd = std::exchange(listener->fds_[static_cast<size_t>(i)], -1);
    self->loops.push_back(std::make_unique<internal::HttpLoop>(&shared, fd, per_loop_connections));
    if (base::Status s = self->loops.back()->Init(); !s.ok()) {
      self->loops.clear();
      return s;
    }
  }
  shared.blocking_pool = std::make_unique<boost::asio::thread_pool>(options.blocking_threads);
  for (int i = 0; i < options.threads; i++) {
    internal::HttpLoop* loop = self->loops[static_cast<size_t>(i)].get();
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
