#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "log/record_batch.h"
#include "log_test_util.h"

namespace tally::broker {
namespace {

using testutil::MakeBatch;
using testutil::TestRecord;

std::span<const uint8_t> Span(const std::string& s) {
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(RecordBatchTest, EncodedBatchParsesAndIterates) {
  std::string batch = MakeBatch(
      {{"a", "1", 1000}, {std::nullopt, "2", 1005}, {"c", std::nullopt, 1002}}, {42, 3, 7});
  auto batches = SplitBatches(Span(batch));
  ASSERT_TRUE(batches.ok()) << batches.status().ToString();
  ASSERT_EQ(batches->size(), 1u);
  const BatchHeader& h = (*batches)[0].header;
  EXPECT_EQ(h.size(), static_cast<int64_t>(batch.size()));
  EXPECT_EQ(h.record_count, 3);
  EXPECT_EQ(h.last_offset_delta, 2);
  EXPECT_EQ(h.base_timestamp, 1000);
  EXPECT_EQ(h.max_timestamp, 1005);
  EXPECT_EQ(h.producer_id, 42);
  EXPECT_EQ(h.producer_epoch, 3);
  EXPECT_EQ(h.base_sequence, 7);
  EXPECT_EQ(h.last_sequence(), 9);
  EXPECT_EQ(h.compression(), Compression::kNone);

  auto decoded = testutil::DecodeAll(batch);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->size(), 3u);
  EXPECT_EQ((*decoded)[0].key, "a");
  EXPECT_EQ((*decoded)[1].key, std::nullopt);
  EXPECT_EQ((*decoded)[1].timestamp, 1005);
  EXPECT_EQ((*decoded)[2].value, std::nullopt);
  EXPECT_EQ((*decoded)[2].offset, 2);
}

TEST(RecordBatchTest, SplitsSeveralBatches) {
  std::string set = MakeBatch({{"a", "1", 1}}) + MakeBatch({{"b", "2", 2}, {"c", "3", 3}});
  auto batches = SplitBatches(Span(set));
  ASSERT_TRUE(batches.ok());
  ASSERT_EQ(batches->size(), 2u);
  EXPECT_EQ((*batches)[1].header.record_count, 2);
}

TEST(RecordBatchTest, RejectsOldMagicBadCrcAndBadSizes) {
  std::string batch = MakeBatch({{"a", "1", 1}});
  std::string v1 = batch;
  v1[16] = 1;
  EXPECT_EQ(SplitBatches(Span(v1)).status().code(), base::StatusCode::kCorruption);
  std::string flipped = batch;
  flipped[flipped.size() - 1] ^= 0x40;
  auto st = SplitBatches(Span(flipped)).status();
  EXPECT_EQ(st.code(), base::StatusCode::kCorruption);
  EXPECT_NE(st.message().find("CRC"), std::string::npos) << st.ToString();
  EXPECT_FALSE(SplitBatches(Span(batch.substr(0, batch.size() - 1))).ok());
  EXPECT_FALSE(SplitBatches(Span(batch.substr(0, 30))).ok());
  EXPECT_FALSE(SplitBatches(Span(batch + "xyz")).ok());
  EXPECT_FALSE(SplitBatches(std::span<const uint8_t>()).ok());
  std::string short_length = batch;
  StoreBe32(reinterpret_cast<uint8_t*>(short_length.data()) + 8, 10);
  EXPECT_FALSE(SplitBatches(Span(short_length)).ok());
}

TEST(RecordBatchTest, RejectsRecordCountThatDisagreesWithRecords) {
  BatchHeader h;
  std::string body;
  batch_encoding::AppendRecord(&body, 0, 0, "k", "v");
  h.record_count = 2;
  h.last_offset_delta = 1;
  std::string batch = batch_encoding::BuildBatch(h, body);
  EXPECT_EQ(SplitBatches(Span(batch)).status().code(), base::StatusCode::kCorruption);
  std::string body2;
  batch_encoding::AppendRecord(&body2, 0, 0, "k", "v");
  batch_encoding::AppendRecord(&body2, 0, 5, "k", "v");
  batch = batch_encoding::BuildBatch(h, body2);
  EXPECT_EQ(SplitBatches(Span(batch)).status().code(), base::StatusCode::kCorruption);
}

TEST(RecordBatchTest, SetBaseOffsetKeepsTheCrcValid) {
  std::string batch = MakeBatch({{"a", "1", 1}, {"b", "2", 2}});
  SetBaseOffset(std::span<uint8_t>(reinterpret_cast<uint8_t*>(batch.data()), batch.size()),
                123456789012LL);
  auto batches = SplitBatches(Span(batch));
  ASSERT_TRUE(batches.ok());
  EXPECT_EQ((*batches)[0].header.base_offset, 123456789012LL);
  EXPECT_EQ((*batches)[0].header.last_offset(), 123456789013LL);
}

TEST(RecordBatchTest, VarintsRoundTripAtTheExtremes) {
  for (int64_t v :
       {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{63}, int64_t{-64}, int64_t{64}, int64_t{300},
        int64_t{std::numeric_limits<int32_t>::max()}, int64_t{std::numeric_limits<int32_t>::min()},
        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    std::string buf;
    AppendVarint(&buf, v);
    std::span<const uint8_t> in = Span(buf);
    int64_t out;
    ASSERT_TRUE(ReadVarlong(&in, &out)) << v;
    EXPECT_EQ(out, v);
    EXPECT_TRUE(in.empty());
  }
  std::string big;
  AppendVarint(&big, int64_t{1} << 40);
  std::span<const uint8_t> in = Span(big);
  int32_t small;
  EXPECT_FALSE(ReadVarint(&in, &small));
  std::string truncated = "\x80\x80";
  in = Span(truncated);
  int64_t out;
  EXPECT_FALSE(ReadVarlong(&in, &out));
}

}  // namespace
}  // namespace tally::broker
