// HttpLoop's requests: the parser's callbacks (the request's parts and the
// limits), the parse of what a connection read, and the answer: on the
// loop's thread, or handed to another and posted back.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <climits>
#include <iterator>
#include <optional>
#include <string_view>

#include "http_loop.h"
#include "http_wire.h"
#include "query/cluster_routing.h"
#include "routes.h"

namespace tally::query::internal {

namespace {

constexpr size_t kMaxFieldNameBytes = 1024;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// True if the request asks for 100 Continue before it sends its body.
bool ExpectsContinue(const http_parser* p, std::string_view expect) {
  return !expect.empty() && p->http_major == 1 && p->http_minor >= 1 &&
         SameHeaderName(expect, "100-continue");
}

Response ErrorAnswer(int status, std::string_view code, std::string_view message) {
  return Response{status, kJsonContentType, RenderErrorBody(code, message), {}};
}

// The printed address of a peer.
std::string AddressText(const sockaddr_storage& peer) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

void HttpLoop::BeginMessage(Conn* c) {
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
  c->transfer_encoding.clear();
  c->head_scanned = false;
  c->at_line_start = true;
  c->folded = false;
  c->lines = 0;
  c->line_bytes = 0;
  c->refusal.reset();
}

void HttpLoop::Consume(Conn* c, const char* data, size_t n) {
  while (n > 0) {
    if (!c->head_scanned) ScanHeaderLines(c, data, n);
    const size_t used = http_parser_execute(&c->parser, &settings_, data, n);
    data += used;
    n -= used;
    if (c->complete) {
      // An Upgrade is not taken (RFC 9110 section 7.8 lets a server ignore
      // it): the request is answered as HTTP/1.1, and so are the bytes after
      // it, which http_parser would leave to the other protocol.
      const bool keep_alive = http_should_keep_alive(&c->parser) != 0;
      Dispatch(c, keep_alive);
      BeginMessage(c);
      // A request handed off keeps the handle deadline HandOff() set.
      if (!c->handling) c->deadline_ms = now_ms_ + options_.read_timeout_ms;
      if (!MayRead(c)) {
        if (!c->close_after_write) c->pending.assign(data, n);
        return;
      }
      continue;
    }
    if (c->refusal) {
      // Decided by the headers (the parser paused there): answered, and the
      // body, which the answer does not say was read, is not.
      Answer(c, *c->refusal, /*close=*/true);
      return;
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

void HttpLoop::ScanHeaderLines(Conn* c, const char* data, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char ch = data[i];
    if (ch == '\n') {
      if (c->line_bytes == 0 && c->lines > 0) {
        c->head_scanned = true;  // the empty line: the body follows
        return;
      }
      if (c->line_bytes > 0) c->lines++;  // empty lines before the request line are skipped
      c->line_bytes = 0;
      c->at_line_start = true;
      continue;
    }
    if (c->at_line_start && c->lines > 0 && (ch == ' ' || ch == '\t')) c->folded = true;
    c->at_line_start = false;
    if (ch != '\r') c->line_bytes++;
  }
}

std::optional<Response> HttpLoop::RefuseByHeaders(Conn* c) {
  if (c->folded) {
    return ErrorAnswer(400, "bad_request",
                       "a header line starts with a space or tab (obsolete line folding)");
  }
  // RFC 9112 6.1 and 6.3: a request's body is framed by chunked, applied
  // once and last, else its length is unknown (400); any other coding
  // (gzip, chunked) is one tally does not decode (501).
  int chunked = 0;
  bool chunked_last = false;
  std::string_view unknown;
  for (std::string_view te = c->transfer_encoding; !te.empty();) {
    const size_t comma = te.find(',');
    std::string_view coding = te.substr(0, comma);
    te = comma == std::string_view::npos ? std::string_view() : te.substr(comma + 1);
    while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) {
      coding.remove_prefix(1);
    }
    while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) {
      coding.remove_suffix(1);
    }
    if (coding.empty()) continue;
    chunked_last = SameHeaderName(coding, "chunked");
    if (chunked_last) {
      chunked++;
    } else if (unknown.empty()) {
      unknown = coding;
    }
  }
  if (!c->transfer_encoding.empty() && (!chunked_last || chunked > 1)) {
    return ErrorAnswer(400, "bad_request", "Transfer-Encoding must end in chunked, applied once");
  }
  if (!unknown.empty()) {
    return ErrorAnswer(501, "not_implemented",
                       fmt::format("transfer coding \"{}\" is not implemented; only chunked is",
                                   unknown.substr(0, 32)));
  }
  const http_parser* p = &c->parser;
  if (!ExpectsContinue(p, c->expect)) return std::nullopt;
  // The client waits for leave to send its body: when the headers already
  // decide the answer (the token, the announced length, ...), that answer
  // goes instead of 100 Continue (RFC 9110 section 10.1.1).
  if (shared_->stopping.load(std::memory_order_acquire)) {
    return ErrorAnswer(503, "unavailable", "server is shutting down");
  }
  const std::string_view method = http_method_str(static_cast<http_method>(p->method));
  const bool too_large =
      p->content_length != ULLONG_MAX && p->content_length > options_.max_body_bytes;
  return shared_->service->RefusalByHeaders(
      Request{method, c->url, {}, too_large, c->authorization, c->forwarded});
}

// ---- http_parser callbacks: the request's parts, and the limits ----

std::string* HttpLoop::KeptHeader(Conn* c) {
  if (c->headers_done) return nullptr;  // trailers are not headers
  if (SameHeaderName(c->field, "transfer-encoding")) {
    // Every line counts: "gzip" on one and "chunked" on the next is "gzip, chunked".
    if (!c->transfer_encoding.empty()) c->transfer_encoding.push_back(',');
    return &c->transfer_encoding;
  }
  static constexpr std::string_view kNames[] = {"authorization", kForwardedHeader, "if-none-match",
                                                "expect"};
  std::string* const kept[] = {&c->authorization, &c->forwarded, &c->if_none_match, &c->expect};
  for (unsigned i = 0; i < std::size(kNames); i++) {
    if ((c->seen & (1u << i)) == 0 && SameHeaderName(c->field, kNames[i])) {
      c->seen |= 1u << i;
      return kept[i];
    }
  }
  return nullptr;
}

int HttpLoop::OnUrl(http_parser* p, const char* at, size_t n) {
  Conn* c = static_cast<Conn*>(p->data);
  if (c->url.size() + n > c->loop->options_.max_url_bytes) return -1;
  c->url.append(at, n);
  return 0;
}

int HttpLoop::OnHeaderField(http_parser* p, const char* at, size_t n) {
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

int HttpLoop::OnHeaderValue(http_parser* p, const char* at, size_t n) {
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

int HttpLoop::OnHeadersComplete(http_parser* p) {
  Conn* c = static_cast<Conn*>(p->data);
  c->headers_done = true;
  c->refusal = c->loop->RefuseByHeaders(c);
  if (c->refusal) {
    http_parser_pause(p, 1);  // Consume() answers it; the body is not read
    return 0;
  }
  if (p->content_length != ULLONG_MAX && p->content_length > 0) {
    // Not read at all: the connection is closed without an answer.
    if (p->content_length > c->loop->options_.max_readable_body_bytes) return -1;
    c->body.reserve(std::min<size_t>(p->content_length, kReadBytes));
  }
  // A client that waits for leave to send its body (curl does, for large
  // ones) gets it at once rather than after its own timeout.
  if (ExpectsContinue(p, c->expect)) c->out.append(kContinue);
  return 0;
}

int HttpLoop::OnBody(http_parser* p, const char* at, size_t n) {
  Conn* c = static_cast<Conn*>(p->data);
  if (c->body.size() + n > c->loop->options_.max_readable_body_bytes) return -1;
  c->body.append(at, n);
  return 0;
}

int HttpLoop::OnMessageComplete(http_parser* p) {
  // Stop here: the request is answered before the next one is parsed.
  http_parser_pause(p, 1);
  static_cast<Conn*>(p->data)->complete = true;
  return 0;
}

// ---- answering ----

void HttpLoop::Dispatch(Conn* c, bool keep_alive) {
  const std::string_view method = http_method_str(static_cast<http_method>(c->parser.method));
  if (shared_->stopping.load(std::memory_order_acquire)) {
    Answer(
        c,
        Response{
            503, kJsonContentType, RenderErrorBody("unavailable", "server is shutting down"), {}},
        /*close=*/true);
    return;
  }
  // A read another member forwarded was limited where its client reached
  // the cluster; the forwarded header alone does not say so (a client may
  // send it), the member's key does (ServerOptions::from_member).
  if (shared_->rate_limiter && !internal::ExemptFromRateLimit(method, c->url) &&
      !(options_.from_member && !c->forwarded.empty() &&
        options_.from_member(c->forwarded, c->authorization))) {
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
    if (const int64_t wait_ms = shared_->rate_limiter->Acquire(c->client, now_ns); wait_ms > 0) {
      shared_->rate_limited_total->Inc();
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
  if (shared_->service->MayBlock(request)) {
    HandOff(c, request, keep_alive);
    return;
  }
  if (request.body.size() > options_.max_body_bytes) {
    request.body = {};
    request.body_too_large = true;
  }
  request.must_not_block = true;  // an I/O thread
  Answer(c, shared_->service->Handle(request), !keep_alive);
}

void HttpLoop::HandOff(Conn* c, const Request& request, bool keep_alive) {
  auto job = std::make_shared<HttpJob>();
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

  HttpShared* shared = shared_;
  c->handling = true;
  c->deadline_ms = now_ms_ + options_.handle_timeout_ms;
  shared->jobs.fetch_add(1, std::memory_order_acq_rel);
  // A read other members answer (every read ForwardAsync takes may block):
  // handed to the peer client's thread, whose callback posts the answer
  // here; if a member asked does not answer, the blocking pool goes around
  // it.
  shared->forwards.fetch_add(1, std::memory_order_acq_rel);
  bool taken = false;
  try {
    taken = shared->service->ForwardAsync(
        job->request, [shared, job](std::optional<Response> answer) noexcept {
          if (answer) {
            job->loop->Post(job, std::move(*answer));
          } else {
            try {
              boost::asio::post(*shared->blocking_pool,
                                [shared, job]() noexcept { shared->ProcessBlocking(job); });
            } catch (...) {
              job->close = true;
              job->loop->Post(
                  job,
                  Response{
                      500, kJsonContentType, RenderErrorBody("internal", "out of memory"), {}});
            }
          }
          shared->forwards.fetch_sub(1, std::memory_order_acq_rel);
        });
    if (!taken) {
      shared->forwards.fetch_sub(1, std::memory_order_acq_rel);
      // Off the I/O threads: a publish waits for the broker's acks, a read
      // in a cluster may wait for another member.
      boost::asio::post(*shared->blocking_pool,
                        [shared, job]() noexcept { shared->ProcessBlocking(job); });
    }
  } catch (...) {
    if (!taken) {
      shared->forwards.fetch_sub(1, std::memory_order_acq_rel);
      shared->jobs.fetch_sub(1, std::memory_order_acq_rel);
      c->handling = false;
    }
    throw;
  }
}

void HttpLoop::Answer(Conn* c, const Response& r, bool close) {
  // Appended piece by piece: no format string is parsed per answer.
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

void HttpShared::ProcessBlocking(const std::shared_ptr<HttpJob>& job) noexcept {
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

}  // namespace tally::query::internal
