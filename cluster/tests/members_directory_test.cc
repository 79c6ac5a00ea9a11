// MembersDirectory against the embedded broker (librdkafka's mock cluster):
// directories in one process stand for the members of a cluster and must
// see each other, their changes, their leaves and their deaths, ignore what
// is not a member's record, and rebuild the same view from the topic.
#include "cluster/members_directory.h"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/kafka.h"
#include "base/log.h"
#include "testing/embedded_cluster.h"
#include "testing/wait_for.h"

namespace tally::cluster {
namespace {

// Short enough for quick tests, long enough for a loaded 2-core machine.
constexpr int kHeartbeatMs = 250;
constexpr int kExpireMs = 2500;
constexpr int kSeeMs = 10000;  // bound for what must be seen "soon"

bool Has(const std::vector<MemberInfo>& live, const std::string& member) {
  return std::any_of(live.begin(), live.end(),
                     [&](const MemberInfo& m) { return m.member == member; });
}

const MemberInfo* Find(const std::vector<MemberInfo>& live, const std::string& member) {
  for (const auto& m : live) {
    if (m.member == member) return &m;
  }
  return nullptr;
}

// The member OwnerOf() names, "" for none.
std::string OwnerName(const MembersDirectory& d, int32_t partition) {
  auto owner = d.OwnerOf(partition);
  return owner ? owner->member : std::string();
}

MemberInfo Info(std::vector<int32_t> owns, int64_t generation, std::vector<int32_t> standby = {}) {
  MemberInfo m;
  m.http = "http://127.0.0.1:1";
  m.owns = std::move(owns);
  m.standby = std::move(standby);
  m.generation = generation;
  return m;
}

class MembersDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::SetLogLevel(base::LogLevel::kError);
    kafka_.brokers = cluster_.bootstrap();
    kafka_.embedded = true;
    kafka_.overrides = {{"log_level", "0"}};
  }

  void CreateTopic() {
    ASSERT_TRUE(cluster_.CreateTopic(std::string(base::kMembersTopic), 1).ok());
  }

  std::unique_ptr<MembersDirectory> StartMember(const std::string& id, int expire_ms = kExpireMs,
                                                std::function<void()> on_change = {},
                                                const std::string& group = "") {
    MembersDirectoryOptions o;
    o.kafka = kafka_;
    o.member = id;
    o.group = group;
    o.heartbeat_ms = kHeartbeatMs;
    o.expire_ms = expire_ms;
    o.leave_timeout_ms = 2000;
    o.on_change = std::move(on_change);
    auto d = MembersDirectory::Start(std::move(o));
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(d).value() : nullptr;
  }

  // Produces one raw record to tally.members partition 0 (value null when
  // `value` is null).
  void ProduceRaw(const std::string& key, const char* value) {
    auto conf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, kafka_, {});
    ASSERT_TRUE(conf.ok());
    auto p = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
    ASSERT_TRUE(p.ok());
    std::string topic(base::kMembersTopic);
    ASSERT_EQ(
        rd_kafka_producev(p->get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_KEY(key.empty() ? nullptr : key.data(), key.size()),
                          RD_KAFKA_V_VALUE(const_cast<char*>(value), value ? strlen(value) : 0),
                          RD_KAFKA_V_END),
        RD_KAFKA_RESP_ERR_NO_ERROR);
    ASSERT_EQ(rd_kafka_flush(p->get(), 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  }

  testing::EmbeddedCluster cluster_;
  base::KafkaOptions kafka_;
};

TEST_F(MembersDirectoryTest, ThreeMembersSeeEachOther) {
  CreateTopic();
  int64_t t0 = base::SteadyMs();
  auto a = StartMember("a");
  auto b = StartMember("b");
  auto c = StartMember("c");
  ASSERT_TRUE(a && b && c);
  a->Publish(Info({0, 1}, 1));
  b->Publish(Info({2}, 1));
  c->Publish(Info({3}, 1, {0}));
  auto all_three = [](const std::vector<MemberInfo>& live) {
    return live.size() == 3 && Has(live, "a") && Has(live, "b") && Has(live, "c");
  };
  for (auto* d : {a.get(), b.get(), c.get()}) ASSERT_TRUE(d->WaitFor(all_three, kSeeMs));
  std::printf("three members saw each other %lld ms after the first started\n",
              static_cast<long long>(base::SteadyMs() - t0));
  int64_t t1 = base::SteadyMs();
  EXPECT_TRUE(::tally::testing::WaitFor([&] { return a->CaughtUp(); }, kSeeMs));
  std::printf("caught up after %lld ms more\n", static_cast<long long>(base::SteadyMs() - t1));
  auto live = b->Snapshot();
  EXPECT_EQ(live[0].member, "a");
  EXPECT_EQ(live[0].owns, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(live[0].http, "http://127.0.0.1:1");
  EXPECT_EQ(OwnerName(*b, 2), "b");
  EXPECT_FALSE(b->OwnerOf(9).has_value());
  auto standbys = a->CurrentStandbysOf(0);
  ASSERT_EQ(standbys.size(), 1u);
  EXPECT_EQ(standbys[0].member, "c");
  EXPECT_TRUE(a->CurrentStandbysOf(1).empty());
}

// Clusters of two groups share the topic without seeing each other, even
// with the same member ids.
TEST_F(MembersDirectoryTest, GroupsSharingTheTopicAreApart) {
  CreateTopic();
  auto a = StartMember("a", kExpireMs, {}, "g1");
  auto b = StartMember("b", kExpireMs, {}, "g1");
  auto other_a = StartMember("a", kExpireMs, {}, "g2");
  auto plain = StartMember("c");
  ASSERT_TRUE(a && b && other_a && plain);
  a->Publish(Info({0}, 1));
  b->Publish(Info({1}, 1));
  other_a->Publish(Info({0, 1}, 7));
  plain->Publish(Info({2}, 1));
  ASSERT_TRUE(
      b->WaitFor([](const auto& live) { return Has(live, "a") && Has(live, "b"); }, kSeeMs));
  ASSERT_TRUE(other_a->WaitFor([](const auto& live) { return Has(live, "a"); }, kSeeMs));
  ASSERT_TRUE(plain->WaitFor([](const auto& live) { return Has(live, "c"); }, kSeeMs));
  // Everything is written by now; give the readers a moment more.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(b->Snapshot().size(), 2u);
  EXPECT_EQ(OwnerName(*b, 1), "b");  // not g2's "a", whose generation is higher
  ASSERT_EQ(other_a->Snapshot().size(), 1u);
  EXPECT_EQ(other_a->Snapshot()[0].owns, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(plain->Snapshot().size(), 1u);
  EXPECT_EQ(plain->Snapshot()[0].member, "c");
  EXPECT_EQ(a->MalformedRecords() + plain->MalformedRecords(), 0u);
  // A clean leave removes the member from its own group only.
  ASSERT_TRUE(other_a->Leave().ok());
  ASSERT_FALSE(b->WaitFor([](const auto& live) { return !Has(live, "a"); }, 1000));
}

TEST_F(MembersDirectoryTest, AChangeIsSeenByTheOthers) {
  CreateTopic();
  std::atomic<int> changes{0};
  auto a = StartMember("a");
  auto b = StartMember("b", kExpireMs, [&] { changes++; });
  ASSERT_TRUE(a && b);
  a->Publish(Info({1}, 1));
  ASSERT_TRUE(b->WaitFor([](const auto& live) { return Has(live, "a"); }, kSeeMs));
  uint64_t v = b->Version();
  int seen = changes.load();
  int64_t t0 = base::SteadyMs();
  MemberInfo moved = Info({1, 2}, 2);
  moved.restoring = {{2, 10, 50}};
  a->Publish(moved);
  ASSERT_TRUE(b->WaitFor(
      [](const auto& live) {
        const MemberInfo* m = Find(live, "a");
        return m && m->owns == std::vector<int32_t>{1, 2} && m->restoring.size() == 1;
      },
      kSeeMs));
  std::printf("a change was seen %lld ms after Publish\n",
              static_cast<long long>(base::SteadyMs() - t0));
  EXPECT_EQ(OwnerName(*b, 2), "a");
  auto owner = b->OwnerOf(2);
  ASSERT_TRUE(owner.has_value());
  ASSERT_EQ(owner->restoring.size(), 1u);
  EXPECT_EQ(owner->restoring[0], (RestoringPartition{2, 10, 50}));
  EXPECT_GT(b->Version(), v);
  // on_change runs on the directory's thread after the view changed.
  EXPECT_TRUE(::tally::testing::WaitFor([&] { return changes.load() > seen; }, kSeeMs));
  EXPECT_EQ(b->NextGeneration(), 3);
}

TEST_F(MembersDirectoryTest, LeaveRemovesAMemberAtOnce) {
  CreateTopic();
  // Expiry far away: only the tombstone can remove a in time.
  auto a = StartMember("a", 60000);
  auto b = StartMember("b", 60000);
  ASSERT_TRUE(a && b);
  a->Publish(Info({1}, 1));
  ASSERT_TRUE(b->WaitFor([](const auto& live) { return Has(live, "a"); }, kSeeMs));
  int64_t t0 = base::SteadyMs();
  ASSERT_TRUE(a->Leave().ok());
  ASSERT_TRUE(b->WaitFor([](const auto& live) { return !Has(live, "a"); }, 5000));
  std::printf("a leave was seen %lld ms after Leave() began\n",
              static_cast<long long>(base::SteadyMs() - t0));
  EXPECT_FALSE(b->OwnerOf(1).has_value());
  // The heartbeats stopped with it: a stays away.
  ASSERT_FALSE(b->WaitFor([](const auto& live) { return Has(live, "a"); }, 3 * kHeartbeatMs));
  // And a Publish() joins again.
  a->Publish(Info({1}, 2));
  ASSERT_TRUE(b->WaitFor([](const auto& live) { return Has(live, "a"); }, kSeeMs));
}

TEST_F(MembersDirectoryTest, AKilledMemberExpires) {
  CreateTopic();
  auto a = StartMember("a");
  auto b = StartMember("b");
  ASSERT_TRUE(a && b);
  a->Publish(Info({1}, 1));
  b->Publish(Info({2}, 1));
  ASSERT_TRUE(b->WaitFor([](const auto& live) { return Has(live, "a"); }, kSeeMs));
  // Past several heartbeats a is still live: the heartbeats keep it so.
  ASSERT_FALSE(b->WaitFor([](const auto& live) { return !Has(live, "a"); }, 2 * kExpireMs));
  a.reset();  // no Leave(): what a crash looks like
  int64_t t0 = base::SteadyMs();
  ASSERT_TRUE(b->WaitFor([](const auto& live) { return !Has(live, "a"); }, kExpireMs + kSeeMs));
  int64_t gone_ms = base::SteadyMs() - t0;
  std::printf("a killed member expired %lld ms after it stopped (expire_ms %d)\n",
              static_cast<long long>(gone_ms), kExpireMs);
  EXPECT_GE(gone_ms, kExpireMs - kHeartbeatMs - 100);
  EXPECT_FALSE(b->OwnerOf(1).has_value());
  EXPECT_TRUE(Has(b->Snapshot(), "b"));
}

TEST_F(MembersDirectoryTest, AMalformedRecordIsIgnoredAndCounted) {
  CreateTopic();
  ProduceRaw("x", "not json");
  ProduceRaw("y", R"({"member":"y","owns":"all"})");
  ProduceRaw(
      "",
      R"({"member":"z","http":"","owns":[],"standby":[],"restoring":[],"generation":1,"ts_ms":1})");
  ProduceRaw(
      "spoof",
      R"({"member":"w","http":"","owns":[4],"standby":[],"restoring":[],"generation":9,"ts_ms":1})");
  auto a = StartMember("a");
  ASSERT_TRUE(a);
  a->Publish(Info({1}, 1));
  ASSERT_TRUE(a->WaitFor([](const auto& live) { return Has(live, "a"); }, kSeeMs));
  EXPECT_EQ(a->MalformedRecords(), 4u);
  auto live = a->Snapshot();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_FALSE(a->OwnerOf(4).has_value());
  // One arriving while it runs is ignored the same way.
  ProduceRaw("a", "{]");
  ASSERT_TRUE(::tally::testing::WaitFor([&] { return a->MalformedRecords() == 5; }, kSeeMs));
  EXPECT_EQ(OwnerName(*a, 1), "a");
}

TEST_F(MembersDirectoryTest, AMemberDeadBeforeTheReaderStartedIsNotLive) {
  CreateTopic();
  // Records left by members that stopped without leaving: one long ago, one
  // just now.
  auto record = [](const std::string& id, int64_t ts_ms) {
    MemberInfo m = Info({1}, 1);
    m.member = id;
    m.ts_ms = ts_ms;
    return ToJson(m);
  };
  ProduceRaw("old", record("old", base::WallMs() - 120000).c_str());
  ProduceRaw("recent", record("recent", base::WallMs()).c_str());
  // Long enough that "recent" is still live however slowly this reader
  // starts.
  auto a = StartMember("a", 60000);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->WaitFor([&](const auto&) { return a->CaughtUp(); }, kSeeMs));
  auto live = a->Snapshot();
  EXPECT_FALSE(Has(live, "old"));
  EXPECT_TRUE(Has(live, "recent"));
  EXPECT_EQ(OwnerName(*a, 1), "recent");
  EXPECT_EQ(a->MalformedRecords(), 0u);
}

TEST_F(MembersDirectoryTest, ARestartedDirectoryRebuildsTheSameView) {
  CreateTopic();
  // Nothing expires here: the views compared are of records, not of time.
  constexpr int kNoExpiry = 600000;
  auto a = StartMember("a", kNoExpiry);
  auto b = StartMember("b", kNoExpiry);
  auto c = StartMember("c", kNoExpiry);
  ASSERT_TRUE(a && b && c);
  a->Publish(Info({0}, 1));
  b->Publish(Info({1}, 1));
  c->Publish(Info({2}, 1));
  // Changes and a leave before the restart, so the log holds more than one
  // record per member (the embedded broker does not compact).
  a->Publish(Info({0, 3}, 2));
  ASSERT_TRUE(c->WaitFor([](const auto& live) { return live.size() == 3; }, kSeeMs));
  ASSERT_TRUE(c->Leave().ok());
  ASSERT_TRUE(b->WaitFor(
      [](const auto& live) {
        const MemberInfo* m = Find(live, "a");
        return live.size() == 2 && m && m->owns.size() == 2;
      },
      kSeeMs));
  b.reset();
  b = StartMember("b", kNoExpiry);
  ASSERT_TRUE(b);
  ASSERT_TRUE(b->WaitFor([&](const auto&) { return b->CaughtUp(); }, kSeeMs));
  auto strip = [](std::vector<MemberInfo> v) {
    for (auto& m : v) m.ts_ms = 0;
    return v;
  };
  // Right after catching up, before b publishes anything again; a (which
  // nothing above waited on) has read the same records by then.
  auto rebuilt = strip(b->Snapshot());
  ASSERT_TRUE(a->WaitFor(
      [](const auto& live) {
        const MemberInfo* m = Find(live, "a");
        return live.size() == 2 && m && m->owns.size() == 2 && Find(live, "b");
      },
      kSeeMs));
  auto known = strip(a->Snapshot());
  EXPECT_EQ(rebuilt, known);
  ASSERT_EQ(rebuilt.size(), 2u);  // a, and b's own record from before
  EXPECT_EQ(rebuilt[0].owns, (std::vector<int32_t>{0, 3}));
}

TEST_F(MembersDirectoryTest, OwnerOfPicksTheHighestGeneration) {
  CreateTopic();
  auto a = StartMember("a");
  auto b = StartMember("b");
  auto c = StartMember("c");
  ASSERT_TRUE(a && b && c);
  // Partition 5 moved from b (generation 3) to a (generation 4); b has not
  // said so yet: its record is stale. So is the record of s, older still,
  // though written last and by a clock far ahead.
  b->Publish(Info({5, 6}, 3));
  a->Publish(Info({5}, 4));
  MemberInfo stale = Info({5}, 2);
  stale.member = "s";
  stale.ts_ms = base::WallMs() + 60000;
  ProduceRaw("s", ToJson(stale).c_str());
  ASSERT_TRUE(c->WaitFor(
      [](const auto& live) { return Has(live, "a") && Has(live, "b") && Has(live, "s"); }, kSeeMs));
  EXPECT_EQ(OwnerName(*c, 5), "a");
  EXPECT_EQ(OwnerName(*c, 6), "b");
  // Until the new owner dies: then the stale claims are all there is.
  a.reset();
  ASSERT_TRUE(c->WaitFor([](const auto& live) { return !Has(live, "a"); }, kExpireMs + kSeeMs));
  EXPECT_EQ(OwnerName(*c, 5), "b");
  EXPECT_EQ(c->NextGeneration(), 5);
}

TEST_F(MembersDirectoryTest, WorksOnATopicTheEmbeddedBrokerMadeItself) {
  // No CreateTopic(): the mock makes tally.members on first use, with 4
  // partitions.
  auto a = StartMember("a");
  auto b = StartMember("b");
  ASSERT_TRUE(a && b);
  a->Publish(Info({1}, 1));
  b->Publish(Info({2}, 1));
  for (auto* d : {a.get(), b.get()}) {
    ASSERT_TRUE(d->WaitFor([](const auto& live) { return live.size() == 2; }, kSeeMs));
  }
}

TEST_F(MembersDirectoryTest, StartsThroughTheRealClusterPath) {
  // As against a real cluster: the topic is looked up and created through
  // the admin API (the mock makes it on the look-up already, so this checks
  // the path and its settings, not the compaction).
  kafka_.embedded = false;
  auto a = StartMember("a");
  ASSERT_TRUE(a);
  a->Publish(Info({1}, 1));
  ASSERT_TRUE(a->WaitFor([](const auto& live) { return Has(live, "a"); }, kSeeMs));
}

TEST_F(MembersDirectoryTest, StopIsBoundedWithTheBrokerDown) {
  CreateTopic();
  auto a = StartMember("a");
  ASSERT_TRUE(a);
  a->Publish(Info({1}, 1));
  ASSERT_TRUE(a->WaitFor([](const auto& live) { return Has(live, "a"); }, kSeeMs));
  ASSERT_EQ(rd_kafka_mock_broker_set_down(cluster_.mock(), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  a->Publish(Info({1, 2}, 2));
  int64_t t0 = base::SteadyMs();
  base::Status left = a->Leave();
  int64_t leave_ms = base::SteadyMs() - t0;
  EXPECT_FALSE(left.ok());
  EXPECT_LE(leave_ms, 2000 + 500);
  t0 = base::SteadyMs();
  a.reset();
  int64_t stop_ms = base::SteadyMs() - t0;
  std::printf("with the broker down: Leave() gave up after %lld ms, the stop took %lld ms\n",
              static_cast<long long>(leave_ms), static_cast<long long>(stop_ms));
  EXPECT_LE(stop_ms, 2000);
  rd_kafka_mock_broker_set_up(cluster_.mock(), 1);
}

}  // namespace
}  // namespace tally::cluster
