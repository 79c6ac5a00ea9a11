#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "log/compression.h"
#include "log/partition_log.h"
#include "log/record_batch.h"
#include "log_test_util.h"
#include "testing/temp_dir.h"

#ifdef TALLY_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef TALLY_HAVE_LZ4
#include <lz4frame.h>
#endif
#ifdef TALLY_HAVE_ZSTD
#include <zstd.h>
#endif
#ifdef TALLY_HAVE_SNAPPY
#include <snappy-c.h>
#endif

namespace tally::broker {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;

// Compresses as Kafka's clients frame each codec; kNone if not built in.
// `xerial` picks the Java client's snappy framing.
std::string Compress(Compression codec, const std::string& raw, bool xerial = false) {
  std::string out;
  switch (codec) {
#ifdef TALLY_HAVE_ZLIB
    case Compression::kGzip: {
      z_stream zs;
      std::memset(&zs, 0, sizeof(zs));
      EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
      out.resize(deflateBound(&zs, raw.size()) + 32);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
      zs.avail_in = static_cast<uInt>(raw.size());
      zs.next_out = reinterpret_cast<Bytef*>(out.data());
      zs.avail_out = static_cast<uInt>(out.size());
      EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
      out.resize(zs.total_out);
      deflateEnd(&zs);
      return out;
    }
#endif
#ifdef TALLY_HAVE_LZ4
    case Compression::kLz4: {
      out.resize(LZ4F_compressFrameBound(raw.size(), nullptr));
      size_t n = LZ4F_compressFrame(out.data(), out.size(), raw.data(), raw.size(), nullptr);
      EXPECT_FALSE(LZ4F_isError(n));
      out.resize(n);
      return out;
    }
#endif
#ifdef TALLY_HAVE_ZSTD
    case Compression::kZstd: {
      out.resize(ZSTD_compressBound(raw.size()));
      size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 3);
      EXPECT_FALSE(ZSTD_isError(n));
      out.resize(n);
      return out;
    }
#endif
#ifdef TALLY_HAVE_SNAPPY
    case Compression::kSnappy: {
      std::string block(snappy_max_compressed_length(raw.size()), '\0');
      size_t n = block.size();
      EXPECT_EQ(snappy_compress(raw.data(), raw.size(), block.data(), &n), SNAPPY_OK);
      block.resize(n);
      if (!xerial) return block;
      // The xerial header: magic, version 1, compatible version 1.
      out.assign("\x82SNAPPY\0", 8);
      out.append("\0\0\0\1\0\0\0\1", 8);
      // Two blocks, to exercise the framing.
      std::string half(raw.substr(0, raw.size() / 2)), rest(raw.substr(raw.size() / 2));
      for (const std::string* part : {&half, &rest}) {
        std::string b(snappy_max_compressed_length(part->size()), '\0');
        size_t m = b.size();
        EXPECT_EQ(snappy_compress(part->data(), part->size(), b.data(), &m), SNAPPY_OK);
        b.resize(m);
        std::string len(4, '\0');
        StoreBe32(reinterpret_cast<uint8_t*>(len.data()), static_cast<uint32_t>(m));
        out += len + b;
      }
      return out;
    }
#endif
    default:
      break;
  }
  (void)raw;
  (void)xerial;
  return out;
}

// A batch of `records` compressed with `codec`.
std::string MakeCompressedBatch(const std::vector<testutil::TestRecord>& records, Compression codec,
                                bool xerial = false) {
  BatchHeader h;
  h.base_timestamp = records[0].timestamp;
  h.max_timestamp = records[0].timestamp;
  for (const auto& r : records) h.max_timestamp = std::max(h.max_timestamp, r.timestamp);
  std::string body;
  for (size_t i = 0; i < records.size(); ++i) {
    std::optional<std::string_view> key, value;
    if (records[i].key) key = *records[i].key;
    if (records[i].value) value = *records[i].value;
    batch_encoding::AppendRecord(&body, records[i].timestamp - h.base_timestamp,
                                 static_cast<int32_t>(i), key, value);
  }
  h.attributes = static_cast<int16_t>(codec);
  h.record_count = static_cast<int32_t>(records.size());
  h.last_offset_delta = h.record_count - 1;
  return batch_encoding::BuildBatch(h, Compress(codec, body, xerial));
}

std::vector<testutil::TestRecord> SomeRecords(int n, int64_t ts, const std::string& prefix) {
  std::vector<testutil::TestRecord> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({prefix + std::to_string(i % 5), "value " + std::to_string(i), ts + i});
  }
  return out;
}

class CompressionTest : public ::testing::TestWithParam<std::pair<Compression, bool>> {};

TEST_P(CompressionTest, BatchRecordsDecompressToWhatWasFramed) {
  auto [codec, xerial] = GetParam();
  if (!CodecAvailable(codec)) GTEST_SKIP() << "codec not built in";
  auto records = SomeRecords(50, kNow, "key");
  std::string batch = MakeCompressedBatch(records, codec, xerial);
  auto split = SplitBatches(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(batch.data()), batch.size()));
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  auto decoded = testutil::DecodeAll(batch);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ((*decoded)[i].key, records[i].key);
    EXPECT_EQ((*decoded)[i].value, records[i].value);
    EXPECT_EQ((*decoded)[i].timestamp, records[i].timestamp);
  }
  // A payload cut short does not decompress (or not to the records).
  BatchHeader h = (*split)[0].header;
  std::string cut = batch.substr(0, kBatchHeaderSize + (batch.size() - kBatchHeaderSize) / 2);
  auto body = BatchRecordsUncompressed(
      h, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(cut.data()), cut.size()));
  if (body.ok()) {
    std::span<const uint8_t> rest(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    RecordIterator it(rest, h.record_count);
    Record r;
    bool failed = false;
    for (int i = 0; i <= h.record_count && !failed; ++i) {
      auto more = it.Next(&r);
      failed = !more.ok();
      if (more.ok() && !*more) break;
    }
    EXPECT_TRUE(failed);
  }
}

TEST_P(CompressionTest, CompactionReadsKeysInsideCompressedBatches) {
  auto [codec, xerial] = GetParam();
  if (!CodecAvailable(codec)) GTEST_SKIP() << "codec not built in";
  testing::TempDir tmp("compression");
  PartitionLogOptions options;
  options.log_flush_ms = 0;
  options.config.segment_bytes = 600;
  options.config.cleanup_compact = true;
  options.config.cleanup_delete = false;
  auto log = PartitionLog::Open(tmp.path() / "t-0", "t", 0, options, kNow);
  ASSERT_TRUE(log.ok());
  std::map<std::string, int64_t> last;
  for (int b = 0; b < 30; ++b) {
    auto records = SomeRecords(10, kNow + b * 10, "key");
    auto r = testutil::AppendCopy(**log, MakeCompressedBatch(records, codec, xerial), kNow);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  int64_t active_base = (*log)->active_segment_base();
  ASSERT_GT(active_base, 20);
  auto removed = (*log)->Compact();
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_GT(*removed, 0);
  auto all = testutil::ReadAll(**log, 0, (*log)->high_watermark());
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  // Below the active segment, each of the 5 keys once, at its last offset.
  std::map<std::string, int64_t> seen;
  for (const auto& r : *all) {
    if (r.offset < active_base) {
      EXPECT_EQ(seen.count(*r.key), 0u) << *r.key;
      seen[*r.key] = r.offset;
    }
  }
  EXPECT_EQ(seen.size(), 5u);
  // ListOffsets finds the exact record inside a compressed batch.
  auto found = (*log)->ListOffsets(kNow + 295);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->offset, 295);
  EXPECT_EQ(found->timestamp, kNow + 295);
}

INSTANTIATE_TEST_SUITE_P(Codecs, CompressionTest,
                         ::testing::Values(std::make_pair(Compression::kGzip, false),
                                           std::make_pair(Compression::kSnappy, false),
                                           std::make_pair(Compression::kSnappy, true),
                                           std::make_pair(Compression::kLz4, false),
                                           std::make_pair(Compression::kZstd, false)));

}  // namespace
}  // namespace tally::broker
