#include <gtest/gtest.h>
#include <sys/stat.h>

#include <iostream>
#include <map>
#include <random>

#include "log/partition_log.h"
#include "log_test_util.h"
#include "testing/temp_dir.h"

namespace tally::broker {
namespace {

using testutil::AppendCopy;
using testutil::DecodeAll;
using testutil::MakeBatch;
using testutil::MakeSimpleBatch;
using testutil::ReadAll;

constexpr int64_t kNow = 1'800'000'000'000;

class PartitionLogTest : public ::testing::Test {
 protected:
  PartitionLogTest() {
    options_.config.segment_bytes = 2048;
    options_.index_interval_bytes = 256;
    options_.log_flush_ms = 0;
  }

  std::unique_ptr<PartitionLog> Open() {
    auto log = PartitionLog::Open(dir_.path() / "t-0", "t", 0, options_, kNow);
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return log.ok() ? std::move(*log) : nullptr;
  }

  testing::TempDir dir_{"partition-log"};
  PartitionLogOptions options_;
};

TEST_F(PartitionLogTest, AppendAndReadRoundTripAcrossSegmentRolls) {
  auto log = Open();
  std::vector<testutil::DecodedRecord> expected;
  int64_t offset = 0;
  for (int b = 0; b < 120; ++b) {
    int n = 1 + b % 4;
    auto r = AppendCopy(*log, MakeSimpleBatch(n, kNow + b, "b" + std::to_string(b) + "-"), kNow);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->base_offset, offset);
    EXPECT_EQ(r->last_offset, offset + n - 1);
    for (int i = 0; i < n; ++i) {
      expected.push_back({offset + i, "b" + std::to_string(b) + "-" + std::to_string(i),
                          "v" + std::to_string(i), kNow + b});
    }
    offset += n;
  }
  EXPECT_GT(log->segment_count(), 3u);
  EXPECT_EQ(log->log_end_offset(), offset);
  EXPECT_EQ(log->high_watermark(), offset);
  for (int64_t max_bytes : {1, 300, 5000}) {
    auto all = ReadAll(*log, 0, log->high_watermark(), max_bytes);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    EXPECT_EQ(*all, expected) << "max_bytes=" << max_bytes;
  }
  ASSERT_TRUE(log->Close().ok());
  log = Open();
  EXPECT_EQ(log->log_end_offset(), offset);
  auto all = ReadAll(*log, 0, log->high_watermark());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, expected);
  // Appends continue after a reopen.
  auto r = AppendCopy(*log, MakeSimpleBatch(2, kNow, "z"), kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->base_offset, offset);
}

TEST_F(PartitionLogTest, RequestWithSeveralBatchesIsAppendedWholeOrNotAtAll) {
  auto log = Open();
  std::string two =
      MakeSimpleBatch(2, kNow, "a", {5, 0, 0}) + MakeSimpleBatch(3, kNow, "b", {5, 0, 2});
  auto r = AppendCopy(*log, two, kNow);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->base_offset, 0);
  EXPECT_EQ(r->last_offset, 4);
  auto all = ReadAll(*log, 0, log->high_watermark());
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[2].key, "b0");
  EXPECT_EQ((*all)[2].offset, 2);
  // The second batch out of order: nothing of the request is written.
  std::string bad =
      MakeSimpleBatch(1, kNow, "c", {5, 0, 5}) + MakeSimpleBatch(1, kNow, "d", {5, 0, 9});
  EXPECT_EQ(AppendCopy(*log, bad, kNow)->verdict, ProducerVerdict::kOutOfOrderSequence);
  EXPECT_EQ(log->log_end_offset(), 5);
  EXPECT_EQ(AppendCopy(*log, MakeSimpleBatch(1, kNow, "c", {5, 0, 5}), kNow)->verdict,
            ProducerVerdict::kAppend);
}

TEST_F(PartitionLogTest, SegmentRollsAfterSegmentMs) {
  options_.config.segment_bytes = 1 << 20;
  options_.config.segment_ms = 1000;
  auto log = Open();
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(1, kNow), kNow).ok());
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(1, kNow), kNow + 999).ok());
  EXPECT_EQ(log->segment_count(), 1u);
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(1, kNow), kNow + 1000).ok());
  EXPECT_EQ(log->segment_count(), 2u);
  EXPECT_EQ(log->active_segment_base(), 2);
}

TEST_F(PartitionLogTest, ReadInTheMiddleOfABatchReturnsTheWholeBatch) {
  auto log = Open();
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(5, kNow), kNow).ok());
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(5, kNow), kNow).ok());
  for (int64_t fetch = 5; fetch < 10; ++fetch) {
    auto bytes = log->Read(fetch, 1, log->high_watermark());
    ASSERT_TRUE(bytes.ok());
    auto records = DecodeAll(*bytes);
    ASSERT_TRUE(records.ok());
    ASSERT_EQ(records->size(), 5u);  // one whole batch even over max_bytes
    EXPECT_EQ(records->front().offset, 5);
  }
}

TEST_F(PartitionLogTest, OffsetsOutsideTheLogAreOutOfRangeAndTheEndIsEmpty) {
  auto log = Open();
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(3, kNow), kNow).ok());
  EXPECT_EQ(log->Read(4, 100, 3).status().code(), base::StatusCode::kOutOfRange);
  EXPECT_EQ(log->Read(-1, 100, 3).status().code(), base::StatusCode::kOutOfRange);
  auto at_end = log->Read(3, 100, 3);
  ASSERT_TRUE(at_end.ok());
  EXPECT_TRUE(at_end->empty());
}

TEST_F(PartitionLogTest, ListOffsetsByTimestampFindsTheFirstRecordAtOrAfter) {
  options_.index_interval_bytes = 64;
  auto log = Open();
  std::mt19937 rng(7);
  std::vector<std::pair<int64_t, int64_t>> model;  // offset, timestamp
  int64_t ts = 1000;
  for (int b = 0; b < 80; ++b) {
    std::vector<testutil::TestRecord> records;
    for (int i = 0; i < 3; ++i) {
      ts += static_cast<int64_t>(rng() % 5);
      // Now and then a record from the past, as producers send.
      int64_t t = (rng() % 7 == 0) ? ts - 30 : ts;
      records.push_back({"k", "v", t});
    }
    auto r = AppendCopy(*log, MakeBatch(records), kNow);
    ASSERT_TRUE(r.ok());
    for (int i = 0; i < 3; ++i) model.emplace_back(r->base_offset + i, records[i].timestamp);
  }
  for (int64_t target = 900; target <= ts + 2; target += 3) {
    OffsetAndTimestamp want;
    for (auto [o, t] : model) {
      if (t >= target) {
        want = {o, t};
        break;
      }
    }
    auto got = log->ListOffsets(target);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->offset, want.offset) << "target " << target;
    EXPECT_EQ(got->timestamp, want.timestamp) << "target " << target;
  }
  EXPECT_EQ(log->ListOffsets(kListOffsetsEarliest)->offset, 0);
  EXPECT_EQ(log->ListOffsets(kListOffsetsLatest)->offset, 240);
}

TEST_F(PartitionLogTest, FetchCostDoesNotGrowWithTheLog) {
  options_.config.segment_bytes = 1 << 20;
  options_.index_interval_bytes = 4096;
  auto log = Open();
  std::string batch = MakeSimpleBatch(2, kNow);
  const int64_t batch_size = static_cast<int64_t>(batch.size());
  std::mt19937 rng(3);
  int64_t max_headers = 0;
  int64_t max_bytes_read = 0;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 5000; ++i) ASSERT_TRUE(AppendCopy(*log, batch, kNow).ok());
    for (int probe = 0; probe < 200; ++probe) {
      int64_t offset = static_cast<int64_t>(rng() % static_cast<uint64_t>(log->high_watermark()));
      ReadStats stats;
      auto bytes = log->Read(offset, 1, log->high_watermark(), &stats);
      ASSERT_TRUE(bytes.ok());
      ASSERT_FALSE(bytes->empty());
      max_headers = std::max(max_headers, stats.headers_scanned);
      max_bytes_read = std::max(max_bytes_read, stats.bytes_read);
    }
    // A scan never walks more than one index interval of batches, and a
    // fetch reads no more than that plus what it returns.
    EXPECT_LE(max_headers, 4096 / batch_size + 2) << "after " << log->log_end_offset();
    EXPECT_LE(max_bytes_read, (4096 / batch_size + 2) * 61 + batch_size);
  }
  EXPECT_GT(log->segment_count(), 1u);
}

TEST_F(PartitionLogTest, HighWatermarkWaitsForTheFlush) {
  options_.log_flush_ms = 2;
  auto log = Open();
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(3, kNow), kNow).ok());
  EXPECT_EQ(log->log_end_offset(), 3);
  EXPECT_EQ(log->high_watermark(), 0);
  auto unflushed = log->Read(0, 1 << 20, log->high_watermark());
  ASSERT_TRUE(unflushed.ok());
  EXPECT_TRUE(unflushed->empty());
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(log->high_watermark(), 3);
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(2, kNow), kNow).ok());
  EXPECT_EQ(log->high_watermark(), 3);
  ASSERT_TRUE(log->Flush().ok());
  EXPECT_EQ(log->high_watermark(), 5);
}

TEST_F(PartitionLogTest, FailedWriteLeavesTheLogAsItWasAndAppendsResume) {
  testutil::FaultyFileOps ops;
  options_.ops = &ops;
  options_.config.segment_bytes = 1 << 20;
  auto log = Open();
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(3, kNow), kNow).ok());
  struct stat before;
  ASSERT_EQ(::stat((dir_.path() / "t-0" / "00000000000000000000.log").c_str(), &before), 0);
  ops.write_budget = 20;  // a partial write, then ENOSPC
  auto failed = AppendCopy(*log, MakeSimpleBatch(3, kNow, "x"), kNow);
  EXPECT_EQ(failed.status().code(), base::StatusCode::kIOError);
  struct stat after;
  ASSERT_EQ(::stat((dir_.path() / "t-0" / "00000000000000000000.log").c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size);
  EXPECT_EQ(log->log_end_offset(), 3);
  EXPECT_EQ(ReadAll(*log, 0, log->high_watermark())->size(), 3u);
  EXPECT_FALSE(AppendCopy(*log, MakeSimpleBatch(1, kNow, "y"), kNow).ok());
  ops.write_budget = INT64_MAX;  // space returns
  auto ok = AppendCopy(*log, MakeSimpleBatch(2, kNow, "z"), kNow);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->base_offset, 3);
  log.reset();
  log = Open();
  auto all = ReadAll(*log, 0, log->high_watermark());
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 5u);
  EXPECT_EQ((*all)[3].key, "z0");
}

TEST_F(PartitionLogTest, FailedSyncKeepsTheHighWatermarkAndStopsWrites) {
  testutil::FaultyFileOps ops;
  options_.ops = &ops;
  options_.log_flush_ms = 2;
  auto log = Open();
  ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(3, kNow), kNow).ok());
  ops.fail_sync = true;
  EXPECT_EQ(log->Flush().code(), base::StatusCode::kIOError);
  EXPECT_EQ(log->high_watermark(), 0);
  ops.fail_sync = false;
  EXPECT_FALSE(log->Flush().ok());
  EXPECT_EQ(log->high_watermark(), 0);
  EXPECT_EQ(AppendCopy(*log, MakeSimpleBatch(1, kNow), kNow).status().code(),
            base::StatusCode::kIOError);
}

TEST_F(PartitionLogTest, OversizedBatchIsRefused) {
  options_.config.max_message_bytes = 100;
  auto log = Open();
  EXPECT_EQ(AppendCopy(*log, MakeSimpleBatch(20, kNow), kNow).status().code(),
            base::StatusCode::kResourceExhausted);
  std::string v1 = MakeSimpleBatch(1, kNow);
  v1[16] = 1;
  EXPECT_EQ(AppendCopy(*log, v1, kNow).status().code(), base::StatusCode::kCorruption);
  EXPECT_EQ(log->log_end_offset(), 0);
}

TEST_F(PartitionLogTest, DeleteRecordsMovesTheLogStartAndSurvivesReopen) {
  auto log = Open();
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(AppendCopy(*log, MakeSimpleBatch(4, kNow), kNow).ok());
  size_t segments = log->segment_count();
  auto start = log->DeleteRecordsBefore(130);
  ASSERT_TRUE(start.ok());
  EXPECT_EQ(*start, 130);
  EXPECT_LT(log->segment_count(), segments);
  EXPECT_EQ(log->Read(129, 10, log->high_watermark()).status().code(),
            base::StatusCode::kOutOfRange);
  auto first = DecodeAll(*log->Read(130, 1, log->high_watermark()));
  EXPECT_EQ(first->front().offset, 128);  // the batch holding 130
  EXPECT_EQ(log->ListOffsets(kListOffsetsEarliest)->offset, 130);
  EXPECT_EQ(log->DeleteRecordsBefore(1000).status().code(), base::StatusCode::kOutOfRange);
  log.reset();
  log = Open();
  EXPECT_EQ(log->log_start_offset(), 130);
  EXPECT_EQ(log->log_end_offset(), 240);
}

TEST_F(PartitionLogTest, RetriedIdempotentBatchIsAcknowledgedWithItsOriginalOffsets) {
  auto log = Open();
  std::string b0 = MakeSimpleBatch(3, kNow, "a", {1000, 0, 0});
  std::string b1 = MakeSimpleBatch(2, kNow, "b", {1000, 0, 3});
  ASSERT_EQ(AppendCopy(*log, b0, kNow)->verdict, ProducerVerdict::kAppend);
  ASSERT_EQ(AppendCopy(*log, MakeSimpleBatch(1, kNow), kNow)->verdict, ProducerVerdict::kAppend);
  ASSERT_EQ(AppendCopy(*log, b1, kNow)->verdict, ProducerVerdict::kAppend);
  auto dup = AppendCopy(*log, b0, kNow);
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(dup->verdict, ProducerVerdict::kDuplicate);
  EXPECT_EQ(dup->base_offset, 0);
  EXPECT_EQ(dup->last_offset, 2);
  EXPECT_EQ(log->log_end_offset(), 6);
  EXPECT_EQ(AppendCopy(*log, MakeSimpleBatch(1, kNow, "c", {1000, 0, 9}), kNow)->verdict,
            ProducerVerdict::kOutOfOrderSequence);
  EXPECT_EQ(AppendCopy(*log, MakeSimpleBatch(1, kNow, "c", {1000, -1, 5}), kNow)->verdict,
            ProducerVerdict::kInvalidEpoch);
  EXPECT_EQ(log->log_end_offset(), 6);
}

TEST_F(PartitionLogTest, ProducerStateIsRebuiltAfterAReopenWithoutCleanClose) {
  auto log = Open();
  std::vector<std::string> sent;
  int32_t seq = 0;
  for (int i = 0; i < 90; ++i) {
    sent.push_back(MakeSimpleBatch(3, kNow, "p", {77, 1, seq}));
    ASSERT_EQ(AppendCopy(*log, sent.back(), kNow)->verdict, ProducerVerdict::kAppend);
    seq += 3;
  }
  EXPECT_GT(log->segment_count(), 2u);  // snapshots were taken at rolls
  int64_t leo = log->log_end_offset();
  log.reset();  // no Close: no snapshot at the end
  log = Open();
  for (int back = 1; back <= 5; ++back) {
    auto dup = AppendCopy(*log, sent[sent.size() - static_cast<size_t>(back)], kNow);
    ASSERT_TRUE(dup.ok());
    EXPECT_EQ(dup->verdict, ProducerVerdict::kDuplicate) << back;
    EXPECT_EQ(dup->base_offset, leo - 3 * back);
  }
  EXPECT_EQ(AppendCopy(*log, MakeSimpleBatch(1, kNow, "p", {77, 1, seq}), kNow)->verdict,
            ProducerVerdict::kAppend);
  // Without any snapshot the state comes from the log alone.
  log.reset();
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path() / "t-0")) {
    if (entry.path().extension() == ".snapshot") std::filesystem::remove(entry.path());
  }
  log = Open();
  EXPECT_EQ(AppendCopy(*log, MakeSimpleBatch(1, kNow, "p", {77, 1, seq}), kNow)->verdict,
            ProducerVerdict::kDuplicate);
}

// Random appends, reads, reopens (clean or not), DeleteRecords and retention
// against a model: the list of every record appended.
TEST_F(PartitionLogTest, RandomOperationsMatchAModel) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::cout << "seed " << seed << std::endl;
  std::mt19937 rng(seed);
  options_.config.segment_bytes = 700;
  options_.config.retention_ms = -1;
  auto log = Open();
  std::vector<testutil::DecodedRecord> model;
  int64_t start = 0;
  for (int step = 0; step < 600; ++step) {
    uint32_t op = rng() % 100;
    if (op < 70) {
      std::vector<testutil::TestRecord> records;
      int n = 1 + static_cast<int>(rng() % 5);
      for (int i = 0; i < n; ++i) {
        records.push_back({"k" + std::to_string(rng() % 50), std::string(rng() % 40, 'x'),
                           kNow + static_cast<int64_t>(rng() % 1000)});
      }
      auto r = AppendCopy(*log, MakeBatch(records), kNow);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->base_offset, static_cast<int64_t>(model.size()));
      for (int i = 0; i < n; ++i) {
        model.push_back({r->base_offset + i, records[static_cast<size_t>(i)].key,
                         records[static_cast<size_t>(i)].value,
                         records[static_cast<size_t>(i)].timestamp});
      }
    } else if (op < 85 && !model.empty()) {
      int64_t offset =
          start + static_cast<int64_t>(rng() % static_cast<uint64_t>(model.size() - start + 1));
      int64_t max_bytes = 1 + static_cast<int64_t>(rng() % 2000);
      auto bytes = log->Read(offset, max_bytes, log->high_watermark());
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      auto records = DecodeAll(*bytes);
      ASSERT_TRUE(records.ok());
      if (offset == static_cast<int64_t>(model.size())) {
        EXPECT_TRUE(records->empty());
        continue;
      }
      ASSERT_FALSE(records->empty());
      EXPECT_LE(records->front().offset, offset);
      EXPECT_GE(records->back().offset, offset);
      for (const auto& r : *records) EXPECT_EQ(r, model[static_cast<size_t>(r.offset)]);
    } else if (op < 92) {
      if (rng() % 2 == 0) {
        ASSERT_TRUE(log->Close().ok());
      }
      log.reset();
      log = Open();
      ASSERT_NE(log, nullptr);
    } else if (op < 96 && !model.empty()) {
      int64_t to =
          start + static_cast<int64_t>(rng() % static_cast<uint64_t>(model.size() - start + 1));
      auto moved = log->DeleteRecordsBefore(to);
      ASSERT_TRUE(moved.ok());
      start = std::max(start, to);
      EXPECT_EQ(*moved, start);
    } else {
      options_.config.retention_bytes = static_cast<int64_t>(rng() % 3000);
      log->SetConfig(options_.config);
      ASSERT_TRUE(log->EnforceRetention(kNow).ok());
      start = std::max(start, log->log_start_offset());
      options_.config.retention_bytes = -1;
      log->SetConfig(options_.config);
    }
    ASSERT_EQ(log->log_start_offset(), start);
    ASSERT_EQ(log->log_end_offset(), static_cast<int64_t>(model.size()));
  }
  auto all = ReadAll(*log, start, log->high_watermark());
  ASSERT_TRUE(all.ok());
  std::vector<testutil::DecodedRecord> want(model.begin() + start, model.end());
  EXPECT_EQ(*all, want);
}

}  // namespace
}  // namespace tally::broker
