#include "routes.h"

#include <iterator>

namespace tally::query::internal {

namespace {

constexpr std::string_view kGet = "GET";
constexpr std::string_view kPost = "POST";

// name, pattern, method, may_block, rate_limit_exempt, needs_auth, needs_ready.
// Publishes wait for the broker's acks and watermarks ask the broker, so
// those may block; probes and scrapers are never rate limited; writes need
// the token; /healthz, /metrics, /v1/info and /v1/watermarks answer while
// the state is not ready (/healthz to say so).
constexpr Route kRows[] = {
    {"post_counts", "/v1/posts/{post_id}/counts", kGet, false, false, false, true},
    {"post_counts_batch", "/v1/posts/counts", kGet, false, false, false, true},
    {"user_counts", "/v1/users/{user_id}/counts", kGet, false, false, false, true},
    {"user_unread", "/v1/users/{user_id}/unread", kGet, false, false, false, true},
    {"unread_reset", "/v1/users/{user_id}/unread/{kind}/reset", kPost, true, false, true, true},
    {"post_like", "/v1/posts/{post_id}/likes/{user_id}", kGet, false, false, false, true},
    {"post_view", "/v1/posts/{post_id}/views/{user_id}", kGet, false, false, false, true},
    {"feed_snapshot", "/v1/users/{user_id}/feed/snapshot", kGet, false, false, false, true},
    {"watermarks", "/v1/watermarks", kGet, true, false, false, false},
    {"events", "/v1/events", kPost, true, false, true, true},
    {"info", "/v1/info", kGet, false, false, false, false},
    {"healthz", "/healthz", kGet, false, true, false, false},
    {"metrics", "/metrics", kGet, false, true, false, false},
};
static_assert(std::size(kRows) == kRouteCount);

}  // namespace

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

std::span<const Route> Routes() { return kRows; }

RouteMatch MatchRoute(std::string_view target) {
  RouteMatch m;
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  if (q != std::string_view::npos) m.query = target.substr(q + 1);
  for (const Route& r : kRows) {
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
