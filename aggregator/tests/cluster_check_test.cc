#include "aggregator/cluster_check.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "testing/temp_dir.h"

namespace tally::aggregator {
namespace {

namespace fs = std::filesystem;

constexpr OnNewCluster kRefuse = OnNewCluster::kRefuse;
constexpr OnNewCluster kResetOffsets = OnNewCluster::kResetOffsets;
constexpr OnNewCluster kOwnBroker = OnNewCluster::kOwnBroker;

class ClusterCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions o;
    o.dir = dir_.string();
    o.partitions = 2;
    o.block_cache_bytes = 8 << 20;
    auto s = store::StateStore::Open(o);
    ASSERT_TRUE(s.ok());
    store_ = std::move(s).value();
  }
  void TearDown() override { store_.reset(); }
  // Some state and progress, as a running applier leaves them.
  void Work() {
    store::PartitionBatch b;
    store::CounterOp ops[4] = {store::CounterOp::Add(5), {}, {}, {}};
    b.MergePostCounters(1, ops);
    store::Progress p;
    p.next_deltas_offset = 40;
    p.marks[{"tally.events", 0}] = store::SourceMark{99, 0, 1};
    b.SetProgress(p);
    ASSERT_TRUE(store_->partition(schemas::PartitionOf(1, 2))->Commit(&b).ok());
  }
  int64_t Likes() {
    std::vector<uint64_t> ids = {1};
    std::vector<store::PostCounts> out;
    EXPECT_TRUE(store_->GetPostCounts(ids, &out).ok());
    return out[0].like;
  }
  int64_t Offset() { return store_->partition(schemas::PartitionOf(1, 2))->LoadProgress()->next_deltas_offset; }

  static base::ClusterIdentity Embedded(const std::string& inc) { return {"mockCluster1", true, inc}; }
  static base::ClusterIdentity External(const std::string& id) { return {id, false, ""}; }

  testing::TempDir temp_{"cluster-test"};
  const fs::path& dir_ = temp_.path();
  std::unique_ptr<store::StateStore> store_;
};

TEST_F(ClusterCheckTest, FreshStateRecordsTheCluster) {
  ASSERT_TRUE(AttachToCluster(store_.get(), External("abc"), kRefuse).ok());
  EXPECT_EQ(store_->recorded_cluster(), "abc");
  ASSERT_TRUE(AttachToCluster(store_.get(), External("abc"), kRefuse).ok()) << "same cluster again";
}

TEST_F(ClusterCheckTest, NewEmbeddedLogKeepsCountsAndStartsFromZero) {
  ASSERT_TRUE(AttachToCluster(store_.get(), Embedded("one"), kRefuse).ok());
  Work();
  ASSERT_TRUE(AttachToCluster(store_.get(), Embedded("two"), kRefuse).ok());
  EXPECT_EQ(store_->recorded_cluster(), "mockCluster1/two");
  EXPECT_EQ(Likes(), 5);
  EXPECT_EQ(Offset(), 0);
  EXPECT_TRUE(store_->partition(schemas::PartitionOf(1, 2))->LoadProgress()->marks.empty());
}

TEST_F(ClusterCheckTest, OtherRealClusterIsRefusedUnlessResetOffsets) {
  ASSERT_TRUE(AttachToCluster(store_.get(), External("abc"), kRefuse).ok());
  Work();
  base::Status st = AttachToCluster(store_.get(), External("xyz"), kRefuse);
  EXPECT_EQ(st.code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("--reset-offsets"), std::string::npos) << st.message();
  EXPECT_EQ(store_->recorded_cluster(), "abc");
  EXPECT_EQ(Offset(), 40) << "refusing changes nothing";
  ASSERT_TRUE(AttachToCluster(store_.get(), External("xyz"), kResetOffsets).ok());
  EXPECT_EQ(store_->recorded_cluster(), "xyz");
  EXPECT_EQ(Likes(), 5);
  EXPECT_EQ(Offset(), 0);
}

// tally up's own broker keeps its log in the state directory: a new log
// there (removed, or the state copied without it) keeps the counts and is
// read from its start, without --reset-offsets; the same state is refused
// by a member given --brokers of another cluster.
TEST_F(ClusterCheckTest, ANewLogOfTallyUpsOwnBrokerKeepsTheCounts) {
  ASSERT_TRUE(AttachToCluster(store_.get(), External("abc"), kOwnBroker).ok());
  Work();
  EXPECT_FALSE(AttachToCluster(store_.get(), External("xyz"), kRefuse).ok());
  EXPECT_TRUE(AttachCannotRefuse(dir_.string(), External("xyz"), kOwnBroker));
  ASSERT_TRUE(AttachToCluster(store_.get(), External("xyz"), kOwnBroker).ok());
  EXPECT_EQ(store_->recorded_cluster(), "xyz");
  EXPECT_EQ(Likes(), 5);
  EXPECT_EQ(Offset(), 0);
  EXPECT_TRUE(store_->partition(schemas::PartitionOf(1, 2))->LoadProgress()->marks.empty());
}

// A state built on the in-memory broker of an older tally (librdkafka's
// mock, whose log is gone) starts on tally's own broker, a cluster like
// any other: counts kept, its logs read from their start, no flag needed.
TEST_F(ClusterCheckTest, AStateOfTheOldInMemoryBrokerStartsOnANewCluster) {
  ASSERT_TRUE(AttachToCluster(store_.get(), Embedded("one"), kRefuse).ok());
  Work();
  EXPECT_TRUE(AttachCannotRefuse(dir_.string(), External("abc"), kRefuse));
  ASSERT_TRUE(AttachToCluster(store_.get(), External("abc"), kRefuse).ok());
  EXPECT_EQ(store_->recorded_cluster(), "abc");
  EXPECT_EQ(Likes(), 5);
  EXPECT_EQ(Offset(), 0);
  // From then on it is that cluster's state: another is refused.
  Work();
  EXPECT_FALSE(AttachToCluster(store_.get(), External("xyz"), kRefuse).ok());
}

// AttachCannotRefuse() reads the state directory without opening it; it
// must never say "cannot refuse" where AttachToCluster() refuses.
TEST_F(ClusterCheckTest, CannotRefuseOnlyWhereAttachAccepts) {
  EXPECT_TRUE(AttachCannotRefuse((dir_ / "none").string(), External("abc"), kRefuse))
      << "no state yet";
  Work();  // progress, and no cluster recorded
  EXPECT_FALSE(AttachCannotRefuse(dir_.string(), External("abc"), kRefuse));
  EXPECT_FALSE(AttachToCluster(store_.get(), External("abc"), kRefuse).ok());
  EXPECT_TRUE(AttachCannotRefuse(dir_.string(), External("abc"), kResetOffsets));
  EXPECT_TRUE(AttachCannotRefuse(dir_.string(), Embedded("one"), kRefuse));
  ASSERT_TRUE(AttachToCluster(store_.get(), External("abc"), kResetOffsets).ok());
  EXPECT_TRUE(AttachCannotRefuse(dir_.string(), External("abc"), kRefuse))
      << "the recorded cluster";
  EXPECT_FALSE(AttachCannotRefuse(dir_.string(), External("xyz"), kRefuse));
  EXPECT_FALSE(AttachToCluster(store_.get(), External("xyz"), kRefuse).ok());
}

}  // namespace
}  // namespace tally::aggregator
