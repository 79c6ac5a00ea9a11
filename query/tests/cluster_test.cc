// Any member answers any request (SPEC section 6), over real parts: three
// StateStores each holding some partitions of the same data, each served by
// a QueryService and HttpServer of its own, wired by a fixed ClusterRouting;
// every answer compared with one store that holds every partition. (The
// merged watermarks: cluster_watermarks_test.cc.)
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fixed_routing.h"
#include "ingest/event_publisher.h"
#include "mock_kafka.h"
#include "query/cluster_routing.h"
#include "query/http_server.h"
#include "query/peer_client.h"
#include "query/query_service.h"
#include "responses.h"
#include "schemas/delta.h"
#include "schemas/event.h"
#include "store/state_store.h"
#include "test_state.h"

namespace tally::query {
namespace {

using testing::FixedRouting;
using testing::kTestPartitions;
using testing::TempDir;

// `count` ids of partition `p`, from `from` up.
std::vector<uint64_t> IdsIn(uint32_t p, int count, uint64_t from) {
  std::vector<uint64_t> ids;
  for (uint64_t id = from; static_cast<int>(ids.size()) < count; id++) {
    if (schemas::PartitionOf(id, kTestPartitions) == p) ids.push_back(id);
  }
  return ids;
}

// Commits to `entity`'s partition if `s` holds it.
template <typename Fn>
void CommitIfHeld(store::StateStore* s, uint64_t entity, Fn&& fill) {
  const uint32_t p = schemas::PartitionOf(entity, s->partitions());
  if (!s->HoldsPartition(p)) return;
  store::PartitionBatch b;
  fill(&b);
  base::Status st = s->partition(p)->Commit(&b);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

constexpr uint64_t kReader = 42;  // has a feed snapshot, follows users on every member

class ClusterTest : public ::testing::Test {
 protected:
  static constexpr const char* kMembers[] = {"a", "b", "c"};

  struct Member {
    std::string id;
    TempDir dir;
    std::unique_ptr<store::StateStore> store;
    std::unique_ptr<FixedRouting> routing;
    std::unique_ptr<QueryService> service;
    std::unique_ptr<HttpServer> server;
    std::string url;
  };

  void SetUp() override {
    // The partition of the notices and global red dots is served by "a"
    // and held by every member; the others: one by "b", two by "c".
    global_ = schemas::PartitionOf(schemas::kGlobalEntity, kTestPartitions);
    std::vector<uint32_t> others;
    for (uint32_t p = 0; p < kTestPartitions; p++) {
      if (p != global_) others.push_back(p);
    }
    owner_[global_] = "a";
    owner_[others[0]] = "b";
    owner_[others[1]] = "c";
    owner_[others[2]] = "c";
    b_part_ = others[0];
    c_part_ = others[1];

    for (uint32_t p = 0; p < kTestPartitions; p++) {
      for (uint64_t id : IdsIn(p, 3, 1)) posts_.push_back(id);
      for (uint64_t id : IdsIn(p, 2, 1000)) users_.push_back(id);
    }
    std::sort(posts_.begin(), posts_.end());
    std::sort(users_.begin(), users_.end());
    // The reader lives on "b"'s partition unless 42 does not; then the
    // first id there.
    reader_ = IdsIn(b_part_, 1, kReader)[0];
    reader_g_ = IdsIn(global_, 1, kReader)[0];

    reference_ = OpenStore(all_dir_, std::nullopt);
    QueryServiceOptions ro;
    ro.store = reference_.get();
    reference_service_ = std::make_unique<QueryService>(std::move(ro));

    for (int i = 0; i < 3; i++) {
      Member& m = members_[i];
      m.id = kMembers[i];
      std::vector<uint32_t> held = {global_};
      for (const auto& [p, o] : owner_) {
        if (o == m.id && p != global_) held.push_back(p);
      }
      std::sort(held.begin(), held.end());
      m.store = OpenStore(m.dir, held);
      m.routing = std::make_unique<FixedRouting>(m.id);
      for (const auto& [p, o] : owner_) m.routing->Set(p, o);
      QueryServiceOptions o;
      o.store = m.store.get();
      o.cluster = m.routing.get();
      o.peer_timeout_ms = 1000;
      m.service = std::make_unique<QueryService>(std::move(o));
      ServerOptions so;
      so.listen = "127.0.0.1:0";
      auto server = HttpServer::Start(so, m.service.get());
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      m.server = std::move(server).value();
      m.url = "http://127.0.0.1:" + std::to_string(m.server->bound_port());
    }
    for (Member& m : members_) {
      for (const Member& other : members_) m.routing->SetUrl(other.id, other.url);
    }
    auto client = PeerClient::Start(PeerClientOptions{});
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();
  }

  void TearDown() override {
    client_.reset();
    for (Member& m : members_) m.server.reset();
  }

  // A store in `dir` holding `held` (every partition: nullopt), filled with
  // what it holds of the test data.
  std::unique_ptr<store::StateStore> OpenStore(const TempDir& dir,
                                               std::optional<std::vector<uint32_t>> held) {
    store::StoreOptions o = testing::TestStoreOptions(dir.path());
    o.open_partitions = std::move(held);
    auto s = store::StateStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) std::abort();
    Fill(s->get());
    return std::move(s).value();
  }

  void Fill(store::StateStore* s) {
    using store::CounterOp;
    for (uint64_t id : posts_) {
      CommitIfHeld(s, id, [id](store::PartitionBatch* b) {
        CounterOp ops[4] = {CounterOp::Add(id % 5 + 1), CounterOp::Add(id % 3),
                            CounterOp::Add(id % 7), CounterOp::Add(id)};
        b->MergePostCounters(id, ops);
        if (id % 2 == 0) b->PutLike(id, kReader);
      });
    }
    for (uint64_t u : users_) {
      CommitIfHeld(s, u, [u](store::PartitionBatch* b) {
        CounterOp ops[3] = {CounterOp::Add(u % 9 + 2), CounterOp::Add(u % 4), {}};
        b->MergeUserCounters(u, ops);
      });
    }
    CommitIfHeld(s, schemas::kGlobalEntity, [](store::PartitionBatch* b) {
      b->PutNotice(10, "maintenance");
      b->PutNotice(20, "terms");
      b->MaxRedDot("discover", 100);
      b->MaxRedDot("games", 50);
    });
    // Both readers follow every test user; their snapshots are older than
    // the counts (some above them: max(0, ...) applies).
    for (uint64_t r : {reader_, reader_g_}) {
      CommitIfHeld(s, r, [this, r](store::PartitionBatch* b) {
        std::vector<std::pair<uint64_t, uint64_t>> snap;
        for (uint64_t u : users_) {
          b->PutFollow(r, u);
          snap.emplace_back(u, u % 3 == 0 ? 50 : 1);
        }
        b->PutFeedSnapshot(r, 777, snap.data(), snap.size());
        CounterOp unread[6] = {CounterOp::Add(1), CounterOp::Add(2), CounterOp::Add(3),
                               CounterOp::Add(4), CounterOp::Add(5), CounterOp::Add(6)};
        b->MergeUnreadCounters(r, unread);
        CounterOp user[3] = {{}, {}, CounterOp::Add(static_cast<int64_t>(users_.size()))};
        b->MergeUserCounters(r, user);
        b->SetNoticeRead(r, 10, 5);
        b->MaxUserRedDot(r, "games", 60);
      });
    }
  }

  // The reference answer (one store holding everything, no cluster).
  std::pair<int, std::string> Reference(const std::string& target) {
    Response r = reference_service_->Handle(Request{"GET", target, {}, false, {}, {}});
    return {r.status, r.body};
  }

  PeerResponse Get(const Member* m, const std::string& target, PeerHeaders headers = {}) {
    return client_->Get(m->url, target, headers, PeerClient::In(5000));
  }

  const Member& Of(const std::string& id) const {
    for (const Member& m : members_) {
      if (m.id == id) return m;
    }
    std::abort();
  }
  std::string OwnerOf(uint64_t entity) {
    return owner_[schemas::PartitionOf(entity, kTestPartitions)];
  }

  uint32_t global_ = 0, b_part_ = 0, c_part_ = 0;
  std::map<uint32_t, std::string> owner_;
  std::vector<uint64_t> posts_, users_;
  uint64_t reader_ = 0, reader_g_ = 0;
  TempDir all_dir_;
  std::unique_ptr<store::StateStore> reference_;
  std::unique_ptr<QueryService> reference_service_;
  Member members_[3];
  std::unique_ptr<PeerClient> client_;
};

TEST_F(ClusterTest, EveryMemberAnswersEveryReadAsOneStoreWould) {
  std::vector<std::pair<std::string, std::string>> reads;  // target, member expected
  for (uint64_t p : posts_) {
    reads.emplace_back(fmt::format("/v1/posts/{}/counts", p), OwnerOf(p));
    reads.emplace_back(fmt::format("/v1/posts/{}/likes/{}", p, kReader), OwnerOf(p));
    reads.emplace_back(fmt::format("/v1/posts/{}/views/{}", p, kReader), OwnerOf(p));
  }
  for (uint64_t u : users_) {
    reads.emplace_back(fmt::format("/v1/users/{}/counts", u), OwnerOf(u));
  }
  for (uint64_t r : {reader_, reader_g_}) {
    reads.emplace_back(fmt::format("/v1/users/{}/counts", r), OwnerOf(r));
    reads.emplace_back(fmt::format("/v1/users/{}/feed/snapshot", r), OwnerOf(r));
  }
  int liked = 0;
  for (const Member& m : members_) {
    for (const auto& [target, owner] : reads) {
      PeerResponse a = Get(&m, target);
      ASSERT_TRUE(a.ok()) << a.error;
      auto [status, body] = Reference(target);
      EXPECT_EQ(a.status, status) << m.id << " " << target;
      EXPECT_EQ(a.body, body) << m.id << " " << target;
      EXPECT_EQ(a.Header(kMemberHeader), owner) << m.id << " " << target;
      if (a.body == "{\"liked\":true}") liked++;
    }
  }
  EXPECT_EQ(liked, 3 * static_cast<int>(std::count_if(posts_.begin(), posts_.end(),
                                                      [](uint64_t p) { return p % 2 == 0; })));
}

TEST_F(ClusterTest, BatchIsSplitByMemberAndMergedInTheOrderAsked) {
  // Ids of every member, interleaved, with repeats.
  std::vector<uint64_t> ids = {IdsIn(c_part_, 1, 1)[0], IdsIn(global_, 1, 1)[0],
                               IdsIn(b_part_, 1, 1)[0]};
  for (uint64_t p : posts_) ids.push_back(p);
  ids.push_back(ids[0]);
  ids.push_back(999999);
  std::string target = "/v1/posts/counts?ids=";
  for (size_t i = 0; i < ids.size(); i++) target += (i ? "," : "") + std::to_string(ids[i]);
  auto [status, body] = Reference(target);
  ASSERT_EQ(status, 200);
  for (const Member& m : members_) {
    PeerResponse a = Get(&m, target);
    ASSERT_TRUE(a.ok()) << a.error;
    EXPECT_EQ(a.status, 200) << m.id;
    EXPECT_EQ(a.body, body) << m.id;
    // First seen: the first id's member ("c"), then "a", then "b".
    EXPECT_EQ(a.Header(kMemberHeader), "c,a,b") << m.id;
  }
  // A batch of one member's ids names only that member.
  std::string only_b = fmt::format("/v1/posts/counts?ids={}", IdsIn(b_part_, 1, 1)[0]);
  EXPECT_EQ(Get(&Of("a"), only_b).Header(kMemberHeader), "b");
  EXPECT_EQ(Get(&Of("a"), only_b).body, Reference(only_b).second);
}

TEST_F(ClusterTest, UnreadCountsFeedFolloweesOnOtherMembers) {
  for (uint64_t r : {reader_, reader_g_}) {
    const std::string target = fmt::format("/v1/users/{}/unread", r);
    auto [status, body] = Reference(target);
    ASSERT_EQ(status, 200);
    // The feed is not 0: it counts followees of every member.
    ASSERT_EQ(body.find("\"feed\":0"), std::string::npos) << body;
    for (const Member& m : members_) {
      PeerResponse a = Get(&m, target);
      ASSERT_TRUE(a.ok()) << a.error;
      EXPECT_EQ(a.status, 200) << m.id << " " << a.body;
      EXPECT_EQ(a.body, body) << m.id;
      // The user's member first, then those of the followees it asked.
      std::string_view who = a.Header(kMemberHeader);
      EXPECT_TRUE(who.starts_with(OwnerOf(r))) << who;
      for (const char* x : kMembers) EXPECT_NE(who.find(x), std::string_view::npos) << who;
    }
  }
}

TEST_F(ClusterTest, NowherePartitionIsPartitionMovingWithRetryAfter) {
  for (Member& m : members_) m.routing->Set(c_part_, "");
  const uint64_t post = IdsIn(c_part_, 1, 1)[0];
  for (const std::string& target :
       {fmt::format("/v1/posts/{}/counts", post),
        fmt::format("/v1/posts/counts?ids={},{}", IdsIn(b_part_, 1, 1)[0], post),
        fmt::format("/v1/users/{}/unread", reader_)}) {
    for (const Member& m : members_) {
      PeerResponse a = Get(&m, target);
      ASSERT_TRUE(a.ok()) << a.error;
      EXPECT_EQ(a.status, 503) << m.id << " " << target;
      EXPECT_NE(a.body.find("\"code\":\"partition_moving\""), std::string::npos) << a.body;
      EXPECT_NE(a.body.find(fmt::format("partition {}", c_part_)), std::string::npos) << a.body;
      EXPECT_EQ(a.Header("Retry-After"), "1") << m.id << " " << target;
    }
  }
}

// A listener that accepts nothing: counts the connections made to it.
class SilentPeer {
 public:
  SilentPeer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~SilentPeer() { close(fd_); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Connections waiting to be accepted (taken now).
  int Connections() {
    int n = 0;
    for (int c; (c = accept(fd_, nullptr, nullptr)) >= 0; n++) close(c);
    return n;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(ClusterTest, ForwardedRequestForAPartitionNotHeldIsNeverForwardedAgain) {
  // "a" believes "z" serves b's partition; "z" never answers.
  SilentPeer z;
  FixedRouting* routing = members_[0].routing.get();
  routing->Set(b_part_, "z");
  routing->SetUrl("z", z.url());
  const uint64_t post = IdsIn(b_part_, 1, 1)[0];
  for (const std::string& target :
       {fmt::format("/v1/posts/{}/counts", post), fmt::format("/v1/posts/counts?ids={}", post),
        fmt::format("/v1/users/{}/unread", reader_)}) {
    PeerResponse a = Get(&Of("a"), target, {{"X-Tally-Forwarded", "b"}});
    ASSERT_TRUE(a.ok()) << a.error;
    EXPECT_EQ(a.status, 503) << target;
    EXPECT_NE(a.body.find("partition_moving"), std::string::npos) << a.body;
    EXPECT_EQ(a.Header("Retry-After"), "1");
    EXPECT_EQ(z.Connections(), 0) << target << ": forwarded again";
  }
  // Not forwarded, the same request does go to "z" (and, unanswered, is
  // partition_moving too, after the peer timeout: "z" is reported
  // unreachable and nobody else serves the partition).
  PeerResponse a = Get(&Of("a"), fmt::format("/v1/posts/{}/counts", post));
  ASSERT_TRUE(a.ok()) << a.error;
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.body.find("partition_moving"), std::string::npos) << a.body;
  EXPECT_EQ(z.Connections(), 1);
  EXPECT_EQ(routing->Unreachables(), (std::vector<std::string>{"z"}));
}

// An owner that does not answer (killed, still in the directory): the read
// is asked once more where routing now says, a current standby, and answered.
TEST_F(ClusterTest, AReadGoesToAStandbyWhenTheOwnerDoesNotAnswer) {
  SilentPeer z;
  FixedRouting* routing = members_[0].routing.get();
  routing->Set(b_part_, "z");
  routing->SetUrl("z", z.url());
  routing->SetFallback(b_part_, "b");
  const uint64_t post = IdsIn(b_part_, 1, 1)[0];
  const std::string target = fmt::format("/v1/posts/{}/counts", post);
  PeerResponse a = Get(&Of("a"), target);
  ASSERT_TRUE(a.ok()) << a.error;
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.Header("X-Tally-Member"), "b");
  EXPECT_EQ(a.body, Get(&Of("b"), target).body);
  EXPECT_EQ(z.Connections(), 1);
}

// A partition that left this member between routing and reading (a
// handover: the member says where the partition went, then drops it): the
// read is routed once more, to where it went, and answered.
TEST_F(ClusterTest, AReadOfAPartitionThatLeftWhileRoutedIsRoutedAgain) {
  FixedRouting* routing = members_[0].routing.get();  // "a" does not hold b_part_
  routing->SetStaleHere(b_part_, 1);
  const uint64_t post = IdsIn(b_part_, 1, 1)[0];
  const std::string target = fmt::format("/v1/posts/{}/counts", post);
  Response r = members_[0].service->Handle(Request{"GET", target, {}, false, {}, {}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.member, "b");
  EXPECT_EQ(r.body, Reference(target).second);
}

TEST_F(ClusterTest, ForwardedRequestIsAnsweredFromWhatIsHeld) {
  const uint64_t post = IdsIn(b_part_, 1, 1)[0];
  const std::string target = fmt::format("/v1/posts/{}/counts", post);
  PeerResponse a = Get(&Of("b"), target, {{"X-Tally-Forwarded", "a"}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, Reference(target).second);
  EXPECT_EQ(a.Header(kMemberHeader), "b");
}

TEST_F(ClusterTest, PeerThatIsDownIsPartitionMoving) {
  members_[2].server->Stop();  // "c"
  const uint64_t post = IdsIn(c_part_, 1, 1)[0];
  for (const std::string& target :
       {fmt::format("/v1/posts/{}/counts", post),
        fmt::format("/v1/posts/counts?ids={},{}", IdsIn(global_, 1, 1)[0], post),
        fmt::format("/v1/users/{}/unread", reader_)}) {
    for (int i = 0; i < 2; i++) {
      PeerResponse a = Get(&members_[i], target);
      ASSERT_TRUE(a.ok()) << a.error;
      EXPECT_EQ(a.status, 503) << members_[i].id << " " << target << " " << a.body;
      EXPECT_NE(a.body.find("\"code\":\"partition_moving\""), std::string::npos) << a.body;
      EXPECT_EQ(a.Header("Retry-After"), "1");
    }
  }
  // What the others serve is still answered.
  const std::string own = fmt::format("/v1/posts/{}/counts", IdsIn(b_part_, 1, 1)[0]);
  EXPECT_EQ(Get(&members_[0], own).body, Reference(own).second);
}

TEST_F(ClusterTest, ClusterRouteAnswersTheDirectory) {
  for (const Member& m : members_) {
    PeerResponse a = Get(&m, "/v1/cluster");
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a.status, 200);
    EXPECT_EQ(a.body, "{\"group\":\"g\",\"generation\":7}");
  }
}

TEST_F(ClusterTest, FeedResetRecordsEveryFolloweesCountFromTheirMembers) {
  testing::MockKafka kafka;
  kafka.CreateTopic("tally.events", 2);
  auto publisher = kafka.NewPublisher();
  ASSERT_NE(publisher, nullptr);
  auto expected = reference_->CurrentFolloweePosts(reader_);
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(expected->size(), users_.size());
  // Reset on every member (a service with a publisher beside each server,
  // over the same store and routing): the user's member reads the followees
  // here and on the others; the others ask it.
  size_t published = 0;
  for (const Member& m : members_) {
    QueryServiceOptions o;
    o.store = m.store.get();
    o.cluster = m.routing.get();
    o.publisher = publisher.get();
    QueryService service(std::move(o));
    const std::string target = fmt::format("/v1/users/{}/unread/feed/reset", reader_);
    Response r = service.Handle(Request{"POST", target, {}, false, {}, {}});
    ASSERT_EQ(r.status, 202) << m.id << " " << r.body;
    auto records = kafka.ReadAll("tally.events", 2);
    ASSERT_EQ(records.size(), ++published);
    schemas::EventParser parser;
    schemas::Event e;
    ASSERT_TRUE(parser.Parse(records.back().value, &e).ok()) << records.back().value;
    EXPECT_EQ(e.user_id, reader_);
    EXPECT_EQ(e.snapshot, *expected) << m.id << " " << records.back().value;
  }
}

TEST_F(ClusterTest, OnlyReadsThatMayAskAPeerLeaveTheIoThreads) {
  QueryService& a = *members_[0].service;  // serves the global partition
  const uint64_t here = IdsIn(global_, 1, 1)[0];
  const uint64_t there = IdsIn(b_part_, 1, 1)[0];
  std::deque<std::string> targets;  // the requests' targets borrow from here
  auto get = [&targets](std::string target, std::string_view forwarded = {}) {
    targets.push_back(std::move(target));
    return Request{"GET", targets.back(), {}, false, {}, forwarded};
  };
  EXPECT_FALSE(a.MayBlock(get(fmt::format("/v1/posts/{}/counts", here))));
  EXPECT_FALSE(a.MayBlock(get(fmt::format("/v1/users/{}/feed/snapshot", here))));
  EXPECT_TRUE(a.MayBlock(get(fmt::format("/v1/posts/{}/counts", there))));
  EXPECT_TRUE(a.MayBlock(get(fmt::format("/v1/posts/{}/likes/1", there))));
  EXPECT_TRUE(a.MayBlock(get(fmt::format("/v1/posts/counts?ids={}", here))));
  EXPECT_TRUE(a.MayBlock(get(fmt::format("/v1/users/{}/unread", here))));
  EXPECT_TRUE(a.MayBlock(get(fmt::format("/v1/users/{}/feed/snapshot?current=true", here))));
  EXPECT_FALSE(a.MayBlock(get("/v1/posts/x/counts")));
  EXPECT_FALSE(a.MayBlock(get("/v1/cluster")));
  // Forwarded: answered from what is here, but for followee counts.
  EXPECT_FALSE(a.MayBlock(get(fmt::format("/v1/posts/{}/counts", there), "b")));
  EXPECT_FALSE(a.MayBlock(get(fmt::format("/v1/posts/counts?ids={}", there), "b")));
  EXPECT_TRUE(a.MayBlock(get(fmt::format("/v1/users/{}/unread", here), "b")));

  // Moved between MayBlock and the handler: 503, never a wait on the I/O
  // thread.
  Request moved = get(fmt::format("/v1/posts/{}/counts", there));
  moved.must_not_block = true;
  Response r = a.Handle(moved);
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("partition_moving"), std::string::npos) << r.body;
  EXPECT_EQ(r.retry_after_s, 1);
}

// A read that goes whole to its owner is asked without a thread of the
// blocking pool: the peer client's callback has the owner's answer; what
// is served here, a batch, a forwarded request and a bad id are not taken.
TEST_F(ClusterTest, AReadOfAnotherMembersPartitionIsForwardedWithoutBlocking) {
  QueryService& a = *members_[0].service;
  const uint64_t here = IdsIn(global_, 1, 1)[0];
  const uint64_t there = IdsIn(b_part_, 1, 1)[0];
  std::deque<std::string> targets;
  auto get = [&targets](std::string target, std::string_view forwarded = {}) {
    targets.push_back(std::move(target));
    return Request{"GET", targets.back(), {}, false, {}, forwarded};
  };
  auto never = [](std::optional<Response>) { ADD_FAILURE() << "called back"; };
  EXPECT_FALSE(a.ForwardAsync(get(fmt::format("/v1/posts/{}/counts", here)), never));
  EXPECT_FALSE(a.ForwardAsync(get("/v1/posts/counts?ids=1,x"), never));
  {
    // A batch of ids all served here: answered at once, on this thread.
    const std::string target = fmt::format("/v1/posts/counts?ids={},{}", here, here);
    std::optional<Response> r;
    EXPECT_TRUE(a.ForwardAsync(get(target), [&r](std::optional<Response> x) { r = std::move(x); }));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, Reference(target).second);
    EXPECT_EQ(r->member, "a");
  }
  EXPECT_FALSE(a.ForwardAsync(get(fmt::format("/v1/posts/{}/counts", there), "b"), never));
  EXPECT_FALSE(a.ForwardAsync(get("/v1/posts/x/counts"), never));
  EXPECT_FALSE(a.ForwardAsync(get("/v1/cluster"), never));

  for (const std::string& target :
       {fmt::format("/v1/posts/{}/counts", there), fmt::format("/v1/users/{}/unread", reader_),
        fmt::format("/v1/posts/{}/likes/{}", there, kReader)}) {
    std::promise<std::optional<Response>> answered;
    ASSERT_TRUE(a.ForwardAsync(get(target), [&answered](std::optional<Response> r) {
      answered.set_value(std::move(r));
    })) << target;
    auto future = answered.get_future();
    ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready) << target;
    std::optional<Response> r = future.get();
    ASSERT_TRUE(r.has_value()) << target;
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, Reference(target).second) << target;
    // The owner answers (an unread names every member whose counts it used).
    EXPECT_EQ(r->member.substr(0, 1), "b") << target;
  }

  // A batch over every member: the ids here read at once, the others asked
  // of "b" and "c" in parallel, merged in the order asked.
  {
    std::string ids;
    for (uint64_t id : posts_) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const std::string target = "/v1/posts/counts?ids=" + ids;
    std::promise<std::optional<Response>> answered;
    ASSERT_TRUE(a.ForwardAsync(
        get(target), [&answered](std::optional<Response> r) { answered.set_value(std::move(r)); }));
    auto future = answered.get_future();
    ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    std::optional<Response> r = future.get();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, Reference(target).second);
    std::vector<std::string> members;
    internal::AddMembers(r->member, &members);
    std::sort(members.begin(), members.end());
    EXPECT_EQ(members, (std::vector<std::string>{"a", "b", "c"})) << r->member;
  }

  // An owner that does not answer: no answer, and it is marked unreachable
  // (the transport then answers the request with Handle(), which goes
  // around it).
  SilentPeer z;
  members_[0].routing->Set(b_part_, "z");
  members_[0].routing->SetUrl("z", z.url());
  std::promise<std::optional<Response>> answered;
  ASSERT_TRUE(
      a.ForwardAsync(get(fmt::format("/v1/posts/{}/counts", there)),
                     [&answered](std::optional<Response> r) { answered.set_value(std::move(r)); }));
  auto future = answered.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(future.get().has_value());
  EXPECT_EQ(members_[0].routing->Unreachables(), (std::vector<std::string>{"z"}));
}

TEST(SingleProcessClusterTest, BatchesAndUnreadsStayOnTheIoThreadWhileEveryPartitionIsHere) {
  TempDir dir;
  auto store = testing::OpenTestStore(dir.path());
  FixedRouting routing("solo");
  for (uint32_t p = 0; p < kTestPartitions; p++) routing.Set(p, "solo");
  routing.SetUrl("other", "http://127.0.0.1:1");
  QueryServiceOptions o;
  o.store = store.get();
  o.cluster = &routing;
  QueryService service(std::move(o));
  auto get = [](std::string_view target, std::string_view forwarded = {}) {
    return Request{"GET", target, {}, false, {}, forwarded};
  };
  // A member alone asks no peer: nothing leaves the I/O threads, and the
  // answers are the store's own.
  EXPECT_FALSE(service.MayBlock(get("/v1/posts/counts?ids=7,8")));
  EXPECT_FALSE(service.MayBlock(get("/v1/users/42/unread")));
  EXPECT_FALSE(service.MayBlock(get("/v1/users/42/unread", "peer")));
  // A current snapshot still leaves them: it has no answer for a move.
  EXPECT_TRUE(service.MayBlock(get("/v1/users/42/feed/snapshot?current=true", "peer")));
  Request unread = get("/v1/users/42/unread");
  unread.must_not_block = true;
  Response r = service.Handle(unread);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"mention\":1,"), std::string::npos) << r.body;
  EXPECT_EQ(r.member, "solo");
  Request batch = get("/v1/posts/counts?ids=7,8");
  batch.must_not_block = true;
  r = service.Handle(batch);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"like\":3,"), std::string::npos) << r.body;

  // One partition elsewhere: both may ask a peer again. Moved after
  // MayBlock said no: 503 partition_moving, never a wait on the I/O thread.
  const uint32_t moved = schemas::PartitionOf(8, kTestPartitions);
  routing.Set(moved, "other");
  EXPECT_TRUE(service.MayBlock(get("/v1/posts/counts?ids=7,8")));
  EXPECT_TRUE(service.MayBlock(get("/v1/users/42/unread")));
  r = service.Handle(batch);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("partition_moving"), std::string::npos) << r.body;
  r = service.Handle(unread);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("partition_moving"), std::string::npos) << r.body;
  EXPECT_EQ(r.retry_after_s, 1);
}

TEST(SingleProcessClusterTest, ClusterOfOneOwnsEveryPartitionAndNamesItsMember) {
  TempDir dir;
  auto store = testing::OpenTestStore(dir.path());
  QueryServiceOptions o;
  o.store = store.get();
  o.member = "solo";
  o.info.group = "tally";
  QueryService service(std::move(o));
  Response r = service.Handle(Request{"GET", "/v1/cluster", {}, false, {}, {}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body,
            "{\"group\":\"tally\",\"generation\":0,\"members\":[{\"member\":\"solo\",\"http\":\"\","
            "\"owns\":[0,1,2,3],\"standby\":[],\"restoring\":[]}]}");
  EXPECT_EQ(r.member, "");  // reads no state
  r = service.Handle(Request{"GET", "/v1/posts/7/counts", {}, false, {}, {}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.member, "solo");
  // Never blocks on a peer: reads stay on the I/O threads.
  EXPECT_FALSE(service.MayBlock(Request{"GET", "/v1/posts/7/counts", {}, false, {}, {}}));
}

}  // namespace
}  // namespace tally::query
