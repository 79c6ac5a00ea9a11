// Committed offsets through GroupCoordinator: who may commit when, the
// answer held until the store is durable, OffsetFetch, retention.
#include <gtest/gtest.h>

#include "group/group_coordinator.h"
#include "group_test_support.h"

namespace tally::broker {
namespace {

namespace err = group_error;

class GroupOffsetsTest : public GroupTest {
 protected:
  // A group of one in Stable; returns the member's join answer.
  JoinGroupResult StableOfOne() {
    JoinGroupResult a = JoinAlone("ma");
    EXPECT_TRUE(Sync(a.member_id, a.generation_id, {{a.member_id, "A"}})->has_value());
    return a;
  }

  static int16_t OnlyError(const Held<OffsetCommitResult>& r) {
    EXPECT_TRUE(r->has_value());
    if (!r->has_value() || (*r)->partitions.empty()) return -1;
    return (*r)->partitions[0].error;
  }
};

TEST_F(GroupOffsetsTest, MemberCommitIsAnsweredOnceDurable) {
  JoinGroupResult a = StableOfOne();
  auto c =
      Commit(a.member_id, a.generation_id, {{"topic", 0, 42, 3, "meta"}, {"topic", 1, 7, -1, ""}});
  EXPECT_FALSE(c->has_value());
  EXPECT_EQ(coord_->pending_commits(), 1u);
  // Visible at once, acknowledged only after the flush.
  EXPECT_EQ(Fetch("topic", 0).offset, 42);
  coord_->ReleaseDurableCommits();
  EXPECT_FALSE(c->has_value());
  FlushAndRelease();
  ASSERT_TRUE(c->has_value());
  ASSERT_EQ((*c)->partitions.size(), 2u);
  EXPECT_EQ((*c)->partitions[0].topic, "topic");
  EXPECT_EQ((*c)->partitions[1].partition, 1);
  EXPECT_EQ((*c)->partitions[0].error, err::kNone);
  EXPECT_EQ((*c)->partitions[1].error, err::kNone);

  OffsetFetchPartition f = Fetch("topic", 0);
  EXPECT_EQ(f.offset, 42);
  EXPECT_EQ(f.leader_epoch, 3);
  EXPECT_EQ(f.metadata, "meta");
  EXPECT_EQ(f.error, err::kNone);
  // Never committed: -1 and no error.
  f = Fetch("topic", 2);
  EXPECT_EQ(f.offset, -1);
  EXPECT_EQ(f.error, err::kNone);
  group_ = "no-such-group";
  EXPECT_EQ(Fetch("topic", 0).offset, -1);
}

TEST_F(GroupOffsetsTest, TickReleasesDurableCommits) {
  JoinGroupResult a = StableOfOne();
  auto c = Commit(a.member_id, a.generation_id, {{"t", 0, 1, -1, ""}});
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_FALSE(c->has_value());
  coord_->Tick();
  EXPECT_TRUE(c->has_value());
}

TEST_F(GroupOffsetsTest, WithoutSyncACommitIsAnsweredAtOnce) {
  OpenStore(OffsetStoreOptions{.sync = false});
  MakeCoordinator();
  auto c = Commit("", -1, {{"t", 0, 1, -1, ""}});
  EXPECT_EQ(OnlyError(c), err::kNone);
}

TEST_F(GroupOffsetsTest, SimpleCommitWithoutAGroup) {
  auto c = Commit("", -1, {{"t", 0, 100, -1, ""}});
  FlushAndRelease();
  EXPECT_EQ(OnlyError(c), err::kNone);
  EXPECT_EQ(Fetch("t", 0).offset, 100);
  // Also once the group exists but is empty again.
  JoinGroupResult a = JoinAlone("ma");
  auto refused = Commit("", -1, {{"t", 0, 1, -1, ""}});
  EXPECT_EQ(OnlyError(refused), err::kUnknownMemberId);
  coord_->LeaveGroup({group_, {{a.member_id, ""}}});
  ASSERT_EQ(State(), "Empty");
  c = Commit("", -1, {{"t", 0, 101, -1, ""}});
  FlushAndRelease();
  EXPECT_EQ(OnlyError(c), err::kNone);
  EXPECT_EQ(Fetch("t", 0).offset, 101);
}

TEST_F(GroupOffsetsTest, WrongGenerationOrUnknownMemberIsRefused) {
  JoinGroupResult a = StableOfOne();
  EXPECT_EQ(OnlyError(Commit(a.member_id, a.generation_id + 1, {{"t", 0, 1, -1, ""}})),
            err::kIllegalGeneration);
  EXPECT_EQ(OnlyError(Commit("stranger", a.generation_id, {{"t", 0, 1, -1, ""}})),
            err::kUnknownMemberId);
  group_ = "unknown";
  EXPECT_EQ(OnlyError(Commit("x", 3, {{"t", 0, 1, -1, ""}})), err::kIllegalGeneration);
  group_ = "g";
  EXPECT_EQ(Fetch("t", 0).offset, -1);
  EXPECT_EQ(coord_->pending_commits(), 0u);
}

TEST_F(GroupOffsetsTest, CommitsAreTakenDuringARebalance) {
  JoinGroupResult a = StableOfOne();
  // PreparingRebalance: A's generation is still the group's (Kafka too).
  auto jb = Join(JoinReq("", Protocols("mb")));
  ASSERT_EQ(State(), "PreparingRebalance");
  auto c = Commit(a.member_id, a.generation_id, {{"t", 0, 5, -1, ""}});
  FlushAndRelease();
  EXPECT_EQ(OnlyError(c), err::kNone);
  // CompletingRebalance with the new generation (Kafka answers
  // REBALANCE_IN_PROGRESS there; see the README).
  auto ja = Join(JoinReq(a.member_id, Protocols("ma")));
  ASSERT_EQ(State(), "CompletingRebalance");
  c = Commit(a.member_id, (*ja)->generation_id, {{"t", 0, 6, -1, ""}});
  FlushAndRelease();
  EXPECT_EQ(OnlyError(c), err::kNone);
  EXPECT_EQ(OnlyError(Commit(a.member_id, a.generation_id, {{"t", 0, 6, -1, ""}})),
            err::kIllegalGeneration);
}

TEST_F(GroupOffsetsTest, BadPartitionsAreRefusedOneByOne) {
  options_.max_metadata_bytes = 8;
  options_.partition_exists = [](const std::string& topic, int32_t partition) {
    return topic == "known" && partition < 2;
  };
  MakeCoordinator();
  auto c = Commit("", -1,
                  {{"known", 0, 1, -1, "short"},
                   {"known", 1, 1, -1, "much too long"},
                   {"unknown", 0, 1, -1, ""},
                   {"known", 5, 1, -1, ""}});
  FlushAndRelease();
  ASSERT_TRUE(c->has_value());
  ASSERT_EQ((*c)->partitions.size(), 4u);
  EXPECT_EQ((*c)->partitions[0].error, err::kNone);
  EXPECT_EQ((*c)->partitions[1].error, err::kOffsetMetadataTooLarge);
  EXPECT_EQ((*c)->partitions[2].error, err::kUnknownTopicOrPartition);
  EXPECT_EQ((*c)->partitions[3].error, err::kUnknownTopicOrPartition);
  EXPECT_EQ(Fetch("known", 1).offset, -1);
  // Nothing valid: answered at once.
  auto bad = Commit("", -1, {{"unknown", 0, 1, -1, ""}});
  EXPECT_EQ(OnlyError(bad), err::kUnknownTopicOrPartition);
}

TEST_F(GroupOffsetsTest, FetchAllPartitions) {
  auto c = Commit("", -1, {{"b", 1, 11, -1, ""}, {"a", 2, 22, -1, ""}, {"a", 0, 20, -1, "m"}});
  FlushAndRelease();
  GroupOffsetFetchRequest r;
  r.group_id = group_;
  r.all_partitions = true;
  OffsetFetchResult res = coord_->OffsetFetch(r);
  ASSERT_EQ(res.partitions.size(), 3u);
  EXPECT_EQ(res.partitions[0].topic, "a");
  EXPECT_EQ(res.partitions[0].partition, 0);
  EXPECT_EQ(res.partitions[0].metadata, "m");
  EXPECT_EQ(res.partitions[1].offset, 22);
  EXPECT_EQ(res.partitions[2].topic, "b");
  r.group_id = "other";
  EXPECT_TRUE(coord_->OffsetFetch(r).partitions.empty());
}

TEST_F(GroupOffsetsTest, OffsetsSurviveARestart) {
  JoinGroupResult a = StableOfOne();
  auto c = Commit(a.member_id, a.generation_id, {{"t", 3, 333, 1, "x"}});
  FlushAndRelease();
  ASSERT_EQ(OnlyError(c), err::kNone);
  OpenStore();
  MakeCoordinator();
  OffsetFetchPartition f = Fetch("t", 3);
  EXPECT_EQ(f.offset, 333);
  EXPECT_EQ(f.leader_epoch, 1);
  EXPECT_EQ(f.metadata, "x");
  // The member itself is gone with the old coordinator: it must rejoin.
  EXPECT_EQ(Heartbeat(a.member_id, a.generation_id), err::kUnknownMemberId);
  EXPECT_EQ(OnlyError(Commit(a.member_id, a.generation_id, {{"t", 3, 334, -1, ""}})),
            err::kIllegalGeneration);
  EXPECT_EQ(State(), "Empty");
}

TEST_F(GroupOffsetsTest, OffsetsOfEmptyGroupsExpire) {
  options_.offsets_retention_ms = 60000;
  options_.offsets_retention_check_ms = 1000;
  MakeCoordinator();
  auto c = Commit("", -1, {{"t", 0, 1, -1, ""}});
  FlushAndRelease();
  group_ = "active";
  JoinGroupResult a = StableOfOne();
  auto c2 = Commit(a.member_id, a.generation_id, {{"t", 0, 2, -1, ""}});
  FlushAndRelease();
  for (int i = 0; i < 30; i++) {
    Advance(2000);
    EXPECT_EQ(Heartbeat(a.member_id, a.generation_id), err::kNone);
  }
  EXPECT_EQ(Fetch("t", 0).offset, 2);  // "active" has a member
  group_ = "g";
  EXPECT_EQ(Fetch("t", 0).offset, 1);
  Advance(2000);
  EXPECT_EQ(Fetch("t", 0).offset, -1);
  EXPECT_EQ(coord_->DescribeGroup("g").state, "Dead");
  OpenStore();
  MakeCoordinator();
  EXPECT_EQ(Fetch("t", 0).offset, -1);
}

TEST_F(GroupOffsetsTest, AbortHeldAnswersPendingCommits) {
  // A stopping server answers the commits still waiting for a flush.
  JoinGroupResult a = StableOfOne();
  auto c = Commit(a.member_id, a.generation_id, {{"t", 0, 1, -1, ""}});
  coord_->AbortHeld();
  EXPECT_EQ(OnlyError(c), err::kCoordinatorNotAvailable);
}

}  // namespace
}  // namespace tally::broker
