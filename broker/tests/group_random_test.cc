// Randomized tests against simple models: the offsets file against a
// std::map through appends, deletes, compactions and reopens; and the
// coordinator driven by simulated consumers that crash, stall, leave and
// change their metadata, after which well-behaved consumers must always
// reach one Stable generation. The seed is printed on failure.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

#include "base/log.h"
#include "group/group_coordinator.h"
#include "group/offset_store.h"
#include "group_test_support.h"
#include "testing/temp_dir.h"

namespace tally::broker {
namespace {

namespace err = group_error;

uint32_t Seed() {
  std::random_device rd;
  return rd();
}

TEST(OffsetStoreRandomTest, MatchesAMapAcrossCompactionsAndReopens) {
  const uint32_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  tally::testing::TempDir dir("offsets-random");
  OffsetStoreOptions options;
  options.compact_min_bytes = 1024;
  options.compact_ratio = 2;
  using Key = std::tuple<std::string, std::string, int32_t>;
  std::map<Key, std::pair<int64_t, std::string>> model;
  auto store = std::move(OffsetStore::Open(dir.path(), options)).value();

  auto check = [&] {
    size_t n = 0;
    for (const auto& [group, offsets] : store->groups()) {
      for (const auto& [tp, value] : offsets) {
        auto it = model.find({group, tp.first, tp.second});
        ASSERT_NE(it, model.end()) << group << " " << tp.first << " " << tp.second;
        EXPECT_EQ(value.offset, it->second.first);
        EXPECT_EQ(value.metadata, it->second.second);
        n++;
      }
    }
    EXPECT_EQ(n, model.size());
  };

  for (int step = 0; step < 3000; step++) {
    const int action = static_cast<int>(rng() % 100);
    if (action < 85) {
      std::vector<OffsetRecord> batch;
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n; i++) {
        OffsetRecord r;
        r.group = std::string(1, static_cast<char>('a' + rng() % 3));
        r.topic = std::string(1 + rng() % 3, 'x');
        r.partition = static_cast<int32_t>(rng() % 4);
        r.offset = static_cast<int64_t>(rng() % 100000);
        r.metadata = std::string(rng() % 20, 'm');
        r.deleted = rng() % 10 == 0;
        if (r.deleted) {
          model.erase({r.group, r.topic, r.partition});
        } else {
          model[{r.group, r.topic, r.partition}] = {r.offset, r.metadata};
        }
        batch.push_back(std::move(r));
      }
      ASSERT_TRUE(store->Append(batch).ok());
    } else if (action < 93) {
      ASSERT_TRUE(store->Flush().ok());
      EXPECT_EQ(store->DurableSequence(), store->WrittenSequence());
    } else if (action < 96) {
      ASSERT_TRUE(store->Compact().ok());
    } else {
      store.reset();
      auto reopened = OffsetStore::Open(dir.path(), options);
      ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
      store = std::move(reopened).value();
    }
    if (step % 100 == 0) check();
    if (::testing::Test::HasFailure()) return;
  }
  check();
}

// A consumer as librdkafka behaves, reduced to the group protocol.
struct Client {
  std::string id;
  std::string instance_id;
  bool v4 = false;
  std::string meta = "m0";
  int32_t generation = -1;
  bool stable = false;
  Held<JoinGroupResult> join;
  Held<SyncGroupResult> sync;
  int64_t silent_until = 0;
};

class GroupRandomTest : public GroupTest {
 protected:
  // Thousands of rebalances: keep their INFO lines out of the test's log.
  void SetUp() override {
    saved_level_ = base::GetLogLevel();
    base::SetLogLevel(base::LogLevel::kWarn);
    GroupTest::SetUp();
  }
  void TearDown() override { base::SetLogLevel(saved_level_); }

  void SendJoin(Client& c) {
    GroupJoinRequest r = JoinReq(c.id, Protocols(c.meta), c.instance_id);
    r.require_known_member_id = c.v4;
    c.stable = false;
    c.join = Join(r);
  }

  void Reset(Client& c) {
    c.id.clear();
    c.generation = -1;
    c.stable = false;
    SendJoin(c);
  }

  // One step of a well-behaved client.
  void Step(Client& c) {
    if (c.join) {
      if (!c.join->has_value()) return;
      JoinGroupResult r = std::move(**c.join);
      c.join.reset();
      if (r.error == err::kMemberIdRequired) {
        c.id = r.member_id;
        SendJoin(c);
        return;
      }
      if (r.error == err::kUnknownMemberId) return Reset(c);
      if (r.error != err::kNone) return SendJoin(c);
      c.id = r.member_id;
      c.generation = r.generation_id;
      // Everyone told of one generation agrees on its leader and protocol.
      auto [it, fresh] =
          generations_.emplace(r.generation_id, std::make_pair(r.leader_id, r.protocol_name));
      if (!fresh && c.instance_id.empty()) {
        EXPECT_EQ(it->second.second, r.protocol_name) << "generation " << r.generation_id;
      }
      std::vector<SyncGroupAssignment> assignments;
      if (r.leader_id == c.id) {
        EXPECT_FALSE(r.members.empty());
        for (const auto& m : r.members) {
          assignments.push_back({m.member_id, fmt::format("g{}/{}", r.generation_id, m.member_id)});
        }
      }
      c.sync = Sync(c.id, c.generation, std::move(assignments), c.instance_id);
      return;
    }
    if (c.sync) {
      if (!c.sync->has_value()) return;
      SyncGroupResult r = std::move(**c.sync);
      c.sync.reset();
      if (r.error == err::kNone) {
        c.stable = true;
        // A static member restarted without a rebalance keeps the
        // assignment its instance had under its old id.
        if (c.instance_id.empty()) {
          EXPECT_EQ(r.assignment, fmt::format("g{}/{}", c.generation, c.id));
        } else {
          EXPECT_EQ(r.assignment.rfind(fmt::format("g{}/", c.generation), 0), 0u) << r.assignment;
        }
      } else if (r.error == err::kRebalanceInProgress) {
        SendJoin(c);
      } else {
        Reset(c);
      }
      return;
    }
    if (c.id.empty() || !c.stable) return SendJoin(c);
    int16_t e = Heartbeat(c.id, c.generation, c.instance_id);
    if (e == err::kRebalanceInProgress) {
      SendJoin(c);
    } else if (e != err::kNone) {
      Reset(c);
    }
  }

  std::map<int32_t, std::pair<std::string, std::string>> generations_;
  base::LogLevel saved_level_ = base::LogLevel::kInfo;
};

TEST_F(GroupRandomTest, ConsumersAlwaysSettleAfterChaos) {
  const uint32_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<Client> clients(5);
  clients[0].v4 = true;
  clients[1].v4 = true;
  clients[3].instance_id = "static-3";
  clients[4].instance_id = "static-4";
  clients[4].v4 = true;

  // Chaos: crashes (state lost, held answers abandoned), stalls longer
  // than a session, leaves, new metadata, and time passing unevenly.
  for (int round = 0; round < 1500 && !HasFailure(); round++) {
    for (Client& c : clients) {
      if (now_ < c.silent_until) continue;
      const int action = static_cast<int>(rng() % 1000);
      if (action < 10) {
        c.join.reset();
        c.sync.reset();
        Reset(c);
      } else if (action < 15) {
        c.silent_until = now_ + static_cast<int64_t>(rng() % 25000);
      } else if (action < 20 && !c.id.empty()) {
        coord_->LeaveGroup({group_, {{c.id, c.instance_id}}});
        c.join.reset();
        c.sync.reset();
        Reset(c);
      } else if (action < 30 && !c.join) {
        c.meta = fmt::format("m{}", rng() % 3);
        SendJoin(c);
      } else {
        Step(c);
      }
    }
    Advance(static_cast<int64_t>(rng() % 1500));
  }

  // Calm: every client behaves and heartbeats every 500 ms.
  for (Client& c : clients) c.silent_until = 0;
  bool settled = false;
  for (int round = 0; round < 400 && !HasFailure() && !settled; round++) {
    for (Client& c : clients) Step(c);
    Advance(500);
    // Members of crashed clients linger until their sessions expire.
    settled = State() == "Stable" &&
              coord_->DescribeGroup(group_).members.size() == clients.size() &&
              std::all_of(clients.begin(), clients.end(), [&](const Client& c) {
                return c.stable && c.generation == clients[0].generation;
              });
  }
  EXPECT_TRUE(settled) << "state " << State();
  GroupDescription d = coord_->DescribeGroup(group_);
  EXPECT_EQ(d.members.size(), clients.size());
  // Stable stays stable.
  for (int round = 0; round < 100 && !HasFailure(); round++) {
    for (Client& c : clients) Step(c);
    Advance(500);
  }
  EXPECT_EQ(State(), "Stable");
  for (const Client& c : clients) EXPECT_EQ(c.generation, clients[0].generation);
}

}  // namespace
}  // namespace tally::broker
