#include <gtest/gtest.h>

#include <map>
#include <random>

#include "log/partition_log.h"
#include "log_test_util.h"
#include "testing/temp_dir.h"

namespace tally::broker {
namespace {

using testutil::AppendCopy;
using testutil::MakeBatch;
using testutil::MakeSimpleBatch;
using testutil::ReadAll;

constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kHour = 3'600'000;

class CleanerTest : public ::testing::Test {
 protected:
  CleanerTest() {
    options_.config.segment_bytes = 1000;
    options_.index_interval_bytes = 128;
    options_.log_flush_ms = 0;
  }
  std::unique_ptr<PartitionLog> Open() {
    auto log = PartitionLog::Open(tmp_.path() / "t-0", "t", 0, options_, kNow);
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return log.ok() ? std::move(*log) : nullptr;
  }
  testing::TempDir tmp_{"cleaner"};
  PartitionLogOptions options_;
};

TEST_F(CleanerTest, RetentionByTimeDeletesExpiredClosedSegmentsOnly) {
  options_.config.retention_ms = 10 * kHour;
  auto log = Open();
  // Old records (20 h ago), then recent ones.
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(3, kNow - 20 * kHour), kNow).ok());
  }
  int64_t recent_from = log->log_end_offset();
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(3, kNow), kNow).ok());
  size_t before = log->segment_count();
  auto deleted = log->EnforceRetention(kNow);
  ASSERT_TRUE(deleted.ok());
  EXPECT_GT(*deleted, 0);
  EXPECT_EQ(log->segment_count(), before - static_cast<size_t>(*deleted));
  EXPECT_GT(log->log_start_offset(), 0);
  EXPECT_LE(log->log_start_offset(), recent_from);
  auto records = ReadAll(*log, log->log_start_offset(), log->high_watermark());
  ASSERT_TRUE(records.ok());
  for (const auto& r : *records) {
    if (r.offset >= recent_from) {
      EXPECT_EQ(r.timestamp, kNow);
    }
  }
  // Everything expired, but the active segment stays.
  ASSERT_TRUE(log->EnforceRetention(kNow + 100 * kHour).ok());
  EXPECT_EQ(log->segment_count(), 1u);
  EXPECT_EQ(log->log_end_offset(), 180);
  log.reset();
  log = Open();
  EXPECT_EQ(log->log_end_offset(), 180);
  EXPECT_EQ(log->segment_count(), 1u);
}

TEST_F(CleanerTest, RetentionBySizeKeepsThePartitionUnderTheLimit) {
  options_.config.retention_bytes = 3000;
  options_.config.retention_ms = -1;
  auto log = Open();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(3, kNow), kNow).ok());
  ASSERT_GT(log->size_bytes(), 3000);
  ASSERT_TRUE(log->EnforceRetention(kNow).ok());
  EXPECT_LE(log->size_bytes(), 3000 + options_.config.segment_bytes);
  EXPECT_GT(log->size_bytes(), 3000 - options_.config.segment_bytes);
  EXPECT_TRUE(ReadAll(*log, log->log_start_offset(), log->high_watermark()).ok());
}

TEST_F(CleanerTest, CompactionKeepsTheLatestValuePerKeyWithOffsetsIntact) {
  options_.config.cleanup_compact = true;
  options_.config.cleanup_delete = false;
  auto log = Open();
  std::mt19937 rng(11);
  std::map<int64_t, testutil::DecodedRecord> written;
  for (int b = 0; b < 120; ++b) {
    std::vector<testutil::TestRecord> records;
    int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) {
      std::string key = "key" + std::to_string(rng() % 10);
      std::optional<std::string> value = "v" + std::to_string(b) + "." + std::to_string(i);
      if (rng() % 10 == 0) value.reset();  // a tombstone
      if (b == 60 && i == 0) {
        key = "deleted";  // a tombstone that stays the latest of its key
        value.reset();
      }
      records.push_back({key, value, kNow + b});
    }
    auto r = AppendCopy(*log, MakeBatch(records), kNow);
    ASSERT_TRUE(r.ok());
    for (int i = 0; i < n; ++i) {
      written[r->base_offset + i] = {r->base_offset + i, records[static_cast<size_t>(i)].key,
                                     records[static_cast<size_t>(i)].value, kNow + b};
    }
  }
  const int64_t active_base = log->active_segment_base();
  ASSERT_GT(active_base, 0);
  int64_t size_before = log->size_bytes();
  auto removed = log->Compact();
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_GT(*removed, 0);
  EXPECT_LT(log->size_bytes(), size_before);

  // Model: a record survives if it is the last of its key among offsets
  // below the active segment (tombstones included), or lies in the active
  // segment; every survivor keeps its offset.
  std::map<std::string, int64_t> last_closed;
  for (const auto& [o, r] : written) {
    if (o < active_base) last_closed[*r.key] = o;
  }
  std::vector<testutil::DecodedRecord> want;
  bool kept_tombstone = false;
  for (const auto& [o, r] : written) {
    if (o >= active_base || last_closed[*r.key] == o) {
      want.push_back(r);
      kept_tombstone |= o < active_base && !r.value.has_value();
    }
  }
  EXPECT_TRUE(kept_tombstone);
  auto check = [&](const PartitionLog& l) {
    auto all = ReadAll(l, 0, l.high_watermark());
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    EXPECT_EQ(*all, want);
  };
  check(*log);
  // A second pass without a new closed segment changes nothing; a reopen
  // reads the same.
  EXPECT_EQ(*log->Compact(), 0);
  log.reset();
  log = Open();
  check(*log);
  // Offsets go on after the end.
  auto r = AppendCopy(*log, MakeSimpleBatch(1, kNow), kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->base_offset, static_cast<int64_t>(written.size()));
}

}  // namespace
}  // namespace tally::broker
