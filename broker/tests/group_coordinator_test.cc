// Membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the timers of
// GroupCoordinator, driven by a manual clock.
#include "group/group_coordinator.h"

#include <gtest/gtest.h>

#include "group_test_support.h"

namespace tally::broker {
namespace {

namespace err = group_error;

class GroupCoordinatorTest : public GroupTest {
 protected:
  struct Pair {
    std::string a;  // the leader
    std::string b;
    int32_t generation = 0;
  };

  // Members A and B in a Stable group, A the leader, each with its
  // assignment ("pa", "pb"), as two consumers reach it.
  Pair StablePair() {
    Pair p;
    JoinGroupResult a = JoinAlone("ma");
    p.a = a.member_id;
    EXPECT_EQ(a.generation_id, 1);
    auto sa = Sync(p.a, 1, {{p.a, "pa-alone"}});
    EXPECT_TRUE(sa->has_value());

    auto jb = Join(JoinReq("", Protocols("mb")));
    EXPECT_FALSE(jb->has_value());
    EXPECT_EQ(Heartbeat(p.a, 1), err::kRebalanceInProgress);
    auto ja = Join(JoinReq(p.a, Protocols("ma")));
    EXPECT_TRUE(ja->has_value() && jb->has_value());
    p.b = (*jb)->member_id;
    p.generation = (*ja)->generation_id;
    EXPECT_EQ(p.generation, 2);

    auto sb = Sync(p.b, p.generation);
    EXPECT_FALSE(sb->has_value());
    auto sa2 = Sync(p.a, p.generation, {{p.a, "pa"}, {p.b, "pb"}});
    EXPECT_TRUE(sa2->has_value() && sb->has_value());
    EXPECT_EQ(State(), "Stable");
    return p;
  }
};

TEST_F(GroupCoordinatorTest, GroupOfOneJoinsSyncsAndHeartbeats) {
  auto j = Join(JoinReq("", Protocols("meta-a")));
  ASSERT_TRUE(j->has_value());
  const JoinGroupResult& r = **j;
  EXPECT_EQ(r.error, err::kNone);
  EXPECT_EQ(r.generation_id, 1);
  EXPECT_EQ(r.protocol_type, "consumer");
  EXPECT_EQ(r.protocol_name, "range");
  EXPECT_FALSE(r.member_id.empty());
  EXPECT_EQ(r.leader_id, r.member_id);
  ASSERT_EQ(r.members.size(), 1u);
  EXPECT_EQ(r.members[0].member_id, r.member_id);
  EXPECT_EQ(r.members[0].metadata, "meta-a");
  EXPECT_EQ(State(), "CompletingRebalance");

  auto s = Sync(r.member_id, 1, {{r.member_id, std::string("assign\0ment", 11)}});
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->error, err::kNone);
  EXPECT_EQ((*s)->assignment, std::string("assign\0ment", 11));
  EXPECT_EQ((*s)->protocol_name, "range");
  EXPECT_EQ(State(), "Stable");

  EXPECT_EQ(Heartbeat(r.member_id, 1), err::kNone);
  EXPECT_EQ(Heartbeat(r.member_id, 2), err::kIllegalGeneration);
  EXPECT_EQ(Heartbeat("nobody", 1), err::kUnknownMemberId);

  GroupDescription d = coord_->DescribeGroup(group_);
  EXPECT_EQ(d.state, "Stable");
  EXPECT_EQ(d.protocol_name, "range");
  ASSERT_EQ(d.members.size(), 1u);
  EXPECT_EQ(d.members[0].metadata, "meta-a");
  EXPECT_EQ(d.members[0].assignment, std::string("assign\0ment", 11));
  EXPECT_EQ(d.members[0].client_id, "client");

  // A sync in Stable repeats the assignment.
  auto again = Sync(r.member_id, 1);
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ((*again)->assignment, std::string("assign\0ment", 11));
}

TEST_F(GroupCoordinatorTest, MemberIdRequiredFromVersion4Only) {
  GroupJoinRequest req = JoinReq("", Protocols("m"));
  req.require_known_member_id = true;
  auto first = Join(req);
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->error, err::kMemberIdRequired);
  const std::string id = (*first)->member_id;
  EXPECT_FALSE(id.empty());
  EXPECT_TRUE(coord_->DescribeGroup(group_).members.empty());

  req.member_id = id;
  auto second = Join(req);
  ASSERT_TRUE(second->has_value());
  EXPECT_EQ((*second)->error, err::kNone);
  EXPECT_EQ((*second)->member_id, id);
  EXPECT_EQ((*second)->generation_id, 1);

  // An older version (kafka-python's v2) is never asked for it.
  group_ = "old";
  auto old = Join(JoinReq("", Protocols("m")));
  ASSERT_TRUE(old->has_value());
  EXPECT_EQ((*old)->error, err::kNone);
  EXPECT_EQ((*old)->generation_id, 1);
}

TEST_F(GroupCoordinatorTest, PendingMemberIdHoldsTheRebalanceUntilItLapses) {
  Pair p = StablePair();
  GroupJoinRequest req = JoinReq("", Protocols("mc"));
  req.require_known_member_id = true;
  auto c = Join(req);
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->error, err::kMemberIdRequired);
  // A pending id alone does not start a rebalance...
  EXPECT_EQ(Heartbeat(p.a, p.generation), err::kNone);
  // ...but a rebalance waits for it, as Kafka does.
  auto ja = Join(JoinReq(p.a, Protocols("ma2")));
  auto jb = Join(JoinReq(p.b, Protocols("mb")));
  EXPECT_FALSE(ja->has_value());
  Advance(kSession);
  ASSERT_TRUE(ja->has_value() && jb->has_value());
  EXPECT_EQ((*ja)->generation_id, p.generation + 1);
  EXPECT_EQ((*ja)->members.size(), 2u);
}

TEST_F(GroupCoordinatorTest, SecondMemberRebalancesTheGroup) {
  Pair p = StablePair();
  EXPECT_NE(p.a, p.b);
  // Repeat the rebalance's answers in detail: a third member joins.
  auto jc = Join(JoinReq("", Protocols("mc")));
  EXPECT_FALSE(jc->has_value());
  EXPECT_EQ(State(), "PreparingRebalance");
  EXPECT_EQ(Heartbeat(p.a, p.generation), err::kRebalanceInProgress);
  EXPECT_EQ(Heartbeat(p.b, p.generation), err::kRebalanceInProgress);
  auto jb = Join(JoinReq(p.b, Protocols("mb")));
  EXPECT_FALSE(jb->has_value());
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  ASSERT_TRUE(ja->has_value() && jb->has_value() && jc->has_value());
  const int32_t gen = (*ja)->generation_id;
  EXPECT_EQ(gen, p.generation + 1);
  EXPECT_EQ((*jb)->generation_id, gen);
  EXPECT_EQ((*jc)->generation_id, gen);
  EXPECT_EQ((*ja)->leader_id, p.a);
  EXPECT_EQ((*jb)->leader_id, p.a);
  // The leader gets everyone's metadata, the others nothing.
  ASSERT_EQ((*ja)->members.size(), 3u);
  std::map<std::string, std::string> metas;
  for (const auto& m : (*ja)->members) metas[m.member_id] = m.metadata;
  EXPECT_EQ(metas[p.a], "ma");
  EXPECT_EQ(metas[p.b], "mb");
  EXPECT_EQ(metas[(*jc)->member_id], "mc");
  EXPECT_TRUE((*jb)->members.empty());
  EXPECT_TRUE((*jc)->members.empty());

  // Followers wait for the leader's assignment; one gets none (allowed).
  auto sb = Sync(p.b, gen);
  auto sc = Sync((*jc)->member_id, gen);
  EXPECT_FALSE(sb->has_value());
  EXPECT_FALSE(sc->has_value());
  EXPECT_EQ(Heartbeat(p.b, gen), err::kNone);
  auto sa = Sync(p.a, gen, {{p.a, "A"}, {p.b, "B"}});
  ASSERT_TRUE(sa->has_value() && sb->has_value() && sc->has_value());
  EXPECT_EQ((*sa)->assignment, "A");
  EXPECT_EQ((*sb)->assignment, "B");
  EXPECT_EQ((*sc)->error, err::kNone);
  EXPECT_EQ((*sc)->assignment, "");
  EXPECT_EQ(Heartbeat(p.b, gen), err::kNone);
  EXPECT_EQ(Heartbeat(p.a, p.generation), err::kIllegalGeneration);
}

TEST_F(GroupCoordinatorTest, FollowerRejoiningWithNewMetadataWhileStableStartsARebalance) {
  Pair p = StablePair();
  // B revoked partitions and rejoins with its new owned partitions in its
  // metadata, as cooperative-sticky does, while the group is Stable.
  auto jb = Join(JoinReq(p.b, Protocols("mb-revoked")));
  EXPECT_FALSE(jb->has_value());
  EXPECT_EQ(State(), "PreparingRebalance");
  EXPECT_EQ(Heartbeat(p.a, p.generation), err::kRebalanceInProgress);
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  ASSERT_TRUE(ja->has_value() && jb->has_value());
  EXPECT_EQ((*ja)->generation_id, p.generation + 1);
  EXPECT_EQ((*jb)->generation_id, p.generation + 1);
  std::map<std::string, std::string> metas;
  for (const auto& m : (*ja)->members) metas[m.member_id] = m.metadata;
  EXPECT_EQ(metas[p.b], "mb-revoked");
}

TEST_F(GroupCoordinatorTest, CooperativeStickyRebalancesInTwoRounds) {
  const std::string coop = "cooperative-sticky";
  auto cs = [&](const std::string& meta) { return Protocols(meta, coop); };
  auto ja_first = Join(JoinReq("", cs("a-owns-none")));
  ASSERT_TRUE(ja_first->has_value());
  JoinGroupResult a = **ja_first;
  EXPECT_EQ(a.protocol_name, coop);
  auto ja0 = Sync(a.member_id, 1, {{a.member_id, "a:0,1"}});
  ASSERT_TRUE(ja0->has_value());
  // B arrives; A rejoins with what it owns; the leader (A) gives B nothing
  // yet and revokes from A.
  auto jb = Join(JoinReq("", cs("b-owns-none")));
  auto ja = Join(JoinReq(a.member_id, cs("a-owns-0,1")));
  ASSERT_TRUE(ja->has_value() && jb->has_value());
  const std::string b = (*jb)->member_id;
  int32_t gen = (*ja)->generation_id;
  auto sb = Sync(b, gen);
  auto sa = Sync(a.member_id, gen, {{a.member_id, "a:0"}, {b, ""}});
  ASSERT_TRUE(sa->has_value() && sb->has_value());
  EXPECT_EQ(State(), "Stable");
  // A revoked partition 1 and rejoins at once while the group is Stable.
  auto ja2 = Join(JoinReq(a.member_id, cs("a-owns-0")));
  EXPECT_FALSE(ja2->has_value());
  EXPECT_EQ(Heartbeat(b, gen), err::kRebalanceInProgress);
  auto jb2 = Join(JoinReq(b, cs("b-owns-none")));
  ASSERT_TRUE(ja2->has_value() && jb2->has_value());
  EXPECT_EQ((*ja2)->generation_id, gen + 1);
  EXPECT_EQ((*jb2)->generation_id, gen + 1);
  gen++;
  auto sb2 = Sync(b, gen);
  auto sa2 = Sync(a.member_id, gen, {{a.member_id, "a:0"}, {b, "b:1"}});
  ASSERT_TRUE(sa2->has_value() && sb2->has_value());
  EXPECT_EQ((*sb2)->assignment, "b:1");
}

TEST_F(GroupCoordinatorTest, FollowerRejoiningUnchangedGetsTheCurrentGeneration) {
  Pair p = StablePair();
  auto jb = Join(JoinReq(p.b, Protocols("mb")));
  ASSERT_TRUE(jb->has_value());
  EXPECT_EQ((*jb)->error, err::kNone);
  EXPECT_EQ((*jb)->generation_id, p.generation);
  EXPECT_EQ((*jb)->leader_id, p.a);
  EXPECT_EQ(State(), "Stable");
  // The leader rejoining always rebalances (new partitions, say).
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  EXPECT_FALSE(ja->has_value());
  EXPECT_EQ(State(), "PreparingRebalance");
}

TEST_F(GroupCoordinatorTest, SilentMemberSessionExpires) {
  Pair p = StablePair();
  // A heartbeats, B says nothing.
  for (int i = 0; i < 3; i++) {
    Advance(3000);
    EXPECT_EQ(Heartbeat(p.a, p.generation), err::kNone) << i;
  }
  Advance(999);
  EXPECT_EQ(State(), "Stable");
  Advance(1);
  EXPECT_EQ(State(), "PreparingRebalance");
  EXPECT_EQ(Heartbeat(p.b, p.generation), err::kUnknownMemberId);
  EXPECT_EQ(Heartbeat(p.a, p.generation), err::kRebalanceInProgress);
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  ASSERT_TRUE(ja->has_value());
  EXPECT_EQ((*ja)->generation_id, p.generation + 1);
  EXPECT_EQ((*ja)->members.size(), 1u);
}

TEST_F(GroupCoordinatorTest, TickReturnsTheNextDeadline) {
  EXPECT_EQ(coord_->Tick(), now_ + options_.offsets_retention_check_ms);
  JoinGroupResult a = JoinAlone("ma");
  auto s = Sync(a.member_id, 1, {});
  EXPECT_EQ(coord_->Tick(), now_ + kSession);
  Advance(4000);
  EXPECT_EQ(Heartbeat(a.member_id, 1), err::kNone);
  EXPECT_EQ(coord_->Tick(), now_ + kSession);
  const int64_t next = Advance(kSession - 1);
  EXPECT_EQ(next, now_ + 1);
  Advance(1);
  // Expired, and with no members and no offsets the group is forgotten.
  EXPECT_EQ(State(), "Dead");
}

TEST_F(GroupCoordinatorTest, MemberThatNeverSyncsIsRemoved) {
  Pair p = StablePair();
  auto jc = Join(JoinReq("", Protocols("mc")));
  auto jb = Join(JoinReq(p.b, Protocols("mb")));
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  ASSERT_TRUE(jc->has_value());
  const int32_t gen = (*ja)->generation_id;
  const std::string c = (*jc)->member_id;
  // A and B sync; C heartbeats but never syncs.
  auto sb = Sync(p.b, gen);
  auto sa = Sync(p.a, gen, {{p.a, "A"}, {p.b, "B"}, {c, "C"}});
  ASSERT_TRUE(sb->has_value());
  for (int i = 0; i < 3; i++) {
    Advance(4000);
    EXPECT_EQ(Heartbeat(p.a, gen), i < 2 ? err::kNone : err::kRebalanceInProgress) << i;
    EXPECT_EQ(Heartbeat(p.b, gen), i < 2 ? err::kNone : err::kRebalanceInProgress) << i;
    if (i < 2) {
      EXPECT_EQ(Heartbeat(c, gen), err::kNone) << i;
    }
  }
  EXPECT_EQ(Heartbeat(c, gen), err::kUnknownMemberId);
}

TEST_F(GroupCoordinatorTest, LeaderThatNeverSyncsReleasesTheFollowers) {
  Pair p = StablePair();
  auto jb = Join(JoinReq(p.b, Protocols("mb2")));
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  ASSERT_TRUE(ja->has_value() && jb->has_value());
  const int32_t gen = (*ja)->generation_id;
  auto sb = Sync(p.b, gen);
  Advance(kSession - 1);
  EXPECT_FALSE(sb->has_value());
  Advance(1);
  ASSERT_TRUE(sb->has_value());
  EXPECT_EQ((*sb)->error, err::kRebalanceInProgress);
  EXPECT_EQ(Heartbeat(p.a, gen), err::kUnknownMemberId);
  // B rejoins alone.
  auto jb2 = Join(JoinReq(p.b, Protocols("mb2")));
  ASSERT_TRUE(jb2->has_value());
  EXPECT_EQ((*jb2)->leader_id, p.b);
  EXPECT_EQ((*jb2)->generation_id, gen + 1);
}

TEST_F(GroupCoordinatorTest, RebalanceTimeoutDropsMembersThatDidNotRejoin) {
  Pair p = StablePair();
  auto jc = Join(JoinReq("", Protocols("mc")));
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  EXPECT_FALSE(ja->has_value());
  // B keeps heartbeating (so its session lives) but never rejoins.
  for (int64_t t = 0; t + 5000 < kRebalance; t += 5000) {
    Advance(5000);
    EXPECT_EQ(Heartbeat(p.b, p.generation), err::kRebalanceInProgress);
    EXPECT_FALSE(ja->has_value());
  }
  Advance(5000);
  ASSERT_TRUE(ja->has_value() && jc->has_value());
  EXPECT_EQ((*ja)->error, err::kNone);
  EXPECT_EQ((*ja)->members.size(), 2u);
  EXPECT_EQ(Heartbeat(p.b, p.generation), err::kUnknownMemberId);
  auto jb = Join(JoinReq(p.b, Protocols("mb")));
  ASSERT_TRUE(jb->has_value());
  EXPECT_EQ((*jb)->error, err::kUnknownMemberId);
}

TEST_F(GroupCoordinatorTest, StaticMemberRestartKeepsItsPlaceAndFencesTheOldId) {
  JoinGroupResult a = JoinAlone("ma", "instance-a");
  auto sa = Sync(a.member_id, 1, {{a.member_id, "A1"}}, "instance-a");
  auto jb = Join(JoinReq("", Protocols("mb"), "instance-b"));
  auto ja = Join(JoinReq(a.member_id, Protocols("ma"), "instance-a"));
  ASSERT_TRUE(ja->has_value() && jb->has_value());
  const std::string b = (*jb)->member_id;
  const int32_t gen = (*ja)->generation_id;
  auto sb = Sync(b, gen, {}, "instance-b");
  auto sa2 = Sync(a.member_id, gen, {{a.member_id, "A"}, {b, "B"}}, "instance-a");
  ASSERT_TRUE(sb->has_value());
  ASSERT_EQ(State(), "Stable");

  // B restarts: same instance id, no member id, same protocols.
  auto jb2 = Join(JoinReq("", Protocols("mb"), "instance-b"));
  ASSERT_TRUE(jb2->has_value());
  EXPECT_EQ((*jb2)->error, err::kNone);
  const std::string b2 = (*jb2)->member_id;
  EXPECT_NE(b2, b);
  EXPECT_EQ((*jb2)->generation_id, gen);
  EXPECT_EQ((*jb2)->leader_id, a.member_id);
  EXPECT_EQ(State(), "Stable");
  EXPECT_EQ(Heartbeat(a.member_id, gen, "instance-a"), err::kNone);
  // It gets B's assignment back without a rebalance.
  auto sb2 = Sync(b2, gen, {}, "instance-b");
  ASSERT_TRUE(sb2->has_value());
  EXPECT_EQ((*sb2)->assignment, "B");
  // The old incarnation is fenced.
  EXPECT_EQ(Heartbeat(b, gen, "instance-b"), err::kFencedInstanceId);
  auto old_sync = Sync(b, gen, {}, "instance-b");
  EXPECT_EQ((*old_sync)->error, err::kFencedInstanceId);
  auto old_join = Join(JoinReq(b, Protocols("mb"), "instance-b"));
  EXPECT_EQ((*old_join)->error, err::kFencedInstanceId);
  EXPECT_EQ(Commit(b, gen, {{"t", 0, 5, -1, ""}}, "instance-b")->value().partitions[0].error,
            err::kFencedInstanceId);

  // The leader restarts: the answer names the old leader id, so that it
  // does not assign; the group stays Stable and it leads under its new id.
  auto ja3 = Join(JoinReq("", Protocols("ma"), "instance-a"));
  ASSERT_TRUE(ja3->has_value());
  EXPECT_EQ((*ja3)->leader_id, a.member_id);
  EXPECT_TRUE((*ja3)->members.empty());
  EXPECT_EQ(State(), "Stable");
}

TEST_F(GroupCoordinatorTest, StaticMemberWithNewProtocolsRebalances) {
  JoinGroupResult a = JoinAlone("ma", "ia");
  ASSERT_TRUE(Sync(a.member_id, 1, {}, "ia")->has_value());
  ASSERT_EQ(State(), "Stable");
  GroupJoinRequest req = JoinReq("", {{"roundrobin", "x"}, {"range", "ma"}}, "ia");
  // The only member now prefers roundrobin: the chosen protocol changes.
  auto ja = Join(req);
  ASSERT_TRUE(ja->has_value());
  EXPECT_EQ((*ja)->error, err::kNone);
  EXPECT_EQ((*ja)->protocol_name, "roundrobin");
  EXPECT_EQ((*ja)->generation_id, a.generation_id + 1);
}

TEST_F(GroupCoordinatorTest, LeaveStartsARebalance) {
  Pair p = StablePair();
  LeaveGroupResult r = coord_->LeaveGroup({group_, {{p.b, ""}}});
  EXPECT_EQ(r.error, err::kNone);
  ASSERT_EQ(r.member_errors.size(), 1u);
  EXPECT_EQ(r.member_errors[0], err::kNone);
  EXPECT_EQ(Heartbeat(p.a, p.generation), err::kRebalanceInProgress);
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  ASSERT_TRUE(ja->has_value());
  EXPECT_EQ((*ja)->members.size(), 1u);
  // Unknown members and groups.
  r = coord_->LeaveGroup({group_, {{p.b, ""}, {"nobody", ""}}});
  EXPECT_EQ(r.member_errors, (std::vector<int16_t>{err::kUnknownMemberId, err::kUnknownMemberId}));
  r = coord_->LeaveGroup({"no-such-group", {{p.a, ""}}});
  EXPECT_EQ(r.member_errors, (std::vector<int16_t>{err::kUnknownMemberId}));
  // The last member leaves: the group is empty.
  r = coord_->LeaveGroup({group_, {{p.a, ""}}});
  EXPECT_EQ(r.member_errors[0], err::kNone);
  EXPECT_EQ(State(), "Empty");
}

TEST_F(GroupCoordinatorTest, StaticMemberLeavesByInstanceId) {
  JoinGroupResult a = JoinAlone("ma", "ia");
  LeaveGroupResult r = coord_->LeaveGroup({group_, {{"other-id", "ia"}}});
  EXPECT_EQ(r.member_errors[0], err::kFencedInstanceId);
  r = coord_->LeaveGroup({group_, {{"", "ia"}}});
  EXPECT_EQ(r.member_errors[0], err::kNone);
  EXPECT_EQ(Heartbeat(a.member_id, a.generation_id, "ia"), err::kUnknownMemberId);
}

TEST_F(GroupCoordinatorTest, LeavingDuringARebalanceCompletesIt) {
  Pair p = StablePair();
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  EXPECT_FALSE(ja->has_value());
  coord_->LeaveGroup({group_, {{p.b, ""}}});
  ASSERT_TRUE(ja->has_value());
  EXPECT_EQ((*ja)->members.size(), 1u);
}

TEST_F(GroupCoordinatorTest, InconsistentProtocolsAreRefused) {
  JoinGroupResult a = JoinAlone("ma");
  auto jb = Join(JoinReq("", Protocols("mb", "roundrobin")));
  ASSERT_TRUE(jb->has_value());
  EXPECT_EQ((*jb)->error, err::kInconsistentGroupProtocol);
  GroupJoinRequest other_type = JoinReq("", Protocols("mb"));
  other_type.protocol_type = "connect";
  auto jc = Join(other_type);
  EXPECT_EQ((*jc)->error, err::kInconsistentGroupProtocol);
  GroupJoinRequest none = JoinReq("", {});
  group_ = "fresh";
  EXPECT_EQ((*Join(none))->error, err::kInconsistentGroupProtocol);
  group_ = "g";
  EXPECT_EQ(State(), "CompletingRebalance");
  EXPECT_EQ(coord_->DescribeGroup(group_).members.size(), 1u);
}

TEST_F(GroupCoordinatorTest, ProtocolIsChosenByVotes) {
  auto ja = Join(JoinReq("", {{"roundrobin", "a"}, {"range", "a"}}));
  const std::string a = (*ja)->member_id;
  EXPECT_EQ((*ja)->protocol_name, "roundrobin");
  auto jb = Join(JoinReq("", {{"range", "b"}, {"roundrobin", "b"}}));
  auto jc = Join(JoinReq("", {{"range", "c"}, {"roundrobin", "c"}}));
  ja = Join(JoinReq(a, {{"roundrobin", "a"}, {"range", "a"}}));
  ASSERT_TRUE(ja->has_value() && jb->has_value() && jc->has_value());
  EXPECT_EQ((*ja)->protocol_name, "range");
  EXPECT_EQ((*jb)->protocol_name, "range");
  for (const auto& m : (*ja)->members) EXPECT_EQ(m.metadata.size(), 1u);
}

TEST_F(GroupCoordinatorTest, BadRequestsAreRefused) {
  GroupJoinRequest r = JoinReq("", Protocols("m"));
  r.session_timeout_ms = 1000;
  EXPECT_EQ((*Join(r))->error, err::kInvalidSessionTimeout);
  r.session_timeout_ms = 2000000;
  EXPECT_EQ((*Join(r))->error, err::kInvalidSessionTimeout);
  r = JoinReq("someone", Protocols("m"));
  EXPECT_EQ((*Join(r))->error, err::kUnknownMemberId);
  group_ = "";
  EXPECT_EQ((*Join(JoinReq("", Protocols("m"))))->error, err::kInvalidGroupId);
  group_ = "g";
  EXPECT_EQ((*Sync("someone", 1))->error, err::kUnknownMemberId);
  EXPECT_EQ(Heartbeat("someone", 1), err::kUnknownMemberId);
}

TEST_F(GroupCoordinatorTest, SyncBeforeTheJoinCompletesIsRefused) {
  Pair p = StablePair();
  auto jc = Join(JoinReq("", Protocols("mc")));
  auto s = Sync(p.a, p.generation);
  EXPECT_EQ((*s)->error, err::kRebalanceInProgress);
  s = Sync(p.a, p.generation + 1);
  EXPECT_EQ((*s)->error, err::kIllegalGeneration);
}

TEST_F(GroupCoordinatorTest, JoinRepeatedDuringCompletingRebalanceIsAnsweredAgain) {
  Pair p = StablePair();
  auto jb = Join(JoinReq(p.b, Protocols("mb2")));
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  ASSERT_TRUE(ja->has_value());
  auto again = Join(JoinReq(p.a, Protocols("ma")));
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ((*again)->generation_id, (*ja)->generation_id);
  EXPECT_EQ((*again)->members.size(), 2u);
  EXPECT_EQ(State(), "CompletingRebalance");
}

TEST_F(GroupCoordinatorTest, InitialRebalanceDelayWaitsForMoreMembers) {
  options_.initial_rebalance_delay_ms = 3000;
  MakeCoordinator();
  auto ja = Join(JoinReq("", Protocols("ma")));
  EXPECT_FALSE(ja->has_value());
  EXPECT_EQ(coord_->Tick(), now_ + 3000);
  Advance(1000);
  auto jb = Join(JoinReq("", Protocols("mb")));
  EXPECT_FALSE(jb->has_value());
  Advance(2000);
  ASSERT_TRUE(ja->has_value() && jb->has_value());
  EXPECT_EQ((*ja)->generation_id, 1);
  EXPECT_EQ((*ja)->members.size(), 2u);
}

TEST_F(GroupCoordinatorTest, CallbacksMayCallTheCoordinator) {
  Pair p = StablePair();
  auto jc = std::make_shared<std::optional<JoinGroupResult>>();
  auto ja = Join(JoinReq(p.a, Protocols("ma")));
  // B's answer arrives inside A's... make B's callback rejoin C at once.
  coord_->JoinGroup(JoinReq(p.b, Protocols("mb")), [this, jc](JoinGroupResult r) {
    EXPECT_EQ(r.error, err::kNone);
    coord_->JoinGroup(JoinReq("", Protocols("mc")), [jc](JoinGroupResult r2) { *jc = r2; });
  });
  ASSERT_TRUE(ja->has_value());
  EXPECT_FALSE(jc->has_value());
  EXPECT_EQ(State(), "PreparingRebalance");
}

TEST_F(GroupCoordinatorTest, AbortHeldAnswersEveryone) {
  Pair p = StablePair();
  auto jc = Join(JoinReq("", Protocols("mc")));
  coord_->AbortHeld();
  ASSERT_TRUE(jc->has_value());
  EXPECT_EQ((*jc)->error, err::kCoordinatorNotAvailable);
}

TEST_F(GroupCoordinatorTest, ListGroupsShowsGroupsWithMembersOrOffsets) {
  Pair p = StablePair();
  group_ = "offsets-only";
  auto c = Commit("", -1, {{"t", 0, 7, -1, ""}});
  FlushAndRelease();
  ASSERT_TRUE(c->has_value());
  std::vector<GroupListing> all = coord_->ListGroups();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].group_id, "g");
  EXPECT_EQ(all[0].protocol_type, "consumer");
  EXPECT_EQ(all[0].state, "Stable");
  EXPECT_EQ(all[1].group_id, "offsets-only");
  EXPECT_EQ(all[1].state, "Empty");
  EXPECT_EQ(coord_->DescribeGroup("offsets-only").state, "Empty");
  EXPECT_EQ(coord_->DescribeGroup("unknown").state, "Dead");
  EXPECT_EQ(coord_->DescribeGroup("unknown").error, err::kNone);
}

}  // namespace
}  // namespace tally::broker
