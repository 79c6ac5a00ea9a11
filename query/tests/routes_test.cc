// The route table against SPEC section 4, and against what the service
// answers: a route's method, may-block, rate-limit, auth and readiness
// properties are stated once, in src/routes.cc.
#include "routes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "query/query_service.h"
#include "store/state_store.h"
#include "test_state.h"

namespace tally::query::internal {
namespace {

using query::testing::TempDir;

// Every route of SPEC section 4, with a target that has its shape.
struct SpecRoute {
  std::string_view method;
  std::string_view target;
  std::string_view name;
  bool may_block;
  bool rate_limit_exempt;
  bool needs_auth;
  bool needs_ready;
};

constexpr SpecRoute kSpecRoutes[] = {
    {"GET", "/v1/posts/7/counts", "post_counts", false, false, false, true},
    {"GET", "/v1/posts/counts?ids=1,2,3", "post_counts_batch", false, false, false, true},
    {"GET", "/v1/users/42/counts", "user_counts", false, false, false, true},
    {"GET", "/v1/users/42/unread", "user_unread", false, false, false, true},
    {"POST", "/v1/users/42/unread/red_dot/reset?channel=a", "unread_reset", true, false, true,
     true},
    {"GET", "/v1/posts/7/likes/42", "post_like", false, false, false, true},
    {"GET", "/v1/posts/7/views/42", "post_view", false, false, false, true},
    {"GET", "/v1/users/42/feed/snapshot", "feed_snapshot", false, false, false, true},
    {"GET", "/v1/watermarks", "watermarks", true, false, false, true},
    {"POST", "/v1/events", "events", true, false, true, true},
    {"GET", "/v1/info", "info", false, false, false, false},
    {"GET", "/healthz", "healthz", false, true, false, false},
    {"GET", "/metrics", "metrics", false, true, false, false},
    {"GET", "/v1/cluster", "cluster", false, false, false, false},  // SPEC section 6
    // The status page (README.md, "Status page").
    {"GET", "/", "status_page", false, true, false, false},
    {"GET", "/status", "status_page_alias", false, true, false, false},
    {"GET", "/status/status.js", "status_file", false, true, false, false},
    {"GET", "/v1/status", "status", false, true, false, false},
    {"GET", "/v1/status/history?since=0", "status_history", false, true, false, false},
    {"GET", "/v1/status/hot-posts", "status_hot_posts", false, true, false, false},
};

// Targets with no route, or on the edge of one.
constexpr std::string_view kOtherTargets[] = {
    "",
    "//",
    "/status/a/b",
    "/v1/status/",
    "v1/info",
    "//v1/info",
    "/v1/info/",
    "/v1/info?x=1",
    "/HEALTHZ",
    "/healthz/",
    "/metrics?name=x",
    "/v1",
    "/v1/",
    "/v1/posts",
    "/v1/posts/7",
    "/v1/posts//counts",
    "/v1/posts/counts/counts",
    "/v1/posts/%31/counts",
    "/v1/p%6fsts/7/counts",
    "/v1/posts/7/counts/",
    "/v1/posts/7/likes",
    "/v1/posts/7/likes/",
    "/v1/posts/7/shares/42",
    "/v1/users/x/unread/y/reset",
    "/v1/users/42/unread/like",
    "/v1/users/42/unread/like/reset/now",
    "/v1/users/42/feed",
    "/v1/users/42/feed/snapshot/x",
    "/v1/watermarks/",
    "/v1/events?wait=visible",
    "/1/2/3/4/5/6/7/8/9",
    "/v2/info",
};

TEST(HttpRoutesTest, EverySpecRouteIsInTheTableWithItsProperties) {
  EXPECT_EQ(Routes().size(), std::size(kSpecRoutes)) << "a route SPEC does not list";
  for (const SpecRoute& s : kSpecRoutes) {
    RouteMatch m = MatchRoute(s.target);
    ASSERT_NE(m.route, nullptr) << s.target;
    EXPECT_EQ(m.route->name, s.name) << s.target;
    EXPECT_EQ(m.route->method, s.method) << s.target;
    EXPECT_EQ(m.route->may_block, s.may_block) << s.target;
    EXPECT_EQ(m.route->rate_limit_exempt, s.rate_limit_exempt) << s.target;
    EXPECT_EQ(m.route->needs_auth, s.needs_auth) << s.target;
    EXPECT_EQ(m.route->needs_ready, s.needs_ready) << s.target;
    EXPECT_EQ(RequestMayBlock(s.method, s.target), s.may_block) << s.target;
    EXPECT_EQ(ExemptFromRateLimit(s.method, s.target), s.rate_limit_exempt) << s.target;
  }
}

TEST(HttpRoutesTest, PatternsTakeWholeSegmentsAndTheQueryApart) {
  RouteMatch m = MatchRoute("/v1/posts/7/likes/42?x=1");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.route->name, "post_like");
  ASSERT_EQ(m.params, 2);
  EXPECT_EQ(m.param[0], "7");
  EXPECT_EQ(m.param_name[0], "post_id");
  EXPECT_EQ(m.param[1], "42");
  EXPECT_EQ(m.param_name[1], "user_id");
  EXPECT_EQ(m.query, "x=1");

  m = MatchRoute("/v1/users//unread/like/reset");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.route->name, "unread_reset");
  EXPECT_EQ(m.param[0], "");
  EXPECT_EQ(m.param[1], "like");
  EXPECT_EQ(m.param_name[1], "kind");

  m = MatchRoute("/v1/posts/counts/counts");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.route->name, "post_counts");
  EXPECT_EQ(m.param[0], "counts");

  for (std::string_view t : {"/v1/info/", "//v1/info", "/v1/p%6fsts/7/counts", "/v1/posts/7"}) {
    EXPECT_EQ(MatchRoute(t).route, nullptr) << t;
  }
}

TEST(HttpRoutesTest, NoPatternTakesMoreParamsThanAMatchHolds) {
  for (const Route& r : Routes()) {
    EXPECT_LE(std::count(r.pattern.begin(), r.pattern.end(), '{'), kMaxRouteParams) << r.pattern;
  }
}

TEST(HttpRoutesTest, NoTwoPatternsMatchOnePath) {
  for (const SpecRoute& s : kSpecRoutes) {
    int matches = 0;
    const std::string_view path = s.target.substr(0, s.target.find('?'));
    for (const Route& r : Routes()) {
      RouteMatch m;
      matches += MatchPattern(r.pattern, path, &m) ? 1 : 0;
    }
    EXPECT_EQ(matches, 1) << s.target;
  }
}

// The transport's choice of thread.
TEST(HttpRoutesTest, MayBlockIsTrueForPublishesAndWatermarks) {
  EXPECT_TRUE(RequestMayBlock("POST", "/v1/events"));
  EXPECT_TRUE(RequestMayBlock("POST", "/v1/users/1/unread/like/reset"));
  EXPECT_TRUE(RequestMayBlock("GET", "/v1/watermarks"));
  EXPECT_TRUE(RequestMayBlock("GET", "/v1/watermarks?x=1"));
  EXPECT_FALSE(RequestMayBlock("GET", "/v1/posts/7/counts"));
  EXPECT_FALSE(RequestMayBlock("GET", "/v1/events"));
}

// What the service answers follows the table: 404 without a route, 405
// with the row's method, 401 where it needs the token, the readiness gate
// where it needs the state.
class HttpRoutesServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = query::testing::OpenTestStore(dir_.path(), /*fill=*/false);
    QueryServiceOptions o;
    o.store = store_.get();
    o.info =
        ServiceInfo{"0.1.0", "", {"tally.events"}, dir_.path(), query::testing::kTestPartitions};
    o.ready = [this] { return ready_.load(); };
    o.auth_token = "t0ken";
    service_ = std::make_unique<QueryService>(std::move(o));
  }

  TempDir dir_;
  std::unique_ptr<store::StateStore> store_;
  std::atomic<bool> ready_{true};
  std::unique_ptr<QueryService> service_;
};

TEST_F(HttpRoutesServiceTest, UnknownPathsAre404AndOtherMethods405WithTheRowsMethod) {
  std::vector<std::string_view> targets(std::begin(kOtherTargets), std::end(kOtherTargets));
  for (const SpecRoute& s : kSpecRoutes) targets.push_back(s.target);
  for (std::string_view t : targets) {
    const RouteMatch m = MatchRoute(t);
    Response r = service_->Handle(Request{"PUT", t, {}, false, {}});
    if (m.route == nullptr) {
      EXPECT_EQ(r.status, 404) << t << " -> " << r.body;
    } else {
      EXPECT_EQ(r.status, 405) << t << " -> " << r.body;
      EXPECT_EQ(r.allow, m.route->method) << t;
    }
  }
}

TEST_F(HttpRoutesServiceTest, AuthAndReadinessFollowTheTable) {
  const std::string gate = "not ready: the state is still being opened or caught up";
  for (const SpecRoute& s : kSpecRoutes) {
    ready_ = true;
    Response r = service_->Handle(Request{s.method, s.target, {}, false, {}});
    EXPECT_EQ(r.status == 401, s.needs_auth) << s.target << " -> " << r.body;
    EXPECT_EQ(r.unauthorized, s.needs_auth) << s.target;
    ready_ = false;
    r = service_->Handle(Request{s.method, s.target, {}, false, {}});
    EXPECT_EQ(r.status == 503 && r.body.find(gate) != std::string::npos, s.needs_ready)
        << s.target << " -> " << r.body;
  }
}

}  // namespace
}  // namespace tally::query::internal
