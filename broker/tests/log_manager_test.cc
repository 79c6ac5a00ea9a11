#include "log/log_manager.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "log_test_util.h"
#include "testing/temp_dir.h"

namespace tally::broker {
namespace {

using testutil::AppendCopy;
using testutil::MakeSimpleBatch;

constexpr int64_t kNow = 1'800'000'000'000;

class LogManagerTest : public ::testing::Test {
 protected:
  LogManagerTest() {
    options_.log_dir = tmp_.path() / "logs";
    options_.log_flush_ms = 0;
  }
  std::unique_ptr<LogManager> Open() {
    auto m = LogManager::Open(options_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(*m) : nullptr;
  }
  testing::TempDir tmp_{"log-manager"};
  LogManagerOptions options_;
};

TEST_F(LogManagerTest, NewDirectoryGetsAClusterIdThatARestartKeeps) {
  std::string id;
  {
    auto m = Open();
    id = m->cluster_id();
    EXPECT_EQ(id.size(), 22u);
    EXPECT_NE(id[0], '-');
    for (char c : id)
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
    ASSERT_TRUE(m->Close().ok());
  }
  auto m = Open();
  EXPECT_EQ(m->cluster_id(), id);
  ASSERT_TRUE(m->Close().ok());
  options_.log_dir = tmp_.path() / "other";
  auto other = Open();
  EXPECT_NE(other->cluster_id(), id);
  EXPECT_NE(NewClusterId(), NewClusterId());
}

TEST_F(LogManagerTest, SecondBrokerOnTheSameDirectoryFailsNamingThePid) {
  auto m = Open();
  auto second = LogManager::Open(options_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(::getpid())), std::string::npos)
      << second.status().ToString();
  ASSERT_TRUE(m->Close().ok());
  EXPECT_TRUE(LogManager::Open(options_).ok());
}

TEST_F(LogManagerTest, TopicsConfigsAndRecordsSurviveARestart) {
  {
    auto m = Open();
    TopicConfig config;
    ASSERT_TRUE(SetTopicConfig(&config, "retention.ms", "-1").ok());
    ASSERT_TRUE(SetTopicConfig(&config, "cleanup.policy", "compact").ok());
    ASSERT_TRUE(m->CreateTopic("tally.deltas", 3, config).ok());
    ASSERT_TRUE(m->CreateTopic("events", 1, TopicConfig()).ok());
    EXPECT_EQ(m->CreateTopic("events", 1, TopicConfig()).code(),
              base::StatusCode::kFailedPrecondition);
    PartitionLog* p = m->GetPartition("tally.deltas", 2);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(AppendCopy(*p, MakeSimpleBatch(4, kNow), kNow).ok());
    EXPECT_EQ(m->GetPartition("tally.deltas", 3), nullptr);
    EXPECT_EQ(m->GetPartition("nope", 0), nullptr);
    ASSERT_TRUE(m->Close().ok());
  }
  auto m = Open();
  auto topics = m->Topics();
  ASSERT_EQ(topics.size(), 2u);
  const TopicInfo* deltas = m->FindTopic("tally.deltas");
  ASSERT_NE(deltas, nullptr);
  EXPECT_EQ(deltas->partitions, 3);
  EXPECT_EQ(deltas->config.retention_ms, -1);
  EXPECT_TRUE(deltas->config.cleanup_compact);
  EXPECT_FALSE(deltas->config.cleanup_delete);
  EXPECT_EQ(m->GetPartition("tally.deltas", 2)->log_end_offset(), 4);
  EXPECT_EQ(m->FindTopic("events")->config, TopicConfig());
}

TEST_F(LogManagerTest, BadNamesPartitionsAndConfigsAreRefused) {
  auto m = Open();
  for (const std::string& name :
       std::vector<std::string>{"", ".", "..", "a/b", "a b", std::string(250, 'x'), "é"}) {
    EXPECT_EQ(m->CreateTopic(name, 1, TopicConfig()).code(), base::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_TRUE(m->CreateTopic(std::string(249, 'x'), 1, TopicConfig()).ok());
  EXPECT_EQ(m->CreateTopic("zero", 0, TopicConfig()).code(), base::StatusCode::kInvalidArgument);
  TopicConfig config;
  EXPECT_EQ(SetTopicConfig(&config, "retention.mss", "1").code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetTopicConfig(&config, "retention.ms", "soon").code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetTopicConfig(&config, "cleanup.policy", "shred").code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SetTopicConfig(&config, "cleanup.policy", "compact,delete").ok());
  EXPECT_TRUE(config.cleanup_compact && config.cleanup_delete);
  auto parsed = ParseTopicConfig({{"segment.bytes", "1048576"}, {"max.message.bytes", "2000"}});
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->segment_bytes, 1048576);
  EXPECT_EQ(ToProperties(*parsed).at("max.message.bytes"), "2000");
}

TEST_F(LogManagerTest, DamagedPartitionRefusesToStartNamingTheFile) {
  {
    auto m = Open();
    TopicConfig config;
    config.segment_bytes = 400;
    ASSERT_TRUE(m->CreateTopic("t", 1, config).ok());
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(AppendCopy(*m->GetPartition("t", 0), MakeSimpleBatch(3, kNow), kNow).ok());
    }
    ASSERT_GT(m->GetPartition("t", 0)->segment_count(), 2u);
    ASSERT_TRUE(m->Close().ok());
  }
  auto first = options_.log_dir / "t-0" / OffsetFileName(0, ".log");
  std::filesystem::resize_file(first, std::filesystem::file_size(first) - 1);
  auto m = LogManager::Open(options_);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), base::StatusCode::kCorruption);
  EXPECT_NE(m.status().message().find(first.string()), std::string::npos) << m.status().ToString();
  // The lock was released with the failed open.
  std::filesystem::resize_file(first, 0);
  std::filesystem::remove(options_.log_dir / "t-0" / OffsetFileName(0, ".index"));
  EXPECT_TRUE(LogManager::Open(options_).ok());
}

TEST_F(LogManagerTest, DeletedTopicLeavesNoDataBehind) {
  auto m = Open();
  ASSERT_TRUE(m->CreateTopic("gone", 2, TopicConfig()).ok());
  ASSERT_TRUE(AppendCopy(*m->GetPartition("gone", 0), MakeSimpleBatch(3, kNow), kNow).ok());
  ASSERT_TRUE(m->DeleteTopic("gone").ok());
  EXPECT_EQ(m->DeleteTopic("gone").code(), base::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(options_.log_dir / "gone-0"));
  ASSERT_TRUE(m->CreateTopic("gone", 1, TopicConfig()).ok());
  EXPECT_EQ(m->GetPartition("gone", 0)->log_end_offset(), 0);
  ASSERT_TRUE(m->Close().ok());
  m = Open();
  EXPECT_EQ(m->FindTopic("gone")->partitions, 1);
}

TEST_F(LogManagerTest, FlusherMovesTheHighWatermarkAndCallsBack) {
  std::atomic<int> callbacks{0};
  options_.log_flush_ms = 1;
  options_.on_flushed = [&callbacks] { callbacks.fetch_add(1); };
  auto m = Open();
  ASSERT_TRUE(m->CreateTopic("t", 1, TopicConfig()).ok());
  PartitionLog* p = m->GetPartition("t", 0);
  ASSERT_TRUE(AppendCopy(*p, MakeSimpleBatch(5, kNow), kNow).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (p->high_watermark() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(p->high_watermark(), 5);
  while (callbacks.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(callbacks.load(), 0);
  EXPECT_GT(m->flush_stats().rounds, 0);
  EXPECT_GE(m->flush_stats().max_micros, m->flush_stats().last_micros);
  ASSERT_TRUE(m->Close().ok());
}

TEST_F(LogManagerTest, AppendsRollsAndDeletesRaceTheFlusherSafely) {
  options_.log_flush_ms = 1;
  auto m = Open();
  TopicConfig config;
  config.segment_bytes = 2000;
  config.retention_bytes = 10000;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(m->CreateTopic("busy", 2, config).ok());
    for (int i = 0; i < 600; ++i) {
      PartitionLog* p = m->GetPartition("busy", i % 2);
      ASSERT_TRUE(AppendCopy(*p, MakeSimpleBatch(2, kNow), kNow).ok());
      if (i % 100 == 0) {
        ASSERT_TRUE(m->RunMaintenance(kNow).ok());
      }
    }
    PartitionLog* p = m->GetPartition("busy", 0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (p->high_watermark() < p->log_end_offset() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(p->high_watermark(), 600);
    ASSERT_TRUE(m->DeleteTopic("busy").ok());
  }
  ASSERT_TRUE(m->Close().ok());
}

TEST_F(LogManagerTest, MaintenanceAppliesRetentionAndDiskSpaceIsKnown) {
  auto m = Open();
  TopicConfig config;
  config.segment_bytes = 500;
  config.retention_ms = 1000;
  ASSERT_TRUE(m->CreateTopic("t", 1, config).ok());
  PartitionLog* p = m->GetPartition("t", 0);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(AppendCopy(*p, MakeSimpleBatch(3, kNow), kNow).ok());
  ASSERT_GT(p->segment_count(), 1u);
  ASSERT_TRUE(m->RunMaintenance(kNow + 5000).ok());
  EXPECT_EQ(p->segment_count(), 1u);
  auto space = m->GetDiskSpace();
  ASSERT_TRUE(space.ok());
  EXPECT_GT(space->total_bytes, 0);
  EXPECT_GE(space->total_bytes, space->free_bytes);
}

}  // namespace
}  // namespace tally::broker
