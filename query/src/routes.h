// The route table of the HTTP API (SPEC section 4): one row per route, with
// its path pattern, its method and the properties the tier acts on. The
// service's dispatcher, the transport's choice of thread (RequestMayBlock)
// and the rate limiter's exemption (ExemptFromRateLimit) all read this table
// and nothing else, so a route's properties are stated once.
//
// Matching (query/README.md, "Request targets"): the path is compared byte
// for byte, never percent-decoded or normalized; a `{name}` in a pattern
// takes one whole path segment, whatever it holds (even nothing), so a path
// with the shape of a route but a bad id is that route's 400, not a 404.
// No two patterns match one path, so the order of the rows does not matter.
// Internal to query/.
//
// Thread model: the table is constant; every function is pure.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace tally::query {
class QueryService;
struct Request;
struct Response;
}  // namespace tally::query

namespace tally::query::internal {

struct RouteMatch;
// Answers a request the dispatcher matched to the route, whose method,
// readiness, token and ids it has checked.
using RouteHandler = Response (QueryService::*)(const Request&, const RouteMatch&);

struct Route {
  std::string_view name;  // the route label of the HTTP metrics
  // "/v1/posts/{post_id}/counts": at most kMaxRouteParams {names}; a
  // {..._id} is a canonical id, parsed by the dispatcher.
  std::string_view pattern;
  std::string_view method;  // the one method the route answers; others get 405
  RouteHandler handler;
  bool may_block = false;          // may wait on a broker: answered off the I/O threads
  // Reads state by an id's partition: in a cluster it may be asked of
  // another member (and then waits on it: QueryService::MayBlock).
  bool may_forward = false;
  bool rate_limit_exempt = false;  // never rate limited (probes and scrapers)
  bool needs_auth = false;         // needs the bearer token when one is configured
  bool needs_ready = false;        // answered 503 while the state is not ready
};

// Every route, in the order of SPEC section 4, then GET /v1/cluster (section
// 6), then the status page's.
std::span<const Route> Routes();
// The number of rows of Routes().
inline constexpr int kRouteCount = 20;

inline constexpr int kMaxRouteParams = 2;

// A request target matched against the table.
struct RouteMatch {
  const Route* route = nullptr;  // null: no route has this path (404)
  // What the pattern's {names} took, in the order of the pattern.
  std::string_view param[kMaxRouteParams];
  std::string_view param_name[kMaxRouteParams];  // without the braces
  int params = 0;
  // The values of the {..._id} params (0 for the others), filled in by the
  // dispatcher once it has parsed them.
  uint64_t id[kMaxRouteParams] = {};
  std::string_view query;  // after the '?', empty if none
};

// Matches the path of an origin-form request target against every row.
// Cheap: a byte comparison per row until the first difference, no
// allocation.
RouteMatch MatchRoute(std::string_view target);

// Matches `path` (no query) against one pattern; on a match fills m's
// params (not m->route) and returns true.
bool MatchPattern(std::string_view pattern, std::string_view path, RouteMatch* m);

// True when answering `method` `target` may wait on a broker, so a
// transport runs it off its I/O threads: a route the table marks may_block,
// asked with its method, and every POST (routed or not).
bool RequestMayBlock(std::string_view method, std::string_view target);

// True for a request the rate limiter lets through whatever the rate: a
// rate_limit_exempt route asked with its method.
bool ExemptFromRateLimit(std::string_view method, std::string_view target);

}  // namespace tally::query::internal
