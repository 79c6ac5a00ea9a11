// The network loop of BrokerServer: accepting, reading frames, the response
// slots, writing, timers, wake-ups, and start and stop. The request
// handlers are in handlers.cc.
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <future>

#include "base/clock.h"

namespace tally::broker {

namespace {

constexpr const char* kLog = "broker";
constexpr int kMaxEvents = 256;
constexpr int kAcceptBatch = 64;
constexpr size_t kReadChunk = 64 * 1024;
// Bytes read ahead of the current frame: enough for pipelined small
// requests, small enough that a connection's input stays bounded.
constexpr size_t kMaxReadAhead = 256 * 1024;
// An output buffer grown beyond this is released once written.
constexpr size_t kKeptOutputCapacity = 1 << 20;
// Spare response buffers kept in all (BrokerServer::TakeBuffer): a few of
// the largest fetch answers librdkafka asks for (fetch.max.bytes, 50 MiB).
constexpr size_t kSpareBytes = size_t{128} << 20;
constexpr int64_t kSpareIdleMs = 10000;
// Longest epoll sleep: bounds how late a maintenance pass may start.
constexpr int64_t kMaxSleepMs = 1000;

// Marks the epoll entries that are not connections.
int kListenTag;
int kWakeTag;

std::string PeerName(const sockaddr_storage& peer, std::string* host) {
  char buf[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (peer.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&peer);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    port = ntohs(in->sin_port);
  } else if (peer.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&peer);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    port = ntohs(in6->sin6_port);
  }
  *host = fmt::format("/{}", buf);
  return fmt::format("{}:{}", buf, port);
}

void WakeFd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

}  // namespace

BrokerServer::BrokerServer(const BrokerOptions& options) : options_(options) {
  advertised_host_ = options.advertised_host.empty() ? options.host : options.advertised_host;
}

base::Result<std::unique_ptr<BrokerServer>> BrokerServer::Start(const BrokerOptions& options) {
  if (options.log_dir.empty()) return base::Status::InvalidArgument("broker: no log_dir");
  if (options.default_partitions < 1 || options.max_frame_bytes < 64 ||
      options.max_connections < 1 || options.max_pending_requests_per_connection < 1 ||
      options.log_flush_ms < 0) {
    return base::Status::InvalidArgument("broker: bad options");
  }
  std::unique_ptr<BrokerServer> s(new BrokerServer(options));
  TALLY_RETURN_IF_ERROR(s->Open());
  TALLY_RETURN_IF_ERROR(s->Listen());
  s->loop_thread_ = std::thread([srv = s.get()] { srv->Run(); });
  if (options.log_flush_ms > 0) {
    s->offsets_flusher_ = std::thread([srv = s.get()] {
      // The committed offsets' group commit; the log has its own flusher
      // thread inside LogManager.
      // It sleeps until a commit is written (the network thread notifies,
      // NotifyOffsetsFlusher), then flushes, rounds at least log_flush_ms
      // apart.
      const auto interval = std::chrono::milliseconds(srv->options_.log_flush_ms);
      auto last_round = std::chrono::steady_clock::now() - interval;
      auto quit = [srv] { return srv->offsets_quit_.load(std::memory_order_acquire); };
      std::unique_lock<std::mutex> lock(srv->mu_);
      while (!quit()) {
        srv->cv_.wait(lock, [&] {
          return quit() || srv->offsets_->WrittenSequence() > srv->offsets_->DurableSequence();
        });
        if (quit()) break;
        srv->cv_.wait_until(lock, last_round + interval, quit);
        if (quit()) break;
        last_round = std::chrono::steady_clock::now();
        lock.unlock();
        base::Status st = srv->offsets_->Flush();
        if (!st.ok()) TALLY_LOG_ERROR(kLog, "offsets flush: {}", st.ToString());
        WakeFd(srv->wake_fd_);
        lock.lock();
      }
    });
  }
  TALLY_LOG_INFO(kLog, "broker {} listening on {} (cluster {}, log dir {})", options.node_id,
                 s->bootstrap(), s->cluster_id_, options.log_dir.string());
  return s;
}

base::Status BrokerServer::Open() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0) {
    return base::Status::Unavailable(fmt::format("broker: epoll: {}", std::strerror(errno)));
  }
  LogManagerOptions lo;
  lo.log_dir = options_.log_dir;
  lo.node_id = options_.node_id;
  lo.log_flush_ms = options_.log_flush_ms;
  lo.index_interval_bytes = options_.index_interval_bytes;
  lo.default_topic_config = DefaultTopicConfig();
  const int wake = wake_fd_;
  lo.on_flushed = [this, wake] {
    // On the log's flusher thread, right after the round it reports.
    const LogManager* logs = logs_for_flusher_.load(std::memory_order_acquire);
    const int64_t us = logs == nullptr ? 0 : logs->flush_stats().last_micros;
    int b = 0;
    while (b < kFlushBuckets - 1 && us >= (int64_t{1} << b)) b++;
    flush_hist_[b].fetch_add(1, std::memory_order_relaxed);
    WakeFd(wake);
  };
  auto logs = LogManager::Open(lo);
  if (!logs.ok()) return logs.status();
  logs_ = std::move(*logs);
  logs_for_flusher_.store(logs_.get(), std::memory_order_release);
  cluster_id_ = logs_->cluster_id();
  OffsetStoreOptions so;
  so.sync = options_.log_flush_ms > 0;
  auto store = OffsetStore::Open(options_.log_dir, so);
  if (!store.ok()) return store.status();
  offsets_ = std::move(*store);
  GroupCoordinatorOptions go;
  go.initial_rebalance_delay_ms = options_.group_initial_rebalance_delay_ms;
  go.partition_exists = [this](const std::string& topic, int32_t partition) {
    return logs_->GetPartition(topic, partition) != nullptr;
  };
  coord_ = std::make_unique<GroupCoordinator>(offsets_.get(), go);
  auto ids = ProducerIdAllocator::Open(options_.log_dir);
  if (!ids.ok()) return ids.status();
  producer_ids_ = std::move(*ids);
  return base::Status::Ok();
}

base::Status BrokerServer::Listen() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(options_.port);
  const int rc = ::getaddrinfo(options_.host.empty() ? nullptr : options_.host.c_str(),
                               port.c_str(), &hints, &res);
  if (rc != 0) {
    return base::Status::Unavailable(
        fmt::format("broker: cannot resolve {}: {}", options_.host, ::gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) {
    return base::Status::Unavailable(fmt::format("broker: cannot listen on {}:{}: {}",
                                                 options_.host, options_.port, last_error));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &kWakeTag;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  ev.data.ptr = &kListenTag;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  return base::Status::Ok();
}

BrokerServer::~BrokerServer() {
  Stop().ok();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::string BrokerServer::bootstrap() const {
  if (advertised_host_.find(':') != std::string::npos) {
    return fmt::format("[{}]:{}", advertised_host_, port_);
  }
  return fmt::format("{}:{}", advertised_host_, port_);
}

base::Status BrokerServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return stop_status_;
    stopped_ = true;
  }
  quit_.store(true, std::memory_order_release);
  WakeFd(wake_fd_);
  if (loop_thread_.joinable()) loop_thread_.join();
  offsets_quit_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  if (offsets_flusher_.joinable()) offsets_flusher_.join();
  base::Status st = base::Status::Ok();
  if (offsets_ != nullptr) {
    base::Status f = offsets_->Flush();
    if (!f.ok()) st = f;
  }
  coord_.reset();
  if (logs_ != nullptr) {
    base::Status c = logs_->Close();
    if (!c.ok() && st.ok()) st = c;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stop_status_ = st;
  TALLY_LOG_INFO(kLog, "broker on port {} stopped", port_);
  return st;
}

bool BrokerServer::PostToLoop(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (loop_done_ || stopped_) return false;
    commands_.push_back(std::move(fn));
  }
  WakeFd(wake_fd_);
  return true;
}

base::Status BrokerServer::CreateTopic(const std::string& name, int32_t partitions,
                                       const std::map<std::string, std::string>& configs) {
  auto done = std::make_shared<std::promise<base::Status>>();
  std::future<base::Status> result = done->get_future();
  const bool posted = PostToLoop([this, done, name, partitions, configs] {
    std::string message;
    const ErrorCode e = CreateTopicChecked(name, partitions, configs, false, &message);
    switch (e) {
      case ErrorCode::kNone:
        done->set_value(base::Status::Ok());
        return;
      case ErrorCode::kTopicAlreadyExists:
        done->set_value(base::Status::FailedPrecondition(message));
        return;
      case ErrorCode::kKafkaStorageError:
        done->set_value(base::Status::IOError(message));
        return;
      default:
        done->set_value(base::Status::InvalidArgument(message));
    }
  });
  if (!posted) return base::Status::Aborted("broker stopped");
  return result.get();
}

void BrokerServer::SetAvailable(bool available) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  if (!PostToLoop([this, done, available] {
        available_ = available;
        if (!available) CloseAll("broker set unavailable");
        done->set_value();
      })) {
    return;
  }
  f.wait();
}

void BrokerServer::PushRequestErrors(int16_t api_key, const std::vector<int16_t>& error_codes) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  if (!PostToLoop([this, done, api_key, error_codes] {
        auto& q = injected_errors_[api_key];
        q.insert(q.end(), error_codes.begin(), error_codes.end());
        done->set_value();
      })) {
    return;
  }
  f.wait();
}

BrokerStats BrokerServer::Stats() {
  auto done = std::make_shared<std::promise<BrokerStats>>();
  std::future<BrokerStats> f = done->get_future();
  const bool posted = PostToLoop([this, done] {
    BrokerStats s;
    for (const TopicInfo& t : logs_->Topics()) {
      for (int32_t p = 0; p < t.partitions; p++) {
        const PartitionLog* log = logs_->GetPartition(t.name, p);
        if (log == nullptr) continue;
        s.partitions.push_back({t.name, p, log->size_bytes(), log->log_start_offset(),
                                log->high_watermark(), log->log_end_offset()});
      }
    }
    s.connections = static_cast<int64_t>(conns_.size());
    auto disk = logs_->GetDiskSpace();
    if (disk.ok()) {
      s.disk_free_bytes = disk->free_bytes;
      s.disk_total_bytes = disk->total_bytes;
    }
    done->set_value(std::move(s));
  });
  BrokerStats s;
  if (posted) s = f.get();
  s.produce_requests = produce_requests_.load();
  s.produce_records = produce_records_.load();
  s.produce_bytes = produce_bytes_.load();
  s.fetch_requests = fetch_requests_.load();
  s.fetch_records = fetch_records_.load();
  s.fetch_bytes = fetch_bytes_.load();
  s.requests = requests_.load();
  s.connections_accepted = accepted_.load();
  if (logs_ != nullptr) {
    const FlushStats fs = logs_->flush_stats();
    s.flush_rounds = fs.rounds;
    s.flush_max_micros = fs.max_micros;
  }
  int64_t total = 0;
  for (int i = 0; i < kFlushBuckets; i++) {
    s.flush_micros_buckets.push_back(flush_hist_[i].load(std::memory_order_relaxed));
    total += s.flush_micros_buckets.back();
  }
  // p99: the upper bound of the bucket holding the 99th percentile round.
  int64_t seen = 0;
  for (int i = 0; i < kFlushBuckets && total > 0; i++) {
    seen += s.flush_micros_buckets[i];
    if (seen * 100 >= total * 99) {
      s.flush_p99_micros = int64_t{1} << i;
      break;
    }
  }
  return s;
}

// ---------------------------------------------------------------------------
// The loop.

void BrokerServer::Run() {
  epoll_event events[kMaxEvents];
  read_buf_.resize(kReadChunk);
  next_maintenance_ms_ = base::SteadyMs() + options_.maintenance_interval_ms;
  while (!quit_.load(std::memory_order_acquire)) {
    const int64_t now = base::SteadyMs();
    const int timeout = static_cast<int>(NextTimeout(now));
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, timeout);
    bool woken = false;
    for (int i = 0; i < n; i++) {
      void* ptr = events[i].data.ptr;
      if (ptr == &kListenTag) {
        Accept();
      } else if (ptr == &kWakeTag) {
        woken = true;
      } else {
        auto* c = static_cast<Conn*>(ptr);
        if (c->fd >= 0) OnConnEvent(c, events[i].events);
      }
    }
    if (woken) OnWake();
    if (recheck_) RecheckWaiting();
    NotifyOffsetsFlusher();
    ResumeInput();
    const int64_t after = base::SteadyMs();
    coord_->Tick();
    ExpireFetches(after);
    ReleaseDelayed(after);
    if (after >= next_maintenance_ms_) {
      TrimSpares(after);
      base::Status st = logs_->RunMaintenance(base::WallMs());
      if (!st.ok()) TALLY_LOG_WARN(kLog, "retention/compaction: {}", st.ToString());
      next_maintenance_ms_ = base::SteadyMs() + options_.maintenance_interval_ms;
    }
    // Connections closed during this turn are freed only now: an event of
    // this turn may still point at one.
    for (uint64_t id : closed_) conns_.erase(id);
    closed_.clear();
  }
  RunShutdown();
}

int64_t BrokerServer::NextTimeout(int64_t now) {
  int64_t next = std::min(now + kMaxSleepMs, next_maintenance_ms_);
  const int64_t coord_next = coord_->Tick();
  next = std::min(next, coord_next);
  for (const ParkedFetch& f : fetches_) next = std::min(next, f.deadline);
  if (delayed_pending_) {
    for (auto& [id, c] : conns_) {
      if (!c->slots.empty() && c->slots.front().ready) {
        next = std::min(next, c->slots.front().not_before);
      }
    }
  }
  if (recheck_ || !resume_.empty()) return 0;
  return std::clamp<int64_t>(next - now, 0, kMaxSleepMs);
}

void BrokerServer::RunShutdown() {
  std::vector<std::function<void()>> commands;
  {
    std::lock_guard<std::mutex> lock(mu_);
    loop_done_ = true;
    commands.swap(commands_);
  }
  // Commands that arrived too late run anyway so their callers return.
  for (auto& fn : commands) fn();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  coord_->AbortHeld();
  // Parked fetches get what there is now.
  std::vector<ParkedFetch> fetches;
  fetches.swap(fetches_);
  for (ParkedFetch& f : fetches) {
    FetchResponse resp;
    BuildFetch(f.request, true, &resp);
    Fill(f.conn_id, f.slot, f.correlation_id, std::move(resp), f.version);
  }
  base::Status st = logs_->FlushAll();
  if (!st.ok()) TALLY_LOG_WARN(kLog, "flush at stop: {}", st.ToString());
  RecheckWaiting();
  // Best effort: what the sockets take now is sent; the rest is dropped.
  for (auto& [id, c] : conns_) {
    if (c->fd >= 0) WriteOutput(c.get());
  }
  CloseAll("broker stopping");
  conns_.clear();
  produces_.clear();
}

void BrokerServer::Accept() {
  for (int i = 0; i < kAcceptBatch && listen_fd_ >= 0; i++) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      TALLY_LOG_WARN_LIMITED(accept_log_, kLog, "cannot accept a connection: {}",
                             std::strerror(errno));
      return;
    }
    std::string host;
    std::string name = PeerName(peer, &host);
    if (!available_) {
      ::close(fd);
      continue;
    }
    if (static_cast<int64_t>(conns_.size()) >= options_.max_connections) {
      TALLY_LOG_WARN_LIMITED(accept_log_, kLog,
                             "refusing connection from {}: {} connections already open", name,
                             conns_.size());
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto conn = std::make_unique<Conn>();
    conn->id = next_conn_id_++;
    conn->fd = fd;
    conn->peer = std::move(name);
    conn->host = std::move(host);
    Conn* c = conn.get();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = c;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    c->events = EPOLLIN;
    conns_.emplace(c->id, std::move(conn));
    accepted_.fetch_add(1, std::memory_order_relaxed);
  }
}

BrokerServer::Conn* BrokerServer::FindConn(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second->fd < 0) return nullptr;
  return it->second.get();
}

void BrokerServer::OnConnEvent(Conn* c, uint32_t events) {
  if (events & (EPOLLERR | EPOLLHUP)) {
    CloseConn(c, "");
    return;
  }
  if (events & EPOLLOUT) WriteOutput(c);
  if (c->fd < 0) return;
  if (events & EPOLLIN) ReadInput(c);
  if (c->fd < 0) return;
  ProcessInput(c);
  if (c->fd >= 0) UpdateInterest(c);
}

bool BrokerServer::Backpressured(const Conn* c) const {
  return static_cast<int64_t>(c->out.size() - c->out_off) >
             options_.max_output_bytes_per_connection ||
         static_cast<int>(c->slots.size()) >= options_.max_pending_requests_per_connection;
}

void BrokerServer::ReadInput(Conn* c) {
  if (Backpressured(c)) return;
  // Read at most the frame being assembled plus some read-ahead.
  size_t want = kMaxReadAhead;
  if (c->in.size() >= 4) {
    const uint32_t size = (uint32_t{static_cast<uint8_t>(c->in[0])} << 24) |
                          (uint32_t{static_cast<uint8_t>(c->in[1])} << 16) |
                          (uint32_t{static_cast<uint8_t>(c->in[2])} << 8) |
                          uint32_t{static_cast<uint8_t>(c->in[3])};
    if (size <= static_cast<uint32_t>(options_.max_frame_bytes)) {
      want = std::max<size_t>(want, size + 4);
    }
  }
  if (c->in.size() >= want) return;
  const size_t n = std::min(read_buf_.size(), want - c->in.size());
  const ssize_t r = ::recv(c->fd, read_buf_.data(), n, 0);
  if (r > 0) {
    c->in.append(read_buf_.data(), static_cast<size_t>(r));
    return;
  }
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  // EOF or a reset: a client that closed with a partial frame is logged.
  if (!c->in.empty()) {
    TALLY_LOG_WARN_LIMITED(conn_log_, kLog, "{} closed with {} bytes of an unfinished request",
                           c->peer, c->in.size());
  }
  CloseConn(c, "");
}

void BrokerServer::ResumeInput() {
  std::vector<uint64_t> ids;
  ids.swap(resume_);
  for (uint64_t id : ids) {
    Conn* c = FindConn(id);
    if (c == nullptr) continue;
    ProcessInput(c);
    if (c->fd >= 0) UpdateInterest(c);
  }
}

void BrokerServer::ProcessInput(Conn* c) {
  // Not re-entered: a handler's answer may free room (PumpSlots) while the
  // loop below still holds positions in `in`; that resumes later instead.
  if (c->processing) return;
  c->processing = true;
  size_t off = 0;
  // One frame at a time: decoding may take a multiple of the frame's size.
  while (c->fd >= 0 && !Backpressured(c)) {
    std::span<const uint8_t> buf(reinterpret_cast<const uint8_t*>(c->in.data()) + off,
                                 c->in.size() - off);
    auto size = PeekFrameSize(buf, options_.max_frame_bytes);
    if (!size.ok()) {
      TALLY_LOG_WARN_LIMITED(conn_log_, kLog, "closing {}: {}", c->peer, size.status().message());
      CloseConn(c, "");
      return;
    }
    if (!size->has_value() || buf.size() < 4 + static_cast<size_t>(**size)) break;
    const size_t frame = static_cast<size_t>(**size);
    auto request = DecodeRequest(buf.subspan(4, frame));
    off += 4 + frame;
    if (!request.ok()) {
      TALLY_LOG_WARN_LIMITED(conn_log_, kLog, "closing {}: bad request: {}", c->peer,
                             request.status().message());
      CloseConn(c, "");
      return;
    }
    requests_.fetch_add(1, std::memory_order_relaxed);
    Dispatch(c, *request);
  }
  c->processing = false;
  if (c->fd >= 0 && off > 0) c->in.erase(0, off);
}

uint64_t BrokerServer::NewSlot(Conn* c) {
  Slot s;
  s.not_before = base::SteadyMs() + delay_ms_.load(std::memory_order_relaxed);
  c->slots.push_back(std::move(s));
  return c->first_slot + c->slots.size() - 1;
}

void BrokerServer::Fill(uint64_t conn_id, uint64_t slot, int32_t correlation_id,
                        const ResponseBody& body, int16_t version) {
  Conn* c = FindConn(conn_id);
  if (c == nullptr || slot < c->first_slot || slot - c->first_slot >= c->slots.size()) return;
  Slot& s = c->slots[slot - c->first_slot];
  // A fetch answer is mostly its records: its size is known before encoding.
  size_t hint = 0;
  if (const auto* f = std::get_if<FetchResponse>(&body)) {
    hint = 64;
    for (const auto& t : f->responses) {
      hint += 32 + t.topic.size();
      for (const auto& p : t.partitions) hint += 64 + (p.records ? p.records->size() : 0);
    }
  }
  s.bytes.clear();
  if (hint > kKeptOutputCapacity && s.bytes.capacity() < hint) {
    s.bytes = TakeBuffer(hint);
  } else {
    s.bytes.reserve(hint);
  }
  EncodeResponse(correlation_id, body, version, &s.bytes);
  s.ready = true;
  PumpSlots(c);
}

void BrokerServer::PumpSlots(Conn* c) {
  const bool delayed = delay_ms_.load(std::memory_order_relaxed) > 0;
  const int64_t now = delayed ? base::SteadyMs() : 0;
  bool moved = false;
  while (!c->slots.empty() && c->slots.front().ready) {
    if (delayed && c->slots.front().not_before > now) {
      delayed_pending_ = true;
      break;
    }
    if (c->out_off == c->out.size()) {
      c->out.clear();
      c->out_off = 0;
    }
    if (c->out.empty()) {
      // Nothing unsent before it: the answer's buffer becomes the output
      // (no copy), the drained one is kept for the next answers.
      c->out.swap(c->slots.front().bytes);
      GiveBack(&c->slots.front().bytes);
    } else {
      c->out += c->slots.front().bytes;
    }
    c->slots.pop_front();
    c->first_slot++;
    moved = true;
  }
  if (moved) {
    WriteOutput(c);
    if (c->fd >= 0) {
      // Room again: what waits in the input buffer is decoded at the end
      // of this loop turn.
      if (!c->in.empty()) resume_.push_back(c->id);
      UpdateInterest(c);
    }
  }
}

void BrokerServer::WriteOutput(Conn* c) {
  while (c->out_off < c->out.size()) {
    const ssize_t n =
        ::send(c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    CloseConn(c, "");
    return;
  }
  if (c->out_off == c->out.size()) {
    c->out.clear();
    c->out_off = 0;
    if (c->out.capacity() > kKeptOutputCapacity) GiveBack(&c->out);
  }
}

std::string BrokerServer::TakeBuffer(size_t bytes) {
  // The smallest spare that fits.
  size_t best = spares_.size();
  for (size_t i = 0; i < spares_.size(); i++) {
    if (spares_[i].capacity() >= bytes &&
        (best == spares_.size() || spares_[i].capacity() < spares_[best].capacity())) {
      best = i;
    }
  }
  std::string out;
  spares_used_ms_ = base::SteadyMs();
  if (best < spares_.size()) {
    out.swap(spares_[best]);
    spares_.erase(spares_.begin() + static_cast<ptrdiff_t>(best));
    spare_bytes_ -= out.capacity();
  }
  out.reserve(bytes);
  return out;
}

void BrokerServer::GiveBack(std::string* buffer) {
  buffer->clear();
  if (buffer->capacity() <= kKeptOutputCapacity) return;  // small: kept where it is
  std::string b;
  b.swap(*buffer);
  // Room made by dropping larger spares; a buffer that does not fit is freed.
  std::sort(spares_.begin(), spares_.end(),
            [](const std::string& x, const std::string& y) { return x.capacity() < y.capacity(); });
  while (!spares_.empty() && spare_bytes_ + b.capacity() > kSpareBytes &&
         spares_.back().capacity() >= b.capacity()) {
    spare_bytes_ -= spares_.back().capacity();
    spares_.pop_back();
  }
  if (spare_bytes_ + b.capacity() > kSpareBytes) return;
  spare_bytes_ += b.capacity();
  spares_.push_back(std::move(b));
}

void BrokerServer::TrimSpares(int64_t now) {
  // A burst's buffers are not held for good: freed after kSpareIdleMs unused.
  if (spares_.empty() || now - spares_used_ms_ < kSpareIdleMs) return;
  spares_.clear();
  spare_bytes_ = 0;
}

void BrokerServer::UpdateInterest(Conn* c) {
  uint32_t want = 0;
  if (c->out_off < c->out.size()) want |= EPOLLOUT;
  if (!Backpressured(c)) {
    // Not while backpressured: PumpSlots resumes reading once answers leave.
    want |= EPOLLIN;
  }
  if (want == c->events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = c;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev);
  c->events = want;
}

void BrokerServer::CloseConn(Conn* c, const std::string& why) {
  if (c->fd < 0) return;
  if (!why.empty()) TALLY_LOG_INFO(kLog, "closing {}: {}", c->peer, why);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  c->fd = -1;
  closed_.push_back(c->id);
  c->slots.clear();
  std::string().swap(c->in);
  std::string().swap(c->out);
}

void BrokerServer::CloseAll(const std::string& why) {
  if (!conns_.empty() && !why.empty()) {
    TALLY_LOG_INFO(kLog, "closing {} connections: {}", conns_.size(), why);
  }
  for (auto& [id, c] : conns_) CloseConn(c.get(), "");
}

void BrokerServer::NotifyOffsetsFlusher() {
  if (options_.log_flush_ms <= 0) return;
  const uint64_t written = offsets_->WrittenSequence();
  if (written == offsets_notified_) return;
  offsets_notified_ = written;
  // Under mu_, so the flusher cannot miss it between its check and its wait.
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void BrokerServer::OnWake() {
  uint64_t count;
  [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof(count));
  RunCommands();
  recheck_ = true;
  coord_->ReleaseDurableCommits();
}

void BrokerServer::RunCommands() {
  std::vector<std::function<void()>> commands;
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands.swap(commands_);
  }
  for (auto& fn : commands) fn();
}

void BrokerServer::RecheckWaiting() {
  recheck_ = false;
  // Produce requests whose every partition is now below the high watermark.
  for (auto it = produces_.begin(); it != produces_.end();) {
    bool done = true;
    for (const PendingProduce::Wait& w : it->waits) {
      auto& part = it->response.topics[w.topic_index].partitions[w.partition_index];
      if (part.error_code != ErrorCode::kNone) continue;
      const PartitionLog* log =
          logs_->GetPartition(it->response.topics[w.topic_index].name, part.index);
      if (log == nullptr) {
        part.error_code = ErrorCode::kUnknownTopicOrPartition;
        continue;
      }
      if (log->high_watermark() > w.last_offset) {
        part.log_start_offset = log->log_start_offset();
        continue;
      }
      if (log->storage_failed()) {
        part.error_code = ErrorCode::kKafkaStorageError;
        part.base_offset = -1;
        continue;
      }
      done = false;
    }
    if (done) {
      PendingProduce p = std::move(*it);
      it = produces_.erase(it);
      Fill(p.conn_id, p.slot, p.correlation_id, p.response, p.version);
    } else {
      ++it;
    }
  }
  // Parked fetches that now have min_bytes.
  for (size_t i = 0; i < fetches_.size();) {
    FetchResponse resp;
    if (FindConn(fetches_[i].conn_id) == nullptr) {
      fetches_.erase(fetches_.begin() + static_cast<ptrdiff_t>(i));
      continue;
    }
    if (BuildFetch(fetches_[i].request, false, &resp)) {
      ParkedFetch f = std::move(fetches_[i]);
      fetches_.erase(fetches_.begin() + static_cast<ptrdiff_t>(i));
      Fill(f.conn_id, f.slot, f.correlation_id, std::move(resp), f.version);
    } else {
      i++;
    }
  }
}

void BrokerServer::ExpireFetches(int64_t now) {
  for (size_t i = 0; i < fetches_.size();) {
    if (fetches_[i].deadline > now) {
      i++;
      continue;
    }
    ParkedFetch f = std::move(fetches_[i]);
    fetches_.erase(fetches_.begin() + static_cast<ptrdiff_t>(i));
    FetchResponse resp;
    BuildFetch(f.request, true, &resp);
    Fill(f.conn_id, f.slot, f.correlation_id, std::move(resp), f.version);
  }
}

void BrokerServer::ReleaseDelayed(int64_t now) {
  if (!delayed_pending_) return;
  delayed_pending_ = false;
  const bool delayed = delay_ms_.load(std::memory_order_relaxed) > 0;
  for (auto& [id, c] : conns_) {
    if (c->fd < 0 || c->slots.empty() || !c->slots.front().ready) continue;
    if (!delayed || c->slots.front().not_before <= now) {
      PumpSlots(c.get());
    } else {
      delayed_pending_ = true;
    }
  }
}

}  // namespace tally::broker
