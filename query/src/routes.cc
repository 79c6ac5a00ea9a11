#include "routes.h"

#include <iterator>

#include "query/query_service.h"

namespace tally::query::internal {

namespace {

constexpr std::string_view kGet = "GET";
constexpr std::string_view kPost = "POST";

}  // namespace

// Friend of QueryService: the handlers are its private members.
struct RouteTable {
  using S = QueryService;
  // Publishes wait for the broker's acks and watermarks ask the broker, so
  // those may block; probes and scrapers are never rate limited; writes need
  // the token; /healthz, /metrics and /v1/info answer while the state is
  // not ready (/healthz to say so). /v1/watermarks does not: its lag 0
  // promises that every read sees every record, and a member that is not
  // ready answers reads 503. The reads of state by an id may be forwarded
  // to another member.
  static constexpr Route kRows[] = {
      {.name = "post_counts",
       .pattern = "/v1/posts/{post_id}/counts",
       .method = kGet,
       .handler = &S::HandlePostCounts,
       .may_forward = true,
       .needs_ready = true},
      {.name = "post_counts_batch",
       .pattern = "/v1/posts/counts",
       .method = kGet,
       .handler = &S::HandlePostCountsBatch,
       .may_forward = true,
       .needs_ready = true},
      {.name = "user_counts",
       .pattern = "/v1/users/{user_id}/counts",
       .method = kGet,
       .handler = &S::HandleUserCounts,
       .may_forward = true,
       .needs_ready = true},
      {.name = "user_unread",
       .pattern = "/v1/users/{user_id}/unread",
       .method = kGet,
       .handler = &S::HandleUserUnread,
       .may_forward = true,
       .needs_ready = true},
      {.name = "unread_reset",
       .pattern = "/v1/users/{user_id}/unread/{kind}/reset",
       .method = kPost,
       .handler = &S::HandleUnreadReset,
       .may_block = true,
       .needs_auth = true,
       .needs_ready = true},
      {.name = "post_like",
       .pattern = "/v1/posts/{post_id}/likes/{user_id}",
       .method = kGet,
       .handler = &S::HandlePostLike,
       .may_forward = true,
       .needs_ready = true},
      {.name = "post_view",
       .pattern = "/v1/posts/{post_id}/views/{user_id}",
       .method = kGet,
       .handler = &S::HandlePostView,
       .may_forward = true,
       .needs_ready = true},
      {.name = "feed_snapshot",
       .pattern = "/v1/users/{user_id}/feed/snapshot",
       .method = kGet,
       .handler = &S::HandleFeedSnapshot,
       .may_forward = true,
       .needs_ready = true},
      {.name = "watermarks",
       .pattern = "/v1/watermarks",
       .method = kGet,
       .handler = &S::HandleWatermarks,
       .may_block = true,
       .needs_ready = true},
      {.name = "events",
       .pattern = "/v1/events",
       .method = kPost,
       .handler = &S::HandleEvents,
       .may_block = true,
       .needs_auth = true,
       .needs_ready = true},
      {.name = "info", .pattern = "/v1/info", .method = kGet, .handler = &S::HandleInfo},
      {.name = "healthz",
       .pattern = "/healthz",
       .method = kGet,
       .handler = &S::HandleHealthz,
       .rate_limit_exempt = true},
      {.name = "metrics",
       .pattern = "/metrics",
       .method = kGet,
       .handler = &S::HandleMetrics,
       .rate_limit_exempt = true},
      {.name = "cluster", .pattern = "/v1/cluster", .method = kGet, .handler = &S::HandleCluster},
      // The status page and what it reads: for people looking while
      // something is wrong, so answered before the state is ready and never
      // rate limited. The page's own requests are left out of the HTTP
      // rates it plots (StatusHistory): their names start with "status".
      {.name = "status_page",
       .pattern = "/",
       .method = kGet,
       .handler = &S::HandleStatusPage,
       .rate_limit_exempt = true},
      {.name = "status_page_alias",
       .pattern = "/status",
       .method = kGet,
       .handler = &S::HandleStatusPage,
       .rate_limit_exempt = true},
      {.name = "status_file",
       .pattern = "/status/{file}",
       .method = kGet,
       .handler = &S::HandleStatusFile,
       .rate_limit_exempt = true},
      {.name = "status",
       .pattern = "/v1/status",
       .method = kGet,
       .handler = &S::HandleStatus,
       .rate_limit_exempt = true},
      {.name = "status_history",
       .pattern = "/v1/status/history",
       .method = kGet,
       .handler = &S::HandleStatusHistory,
       .rate_limit_exempt = true},
      {.name = "status_hot_posts",
       .pattern = "/v1/status/hot-posts",
       .method = kGet,
       .handler = &S::HandleHotPosts,
       .rate_limit_exempt = true},
  };
};
static_assert(std::size(RouteTable::kRows) == kRouteCount);

bool MatchPattern(std::string_view pattern, std::string_view path, RouteMatch* m) {
  size_t i = 0, j = 0;
  int params = 0;
  while (i < pattern.size()) {
    if (pattern[i] == '{') {
      const size_t close = pattern.find('}', i);
      size_t end = path.find('/', j);
      if (end == std::string_view::npos) end = path.size();
      m->param[params] = path.substr(j, end - j);
      m->param_name[params] = pattern.substr(i + 1, close - i - 1);
      params++;
      i = close + 1;
      j = end;
    } else {
      if (j >= path.size() || path[j] != pattern[i]) return false;
      i++;
      j++;
    }
  }
  if (j != path.size()) return false;
  m->params = params;
  return true;
}

std::span<const Route> Routes() { return RouteTable::kRows; }

RouteMatch MatchRoute(std::string_view target) {
  RouteMatch m;
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  if (q != std::string_view::npos) m.query = target.substr(q + 1);
  for (const Route& r : RouteTable::kRows) {
    if (MatchPattern(r.pattern, path, &m)) {
      m.route = &r;
      return m;
    }
  }
  return m;
}

bool RequestMayBlock(std::string_view method, std::string_view target) {
  if (method == kPost) return true;
  const RouteMatch m = MatchRoute(target);
  return m.route != nullptr && m.route->may_block && method == m.route->method;
}

bool ExemptFromRateLimit(std::string_view method, std::string_view target) {
  const RouteMatch m = MatchRoute(target);
  return m.route != nullptr && m.route->rate_limit_exempt && method == m.route->method;
}

}  // namespace tally::query::internal
