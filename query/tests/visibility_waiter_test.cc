#include "query/visibility_waiter.h"

#include <gtest/gtest.h>

#include <thread>

#include "mock_kafka.h"
#include "store/state_store.h"
#include "test_state.h"
#include "watermark_fixture.h"

namespace tally::query {
namespace {

WatermarkRow R(const char* topic, int32_t partition, int64_t applied, int64_t end) {
  WatermarkRow r;
  r.topic = topic;
  r.partition = partition;
  r.applied_offset = applied;
  r.end_offset = end;
  return r;
}

WatermarkReport Report(std::vector<WatermarkRow> rows) {
  WatermarkReport r;
  r.rows = std::move(rows);
  return r;
}

bool Advance(const WatermarkReport& report, std::vector<VisibilityTarget>* targets) {
  return AdvanceVisibility(report, "tally.events", "tally.deltas", targets);
}

TEST(AdvanceVisibilityTest, ARecordIsVisibleOnceItsRowIsAppliedPastIt) {
  std::vector<VisibilityTarget> t = {{0, 4}, {1, 0}};
  EXPECT_FALSE(Advance(Report({R("tally.events", 0, 4, 9), R("tally.events", 1, 1, 1)}), &t));
  EXPECT_TRUE(Advance(Report({R("tally.events", 0, 5, 9), R("tally.events", 1, 1, 1)}), &t));
}

TEST(AdvanceVisibilityTest, AnUnknownPartitionIsNeverVisible) {
  std::vector<VisibilityTarget> t = {{7, 0}};
  EXPECT_FALSE(Advance(Report({R("tally.events", 0, 5, 5), R("other", 7, 5, 5)}), &t));
}

// A follow at tally.events/0 offset 4 derives deltas for partition 1: they
// lie below the end partition 1 had when the follow first showed (3), and
// are visible once partition 1 has applied that far.
TEST(AdvanceVisibilityTest, DerivedEffectsWaitForTheEndSeenWhenTheRecordShowed) {
  std::vector<VisibilityTarget> t = {{0, 4, 1}};
  EXPECT_FALSE(Advance(Report({R("tally.events", 0, 5, 5), R("tally.deltas", 1, 2, 3)}), &t));
  EXPECT_EQ(t[0].derived_end, 3);
  // The end moved on (other deltas); only what was there then counts.
  EXPECT_FALSE(Advance(Report({R("tally.events", 0, 5, 6), R("tally.deltas", 1, 2, 8)}), &t));
  EXPECT_TRUE(Advance(Report({R("tally.events", 0, 5, 6), R("tally.deltas", 1, 3, 8)}), &t));
  // Already applied when the record shows: visible at once.
  std::vector<VisibilityTarget> u = {{0, 4, 1}};
  EXPECT_TRUE(Advance(Report({R("tally.events", 0, 5, 5), R("tally.deltas", 1, 3, 3)}), &u));
}

// Against a broker and a real store, as WatermarkSourceTest.
class VisibilityWaiterTest : public testing::WatermarkFixture {
 protected:
  void SetUp() override {
    WatermarkFixture::SetUp();
    waiter_ = std::make_unique<VisibilityWaiter>(source_.get(), "tally.events", "tally.deltas");
  }

  std::unique_ptr<VisibilityWaiter> waiter_;
};

TEST_F(VisibilityWaiterTest, TimesOutUntilRoutedThenReturnsOnceVisible) {
  kafka_.Produce("tally.events", 1, 3);
  base::Status st = waiter_->Wait({{1, 2}}, 300);
  EXPECT_EQ(st.code(), base::StatusCode::kDeadlineExceeded) << st.ToString();

  // Routed (committed; no deltas to apply) while a waiter waits.
  base::Status result;
  std::thread t([&] { result = waiter_->Wait({{1, 2}, {1, 0}}, 20000); });
  kafka_.Commit("tally", {{{"tally.events", 1}, 3}});
  t.join();
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_TRUE(waiter_->Wait({}, 1).ok());
}

TEST_F(VisibilityWaiterTest, ManyWaitersShareOnePoller) {
  kafka_.Produce("tally.events", 0, 2);
  std::vector<std::thread> threads;
  std::vector<base::Status> results(8);
  for (int i = 0; i < 8; i++) {
    threads.emplace_back([&, i] { results[i] = waiter_->Wait({{0, i % 2}}, 20000); });
  }
  kafka_.Commit("tally", {{{"tally.events", 0}, 2}});
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << r.ToString();
}

}  // namespace
}  // namespace tally::query
