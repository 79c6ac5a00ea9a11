#include "query/query_service.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <array>
#include <cassert>
#include <cctype>
#include <chrono>
#include <exception>
#include <iterator>
#include <span>
#include <utility>

#include "base/clock.h"
#include "base/metrics.h"
#include "ingest/event_publisher.h"
#include "ingest/events_request.h"
#include "query/visibility_waiter.h"
#include "query/watermarks.h"
#include "request_target.h"
#include "schemas/delta.h"
#include "schemas/event.h"
#include "schemas/json_escape.h"
#include "store/state_store.h"

namespace tally::query {

using schemas::AppendJsonString;

namespace {

constexpr size_t kMaxBatchIds = 200;
constexpr std::string_view kGet = "GET";
constexpr std::string_view kPost = "POST";
constexpr char kIdRule[] =
    "ids are decimal integers 1..9223372036854775807 without sign or leading zeros";

// ---------------------------------------------------------------------------
// Routes. The path is matched by hand, segment by segment; {id} positions
// match any segment and are validated by the handler (so "/v1/posts/x/counts"
// is a bad id, 400, not an unknown path, 404).

enum RouteId : int {
  kUnmatched = 0,
  kHealthz,
  kMetrics,
  kInfo,
  kWatermarks,
  kEvents,
  kPostCounts,
  kPostCountsBatch,
  kPostLike,
  kPostView,
  kUserCounts,
  kUserUnread,
  kUnreadReset,
  kFeedSnapshot,
  kRouteCount,
};

constexpr const char* kRouteNames[kRouteCount] = {
    "unmatched",   "healthz",     "metrics",           "info",          "watermarks",
    "events",      "post_counts", "post_counts_batch", "post_like",     "post_view",
    "user_counts", "user_unread", "unread_reset",      "feed_snapshot",
};

struct Match {
  RouteId route = kUnmatched;
  std::string_view method;    // the one method the route answers
  std::string_view id1, id2;  // path ids (raw segments)
  std::string_view kind;      // the {kind} of an unread reset
  std::string_view query;
};

Match MatchTarget(std::string_view target) {
  Match m;
  std::string_view path;
  SplitTarget(target, &path, &m.query);
  PathSegments p = SplitPath(path);
  if (!p.ok) return m;
  const auto* s = p.segment;
  const int n = p.count;
  auto route = [&](RouteId r, std::string_view method) {
    m.route = r;
    m.method = method;
    return m;
  };
  if (n == 1) {
    if (s[0] == "healthz") return route(kHealthz, kGet);
    if (s[0] == "metrics") return route(kMetrics, kGet);
    return m;
  }
  if (s[0] != "v1") return m;
  if (n == 2) {
    if (s[1] == "info") return route(kInfo, kGet);
    if (s[1] == "watermarks") return route(kWatermarks, kGet);
    if (s[1] == "events") return route(kEvents, kPost);
    return m;
  }
  if (s[1] == "posts") {
    if (n == 3 && s[2] == "counts") return route(kPostCountsBatch, kGet);
    m.id1 = s[2];
    if (n == 4 && s[3] == "counts") return route(kPostCounts, kGet);
    if (n == 5) {
      m.id2 = s[4];
      if (s[3] == "likes") return route(kPostLike, kGet);
      if (s[3] == "views") return route(kPostView, kGet);
    }
    return Match{};
  }
  if (s[1] == "users") {
    m.id1 = s[2];
    if (n == 4 && s[3] == "counts") return route(kUserCounts, kGet);
    if (n == 4 && s[3] == "unread") return route(kUserUnread, kGet);
    if (n == 5 && s[3] == "feed" && s[4] == "snapshot") return route(kFeedSnapshot, kGet);
    if (n == 6 && s[3] == "unread" && s[5] == "reset") {
      m.kind = s[4];
      return route(kUnreadReset, kPost);
    }
    return Match{};
  }
  return m;
}

// ---------------------------------------------------------------------------
// Responses.

std::string_view DefaultErrorCode(int http_status) {
  switch (http_status) {
    case 400:
      return "bad_request";
    case 401:
      return "unauthorized";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "payload_too_large";
    case 501:
      return "not_implemented";
    case 503:
      return "unavailable";
    case 504:
      return "not_yet_visible";
    default:
      return "internal";
  }
}

Response JsonResponse(int status, std::string body) {
  return Response{status, kJsonContentType, std::move(body), {}};
}

// Constant-time comparison of the bearer token: the time taken does not
// depend on how many leading bytes match.
bool BearerMatches(std::string_view header, std::string_view token) {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); i++) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != std::tolower(static_cast<unsigned char>(kScheme[i]))) {
      return false;
    }
  }
  std::string_view given = header.substr(kScheme.size());
  unsigned char diff = given.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); i++) {
    diff |= static_cast<unsigned char>(token[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  }
  return diff == 0;
}

// An answer the router gives by itself (404, 405, 413, 501, 503).
Response ProtocolError(int http_status, std::string_view message, std::string_view code = {}) {
  return JsonResponse(
      http_status, RenderErrorBody(code.empty() ? DefaultErrorCode(http_status) : code, message));
}

// The answer for a failed operation: the HTTP status comes from the one
// mapping, HttpStatusFor(); `code` refines the body's code for 400s.
Response ErrorResponse(const base::Status& status, std::string_view code = {}) {
  int http = HttpStatusFor(status.code());
  return JsonResponse(
      http, RenderErrorBody(code.empty() ? DefaultErrorCode(http) : code, status.message()));
}

Response BadId(std::string_view what, std::string_view text) {
  // Raw bytes are fine here: RenderErrorBody escapes them.
  std::string msg = fmt::format("bad {} \"{}\": {}", what, Clip(text), kIdRule);
  return ErrorResponse(base::Status::InvalidArgument(std::move(msg)), "bad_id");
}

void AppendPostCounts(std::string* out, const store::PostCounts& c) {
  fmt::format_to(
      std::back_inserter(*out),
      FMT_COMPILE("{{\"post_id\":{},\"like\":{},\"repost\":{},\"comment\":{},\"view\":{}}}"),
      c.post_id, c.like, c.repost, c.comment, c.view);
}

// ---------------------------------------------------------------------------
// Metrics: tally_http_requests_total{route,code} and
// tally_http_request_duration_seconds{route}, registered on first use and
// cached so the hot path is one relaxed atomic add.

constexpr int kStatusSlots[] = {200, 202, 400, 401, 404, 405, 413, 429, 500, 501, 503, 504};
constexpr int kStatusSlotCount = static_cast<int>(std::size(kStatusSlots));

int StatusSlot(int status) {
  int fallback = 0;
  for (int i = 0; i < kStatusSlotCount; i++) {
    if (kStatusSlots[i] == status) return i;
    if (kStatusSlots[i] == 500) fallback = i;
  }
  return fallback;  // every status we answer is listed; anything else counts as 500
}

struct HttpMetrics {
  std::atomic<base::Counter*> requests[kRouteCount][kStatusSlotCount] = {};
  std::atomic<base::Histogram*> latency[kRouteCount] = {};

  static HttpMetrics& Get() {
    static HttpMetrics* m = new HttpMetrics();  // never destroyed: used until exit
    return *m;
  }

  base::Counter* RequestCounter(int route, int status) {
    int slot = StatusSlot(status);
    base::Counter* c = requests[route][slot].load(std::memory_order_acquire);
    if (c == nullptr) {
      // Racing threads get the same pointer back from the registry.
      c = base::MetricsRegistry::Global().GetCounter(
          "tally_http_requests_total", "HTTP requests answered, by route and status code.",
          fmt::format("route=\"{}\",code=\"{}\"", kRouteNames[route], kStatusSlots[slot]));
      requests[route][slot].store(c, std::memory_order_release);
    }
    return c;
  }

  base::Histogram* Latency(int route) {
    base::Histogram* h = latency[route].load(std::memory_order_acquire);
    if (h == nullptr) {
      h = base::MetricsRegistry::Global().GetHistogram(
          "tally_http_request_duration_seconds",
          "Time to compute an HTTP answer (excluding socket I/O), by route.",
          fmt::format("route=\"{}\"", kRouteNames[route]),
          {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
           5});
      latency[route].store(h, std::memory_order_release);
    }
    return h;
  }
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// ---------------------------------------------------------------------------

int HttpStatusFor(base::StatusCode code) {
  switch (code) {
    case base::StatusCode::kOk:
      return 200;
    case base::StatusCode::kInvalidArgument:
      return 400;
    case base::StatusCode::kNotFound:
      return 404;
    case base::StatusCode::kResourceExhausted:
      return 413;
    case base::StatusCode::kUnavailable:
      return 503;
    case base::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string RenderErrorBody(std::string_view code, std::string_view message) {
  size_t eol = message.find_first_of("\r\n");
  if (eol != std::string_view::npos) message = message.substr(0, eol);
  std::string out;
  out.reserve(48 + code.size() + message.size());
  out.append("{\"error\":{\"code\":");
  AppendJsonString(&out, code);
  out.append(",\"message\":");
  AppendJsonString(&out, message);
  out.append("}}");
  return out;
}

QueryService::QueryService(QueryServiceOptions options) : options_(std::move(options)) {
  assert(options_.store != nullptr);
  const ServiceInfo& info = options_.info;
  info_body_.append("{\"version\":");
  AppendJsonString(&info_body_, info.version);
  info_body_.append(",\"brokers\":");
  AppendJsonString(&info_body_, info.brokers);
  info_body_.append(",\"input_topics\":[");
  for (size_t i = 0; i < info.input_topics.size(); i++) {
    if (i > 0) info_body_.push_back(',');
    AppendJsonString(&info_body_, info.input_topics[i]);
  }
  info_body_.append("],\"state_dir\":");
  AppendJsonString(&info_body_, info.state_dir);
  fmt::format_to(std::back_inserter(info_body_), ",\"partitions\":{}}}", info.partitions);
  if (options_.publisher != nullptr && options_.watermarks != nullptr) {
    visibility_ = std::make_unique<VisibilityWaiter>(
        options_.watermarks, options_.publisher->topic(), options_.watermarks->deltas_topic());
  }
}

QueryService::~QueryService() { visibility_.reset(); }

bool QueryService::MayBlock(std::string_view method, std::string_view target) {
  if (method == kPost) return true;  // publishes wait for the broker's acks
  std::string_view path, query;
  SplitTarget(target, &path, &query);
  return path == "/v1/watermarks";
}

Response QueryService::Handle(const Request& request) {
  const int64_t start = NowNs();
  int route = kUnmatched;
  Response response;
  try {
    response = Dispatch(request, &route);
  } catch (const std::exception& e) {
    // Nothing below is meant to throw except allocation; never let it out.
    response = ProtocolError(500, fmt::format("unexpected exception: {}", e.what()), "internal");
  } catch (...) {
    response = ProtocolError(500, "unexpected exception", "internal");
  }
  try {
    Record(route, response.status, start);
  } catch (...) {
    // Registering a metric allocates; losing one sample is better than
    // failing the request.
  }
  return response;
}

void QueryService::Record(int route_id, int status, int64_t start_ns) {
  HttpMetrics& m = HttpMetrics::Get();
  m.RequestCounter(route_id, status)->Inc();
  m.Latency(route_id)->Observe(static_cast<double>(NowNs() - start_ns) / 1e9);
}

namespace {

// ?wait=visible (true), no wait parameter (false), or a bad one.
base::Result<bool> WantsVisible(std::string_view target) {
  std::string_view path, query;
  SplitTarget(target, &path, &query);
  bool found = false;
  std::string value;
  TALLY_RETURN_IF_ERROR(FindQueryParam(query, "wait", &found, &value));
  if (found && value != "visible") {
    return base::Status::InvalidArgument(
        fmt::format("wait=\"{}\": the only wait is wait=visible", Clip(value)));
  }
  return found;
}

}  // namespace

Response QueryService::Dispatch(const Request& request, int* route_id) {
  Match m = MatchTarget(request.target);
  *route_id = m.route;
  if (m.route == kUnmatched) {
    std::string_view path, query;
    SplitTarget(request.target, &path, &query);
    return ProtocolError(404, fmt::format("no such path: \"{}\"", Clip(path)));
  }
  if (request.method != m.method) {
    Response r = ProtocolError(
        405, fmt::format("{} is not allowed here; use {}", Clip(request.method), m.method));
    r.allow = m.method;
    return r;
  }
  if (request.body_too_large) {
    return ProtocolError(413, "request body is larger than the server's limit");
  }

  // Endpoints that answer whether or not the state is ready.
  switch (m.route) {
    case kHealthz:
      if (options_.ready && !options_.ready()) return ProtocolError(503, "not ready");
      if (std::string problem = KafkaProblem(); !problem.empty()) return ProtocolError(503, problem);
      // The state does not take writes (a full or failing disk): reads are
      // served, nothing new becomes visible.
      if (std::string problem = options_.store->WriteProblem(); !problem.empty()) {
        return ProtocolError(503, problem);
      }
      return JsonResponse(200, "{\"ok\":true}");
    case kMetrics:
      return Response{
          200, kPrometheusContentType, base::MetricsRegistry::Global().RenderPrometheus(), {}};
    case kInfo:
      return JsonResponse(200, info_body_);
    case kWatermarks:
      return HandleWatermarks();
    default:
      break;
  }
  if (options_.ready && !options_.ready()) {
    return ProtocolError(503, "not ready: the state is still being opened or caught up");
  }

  if ((m.route == kEvents || m.route == kUnreadReset) && !options_.auth_token.empty() &&
      !BearerMatches(request.authorization, options_.auth_token)) {
    Response r = ProtocolError(401, "this endpoint needs Authorization: Bearer <token>");
    r.unauthorized = true;
    return r;
  }
  if (m.route == kEvents) return HandleEvents(request);
  if (m.route == kPostCountsBatch) {
    return HandlePostCountsBatch(m.query);
  }

  const bool is_post = m.route == kPostCounts || m.route == kPostLike || m.route == kPostView;
  uint64_t id1 = 0;
  if (!ParseId(m.id1, &id1)) return BadId(is_post ? "post id" : "user id", m.id1);
  uint64_t id2 = 0;
  if ((m.route == kPostLike || m.route == kPostView) && !ParseId(m.id2, &id2)) {
    return BadId("user id", m.id2);
  }

  store::StateStore* store = options_.store;
  switch (m.route) {
    case kPostCounts: {
      std::vector<store::PostCounts> counts;
      base::Status st = store->GetPostCounts(std::span<const uint64_t>(&id1, 1), &counts);
      if (!st.ok()) return ErrorResponse(st.WithContext(fmt::format("post {}", id1)));
      std::string body;
      body.reserve(96);
      AppendPostCounts(&body, counts.at(0));
      return JsonResponse(200, std::move(body));
    }
    case kPostLike: {
      auto liked = store->IsLiked(id1, id2);
      if (!liked.ok()) {
        return ErrorResponse(liked.status().WithContext(fmt::format("like {}/{}", id1, id2)));
      }
      return JsonResponse(200, *liked ? "{\"liked\":true}" : "{\"liked\":false}");
    }
    case kPostView: {
      auto viewed = store->MaybeViewed(id1, id2);
      if (!viewed.ok()) return ErrorResponse(viewed.status().WithContext(fmt::format("post {}", id1)));
      return JsonResponse(200, *viewed ? "{\"viewed\":true}" : "{\"viewed\":false}");
    }
    case kUserCounts: {
      auto c = store->GetUserCounts(id1);
      if (!c.ok()) return ErrorResponse(c.status().WithContext(fmt::format("user {}", id1)));
      std::string body;
      body.reserve(80);
      fmt::format_to(
          std::back_inserter(body),
          FMT_COMPILE("{{\"user_id\":{},\"posts\":{},\"followers\":{},\"following\":{}}}"), id1,
          c->posts, c->followers, c->following);
      return JsonResponse(200, std::move(body));
    }
    case kUserUnread: {
      auto u = store->GetUnread(id1);
      if (!u.ok()) return ErrorResponse(u.status().WithContext(fmt::format("user {}", id1)));
      const int64_t* c = u->counters.counts;
      std::string body;
      body.reserve(200 + u->red_dots.size() * 24);
      fmt::format_to(std::back_inserter(body),
                     FMT_COMPILE("{{\"user_id\":{},\"mention\":{},\"comment\":{},\"like\":{},"
                                 "\"repost\":{},\"dm\":{},\"follower\":{},\"notice\":{},\"feed\":{},"
                                 "\"red_dots\":{{"),
                     id1, c[0], c[1], c[2], c[3], c[4], c[5], u->notice, u->feed);
      bool first = true;
      for (const auto& [channel, shows] : u->red_dots) {
        if (!first) body.push_back(',');
        first = false;
        AppendJsonString(&body, channel);
        body.append(shows ? ":true" : ":false");
      }
      body.append("}}");
      return JsonResponse(200, std::move(body));
    }
    case kUnreadReset: {
      auto wait = WantsVisible(request.target);
      if (!wait.ok()) return ErrorResponse(wait.status(), "bad_request");
      if (*wait && options_.publisher != nullptr && visibility_ == nullptr) {
        return ProtocolError(503, "no watermarks: this server cannot tell when a reset is visible");
      }
      return HandleReset(id1, m.kind, m.query, *wait);
    }
    case kFeedSnapshot: {
      auto snap = store->GetFeedSnapshot(id1);
      if (!snap.ok()) return ErrorResponse(snap.status().WithContext(fmt::format("user {}", id1)));
      std::string body;
      body.reserve(64 + snap->followees.size() * 24);
      fmt::format_to(std::back_inserter(body), FMT_COMPILE("{{\"user_id\":{},\"taken_ts\":{},\"followees\":{{"),
                     id1, snap->taken_ts);
      bool first = true;
      for (const auto& [followee, posts] : snap->followees) {
        fmt::format_to(std::back_inserter(body), FMT_COMPILE("{}\"{}\":{}"), first ? "" : ",", followee, posts);
        first = false;
      }
      body.append("}}");
      return JsonResponse(200, std::move(body));
    }
    default:
      return ProtocolError(500, "unrouted request", "internal");
  }
}

Response QueryService::HandlePostCountsBatch(std::string_view query) {
  bool found = false;
  std::string value;
  base::Status st = FindQueryParam(query, "ids", &found, &value);
  if (!st.ok()) return ErrorResponse(st);
  if (!found) return ErrorResponse(base::Status::InvalidArgument("missing parameter ids"));
  if (value.empty()) return ErrorResponse(base::Status::InvalidArgument("parameter ids is empty"));

  std::vector<uint64_t> ids;
  ids.reserve(16);
  std::string_view rest = value;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (ids.size() == kMaxBatchIds) {
      return ErrorResponse(base::Status::InvalidArgument(
          fmt::format("parameter ids has more than {} ids", kMaxBatchIds)));
    }
    uint64_t id = 0;
    if (!ParseId(item, &id)) return BadId("post id", item);
    ids.push_back(id);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }

  std::vector<store::PostCounts> counts;
  st = options_.store->GetPostCounts(ids, &counts);
  if (!st.ok()) return ErrorResponse(st.WithContext(fmt::format("{} posts", ids.size())));
  std::string body;
  body.reserve(12 + counts.size() * 80);
  body.append("{\"posts\":[");
  for (size_t i = 0; i < counts.size(); i++) {
    if (i > 0) body.push_back(',');
    AppendPostCounts(&body, counts[i]);
  }
  body.append("]}");
  return JsonResponse(200, std::move(body));
}

std::string QueryService::KafkaProblem() const {
  return options_.kafka_problem ? options_.kafka_problem() : std::string();
}

Response QueryService::AwaitVisible(const std::vector<ingest::PublishRecord>& records,
                                    const std::vector<ingest::RecordPosition>& positions,
                                    std::string_view accepted) {
  std::vector<VisibilityTarget> targets(records.size());
  for (size_t i = 0; i < records.size(); i++) {
    if (i >= positions.size() || positions[i].offset < 0) {
      return ErrorResponse(base::Status::DeadlineExceeded(
                               "accepted, but the broker did not say where, so visibility is "
                               "unknown"),
                           "not_yet_visible");
    }
    targets[i].partition = positions[i].partition;
    targets[i].offset = positions[i].offset;
    if (records[i].derived_entity != 0) {
      targets[i].derived_partition = static_cast<int32_t>(
          schemas::PartitionOf(records[i].derived_entity, options_.store->partitions()));
    }
  }
  base::Status st = visibility_->Wait(std::move(targets), options_.visible_timeout_ms);
  if (!st.ok()) {
    return ErrorResponse(
        st.WithContext(fmt::format("{} accepted", records.size())),
        st.code() == base::StatusCode::kDeadlineExceeded ? "not_yet_visible" : std::string_view{});
  }
  return JsonResponse(200, fmt::format("{{\"accepted\":{},\"visible\":true}}", accepted));
}

Response QueryService::HandleEvents(const Request& request) {
  if (options_.publisher == nullptr) {
    return ProtocolError(503, "no Kafka brokers configured: this server cannot publish events");
  }
  auto wait = WantsVisible(request.target);
  if (!wait.ok()) return ErrorResponse(wait.status(), "bad_request");
  if (*wait && visibility_ == nullptr) {
    return ProtocolError(503, "no watermarks: this server cannot tell when events are visible");
  }
  std::vector<ingest::PublishRecord> records;
  std::unique_ptr<ingest::EventsRequestParser> parser = AcquireParser();
  base::Status st = parser->Parse(request.body, &records);
  ReleaseParser(std::move(parser));
  if (!st.ok()) return ErrorResponse(st, "invalid_event");
  // A known outage: refuse at once, so the client knows nothing of the
  // request was published and a retry cannot count anything twice.
  if (std::string problem = KafkaProblem(); !problem.empty()) {
    return ProtocolError(503, problem + "; nothing of this request was published, retry later");
  }

  std::vector<ingest::RecordPosition> positions;
  st = options_.publisher->Publish(records, *wait ? &positions : nullptr);
  if (!st.ok()) {
    // The broker did not answer in time: some of the request may be in the
    // log. 503 outcome_unknown tells the client to retry the same request;
    // events that carry an "id" are applied once however often they come.
    const bool unknown = st.code() == base::StatusCode::kUnavailable;
    return ErrorResponse(
        st.WithContext(
            fmt::format("publishing {} events to {}{}", records.size(), options_.publisher->topic(),
                        unknown ? " (some may have been published: retry with the same event ids)"
                                : " (some may have been published)")),
        unknown ? "outcome_unknown" : "");
  }
  if (*wait) return AwaitVisible(records, positions, fmt::format_int(records.size()).str());
  return JsonResponse(202, fmt::format(FMT_COMPILE("{{\"accepted\":{}}}"), records.size()));
}

Response QueryService::HandleReset(uint64_t user_id, std::string_view kind_text,
                                   std::string_view query, bool wait) {
  schemas::UnreadKind kind;
  if (!schemas::ParseUnreadKind(kind_text, &kind)) {
    std::string msg = fmt::format(
        "bad kind \"{}\": one of mention, comment, like, repost, dm, follower, notice, red_dot, "
        "feed",
        Clip(kind_text));
    return ErrorResponse(base::Status::InvalidArgument(std::move(msg)), "bad_kind");
  }
  if (options_.publisher == nullptr) {
    return ProtocolError(503, "no Kafka brokers configured: this server cannot publish resets");
  }
  schemas::Event event;
  event.type = schemas::EventType::kRead;
  event.ts = base::WallMs();
  event.user_id = user_id;
  event.read_kind = kind;
  switch (kind) {
    case schemas::UnreadKind::kNotice: {
      // The reset marks everything up to the newest notice as read.
      auto newest = options_.store->NewestNoticeId();
      if (!newest.ok()) return ErrorResponse(newest.status());
      if (*newest == 0) {
        // No notice exists: nothing to mark read, and a user with no
        // last-read id already reads 0.
        if (wait) return JsonResponse(200, "{\"accepted\":true,\"visible\":true}");
        return JsonResponse(202, "{\"accepted\":true}");
      }
      event.notice_id = *newest;
      break;
    }
    case schemas::UnreadKind::kRedDot: {
      bool found = false;
      base::Status st = FindQueryParam(query, "channel", &found, &event.channel);
      if (!st.ok()) return ErrorResponse(st, "bad_request");
      if (!found || event.channel.empty()) {
        return ErrorResponse(base::Status::InvalidArgument("a red_dot reset needs ?channel="), "bad_request");
      }
      break;
    }
    case schemas::UnreadKind::kFeed: {
      // The snapshot: the current post counts of everyone the user follows.
      auto now = options_.store->CurrentFolloweePosts(user_id);
      if (!now.ok()) return ErrorResponse(now.status().WithContext(fmt::format("user {}", user_id)));
      if (now->size() > schemas::kMaxSnapshotEntries) {
        return ErrorResponse(base::Status::InvalidArgument(fmt::format(
                                 "user {} follows {} accounts; a feed snapshot holds at most {}", user_id,
                                 now->size(), schemas::kMaxSnapshotEntries)),
                             "bad_request");
      }
      event.snapshot = std::move(now).value();
      break;
    }
    default:
      break;
  }
  // What tally publishes must pass the same validation as anyone's events.
  std::string json = schemas::EventToJson(event);
  {
    schemas::EventParser parser;
    schemas::Event check;
    base::Status st = parser.Parse(json, &check);
    if (!st.ok()) return ErrorResponse(st, "bad_request");
  }
  // Keyed by the user, as SPEC section 2 says tally's own resets are, so a
  // reset stays in order with the user's other keyed events.
  if (std::string problem = KafkaProblem(); !problem.empty()) {
    return ProtocolError(503, problem + "; the reset was not published, retry later");
  }
  std::vector<ingest::PublishRecord> records;
  records.push_back({fmt::format_int(user_id).str(), std::move(json)});
  std::vector<ingest::RecordPosition> positions;
  base::Status st = options_.publisher->Publish(records, wait ? &positions : nullptr);
  if (!st.ok()) {
    // A reset applied twice reads the same, so its retry is always safe.
    const bool unknown = st.code() == base::StatusCode::kUnavailable;
    return ErrorResponse(st.WithContext(fmt::format(
                             "publishing the {} reset of user {}{}", schemas::UnreadKindName(kind),
                             user_id, unknown ? " (it may have been published: retry it)" : "")),
                         unknown ? "outcome_unknown" : "");
  }
  if (wait) return AwaitVisible(records, positions, "true");
  return JsonResponse(202, "{\"accepted\":true}");
}

Response QueryService::HandleWatermarks() {
  if (options_.watermarks == nullptr) {
    return ProtocolError(503, "no Kafka brokers configured: watermarks are unknown");
  }
  // With Kafka lost, or the state being attached to a replaced log, the
  // offsets at hand may belong to another log: no lag rather than a wrong 0.
  if (std::string problem = KafkaProblem(); !problem.empty()) return ProtocolError(503, problem);
  auto report = options_.watermarks->Compute();
  if (!report.ok()) return ErrorResponse(report.status());
  std::string body;
  body.reserve(32 + report->rows.size() * 120);
  body.append("{\"partitions\":[");
  bool first = true;
  for (const WatermarkRow& row : report->rows) {
    if (!first) body.push_back(',');
    first = false;
    body.append("{\"topic\":");
    AppendJsonString(&body, row.topic);
    fmt::format_to(std::back_inserter(body),
                   FMT_COMPILE(",\"partition\":{},\"applied_offset\":{},\"end_offset\":{},"
                               "\"lag\":{},\"event_time_ms\":{}}}"),
                   row.partition, row.applied_offset, row.end_offset, row.lag, row.event_time_ms);
  }
  fmt::format_to(std::back_inserter(body), FMT_COMPILE("],\"lag\":{}}}"), report->lag);
  return JsonResponse(200, std::move(body));
}

std::unique_ptr<ingest::EventsRequestParser> QueryService::AcquireParser() {
  {
    std::lock_guard<std::mutex> lock(parsers_mu_);
    if (!parsers_.empty()) {
      auto p = std::move(parsers_.back());
      parsers_.pop_back();
      return p;
    }
  }
  return std::make_unique<ingest::EventsRequestParser>();
}

void QueryService::ReleaseParser(std::unique_ptr<ingest::EventsRequestParser> parser) {
  std::lock_guard<std::mutex> lock(parsers_mu_);
  if (parsers_.size() < 16) parsers_.push_back(std::move(parser));
}

}  // namespace tally::query
