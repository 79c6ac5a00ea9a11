#include "query/query_service.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cctype>
#include <chrono>
#include <exception>
#include <iterator>
#include <span>
#include <utility>

#include "base/clock.h"
#include "base/constant_time.h"
#include "base/metrics.h"
#include "http_metrics.h"
#include "ingest/event_publisher.h"
#include "ingest/events_request.h"
#include "query/cluster_routing.h"
#include "query/peer_client.h"
#include "query/status_history.h"
#include "query/visibility_waiter.h"
#include "query/watermarks.h"
#include "renderers.h"
#include "request_target.h"
#include "reset_request.h"
#include "responses.h"
#include "routes.h"
#include "schemas/delta.h"
#include "schemas/event.h"
#include "schemas/json_escape.h"
#include "store/state_store.h"

namespace tally::query {

using internal::BadId;
using internal::ErrorResponse;
using internal::JsonResponse;
using internal::ProtocolError;
using schemas::AppendJsonString;

namespace {

constexpr size_t kMaxBatchIds = 200;

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
  return base::ConstantTimeEquals(header.substr(kScheme.size()), token);
}

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
  // GET /v1/cluster of a single process: a cluster of one that owns every
  // partition.
  cluster_one_body_.append("{\"group\":");
  AppendJsonString(&cluster_one_body_, info.group);
  cluster_one_body_.append(",\"generation\":0,\"members\":[{\"member\":");
  AppendJsonString(&cluster_one_body_, options_.member);
  cluster_one_body_.append(",\"http\":\"\",\"owns\":[");
  for (uint32_t p = 0; p < options_.store->partitions(); p++) {
    if (p > 0) cluster_one_body_.push_back(',');
    fmt::format_to(std::back_inserter(cluster_one_body_), "{}", p);
  }
  cluster_one_body_.append("],\"standby\":[],\"restoring\":[]}]}");
  if (options_.cluster != nullptr) {
    // Every request this member sends another is marked, so that one is
    // never forwarded again.
    PeerClientOptions po;
    po.extra_headers.emplace_back(std::string(kForwardedHeader), options_.cluster->Self());
    // And proves it (ClusterRouting::FromMember): the owner does not count
    // the read against its rate limit a second time.
    if (std::string auth = options_.cluster->PeerAuthorization(); !auth.empty()) {
      po.extra_headers.emplace_back("Authorization", std::move(auth));
    }
    auto peers = PeerClient::Start(std::move(po));
    if (peers.ok()) {
      peers_ = std::move(peers).value();
    } else {
      // Only a member id that cannot be a header value gets here: reads of
      // other members' partitions then answer 503 saying why.
      peers_error_ = peers.status().WithContext("no client for the other members");
    }
  }
  started_wall_ms_ = base::WallMs();
  started_steady_ms_ = base::SteadyMs();
  if (options_.status_sample_ms > 0) {
    StatusHistoryOptions ho;
    ho.interval_ms = options_.status_sample_ms;
    ho.samples = static_cast<size_t>(15 * 60 * 1000 / options_.status_sample_ms);
    ho.watermarks = options_.watermarks;
    ho.metrics = &base::MetricsRegistry::Global();
    history_ = std::make_unique<StatusHistory>(ho);
    history_->Start();
  }
  if (options_.publisher != nullptr && options_.watermarks != nullptr) {
    if (options_.cluster != nullptr) {
      // Visible means visible wherever it is read: the cluster's view.
      visibility_ = std::make_unique<VisibilityWaiter>(
          [this] { return ClusterWatermarks(nullptr); }, options_.publisher->topic(),
          options_.watermarks->deltas_topic());
    } else {
      visibility_ = std::make_unique<VisibilityWaiter>(
          options_.watermarks, options_.publisher->topic(), options_.watermarks->deltas_topic());
    }
  }
}

bool QueryService::MayBlock(const Request& request) const {
  if (internal::RequestMayBlock(request.method, request.target)) return true;
  if (options_.cluster == nullptr) return false;
  const Match m = internal::MatchRoute(request.target);
  if (m.route == nullptr || !m.route->may_forward || request.method != m.route->method) {
    return false;
  }
  const bool spans = m.route->name == "user_unread" || m.route->name == "post_counts_batch";
  bool current = m.route->name == "feed_snapshot";
  if (current) {
    std::string value;
    if (!FindQueryParam(m.query, "current", &current, &value).ok()) return false;
  }
  // A forwarded request is answered from what is here, except that an
  // unread and a current snapshot read their followees' counts from the
  // members serving them.
  if (!request.forwarded.empty()) {
    return current || (m.route->name == "user_unread" && !EveryPartitionHere());
  }
  // A batch or an unread reads any partition: it asks no peer while every
  // partition is served here (one member alone), and then stays on the I/O
  // thread (the handler answers 503 partition_moving rather than wait if
  // that changes before it runs).
  if (spans) return !EveryPartitionHere();
  if (current) return true;
  // A read of one entity stays on the I/O thread when it is served here
  // (RouteElsewhere refuses to wait if that changes before it runs).
  uint64_t id = 0;
  if (!ParseId(m.param[0], &id)) return false;  // a 400, answered at once
  return options_.cluster->Home(schemas::PartitionOf(id, options_.store->partitions())).where !=
         PartitionHome::Where::kHere;
}

bool QueryService::EveryPartitionHere(uint32_t* not_here) const {
  if (options_.cluster == nullptr) return true;
  const uint32_t n = options_.store->partitions();
  for (uint32_t p = 0; p < n; p++) {
    if (options_.cluster->Home(p).where != PartitionHome::Where::kHere) {
      if (not_here != nullptr) *not_here = p;
      return false;
    }
  }
  return true;
}

QueryService::~QueryService() {
  history_.reset();     // its thread reads the watermarks
  visibility_.reset();  // its thread may ask the peers
  peers_.reset();
}

Response QueryService::Handle(const Request& request) {
  const int64_t start = internal::NowNs();
  int route = 0;
  Response response;
  try {
    response = Dispatch(request, &route);
  } catch (const std::exception& e) {
    // Nothing below is meant to throw except allocation; never let it out.
    response = ProtocolError(500, fmt::format("unexpected exception: {}", e.what()), "internal");
  } catch (...) {
    response = ProtocolError(500, "unexpected exception", "internal");
  }
  RecordQuietly(route, response.status, start);
  return response;
}

void QueryService::RecordQuietly(int route_id, int status, int64_t start_ns) noexcept {
  try {
    Record(route_id, status, start_ns);
  } catch (...) {
    // Registering a metric allocates; losing one sample is better than
    // failing the request.
  }
}

void QueryService::Record(int route_id, int status, int64_t start_ns) {
  internal::RecordRequest(route_id, status, start_ns);
}

std::optional<Response> QueryService::RefusalByHeaders(const Request& request) {
  const int64_t start = internal::NowNs();
  int route = 0;
  Match m;
  std::optional<Response> refusal;
  try {
    refusal = CheckHeaders(request, &m, &route);
  } catch (...) {
    return std::nullopt;  // allocation: Handle() answers once the body is read
  }
  if (refusal) RecordQuietly(route, refusal->status, start);
  return refusal;
}

Response QueryService::Dispatch(const Request& request, int* route_slot) {
  Match m;
  if (auto refusal = CheckHeaders(request, &m, route_slot)) return std::move(*refusal);
  const internal::Route& route = *m.route;
  TakeRouteAgain();
  Response r = (this->*route.handler)(request, m);
  // A read that found a peer dead (killed, its record not expired yet), or
  // a partition gone from here since it was routed here (a handover between
  // the two), runs once more: routing now goes around the peer, or to the
  // partition's new home.
  if (r.status == 503 && request.method == "GET" && TakeRouteAgain()) {
    r = (this->*route.handler)(request, m);
  }
  return r;
}

std::optional<Response> QueryService::CheckHeaders(const Request& request, Match* match,
                                                   int* route_slot) {
  Match& m = *match;
  m = internal::MatchRoute(request.target);
  *route_slot = internal::RouteSlot(m.route);
  if (m.route == nullptr) {
    std::string_view path, query;
    SplitTarget(request.target, &path, &query);
    return ProtocolError(404, fmt::format("no such path: \"{}\"", Clip(path)));
  }
  const internal::Route& route = *m.route;
  if (request.method != route.method) {
    Response r = ProtocolError(
        405, fmt::format("{} is not allowed here; use {}", Clip(request.method), route.method));
    r.allow = route.method;
    return r;
  }
  if (request.body_too_large) {
    return ProtocolError(413, "request body is larger than the server's limit");
  }
  // A peer forwards a read here only for a partition this member says it
  // serves current (the directory): answered even while this member's own
  // start is not over (it restores other partitions, or waits for its group).
  // Only a member's, proven by its key: a client's own X-Tally-Forwarded
  // gets the answer any client gets.
  const bool asked_by_peer = options_.cluster != nullptr && !request.forwarded.empty() &&
                             options_.cluster->FromMember(request.forwarded, request.authorization);
  if (route.needs_ready && options_.ready && !asked_by_peer && !options_.ready()) {
    return ProtocolError(503, "not ready: the state is still being opened or caught up");
  }
  if (route.needs_auth && !options_.auth_token.empty() &&
      !BearerMatches(request.authorization, options_.auth_token)) {
    Response r = ProtocolError(401, "this endpoint needs Authorization: Bearer <token>");
    r.unauthorized = true;
    return r;
  }
  for (int i = 0; i < m.params; i++) {
    if (m.param_name[i].ends_with("_id") && !ParseId(m.param[i], &m.id[i])) {
      return BadId(m.param_name[i], m.param[i]);
    }
  }
  return std::nullopt;
}

Response QueryService::HandleHealthz(const Request&, const Match&) {
  if (options_.ready && !options_.ready()) return ProtocolError(503, "not ready");
  if (std::string problem = KafkaProblem(); !problem.empty()) return ProtocolError(503, problem);
  // The state does not take writes (a full or failing disk): reads are
  // served, nothing new becomes visible.
  if (std::string problem = options_.store->WriteProblem(); !problem.empty()) {
    return ProtocolError(503, problem);
  }
  return JsonResponse(200, "{\"ok\":true}");
}

Response QueryService::HandleMetrics(const Request&, const Match&) {
  std::string text = base::MetricsRegistry::Global().RenderPrometheus();
  if (options_.extra_metrics) text += options_.extra_metrics();
  return Response{200, kPrometheusContentType, std::move(text), {}};
}

Response QueryService::HandleInfo(const Request&, const Match&) {
  return JsonResponse(200, info_body_);
}

// Each read goes where the partition of its entity is served (the post's
// for counts, likes and views; the user's for the rest): here, another
// member (RouteElsewhere), or nowhere (503 partition_moving).
Response QueryService::HandlePostCounts(const Request& request, const Match& m) {
  if (auto elsewhere = RouteElsewhere(request, m.id[0])) return std::move(*elsewhere);
  std::vector<store::PostCounts> counts;
  base::Status st = options_.store->GetPostCounts(std::span<const uint64_t>(&m.id[0], 1), &counts);
  if (!st.ok()) return ReadFailed(st, fmt::format("post {}", m.id[0]));
  return Local(JsonResponse(200, internal::RenderPostCounts(counts.at(0))));
}

Response QueryService::HandlePostLike(const Request& request, const Match& m) {
  if (auto elsewhere = RouteElsewhere(request, m.id[0])) return std::move(*elsewhere);
  auto liked = options_.store->IsLiked(m.id[0], m.id[1]);
  if (!liked.ok()) return ReadFailed(liked.status(), fmt::format("like {}/{}", m.id[0], m.id[1]));
  return Local(JsonResponse(200, *liked ? "{\"liked\":true}" : "{\"liked\":false}"));
}

Response QueryService::HandlePostView(const Request& request, const Match& m) {
  if (auto elsewhere = RouteElsewhere(request, m.id[0])) return std::move(*elsewhere);
  auto viewed = options_.store->MaybeViewed(m.id[0], m.id[1]);
  if (!viewed.ok()) return ReadFailed(viewed.status(), fmt::format("post {}", m.id[0]));
  return Local(JsonResponse(200, *viewed ? "{\"viewed\":true}" : "{\"viewed\":false}"));
}

Response QueryService::HandleUserCounts(const Request& request, const Match& m) {
  if (auto elsewhere = RouteElsewhere(request, m.id[0])) return std::move(*elsewhere);
  auto c = options_.store->GetUserCounts(m.id[0]);
  if (!c.ok()) return ReadFailed(c.status(), fmt::format("user {}", m.id[0]));
  return Local(JsonResponse(200, internal::RenderUserCounts(m.id[0], *c)));
}

Response QueryService::HandleUserUnread(const Request& request, const Match& m) {
  if (auto elsewhere = RouteElsewhere(request, m.id[0])) return std::move(*elsewhere);
  const bool cluster = options_.cluster != nullptr;
  store::UnreadGaps gaps;
  auto u = options_.store->GetUnread(m.id[0], cluster ? &gaps : nullptr);
  if (!u.ok()) return ReadFailed(u.status(), fmt::format("user {}", m.id[0]));
  if (gaps.notice || gaps.red_dots) {
    // Every member applies the partition of the notices and global red
    // dots: missing, it is being moved or reopened right now.
    return ReadFailed(store::NotHeldError(std::vector<uint32_t>{schemas::PartitionOf(
                          schemas::kGlobalEntity, options_.store->partitions())}),
                      fmt::format("user {}: notices and red dots", m.id[0]));
  }
  std::vector<std::string> members;
  members.push_back(SelfId());
  // With every partition served here the store counted every followee;
  // otherwise each is counted where it is served.
  uint32_t not_here = 0;
  if (cluster && !EveryPartitionHere(&not_here)) {
    if (request.must_not_block) {
      // MayBlock() saw every partition here; one moved since. The retry is
      // routed afresh.
      return ReadFailed(store::NotHeldError(std::vector<uint32_t>{not_here}),
                        fmt::format("user {}: it moved while the request was dispatched", m.id[0]));
    }
    if (auto failed = CountFeedWhereServed(m.id[0], &u->feed, &members)) {
      return std::move(*failed);
    }
  }
  Response r = JsonResponse(200, internal::RenderUnread(m.id[0], *u));
  r.member = fmt::format("{}", fmt::join(members, ","));
  if (members.size() == 1 && members[0].empty()) r.member.clear();
  return r;
}

Response QueryService::HandleFeedSnapshot(const Request& request, const Match& m) {
  if (auto elsewhere = RouteElsewhere(request, m.id[0])) return std::move(*elsewhere);
  bool current = false;
  std::string value;
  base::Status st = FindQueryParam(m.query, "current", &current, &value);
  if (!st.ok()) return ErrorResponse(st);
  if (current) {
    // What a feed reset would record now: the followees' current post
    // counts (a member asks the user's member this for a reset).
    if (value != "true") {
      return ErrorResponse(base::Status::InvalidArgument("current: the only value is true"));
    }
    store::FeedSnapshot snap;
    snap.exists = true;
    snap.taken_ts = base::WallMs();
    std::vector<std::string> members;
    if (auto failed = CurrentFolloweePostsAnywhere(m.id[0], &snap.followees, &members)) {
      return std::move(*failed);
    }
    Response r = JsonResponse(200, internal::RenderFeedSnapshot(m.id[0], snap));
    r.member = fmt::format("{}", fmt::join(members, ","));
    if (members.size() == 1 && members[0].empty()) r.member.clear();
    return r;
  }
  auto snap = options_.store->GetFeedSnapshot(m.id[0]);
  if (!snap.ok()) return ReadFailed(snap.status(), fmt::format("user {}", m.id[0]));
  return Local(JsonResponse(200, internal::RenderFeedSnapshot(m.id[0], *snap)));
}

std::optional<Response> QueryService::ParseBatchIds(std::string_view query,
                                                    std::vector<uint64_t>* ids) {
  bool found = false;
  std::string value;
  base::Status st = FindQueryParam(query, "ids", &found, &value);
  if (!st.ok()) return ErrorResponse(st);
  if (!found) return ErrorResponse(base::Status::InvalidArgument("missing parameter ids"));
  if (value.empty()) return ErrorResponse(base::Status::InvalidArgument("parameter ids is empty"));
  ids->reserve(16);
  std::string_view rest = value;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (ids->size() == kMaxBatchIds) {
      return ErrorResponse(base::Status::InvalidArgument(
          fmt::format("parameter ids has more than {} ids", kMaxBatchIds)));
    }
    uint64_t id = 0;
    if (!ParseId(item, &id)) return BadId("post_id", item);
    ids->push_back(id);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return std::nullopt;
}

Response QueryService::HandlePostCountsBatch(const Request& request, const Match& m) {
  std::vector<uint64_t> ids;
  if (auto bad = ParseBatchIds(m.query, &ids)) return std::move(*bad);
  std::vector<store::PostCounts> counts;
  if (options_.cluster == nullptr) {
    base::Status st = options_.store->GetPostCounts(ids, &counts);
    if (!st.ok()) return ReadFailed(st, fmt::format("{} posts", ids.size()));
    return Local(JsonResponse(200, internal::RenderPostCountsBatch(counts)));
  }
  return ClusterPostCounts(request, ids);
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

Response QueryService::HandleEvents(const Request& request, const Match&) {
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

Response QueryService::HandleUnreadReset(const Request& request, const Match& m) {
  auto wait = WantsVisible(request.target);
  if (!wait.ok()) return ErrorResponse(wait.status(), "bad_request");
  if (*wait && options_.publisher != nullptr && visibility_ == nullptr) {
    return ProtocolError(503, "no watermarks: this server cannot tell when a reset is visible");
  }
  const uint64_t user_id = m.id[0];
  auto kind = internal::ParseResetKind(m.param[1]);
  if (!kind.ok()) return ErrorResponse(kind.status(), "bad_kind");
  if (options_.publisher == nullptr) {
    return ProtocolError(503, "no Kafka brokers configured: this server cannot publish resets");
  }
  // In a cluster a feed reset's snapshot is read where the user and the
  // followees are served; the other kinds read nothing of the user's.
  std::optional<std::vector<std::pair<uint64_t, uint64_t>>> followee_posts;
  if (options_.cluster != nullptr && *kind == schemas::UnreadKind::kFeed) {
    followee_posts.emplace();
    const uint32_t p = schemas::PartitionOf(user_id, options_.store->partitions());
    std::vector<std::string> members;
    std::optional<Response> failed =
        options_.cluster->Home(p).where == PartitionHome::Where::kHere
            ? CurrentFolloweePostsAnywhere(user_id, &*followee_posts, &members)
            : CurrentFolloweePostsOfOwner(user_id, &*followee_posts);
    if (failed) return std::move(*failed);
  }
  std::string_view code;
  auto reset = internal::BuildReset(*options_.store, user_id, *kind, m.query, base::WallMs(), &code,
                                    followee_posts ? &*followee_posts : nullptr);
  if (!reset.ok() && store::IsNotHeld(reset.status())) {
    return ReadFailed(reset.status(), fmt::format("the {} reset of user {}",
                                                  schemas::UnreadKindName(*kind), user_id));
  }
  if (!reset.ok()) return ErrorResponse(reset.status(), code);
  if (reset->nothing_to_mark) {
    if (*wait) return JsonResponse(200, "{\"accepted\":true,\"visible\":true}");
    return JsonResponse(202, "{\"accepted\":true}");
  }
  if (std::string problem = KafkaProblem(); !problem.empty()) {
    return ProtocolError(503, problem + "; the reset was not published, retry later");
  }
  std::vector<ingest::PublishRecord> records;
  records.push_back(std::move(reset->record));
  std::vector<ingest::RecordPosition> positions;
  base::Status st = options_.publisher->Publish(records, *wait ? &positions : nullptr);
  if (!st.ok()) {
    // A reset applied twice reads the same, so its retry is always safe.
    const bool unknown = st.code() == base::StatusCode::kUnavailable;
    return ErrorResponse(st.WithContext(fmt::format(
                             "publishing the {} reset of user {}{}", schemas::UnreadKindName(*kind),
                             user_id, unknown ? " (it may have been published: retry it)" : "")),
                         unknown ? "outcome_unknown" : "");
  }
  if (*wait) return AwaitVisible(records, positions, "true");
  return JsonResponse(202, "{\"accepted\":true}");
}

Response QueryService::HandleWatermarks(const Request& request, const Match&) {
  if (options_.watermarks == nullptr) {
    return ProtocolError(503, "no Kafka brokers configured: watermarks are unknown");
  }
  // With Kafka lost, or the state being attached to a replaced log, the
  // offsets at hand may belong to another log: no lag rather than a wrong 0.
  if (std::string problem = KafkaProblem(); !problem.empty()) return ProtocolError(503, problem);
  // A peer asking for this member's part gets this member's own report.
  if (options_.cluster == nullptr || !request.forwarded.empty()) {
    auto report = options_.watermarks->Compute();
    if (!report.ok()) return ErrorResponse(report.status());
    return Local(JsonResponse(200, internal::RenderWatermarks(*report)));
  }
  bool moving = false;
  auto report = ClusterWatermarks(&moving);
  if (!report.ok()) {
    Response r = ErrorResponse(report.status(), moving ? "partition_moving" : std::string_view{});
    if (moving) r.retry_after_s = 1;
    return r;
  }
  return JsonResponse(200, internal::RenderWatermarks(*report));
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
