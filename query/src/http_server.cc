// The only file of tally that includes RESTinio (it compiles slowly).
#include "query/http_server.h"

#include <fmt/core.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <exception>
#include <future>
#include <optional>
#include <restinio/all.hpp>
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

namespace asio = restinio::asio_ns;

// Share nothing between I/O threads: each runs an io_context and a server
// of its own, bound to the same port with SO_REUSEPORT (the kernel spreads
// connections over them), so a connection lives on one thread and needs no
// strand, and no thread wakes another to hand it work. The connection count
// limiter stops accepting at the shard's share of max_connections.
struct Traits : restinio::single_thread_traits_t<restinio::asio_timer_manager_t, restinio::null_logger_t> {
  static constexpr bool use_connection_count_limiter = true;
};
using Server = restinio::http_server_t<Traits>;

// An io_context whose pending handlers can be destroyed while it, and the
// server using it, still exist. A connection's destructor tells the server's
// connection count limiter that it is gone: destroying the io_context (and
// with it the idle connections waiting in it) after the server would touch
// a freed limiter; destroying the server first would leave its acceptor
// pointing into freed services.
class IoContext : public asio::io_context {
 public:
  explicit IoContext(int concurrency_hint) : asio::io_context(concurrency_hint) {}
  // Destroys every pending handler (and so every connection) now.
  void DropPendingHandlers() { shutdown(); }
};

// The rate limiter's key for the peer of a request.
internal::ClientKey ClientOf(const asio::ip::tcp::endpoint& peer) {
  const asio::ip::address a = peer.address();
  if (a.is_v4()) return internal::ClientKey::FromIpv4(a.to_v4().to_uint());
  return internal::ClientKey::FromIpv6(a.to_v6().to_bytes());
}

// The Authorization header, borrowed from the request; empty if absent.
std::string_view Authorization(const restinio::http_request_header_t& header) {
  auto v = header.opt_value_of(restinio::http_field::authorization);
  return v ? std::string_view(v->data(), v->size()) : std::string_view{};
}

// The X-Tally-Forwarded header (a request another member sent), borrowed
// from the request; empty if absent.
std::string_view Forwarded(const restinio::http_request_header_t& header) {
  auto v = header.opt_value_of(std::string_view(kForwardedHeader));
  return v ? std::string_view(v->data(), v->size()) : std::string_view{};
}

// The If-None-Match header (a cached copy's ETag), borrowed from the
// request; empty if absent.
std::string_view IfNoneMatch(const restinio::http_request_header_t& header) {
  auto v = header.opt_value_of(restinio::http_field::if_none_match);
  return v ? std::string_view(v->data(), v->size()) : std::string_view{};
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions options;
  QueryService* service = nullptr;

  // Requests taken by the handler whose answer is not yet written (or
  // abandoned). Declared before the io_context: write notifications can
  // still run while it is destroyed.
  std::atomic<int64_t> in_flight{0};
  // Of those, reads handed to the peer client (ForwardAsync) whose
  // callback has not yet run: it may still post to the blocking pool.
  std::atomic<int64_t> forwards{0};
  std::atomic<bool> stopping{false};
  std::atomic<uint16_t> port{0};

  std::unique_ptr<internal::RateLimiter> rate_limiter;  // null: no --rate-limit
  base::Counter* rate_limited_total = nullptr;

  // One per I/O thread; each server lives on its own io_context.
  struct Shard {
    std::unique_ptr<IoContext> io;
    std::unique_ptr<Server> server;
  };
  std::vector<Shard> shards;
  std::unique_ptr<boost::asio::thread_pool> blocking_pool;
  std::vector<std::thread> threads;
  std::mutex stop_mu;
  bool stopped = false;  // guarded by stop_mu

  ~Impl() { StopNow(); }

  restinio::request_handling_status_t OnRequest(restinio::request_handle_t req,
                                                IoContext* io) noexcept;
  void Process(const restinio::request_handle_t& req) noexcept;
  // Answers `req` with QueryService::Handle() on the blocking pool.
  void ProcessBlocking(const restinio::request_handle_t& req) noexcept;
  void Answer(const restinio::request_handle_t& req, Response response, bool close) noexcept;
  void StopNow();
};

void HttpServer::Impl::Answer(const restinio::request_handle_t& req, Response response,
                              bool close) noexcept {
  try {
    auto builder = req->create_response(restinio::http_status_line_t{
        restinio::http_status_code_t{static_cast<std::uint16_t>(response.status)},
        internal::ReasonPhrase(response.status)});
    builder.append_header(restinio::http_field::date, std::string(internal::HttpDate()));
    builder.append_header(restinio::http_field::content_type, std::string(response.content_type));
    if (!response.allow.empty()) {
      builder.append_header(restinio::http_field::allow, std::string(response.allow));
    }
    if (response.retry_after_s > 0) {
      builder.append_header(restinio::http_field::retry_after,
                            std::to_string(response.retry_after_s));
    }
    if (!response.member.empty()) {
      builder.append_header(std::string(kMemberHeader), std::move(response.member));
    }
    if (!response.etag.empty()) {
      builder.append_header(restinio::http_field::etag, std::string(response.etag));
    }
    if (!response.cache_control.empty()) {
      builder.append_header(restinio::http_field::cache_control,
                            std::string(response.cache_control));
    }
    if (response.unauthorized) {
      builder.append_header(restinio::http_field::www_authenticate, "Bearer realm=\"tally\"");
    }
    if (close) builder.connection_close();
    builder.set_body(std::move(response.body));
    // The notification runs once the answer is written, or when it is
    // dropped with its connection: either way the request is finished.
    builder.done([this](const asio::error_code&) noexcept {
      in_flight.fetch_sub(1, std::memory_order_acq_rel);
    });
  } catch (const std::exception& e) {
    // The connection may be gone or memory short; nothing can be sent.
    in_flight.fetch_sub(1, std::memory_order_acq_rel);
    TALLY_LOG_WARN("http", "could not send an answer: {}", e.what());
  } catch (...) {
    in_flight.fetch_sub(1, std::memory_order_acq_rel);
  }
}

// RESTinio 0.6 calls this while it parses a connection's input, and it is
// never answered here: an answer written from inside the handler starts the
// connection's write while RESTinio still reads pipelined requests, and
// RESTinio then decides whether to read on after that write from a count of
// unanswered requests that the reads went on to raise; the read it resumes
// registers one request too many and closes the connection (20 pipelined
// requests got 3 answers). Posted to the connection's io_context, an answer
// is written only after RESTinio stopped reading, and the count is right.
restinio::request_handling_status_t HttpServer::Impl::OnRequest(restinio::request_handle_t req,
                                                                IoContext* io) noexcept {
  in_flight.fetch_add(1, std::memory_order_acq_rel);
  try {
    asio::post(*io, [this, req = std::move(req)]() noexcept { Process(req); });
    return restinio::request_accepted();
  } catch (...) {
    // Only allocation can fail above; RESTinio answers a rejected request
    // with 501 and closes the connection.
    in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return restinio::request_rejected();
  }
}

void HttpServer::Impl::Process(const restinio::request_handle_t& req) noexcept {
  try {
    if (stopping.load(std::memory_order_acquire)) {
      Response r{
          503, kJsonContentType, RenderErrorBody("unavailable", "server is shutting down"), {}};
      Answer(req, std::move(r), /*close=*/true);
      return;
    }
    const auto& header = req->header();
    std::string_view method = header.method().c_str();
    std::string_view target = header.request_target();
    if (rate_limiter && !internal::ExemptFromRateLimit(method, target)) {
      if (int64_t wait_ms =
              rate_limiter->Acquire(ClientOf(req->remote_endpoint()),
                                    std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
          wait_ms > 0) {
        rate_limited_total->Inc();
        Response r{
            429,
            kJsonContentType,
            RenderErrorBody(
                "rate_limited",
                fmt::format("over {} requests/s from {}; retry in {} ms", options.rate_limit_per_s,
                            req->remote_endpoint().address().to_string(), wait_ms)),
            {}};
        r.retry_after_s = static_cast<int>((wait_ms + 999) / 1000);
        Answer(req, std::move(r), /*close=*/false);
        return;
      }
    }
    Request request{method, target, req->body(), false, Authorization(header), Forwarded(header)};
    request.if_none_match = IfNoneMatch(header);
    if (service->MayBlock(request)) {
      // A read other members answer (every read ForwardAsync takes may
      // block): handed to the peer client's thread, whose callback answers
      // (RESTinio lets any thread finish the answer); if a member asked
      // does not answer, the blocking path below goes around it.
      forwards.fetch_add(1, std::memory_order_acq_rel);
      if (service->ForwardAsync(request, [this, req](std::optional<Response> answer) noexcept {
            if (answer) {
              Answer(req, std::move(*answer), false);
            } else {
              try {
                boost::asio::post(*blocking_pool, [this, req]() noexcept { ProcessBlocking(req); });
              } catch (...) {
                Answer(req,
                       Response{
                           500, kJsonContentType, RenderErrorBody("internal", "out of memory"), {}},
                       /*close=*/true);
              }
            }
            forwards.fetch_sub(1, std::memory_order_acq_rel);
          })) {
        return;
      }
      forwards.fetch_sub(1, std::memory_order_acq_rel);
      // Off the I/O threads: a publish waits for the broker's acks, a read
      // in a cluster may wait for another member. RESTinio lets any thread
      // finish the answer.
      boost::asio::post(*blocking_pool, [this, req]() noexcept { ProcessBlocking(req); });
      return;
    }
    if (request.body.size() > options.max_body_bytes) {
      request.body = {};
      request.body_too_large = true;
    }
    request.must_not_block = true;  // an I/O thread
    Answer(req, service->Handle(request), false);
  } catch (...) {
    // Only allocation can fail above: answer 500 and close, if even that
    // can be allocated (Answer() accounts for the request either way).
    try {
      Answer(req, Response{500, kJsonContentType, RenderErrorBody("internal", "out of memory"), {}},
             /*close=*/true);
    } catch (...) {
      in_flight.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

void HttpServer::Impl::ProcessBlocking(const restinio::request_handle_t& req) noexcept {
  try {
    const auto& h = req->header();
    Request request{h.method().c_str(), h.request_target(), req->body(), false,
                    Authorization(h),   Forwarded(h)};
    request.if_none_match = IfNoneMatch(h);
    if (request.body.size() > options.max_body_bytes) {
      request.body = {};
      request.body_too_large = true;
    }
    Answer(req, service->Handle(request), false);
  } catch (...) {
    Answer(req, Response{500, kJsonContentType, RenderErrorBody("internal", "out of memory"), {}},
           /*close=*/true);
  }
}

void HttpServer::Impl::StopNow() {
  std::lock_guard<std::mutex> lock(stop_mu);
  if (stopped) return;
  stopped = true;
  if (shards.empty()) return;  // Start() failed before running anything
  stopping.store(true, std::memory_order_release);

  // 1. Stop accepting: close each listener on its own executor.
  for (Shard& shard : shards) {
    if (!shard.server) continue;
    std::promise<void> closed;
    shard.server->close_async([&closed]() noexcept { closed.set_value(); },
                              [&closed](std::exception_ptr) noexcept { closed.set_value(); });
    if (closed.get_future().wait_for(std::chrono::milliseconds(options.shutdown_grace_ms)) !=
        std::future_status::ready) {
      TALLY_LOG_WARN("http", "closing a listener timed out; stopping anyway");
    }
  }

  // 2. Let the requests in flight be answered (requests that still arrive
  //    on open connections get 503 and Connection: close).
  const int grace_ms = base::StopBudgetLeftMs(options.shutdown_grace_ms);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (in_flight.load(std::memory_order_acquire) > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (int64_t left = in_flight.load(); left > 0) {
    TALLY_LOG_WARN("http", "{} requests still in flight after {} ms; closing their connections",
                   left, grace_ms);
    if (options.abort_waits) options.abort_waits();
  }

  // 3. Reads handed to the peer client end by their deadline (the client
  //    calls back exactly once, answered or not), and may still hand one to
  //    the blocking pool. Then publishing jobs finish (bounded by the
  //    publisher's delivery timeout) while the io_context still exists for
  //    their answers to be posted to.
  while (forwards.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  blocking_pool->join();
  // 4. Drop every connection and join the I/O threads.
  for (Shard& shard : shards) shard.io->stop();
  for (std::thread& t : threads) t.join();
  threads.clear();
  for (Shard& shard : shards) {
    shard.io->DropPendingHandlers();  // the remaining connections, while their server exists
    shard.server.reset();
    shard.io.reset();
  }
  shards.clear();
  blocking_pool.reset();
}

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
  asio::ip::address address;
  uint16_t port = 0;
  TALLY_RETURN_IF_ERROR(internal::ParseListen(options.listen, &address, &port));

  auto impl = std::make_unique<Impl>();
  Impl* self = impl.get();
  self->options = options;
  self->service = service;
  self->blocking_pool = std::make_unique<boost::asio::thread_pool>(options.blocking_threads);
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
    try {
      asio::io_context probe_io;
      asio::ip::tcp::acceptor probe(probe_io);
      asio::ip::tcp::endpoint ep(address, port);
      probe.open(ep.protocol());
      probe.set_option(asio::ip::tcp::acceptor::reuse_address(true));
      probe.bind(ep);
    } catch (const std::exception& e) {
      self->blocking_pool->join();
      return base::Status::Unavailable(
          fmt::format("http: cannot listen on {}: {}", options.listen, e.what()));
    }
  }

  using std::chrono::milliseconds;
  const size_t per_shard_connections =
      std::max<size_t>(1, (options.max_connections + static_cast<size_t>(options.threads) - 1) /
                              static_cast<size_t>(options.threads));
  for (int i = 0; i < options.threads; i++) {
    Impl::Shard shard;
    shard.io = std::make_unique<IoContext>(1);
    // The first shard may bind port 0; the others join the port it got.
    uint16_t shard_port = i == 0 ? port : self->port.load();
    restinio::server_settings_t<Traits> settings;
    settings.address(address)
        .protocol(address.is_v6() ? asio::ip::tcp::v6() : asio::ip::tcp::v4())
        .port(shard_port)
        .request_handler([self, io = shard.io.get()](restinio::request_handle_t req) {
          return self->OnRequest(std::move(req), io);
        })
        .read_next_http_message_timelimit(milliseconds(options.read_timeout_ms))
        .write_http_response_timelimit(milliseconds(options.write_timeout_ms))
        .handle_request_timeout(milliseconds(options.handle_timeout_ms))
        // One request of a connection at a time: RESTinio reads the next
        // only once the answer to this one is written. A client may
        // pipeline any number (they wait in its socket: TCP pushes back, and
        // a connection holds one request in memory), answers keep their
        // order, publishes from one connection keep theirs, and the answers
        // to the requests before bytes that are not HTTP are written before
        // RESTinio closes the connection at them (it drops the answers it
        // holds when it does).
        .max_pipelined_requests(1)
        .max_parallel_connections(per_shard_connections)
        .concurrent_accepts_count(4)
        .incoming_http_msg_limits(restinio::incoming_http_msg_limits_t{}
                                      .max_url_size(options.max_url_bytes)
                                      .max_field_name_size(1024)
                                      .max_field_value_size(options.max_header_bytes)
                                      .max_field_count(options.max_header_count)
                                      .max_body_size(options.max_readable_body_bytes))
        .acceptor_options_setter([](restinio::acceptor_options_t& o) {
          o.set_option(asio::ip::tcp::acceptor::reuse_address(true));
          o.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true));
        })
        .socket_options_setter(
            [](restinio::socket_options_t& o) { o.set_option(asio::ip::tcp::no_delay(true)); })
        .acceptor_post_bind_hook([self](asio::ip::tcp::acceptor& acceptor) {
          self->port.store(acceptor.local_endpoint().port());
        });
    try {
      shard.server =
          std::make_unique<Server>(restinio::external_io_context(*shard.io), std::move(settings));
      // Binding here, before any thread runs an io_context, makes a taken
      // port an error of Start() rather than of a background thread.
      shard.server->open_sync();
    } catch (const std::exception& e) {
      self->shards.clear();
      self->blocking_pool->join();
      return base::Status::Unavailable(
          fmt::format("http: cannot listen on {}: {}", options.listen, e.what()));
    }
    self->shards.push_back(std::move(shard));
  }
  for (int i = 0; i < options.threads; i++) {
    IoContext* io = self->shards[static_cast<size_t>(i)].io.get();
    self->threads.emplace_back([io, i] {
      pthread_setname_np(pthread_self(), fmt::format("tally-http-{}", i).substr(0, 15).c_str());
      store::DisablePerfCounters();  // handlers read the state on this thread
      // Handlers do not throw (OnRequest is noexcept); RESTinio's own
      // exceptions are caught per connection. Anything else is a bug.
      try {
        io->run();
      } catch (const std::exception& e) {
        TALLY_LOG_ERROR("http", "I/O thread stopped by an exception: {}", e.what());
      }
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
