// The unread resets built apart from the service: the event each kind
// publishes, and the requests refused before anything is published.
#include "reset_request.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "schemas/delta.h"
#include "schemas/event.h"
#include "store/state_store.h"
#include "test_state.h"

namespace tally::query::internal {
namespace {

using query::testing::CommitTo;
using query::testing::TempDir;
using schemas::UnreadKind;

class ResetRequestTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = query::testing::OpenTestStore(dir_.path(), /*fill=*/false); }

  // The event a reset publishes, parsed back.
  schemas::Event Built(UnreadKind kind, std::string_view query = {}) {
    std::string_view code = "unset";
    auto r = BuildReset(*store_, 42, kind, query, 1700000000000, &code);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(code, "");
    schemas::Event e;
    if (!r.ok()) return e;
    EXPECT_FALSE(r->nothing_to_mark);
    EXPECT_EQ(r->record.key, "42");
    schemas::EventParser parser;
    EXPECT_TRUE(parser.Parse(r->record.value, &e).ok()) << r->record.value;
    return e;
  }

  TempDir dir_;
  std::unique_ptr<store::StateStore> store_;
};

TEST_F(ResetRequestTest, KindsAreTheUnreadKindNames) {
  for (int k = 0; k < schemas::kUnreadKindCount; k++) {
    const auto kind = static_cast<UnreadKind>(k);
    auto parsed = ParseResetKind(schemas::UnreadKindName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  auto bad = ParseResetKind("likes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "bad kind \"likes\": one of mention, comment, like, repost, dm, follower, notice, "
            "red_dot, feed");
}

TEST_F(ResetRequestTest, ACounterResetIsAReadEventKeyedByTheUser) {
  schemas::Event e = Built(UnreadKind::kLike);
  EXPECT_EQ(e.type, schemas::EventType::kRead);
  EXPECT_EQ(e.user_id, 42u);
  EXPECT_EQ(e.read_kind, UnreadKind::kLike);
  EXPECT_EQ(e.ts, 1700000000000);
}

TEST_F(ResetRequestTest, ANoticeResetMarksTheNewestNoticeOrNothing) {
  std::string_view code;
  auto none = BuildReset(*store_, 42, UnreadKind::kNotice, {}, 1, &code);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->nothing_to_mark);

  CommitTo(store_.get(), schemas::kGlobalEntity, [](store::PartitionBatch* b) {
    b->PutNotice(10, "maintenance");
    b->PutNotice(20, "terms");
  });
  EXPECT_EQ(Built(UnreadKind::kNotice).notice_id, 20u);
}

TEST_F(ResetRequestTest, ARedDotResetNeedsAValidChannel) {
  EXPECT_EQ(Built(UnreadKind::kRedDot, "x=1&channel=games").channel, "games");
  for (std::string_view query :
       {"", "channel=", "channel=Not%20Valid", "channel=%zz", "channel=a&channel=b"}) {
    std::string_view code;
    auto r = BuildReset(*store_, 42, UnreadKind::kRedDot, query, 1, &code);
    ASSERT_FALSE(r.ok()) << query;
    EXPECT_EQ(r.status().code(), base::StatusCode::kInvalidArgument) << query;
    EXPECT_EQ(code, "bad_request") << query;
  }
}

TEST_F(ResetRequestTest, AFeedResetCarriesTheFolloweesCurrentPostCounts) {
  CommitTo(store_.get(), 42, [](store::PartitionBatch* b) {
    b->PutFollow(42, 43);
    b->PutFollow(42, 44);
  });
  CommitTo(store_.get(), 43, [](store::PartitionBatch* b) {
    store::CounterOp user[3] = {store::CounterOp::Add(4), {}, {}};
    b->MergeUserCounters(43, user);
  });
  EXPECT_EQ(Built(UnreadKind::kFeed).snapshot,
            (std::vector<std::pair<uint64_t, uint64_t>>{{43, 4}, {44, 0}}));
}

}  // namespace
}  // namespace tally::query::internal
