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
// In a cluster (SPEC section 6; QueryServiceOptions::cluster) any member
// answers every request: it reads locally the partitions ClusterRouting
// says are here, forwards the rest to the member it names (PeerClient,
// marked with kForwardedHeader), splits a batch by member and asks them in
// parallel, reads a feed unread's followee counts from their owners, and
// answers 503 partition_moving (Retry-After: 1) for a partition nobody
// serves now. A forwarded request is never forwarded again. See
// query/README.md, "In a cluster".
//
// Thread model: Handle() is safe for concurrent use from any number of
// threads. Everything the service borrows must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tally::base {
class HotKeys;
}
namespace tally::store {
class StateStore;
struct PostCounts;
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
class ClusterRouting;
class PeerClient;
struct PeerRequest;
struct PeerResponse;
class StatusHistory;
struct WatermarkReport;
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
  // The X-Tally-Forwarded header (kForwardedHeader), empty if absent: the
  // id of the member that forwarded this request, which is then answered
  // from what this member holds and never forwarded again.
  std::string_view forwarded = {};
  // Set by a transport that runs Handle() on a thread that must not wait
  // (an I/O thread) because MayBlock() said no: a read whose partition
  // moved to another member in between answers 503 partition_moving rather
  // than wait for that member.
  bool must_not_block = false;
  // The If-None-Match header, empty if absent: an embedded file whose
  // ETag it names is answered 304 without a body.
  std::string_view if_none_match = {};
};

// The answer. `content_type` and `allow` point to static strings.
struct Response {
  int status = 200;
  std::string_view content_type;
  std::string body;
  std::string_view allow;  // the Allow header of a 405; empty otherwise
  bool unauthorized = false;  // a 401: answer with WWW-Authenticate: Bearer
  int retry_after_s = 0;      // > 0: answer with Retry-After (a 429, a 503 partition_moving)
  // The X-Tally-Member header (kMemberHeader): the member(s) whose state
  // answered, comma-separated; empty: no header (nothing was read, or no
  // member id is configured).
  std::string member = {};
  // The ETag and Cache-Control headers (static strings); empty: none.
  std::string_view etag = {};
  std::string_view cache_control = {};
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
  // The consumer group (--group): GET /v1/cluster of a single process.
  std::string group = {};
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
  // Optional; must outlive the service. Null: a single process, every
  // partition read here. Set: any member answers everything (see the top
  // of this file); the service starts a PeerClient of its own.
  ClusterRouting* cluster = nullptr;
  // Without `cluster`: this process's member id, the value of
  // X-Tally-Member on answers that read state and the member of GET
  // /v1/cluster; empty: no X-Tally-Member header. Ignored with `cluster`
  // (ClusterRouting::Self() names this member).
  std::string member = {};
  // In a cluster: how long a read waits for another member's answer
  // before it answers 503 partition_moving.
  int peer_timeout_ms = 2000;
  // The status page's history (GET /v1/status/history): a sample every
  // this many milliseconds, 15 minutes of them kept, taken by a thread of
  // the service (StatusHistory); 0: no history (the page's plots stay
  // empty).
  int status_sample_ms = 0;
  // Optional; must outlive the service. The hottest posts of the last
  // minute (GET /v1/status/hot-posts), tallied by the applier of this
  // process; null: none (a `tally serve`, whose applier runs elsewhere).
  base::HotKeys* hot_posts = nullptr;
  // Optional: more Prometheus text for GET /metrics, after tally's own
  // (tally up's figures of its broker, another process). Called per request.
  std::function<std::string()> extra_metrics;
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

  // The answer `request` gets from its request line and headers alone,
  // before its body is read: Dispatch()'s checks (404, 405, 413 when
  // `body_too_large` is set from the announced length, 503 not ready, 401,
  // 400 for a bad id in the path), or std::nullopt when the body decides.
  // A transport asked for `Expect: 100-continue` sends this instead of 100
  // Continue (RFC 9110 section 10.1.1). `request.body` is not read. A
  // refusal is recorded in the request metrics as by Handle(); never
  // throws. Safe for concurrent use.
  std::optional<Response> RefusalByHeaders(const Request& request);

  // True when answering `request` may block its thread (waiting on a
  // broker or on another member), so a transport runs it off its I/O
  // threads: internal::RequestMayBlock(), and in a cluster the reads that
  // may ask a peer: a read of one entity whose partition is not served
  // here now (ClusterRouting::Home), every batch and unread unless every
  // partition is served here, a current snapshot (?current=true) — except
  // that a forwarded request asks no peer but for an unread's (unless every
  // partition is here) or a current snapshot's followee counts.
  // Cheap: matches the route and asks Home(), reads no state. Safe for
  // concurrent use.
  bool MayBlock(const Request& request) const;

  // A read that goes to other members, asked of them without holding a
  // thread for the round trip (PeerClient::GetAllAsync): a GET of one
  // entity, or of a user's unread or snapshot, whose partition another
  // member serves now (asked whole of it), and a batch of post counts in
  // a cluster (the ids served here read now, each other member asked its
  // share). Returns false when `request` is not such a read, or not one
  // that passes Dispatch()'s checks (method, ids, readiness): the caller
  // answers it with Handle(). Otherwise returns true, and `done` gets the
  // answer exactly once: on the peer client's I/O thread, or on this one
  // before the return (the client stopped; a batch whose ids are all
  // served here). The answer is the members' answer, or std::nullopt when
  // a member asked did not answer (it is then marked unreachable, and the
  // caller answers the request with Handle() off its I/O thread, which
  // goes around it). Every read it takes is one MayBlock() says may block,
  // so a transport need ask only for those. Safe for concurrent use.
  using ForwardDone = std::function<void(std::optional<Response>)>;
  bool ForwardAsync(const Request& request, ForwardDone done);

 private:
  // The route table (src/routes.cc) names the handlers below.
  friend struct internal::RouteTable;
  using Match = internal::RouteMatch;

  // Matches the route, checks the method, the body's size, readiness, the
  // token and the ids, then calls the route's handler. *route_slot: the
  // route's metrics slot.
  Response Dispatch(const Request& request, int* route_slot);
  // Dispatch()'s checks that need no body; fills in `m`.
  std::optional<Response> CheckHeaders(const Request& request, Match* m, int* route_slot);
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
  Response HandleCluster(const Request& request, const Match& m);
  // The status page (src/status_reads.cc).
  Response HandleStatusPage(const Request& request, const Match& m);
  Response HandleStatusFile(const Request& request, const Match& m);
  Response HandleStatus(const Request& request, const Match& m);
  Response HandleStatusHistory(const Request& request, const Match& m);
  Response HandleHotPosts(const Request& request, const Match& m);
  // Why a partition is moving now (one nobody serves current, a member
  // restoring one), "" when none is; always "" without a cluster.
  std::string PartitionsMoving() const;
  // The answer to a publish with ?wait=visible: waits for `records`, which
  // the publisher put at `positions`; `accepted` is the JSON value of the
  // answer's "accepted".
  Response AwaitVisible(const std::vector<ingest::PublishRecord>& records,
                        const std::vector<ingest::RecordPosition>& positions,
                        std::string_view accepted);
  // The pieces of src/cluster_reads.cc. Each std::optional<Response> is
  // the answer to give instead (503 partition_moving, a peer's error passed
  // through), nullopt when the call did its part.
  //
  // A request for `entity`'s partition that is not read here: the peer's
  // answer (forwarded), or 503 partition_moving. nullopt: read it here.
  std::optional<Response> RouteElsewhere(const Request& request, uint64_t entity);
  // A peer asked for this request gave no answer: tells the routing
  // (ClusterRouting::Unreachable) and marks the request on this thread to
  // be routed again.
  void PeerDidNotAnswer(const std::string& member);
  // Whether this thread's request was marked to be routed again since the
  // last call (a peer that did not answer, a partition that left this
  // member between routing and reading); clears it.
  static bool TakeRouteAgain();
  // The answer for a local read that failed with `status`: a partition not
  // held (a move raced the read) is 503 partition_moving, and the request
  // is marked to be routed again: the member says where a partition went
  // before it drops it, so the second routing sends the read there.
  Response ReadFailed(const base::Status& status, std::string_view context);
  // `response` stamped with this member in X-Tally-Member.
  Response Local(Response response) const;
  // This member's id: the cluster's Self(), else options.member ("").
  std::string SelfId() const;
  // The post counts of ids[positions] from the members serving them, one
  // request per member, all at once; fills (*counts)[positions] and
  // (*answered_by)[positions] (sized as `ids`) with the member that
  // answered each.
  std::optional<Response> FillFromPeers(std::span<const uint64_t> ids,
                                        const std::vector<size_t>& positions,
                                        std::vector<store::PostCounts>* counts,
                                        std::vector<std::string>* answered_by);
  // FillFromPeers in three steps, so that a caller may ask without
  // blocking (ForwardAsync): which member serves each of ids[positions]
  // (one part per member; 503 partition_moving if a partition is served
  // nowhere or here now), the part's requests, and the answers merged
  // (which fails on the first part not answered, marking its member
  // unreachable, or answered otherwise than 200 or in an unknown form).
  struct PeerBatchPart;  // cluster_reads.cc
  std::optional<Response> PlanPeerBatch(std::span<const uint64_t> ids,
                                        const std::vector<size_t>& positions,
                                        std::vector<PeerBatchPart>* parts);
  static std::vector<PeerRequest> PeerBatchRequests(std::span<const uint64_t> ids,
                                                    const std::vector<PeerBatchPart>& parts);
  std::optional<Response> MergePeerBatch(std::span<const uint64_t> ids,
                                         const std::vector<PeerBatchPart>& parts,
                                         const std::vector<PeerResponse>& answers,
                                         std::vector<store::PostCounts>* counts,
                                         std::vector<std::string>* answered_by);
  // ForwardAsync for GET /v1/posts/counts: the ids served here read now,
  // the others asked of their members without blocking (a batch of ids
  // all served here is answered at once, on the calling thread); false
  // (the caller answers with Handle()) for a 400, an id served nowhere, or
  // a local read that fails.
  bool BatchAsync(const Match& m, ForwardDone done);
  // The answer to a batch read in a cluster: `counts` in the order asked,
  // X-Tally-Member naming every member that answered (this one for
  // `local_positions`, the others as `answered_by` says).
  Response MergedPostCounts(const std::vector<store::PostCounts>& counts,
                            const std::vector<size_t>& local_positions,
                            std::vector<std::string>* answered_by);
  // The ids of GET /v1/posts/counts?ids=, or the 400 naming what is wrong.
  std::optional<Response> ParseBatchIds(std::string_view query, std::vector<uint64_t>* ids);
  // The post counts (the "posts" of GET /v1/users/{id}/counts) of `users`,
  // none of them served here, from their members, all at once, in the order
  // given.
  std::optional<Response> UserPostsFromPeers(const std::vector<uint64_t>& users,
                                             std::vector<int64_t>* posts,
                                             std::vector<std::string>* members);
  // What a feed reset of `user_id` records (and a feed unread counts
  // against): the current post counts of the user's followees, ascending
  // id. The user's partition must be here; the followees whose partitions
  // are not served here are asked of the members that serve them. Adds the
  // members read to `members`.
  std::optional<Response> CurrentFolloweePostsAnywhere(
      uint64_t user_id, std::vector<std::pair<uint64_t, uint64_t>>* out,
      std::vector<std::string>* members);
  // The same asked of the member serving the user (GET
  // /v1/users/{id}/feed/snapshot?current=true).
  std::optional<Response> CurrentFolloweePostsOfOwner(
      uint64_t user_id, std::vector<std::pair<uint64_t, uint64_t>>* out);
  // GET /v1/posts/counts in a cluster: the ids served here read in one
  // call, the others asked of their members, one request per member, all
  // at once; merged in the order asked.
  Response ClusterPostCounts(const Request& request, const std::vector<uint64_t>& ids);
  // A user's unread feed in a cluster (the user's partition served here),
  // each followee's post count read where its partition is served; adds
  // the members read to `members`.
  std::optional<Response> CountFeedWhereServed(uint64_t user_id, int64_t* feed,
                                               std::vector<std::string>* members);
  // GET /v1/watermarks over the whole cluster: this member's report merged
  // with every peer's (src/cluster_watermarks.h); this member's alone
  // without a cluster. *moving (may be null): the merge failed because a
  // deltas partition is reported by nobody.
  base::Result<WatermarkReport> ClusterWatermarks(bool* moving);
  // True without a cluster, and in a cluster while ClusterRouting::Home()
  // says every partition is here (one member alone): a read then asks no
  // peer. When it returns false, *not_here (may be null) is a partition
  // that is not.
  bool EveryPartitionHere(uint32_t* not_here = nullptr) const;
  // options_.kafka_problem(), or "" without one.
  std::string KafkaProblem() const;
  void Record(int route_id, int status, int64_t start_ns);
  // Record() that drops the sample if registering the metric fails.
  void RecordQuietly(int route_id, int status, int64_t start_ns) noexcept;

  std::unique_ptr<ingest::EventsRequestParser> AcquireParser();
  void ReleaseParser(std::unique_ptr<ingest::EventsRequestParser> parser);

  QueryServiceOptions options_;
  std::string info_body_;  // rendered once: the info never changes

  // Present when the service publishes and has watermarks.
  std::unique_ptr<VisibilityWaiter> visibility_;
  // In a cluster: how this member reads from the others.
  std::unique_ptr<PeerClient> peers_;
  base::Status peers_error_;      // why peers_ is null in a cluster
  std::string cluster_one_body_;  // GET /v1/cluster without a cluster
  // The status page's history; null when options.status_sample_ms is 0.
  std::unique_ptr<StatusHistory> history_;
  int64_t started_wall_ms_ = 0;  // when the service was made (uptime)
  int64_t started_steady_ms_ = 0;

  std::mutex parsers_mu_;
  std::vector<std::unique_ptr<ingest::EventsRequestParser>> parsers_;
};

}  // namespace tally::query
