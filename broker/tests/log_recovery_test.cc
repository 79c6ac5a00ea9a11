#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <random>

#include "log/partition_log.h"
#include "log_test_util.h"
#include "testing/temp_dir.h"

namespace tally::broker {
namespace {

using testutil::AppendCopy;
using testutil::MakeSimpleBatch;
using testutil::ReadAll;

constexpr int64_t kNow = 1'800'000'000'000;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string SegmentName(int64_t base, const char* ext) { return OffsetFileName(base, ext); }

class RecoveryTest : public ::testing::Test {
 protected:
  RecoveryTest() {
    options_.log_flush_ms = 0;
    options_.index_interval_bytes = 200;
  }
  base::Result<std::unique_ptr<PartitionLog>> Open(const std::filesystem::path& dir) {
    return PartitionLog::Open(dir, "t", 0, options_, kNow);
  }
  testing::TempDir tmp_{"recovery"};
  PartitionLogOptions options_;
};

TEST_F(RecoveryTest, KeepsEveryBatchBeforeACutOrDamageAndNothingAfter) {
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << std::endl;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);

  // The original: N batches in one segment; remember where each ends.
  std::filesystem::path original = tmp_.path() / "original";
  std::vector<int64_t> ends;      // byte end of each batch
  std::vector<int64_t> next_off;  // offset after each batch
  {
    auto log = Open(original);
    ASSERT_TRUE(log.ok());
    int64_t end = 0;
    for (int i = 0; i < 60; ++i) {
      std::string batch =
          MakeSimpleBatch(1 + static_cast<int>(rng() % 4), kNow + i, "k" + std::to_string(i) + "-");
      auto r = AppendCopy(**log, batch, kNow);
      ASSERT_TRUE(r.ok());
      end += static_cast<int64_t>(batch.size());
      ends.push_back(end);
      next_off.push_back(r->last_offset + 1);
    }
    ASSERT_TRUE((*log)->Close().ok());
  }
  const std::string bytes = ReadFile(original / SegmentName(0, ".log"));
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), ends.back());

  for (int trial = 0; trial < 40; ++trial) {
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    std::string damaged = bytes;
    int64_t cut = static_cast<int64_t>(rng() % (bytes.size() + 1));
    damaged.resize(static_cast<size_t>(cut));
    // Batches wholly before the cut survive...
    size_t survivors = 0;
    while (survivors < ends.size() && ends[survivors] <= cut) ++survivors;
    if (trial % 2 == 1 && cut > 0) {
      // ...unless a byte of one of them flips: then only the batches
      // before that one survive.
      int64_t pos = static_cast<int64_t>(rng() % static_cast<uint64_t>(cut));
      size_t batch = 0;
      while (ends[batch] <= pos) ++batch;
      int64_t start = batch == 0 ? 0 : ends[batch - 1];
      // Every byte is checked but the base offset and the leader epoch,
      // which lie outside the CRC (a changed length fails the CRC or
      // overruns the file).
      int64_t field = pos - start;
      if (field >= 8 && !(field >= 12 && field < 16)) {
        damaged[static_cast<size_t>(pos)] ^= static_cast<char>(1 + rng() % 255);
        survivors = std::min(survivors, batch);
      }
    }
    std::filesystem::path dir = tmp_.path() / ("trial" + std::to_string(trial));
    std::filesystem::create_directories(dir);
    WriteFile(dir / SegmentName(0, ".log"), damaged);
    auto log = Open(dir);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    int64_t want_end = survivors == 0 ? 0 : next_off[survivors - 1];
    int64_t want_bytes = survivors == 0 ? 0 : ends[survivors - 1];
    EXPECT_EQ((*log)->log_end_offset(), want_end) << "cut " << cut;
    EXPECT_EQ((*log)->size_bytes(), want_bytes);
    EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(dir / SegmentName(0, ".log"))),
              want_bytes);
    auto records = ReadAll(**log, 0, (*log)->high_watermark());
    ASSERT_TRUE(records.ok()) << records.status().ToString();
    EXPECT_EQ(static_cast<int64_t>(records->size()), want_end);
    // The log takes appends again right after what it kept.
    auto r = AppendCopy(**log, MakeSimpleBatch(2, kNow, "after"), kNow);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->base_offset, want_end);
  }
}

class OlderSegmentDamageTest : public RecoveryTest {
 protected:
  void SetUp() override {
    options_.config.segment_bytes = 1000;
    dir_ = tmp_.path() / "t-0";
    auto log = Open(dir_);
    ASSERT_TRUE(log.ok());
    for (int i = 0; i < 40; ++i)
      ASSERT_TRUE(AppendCopy(**log, MakeSimpleBatch(3, kNow), kNow).ok());
    ASSERT_GE((*log)->segment_count(), 3u);
    ASSERT_TRUE((*log)->Close().ok());
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      int64_t base;
      if (ParseOffsetFileName(e.path().filename().string(), ".log", &base)) bases_.push_back(base);
    }
    std::sort(bases_.begin(), bases_.end());
  }

  void ExpectRefusedNaming(const std::filesystem::path& file) {
    auto log = Open(dir_);
    ASSERT_FALSE(log.ok());
    EXPECT_EQ(log.status().code(), base::StatusCode::kCorruption) << log.status().ToString();
    EXPECT_NE(log.status().message().find(file.filename().string()), std::string::npos)
        << log.status().ToString();
  }

  std::filesystem::path dir_;
  std::vector<int64_t> bases_;
};

TEST_F(OlderSegmentDamageTest, ShortenedOlderSegmentRefusesToOpen) {
  auto file = dir_ / SegmentName(bases_[0], ".log");
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 7);
  ExpectRefusedNaming(file);
}

TEST_F(OlderSegmentDamageTest, FlippedByteInTheLastBatchOfAnOlderSegmentRefusesToOpen) {
  auto file = dir_ / SegmentName(bases_[1], ".log");
  std::string bytes = ReadFile(file);
  bytes[bytes.size() - 3] ^= 0x10;
  WriteFile(file, bytes);
  ExpectRefusedNaming(file);
}

TEST_F(OlderSegmentDamageTest, IndexPointingOutsideItsFileRefusesToOpen) {
  auto file = dir_ / SegmentName(bases_[0], ".index");
  std::string entry(8, '\0');
  StoreBe32(reinterpret_cast<uint8_t*>(entry.data()), 100000);
  StoreBe32(reinterpret_cast<uint8_t*>(entry.data()) + 4, 1u << 30);
  WriteFile(file, ReadFile(file) + entry);
  ExpectRefusedNaming(file);
}

TEST_F(OlderSegmentDamageTest, OverlappingBaseOffsetsRefuseToOpen) {
  // A segment file renamed below the end of the one before it.
  auto from = dir_ / SegmentName(bases_[1], ".log");
  auto to = dir_ / SegmentName(bases_[1] - 3, ".log");
  std::filesystem::rename(from, to);
  std::filesystem::remove(dir_ / SegmentName(bases_[1], ".index"));
  std::filesystem::remove(dir_ / SegmentName(bases_[1], ".timeindex"));
  auto log = Open(dir_);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), base::StatusCode::kCorruption);
  EXPECT_NE(log.status().message().find(to.filename().string()), std::string::npos)
      << log.status().ToString();
}

TEST_F(OlderSegmentDamageTest, MissingIndexIsRebuiltFromTheData) {
  std::filesystem::remove(dir_ / SegmentName(bases_[0], ".index"));
  std::filesystem::remove(dir_ / SegmentName(bases_[1], ".timeindex"));
  auto log = Open(dir_);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_TRUE(std::filesystem::exists(dir_ / SegmentName(bases_[0], ".index")));
  auto records = ReadAll(**log, 0, (*log)->high_watermark());
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), 120u);
}

}  // namespace
}  // namespace tally::broker
