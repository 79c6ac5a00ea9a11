#include "aggregator/event_router.h"

#include <gtest/gtest.h>

namespace tally::aggregator {
namespace {

using schemas::Delta;
using schemas::DeltaOp;
using schemas::Event;
using schemas::EventType;

class EventRouterTest : public ::testing::Test {
 protected:
  std::vector<Delta> RouteOne(const Event& e, int64_t offset = 7) {
    std::vector<schemas::DeltaBatchBuilder> builders(kParts);
    EventRouter router(kParts);
    router.Route(e, "tally.events", 3, offset, &builders);
    std::vector<Delta> out;
    for (uint32_t p = 0; p < kParts; p++) {
      if (builders[p].empty()) continue;
      std::string bytes = builders[p].Finish();
      batches_.push_back(bytes);
      schemas::DeltaBatchReader r;
      EXPECT_TRUE(r.Open(batches_.back()).ok());
      EXPECT_EQ(r.streams()[0].topic, "tally.events");
      EXPECT_EQ(r.streams()[0].partition, 3);
      Delta d;
      while (r.Next(&d)) {
        EXPECT_EQ(schemas::PartitionOf(d.entity, kParts), p) << "delta routed to the wrong partition";
        d.text = {};  // borrowed from the batch
        out.push_back(d);
      }
      EXPECT_TRUE(r.status().ok());
    }
    std::sort(out.begin(), out.end(), [](const Delta& a, const Delta& b) { return a.source.effect < b.source.effect; });
    return out;
  }
  static constexpr uint32_t kParts = 8;
  std::vector<std::string> batches_;
};

TEST_F(EventRouterTest, LikeSetsEdgeAndNotifiesAuthor) {
  Event e;
  e.type = EventType::kLike;
  e.ts = 1000;
  e.post_id = 10;
  e.user_id = 20;
  e.author_id = 30;
  auto ds = RouteOne(e);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].op, DeltaOp::kLikeSet);
  EXPECT_EQ(ds[0].entity, 10u);
  EXPECT_EQ(ds[0].member, 20u);
  EXPECT_EQ(ds[0].source.offset, 7);
  EXPECT_EQ(ds[0].source.ts, 1000);
  EXPECT_EQ(ds[1].op, DeltaOp::kUnreadAdd);
  EXPECT_EQ(ds[1].entity, 30u);
  EXPECT_EQ(ds[1].source.effect, 1u);
}

TEST_F(EventRouterTest, MentionNotifiesEachDistinctTargetOnce) {
  Event e;
  e.type = EventType::kMention;
  e.ts = 1;
  e.user_id = 1;
  e.target_ids = {5, 6, 5, 7};
  auto ds = RouteOne(e);
  ASSERT_EQ(ds.size(), 3u);
  for (const auto& d : ds) EXPECT_EQ(d.op, DeltaOp::kUnreadAdd);
}

TEST_F(EventRouterTest, FollowIsOneEdgeDeltaAtTheFollower) {
  Event e;
  e.type = EventType::kFollow;
  e.ts = 1;
  e.user_id = 100;
  e.target_id = 200;
  auto ds = RouteOne(e);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].op, DeltaOp::kFollowSet);
  EXPECT_EQ(ds[0].entity, 100u);
  EXPECT_EQ(ds[0].member, 200u);
}

TEST_F(EventRouterTest, PostDeleteDecrementsAuthorPosts) {
  Event e;
  e.type = EventType::kPostDelete;
  e.ts = 1;
  e.author_id = 9;
  e.post_id = 1;
  auto ds = RouteOne(e);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].op, DeltaOp::kUserCounter);
  EXPECT_EQ(ds[0].amount, -1);
}

TEST_F(EventRouterTest, SameEventSameDeltas) {
  Event e;
  e.type = EventType::kComment;
  e.ts = 5;
  e.post_id = 3;
  e.user_id = 4;
  e.author_id = 5;
  auto a = RouteOne(e, 42);
  auto b = RouteOne(e, 42);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) {
    EXPECT_EQ(a[i].entity, b[i].entity);
    EXPECT_EQ(a[i].source.effect, b[i].source.effect);
  }
}

}  // namespace
}  // namespace tally::aggregator
