// QueryService: the HTTP API of SPEC section 4, independent of any transport.
//
// The query tier is thin: it parses a request target by hand, reads the
// state store (point reads, one batched MultiGet per partition for a list of
// posts), renders compact JSON with fmt and maps errors to HTTP statuses in
// one place (HttpStatusFor). The only writes it makes are publishes to the
// input topic (POST /v1/events and the unread resets); it never writes the
// store. HttpServer (http_server.h) feeds it requests from sockets; tests
// call Handle() directly.
//
// Thread model: Handle() is safe for concurrent use from any number of
// threads. Everything the service borrows must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tally::store {
class StateStore;
}
namespace tally::ingest {
class EventPublisher;
class EventsRequestParser;
struct PublishRecord;
struct RecordPosition;
}  // namespace tally::ingest

namespace tally::query {

class WatermarkSource;
class VisibilityWaiter;
namespace internal {
struct RouteTable;
struct RouteMatch;
}  // namespace internal

// One HTTP request as the transport received it. The views borrow from the
// transport's buffers and must stay valid for the duration of Handle().
struct Request {
  std::string_view method;  // "GET", "POST", ... (case-sensitive, as HTTP says)
  std::string_view target;  // origin-form request target: path, then "?query" if any
  std::string_view body;
  // Set by the transport when the body was larger than its limit (the body
  // is then left empty): the answer is 413 payload_too_large.
  bool body_too_large = false;
  std::string_view authorization;  // the Authorization header, empty if absent
};

// The answer. `content_type` and `allow` point to static strings.
struct Response {
  int status = 200;
  std::string_view content_type;
  std::string body;
  std::string_view allow;  // the Allow header of a 405; empty otherwise
  bool unauthorized = false;  // a 401: answer with WWW-Authenticate: Bearer
  int retry_after_s = 0;      // > 0: answer with Retry-After (a 429)
};

inline constexpr std::string_view kJsonContentType = "application/json";
inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4";

// What GET /v1/info reports.
struct ServiceInfo {
  std::string version;
  std::string brokers;  // "" when running without Kafka
  std::vector<std::string> input_topics;
  std::string state_dir;
  uint32_t partitions = 0;
};

struct QueryServiceOptions {
  // Required. Must outlive the service. Only read (a read-only store
  // follows its writer by itself: StoreOptions::catch_up_interval_ms).
  store::StateStore* store = nullptr;
  // Optional. Null: POST /v1/events and the resets answer 503 unavailable.
  ingest::EventPublisher* publisher = nullptr;
  // Optional. Null: GET /v1/watermarks answers 503 unavailable.
  WatermarkSource* watermarks = nullptr;
  ServiceInfo info;
  // Optional. While it returns false, every endpoint except /healthz,
  // /metrics, /v1/info and /v1/watermarks answers 503 unavailable, and
  // /healthz answers 503. Null means always ready. Called on request threads:
  // must be cheap and safe for concurrent use.
  std::function<bool()> ready;
  // (/healthz also answers 503 while store->WriteProblem() names a reason:
  // a full or failing disk; reads and POST /v1/events go on meanwhile.)
  // Optional. While it returns a non-empty line (the Kafka cluster is lost:
  // base::KafkaHealth::Problem()), /healthz answers 503 with that line, and
  // POST /v1/events and the resets answer 503 at once, publishing nothing;
  // reads are served as usual. Called on request threads: cheap, thread-safe.
  std::function<std::string()> kafka_problem;
  // When not empty, POST /v1/events and the resets need
  // "Authorization: Bearer <auth_token>" (else 401 unauthorized).
  std::string auth_token;
  // POST /v1/events?wait=visible and the resets' ?wait=visible answer 504
  // not_yet_visible when their records are not all visible after this long
  // (`--visible-timeout-ms`). They need `publisher` and `watermarks`.
  int visible_timeout_ms = 5000;
};

// Maps a Status code to its HTTP status. The only such mapping in tally:
// InvalidArgument 400, NotFound 404, ResourceExhausted 413, Unavailable 503,
// DeadlineExceeded 504, everything else 500. (405 and 501 are answers of the router itself, not
// outcomes of an operation, and do not come from a Status.)
int HttpStatusFor(base::StatusCode code);

// Renders {"error":{"code":"<code>","message":"<message>"}}, the message
// JSON-escaped and cut to its first line.
std::string RenderErrorBody(std::string_view code, std::string_view message);

class QueryService {
 public:
  // Precondition: options.store != nullptr.
  explicit QueryService(QueryServiceOptions options);
  ~QueryService();
  QueryService(const QueryService&) = delete;
  QueryService& operator=(const QueryService&) = delete;

  // Answers one request. Never throws: an unexpected exception becomes 500
  // internal. Records tally_http_requests_total{route,code} and
  // tally_http_request_duration_seconds{route}. Safe for concurrent use.
  Response Handle(const Request& request);

 private:
  // The route table (src/routes.cc) names the handlers below.
  friend struct internal::RouteTable;
  using Match = internal::RouteMatch;

  // Matches the route, checks the method, the body's size, readiness, the
  // token and the ids, then calls the route's handler. *route_slot: the
  // route's metrics slot.
  Response Dispatch(const Request& request, int* route_slot);
  Response HandleHealthz(const Request& request, const Match& m);
  Response HandleMetrics(const Request& request, const Match& m);
  Response HandleInfo(const Request& request, const Match& m);
  Response HandleWatermarks(const Request& request, const Match& m);
  Response HandleEvents(const Request& request, const Match& m);
  Response HandlePostCounts(const Request& request, const Match& m);
  Response HandlePostCountsBatch(const Request& request, const Match& m);
  Response HandlePostLike(const Request& request, const Match& m);
  Response HandlePostView(const Request& request, const Match& m);
  Response HandleUserCounts(const Request& request, const Match& m);
  Response HandleUserUnread(const Request& request, const Match& m);
  Response HandleUnreadReset(const Request& request, const Match& m);
  Response HandleFeedSnapshot(const Request& request, const Match& m);
  // The answer to a publish with ?wait=visible: waits for `records`, which
  // the publisher put at `positions`; `accepted` is the JSON value of the
  // answer's "accepted".
  Response AwaitVisible(const std::vector<ingest::PublishRecord>& records,
                        const std::vector<ingest::RecordPosition>& positions,
                        std::string_view accepted);
  // options_.kafka_problem(), or "" without one.
  std::string KafkaProblem() const;
  void Record(int route_id, int status, int64_t start_ns);

  std::unique_ptr<ingest::EventsRequestParser> AcquireParser();
  void ReleaseParser(std::unique_ptr<ingest::EventsRequestParser> parser);

  QueryServiceOptions options_;
  std::string info_body_;  // rendered once: the info never changes

  // Present when the service publishes and has watermarks.
  std::unique_ptr<VisibilityWaiter> visibility_;

  std::mutex parsers_mu_;
  std::vector<std::unique_ptr<ingest::EventsRequestParser>> parsers_;
};

}  // namespace tally::query
