// Tests of the codec's primitive types, headers, frame sizes, API table and
// error codes (broker/src/wire).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "wire/api_versions.h"
#include "wire/byte_reader.h"
#include "wire/byte_writer.h"
#include "wire/error_code.h"
#include "wire/header.h"

namespace tally::broker {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

TEST(WireByteWriterTest, FixedWidthIntegersAreBigEndian) {
  std::string out;
  ByteWriter w(&out);
  w.WriteInt8(-2);
  w.WriteInt16(0x0102);
  w.WriteInt32(-2);
  w.WriteInt64(0x0102030405060708LL);
  w.WriteUint32(0xdeadbeef);
  EXPECT_EQ(out, Bytes({0xfe, 0x01, 0x02, 0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4, 5, 6, 7, 8, 0xde,
                        0xad, 0xbe, 0xef}));
  ByteReader r(out);
  EXPECT_EQ(r.ReadInt8(), -2);
  EXPECT_EQ(r.ReadInt16(), 0x0102);
  EXPECT_EQ(r.ReadInt32(), -2);
  EXPECT_EQ(r.ReadInt64(), 0x0102030405060708LL);
  EXPECT_EQ(r.ReadUint32(), 0xdeadbeefu);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(WireByteWriterTest, VarintsUseZigzagAsKafkaDoes) {
  struct Case {
    int64_t value;
    std::string bytes;
  };
  // From Kafka's ByteUtilsTest.
  std::vector<Case> cases = {{0, Bytes({0x00})},           {-1, Bytes({0x01})},
                             {1, Bytes({0x02})},           {63, Bytes({0x7e})},
                             {-64, Bytes({0x7f})},         {64, Bytes({0x80, 0x01})},
                             {-65, Bytes({0x81, 0x01})},   {8191, Bytes({0xfe, 0x7f})},
                             {-8192, Bytes({0xff, 0x7f})}, {8192, Bytes({0x80, 0x80, 0x01})}};
  for (const Case& c : cases) {
    std::string out;
    ByteWriter w(&out);
    w.WriteVarint(static_cast<int32_t>(c.value));
    EXPECT_EQ(out, c.bytes) << c.value;
    out.clear();
    w.WriteVarlong(c.value);
    EXPECT_EQ(out, c.bytes) << c.value;
    ByteReader r(c.bytes);
    EXPECT_EQ(r.ReadVarint(), c.value);
    ByteReader r2(c.bytes);
    EXPECT_EQ(r2.ReadVarlong(), c.value);
  }
}

TEST(WireByteReaderTest, VarintExtremesRoundTrip) {
  for (int32_t v : {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
    std::string out;
    ByteWriter(&out).WriteVarint(v);
    EXPECT_EQ(out.size(), 5u);
    ByteReader r(out);
    EXPECT_EQ(r.ReadVarint(), v);
    EXPECT_TRUE(r.ok());
  }
  for (int64_t v : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    std::string out;
    ByteWriter(&out).WriteVarlong(v);
    EXPECT_EQ(out.size(), 10u);
    ByteReader r(out);
    EXPECT_EQ(r.ReadVarlong(), v);
    EXPECT_TRUE(r.ok());
  }
  std::string out;
  ByteWriter(&out).WriteUnsignedVarint(UINT32_MAX);
  EXPECT_EQ(out, Bytes({0xff, 0xff, 0xff, 0xff, 0x0f}));
  ByteReader r(out);
  EXPECT_EQ(r.ReadUnsignedVarint(), UINT32_MAX);
}

TEST(WireByteReaderTest, OverlongVarintsAreErrors) {
  std::string r_bytes = Bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x01});
  ByteReader r(r_bytes);
  r.ReadVarint();
  EXPECT_FALSE(r.ok());
  std::string r2_bytes = Bytes({0xff, 0xff, 0xff, 0xff, 0x1f});  // 2^33 - 1
  ByteReader r2(r2_bytes);
  r2.ReadUnsignedVarint();
  EXPECT_FALSE(r2.ok());
  std::string r3_bytes = Bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01});
  ByteReader r3(r3_bytes);
  r3.ReadVarlong();
  EXPECT_FALSE(r3.ok());
  std::string r4_bytes = Bytes({0x80});
  ByteReader r4(r4_bytes);
  r4.ReadVarint();
  EXPECT_FALSE(r4.ok());
}

TEST(WireByteReaderTest, ErrorsAreStickyAndReadNothing) {
  std::string r_bytes = Bytes({0x00, 0x01, 0x02});
  ByteReader r(r_bytes);
  EXPECT_EQ(r.ReadInt32(), 0);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(r.ReadInt8(), 0);  // would fit, but the reader is in error
  EXPECT_EQ(r.status().code(), base::StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("byte 0"), std::string::npos) << r.status().ToString();
}

TEST(WireByteReaderTest, StringsAndNullables) {
  std::string out;
  ByteWriter w(&out);
  w.WriteString("ab");
  w.WriteNullableString(std::nullopt);
  w.WriteNullableString(std::string(""));
  w.WriteCompactString("xyz");
  w.WriteCompactNullableString(std::nullopt);
  w.WriteBytes(std::string("\0\1", 2));
  w.WriteNullableBytes(std::nullopt);
  w.WriteCompactBytes("q");
  w.WriteCompactNullableBytes(std::nullopt);
  EXPECT_EQ(out, Bytes({0, 2, 'a', 'b', 0xff, 0xff, 0,    0,    4,    'x',  'y', 'z', 0,
                        0, 0, 0,   2,   0,    1,    0xff, 0xff, 0xff, 0xff, 2,   'q', 0}));
  ByteReader r(out);
  EXPECT_EQ(r.ReadString(), "ab");
  EXPECT_EQ(r.ReadNullableString(), std::nullopt);
  EXPECT_EQ(r.ReadNullableString(), std::optional<std::string>(""));
  EXPECT_EQ(r.ReadCompactString(), "xyz");
  EXPECT_EQ(r.ReadCompactNullableString(), std::nullopt);
  EXPECT_EQ(r.ReadBytes(), std::string("\0\1", 2));
  EXPECT_EQ(r.ReadNullableBytes(), std::nullopt);
  EXPECT_EQ(r.ReadCompactBytes(), "q");
  EXPECT_EQ(r.ReadCompactNullableBytes(), std::nullopt);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(WireByteReaderTest, BadLengthsAreErrors) {
  // Null where not nullable.
  std::string a_bytes = Bytes({0xff, 0xff});
  ByteReader a(a_bytes);
  a.ReadString();
  EXPECT_FALSE(a.ok());
  // Negative lengths other than -1, even where null is allowed.
  std::string b_bytes = Bytes({0xff, 0xfe});
  ByteReader b(b_bytes);
  b.ReadNullableString();
  EXPECT_FALSE(b.ok());
  std::string c_bytes = Bytes({0x80, 0x00, 0x00, 0x00});
  ByteReader c(c_bytes);
  c.ReadNullableBytes();
  EXPECT_FALSE(c.ok());
  // A length longer than the bytes left.
  std::string d_bytes = Bytes({0x00, 0x05, 'a', 'b'});
  ByteReader d(d_bytes);
  d.ReadString();
  EXPECT_FALSE(d.ok());
  std::string e_bytes = Bytes({0x7f, 0xff, 0xff, 0xff, 'a'});
  ByteReader e(e_bytes);
  e.ReadBytes();
  EXPECT_FALSE(e.ok());
  // Compact null where not nullable.
  std::string f_bytes = Bytes({0x00});
  ByteReader f(f_bytes);
  f.ReadCompactString();
  EXPECT_FALSE(f.ok());
}

TEST(WireByteReaderTest, ArrayCountsAreCappedByTheBytesLeft) {
  std::string huge_bytes = Bytes({0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0});
  ByteReader huge(huge_bytes);
  huge.ReadArrayLength(/*nullable=*/false);
  EXPECT_FALSE(huge.ok());
  std::string null_array_bytes = Bytes({0xff, 0xff, 0xff, 0xff});
  ByteReader null_array(null_array_bytes);
  EXPECT_EQ(null_array.ReadArrayLength(/*nullable=*/true), -1);
  EXPECT_TRUE(null_array.ok());
  std::string null_not_allowed_bytes = Bytes({0xff, 0xff, 0xff, 0xff});
  ByteReader null_not_allowed(null_not_allowed_bytes);
  null_not_allowed.ReadArrayLength(/*nullable=*/false);
  EXPECT_FALSE(null_not_allowed.ok());
  std::string negative_bytes = Bytes({0xff, 0xff, 0xff, 0xfe});
  ByteReader negative(negative_bytes);
  negative.ReadArrayLength(/*nullable=*/true);
  EXPECT_FALSE(negative.ok());
  std::string fits_bytes = Bytes({0, 0, 0, 2, 1, 2});
  ByteReader fits(fits_bytes);
  EXPECT_EQ(fits.ReadArrayLength(false), 2);
  std::string compact_huge_bytes = Bytes({0xff, 0xff, 0xff, 0xff, 0x0f, 0});
  ByteReader compact_huge(compact_huge_bytes);
  compact_huge.ReadCompactArrayLength(false);
  EXPECT_FALSE(compact_huge.ok());
  std::string compact_null_bytes = Bytes({0x00});
  ByteReader compact_null(compact_null_bytes);
  EXPECT_EQ(compact_null.ReadCompactArrayLength(true), -1);
  std::string compact_bytes = Bytes({0x03, 1, 2});
  ByteReader compact(compact_bytes);
  EXPECT_EQ(compact.ReadCompactArrayLength(false), 2);
}

TEST(WireByteReaderTest, TaggedFieldsAreSkipped) {
  // Two fields: tag 0 with 2 bytes, tag 5 with 0 bytes; then a marker byte.
  std::string r_bytes = Bytes({0x02, 0x00, 0x02, 0xaa, 0xbb, 0x05, 0x00, 0x42});
  ByteReader r(r_bytes);
  r.SkipTaggedFields();
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.ReadInt8(), 0x42);
  std::string empty_bytes = Bytes({0x00});
  ByteReader empty(empty_bytes);
  empty.SkipTaggedFields();
  EXPECT_TRUE(empty.ok());
  EXPECT_EQ(empty.remaining(), 0u);
  std::string out_of_order_bytes = Bytes({0x02, 0x05, 0x00, 0x01, 0x00});
  ByteReader out_of_order(out_of_order_bytes);
  out_of_order.SkipTaggedFields();
  EXPECT_FALSE(out_of_order.ok());
  std::string too_long_bytes = Bytes({0x01, 0x00, 0x09, 0xaa});
  ByteReader too_long(too_long_bytes);
  too_long.SkipTaggedFields();
  EXPECT_FALSE(too_long.ok());
  std::string huge_count_bytes = Bytes({0xff, 0xff, 0xff, 0xff, 0x0f});
  ByteReader huge_count(huge_count_bytes);
  huge_count.SkipTaggedFields();
  EXPECT_FALSE(huge_count.ok());
}

TEST(WireByteReaderTest, UuidRoundTrips) {
  Uuid id;
  for (int i = 0; i < 16; i++) id.bytes[i] = static_cast<uint8_t>(i * 7);
  std::string out;
  ByteWriter(&out).WriteUuid(id);
  ASSERT_EQ(out.size(), 16u);
  ByteReader r(out);
  EXPECT_EQ(r.ReadUuid(), id);
  EXPECT_FALSE(id.IsZero());
  EXPECT_TRUE(Uuid().IsZero());
}

TEST(WireHeaderTest, RequestHeaderV1AndV2) {
  RequestHeader h{3, 4, 0x01020304, std::string("cli")};
  std::string out;
  ByteWriter w(&out);
  WriteRequestHeader(w, 1, h);
  EXPECT_EQ(out, Bytes({0, 3, 0, 4, 1, 2, 3, 4, 0, 3, 'c', 'l', 'i'}));
  WriteRequestHeader(w, 2, h);
  ByteReader r(out);
  RequestHeader a, b;
  ReadRequestHeader(r, 1, &a);
  ReadRequestHeader(r, 2, &b);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(a, h);
  EXPECT_EQ(b, h);
  // v2 keeps the classic int16 length of the client id, then tagged fields.
  EXPECT_EQ(out.substr(13), Bytes({0, 3, 0, 4, 1, 2, 3, 4, 0, 3, 'c', 'l', 'i', 0}));
  // A null client id.
  std::string null_id;
  ByteWriter w2(&null_id);
  WriteRequestHeader(w2, 1, RequestHeader{18, 0, 7, std::nullopt});
  EXPECT_EQ(null_id, Bytes({0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff}));
}

TEST(WireHeaderTest, ResponseHeaders) {
  std::string out;
  ByteWriter w(&out);
  WriteResponseHeader(w, 0, 9);
  WriteResponseHeader(w, 1, 10);
  EXPECT_EQ(out, Bytes({0, 0, 0, 9, 0, 0, 0, 10, 0}));
  ByteReader r(out);
  EXPECT_EQ(ReadResponseHeader(r, 0), 9);
  EXPECT_EQ(ReadResponseHeader(r, 1), 10);
  EXPECT_TRUE(r.ok());
}

std::span<const uint8_t> AsSpan(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(WireHeaderTest, FrameSizes) {
  std::string three = Bytes({0, 0, 1});
  auto partial = PeekFrameSize(AsSpan(three));
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE(partial->has_value());

  std::string ok = Bytes({0, 0, 1, 0, 'x'});
  auto size = PeekFrameSize(AsSpan(ok));
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->value(), 256);

  std::string negative = Bytes({0xff, 0xff, 0xff, 0xff});
  auto neg = PeekFrameSize(AsSpan(negative));
  EXPECT_EQ(neg.status().code(), base::StatusCode::kCorruption);

  std::string big = Bytes({0x06, 0x40, 0x00, 0x01});  // 100 MiB + 1
  auto too_big = PeekFrameSize(AsSpan(big));
  EXPECT_EQ(too_big.status().code(), base::StatusCode::kResourceExhausted);
  auto small_limit = PeekFrameSize(AsSpan(ok), 100);
  EXPECT_FALSE(small_limit.ok());
  std::string exact = Bytes({0x06, 0x40, 0x00, 0x00});
  EXPECT_TRUE(PeekFrameSize(AsSpan(exact)).ok());

  std::string frame = "ab";
  size_t start = BeginFrame(&frame);
  frame += "hello";
  FinishFrame(&frame, start);
  EXPECT_EQ(frame, std::string("ab") + Bytes({0, 0, 0, 5}) + "hello");
}

TEST(WireApiVersionsTableTest, RangesAreNonFlexibleExceptApiVersions) {
  std::set<int16_t> keys;
  int16_t last = -1;
  for (const ApiVersionRange& r : ApiVersionsTable()) {
    int16_t key = static_cast<int16_t>(r.api_key);
    EXPECT_GT(key, last) << "table must be sorted by key";
    last = key;
    keys.insert(key);
    EXPECT_LE(r.min_version, r.max_version);
    if (r.api_key == ApiKey::kApiVersions) {
      EXPECT_EQ(r.max_version, FirstFlexibleVersion(r.api_key));
    } else {
      EXPECT_LT(r.max_version, FirstFlexibleVersion(r.api_key)) << ApiKeyName(key);
    }
    EXPECT_TRUE(IsSupported(key, r.min_version));
    EXPECT_TRUE(IsSupported(key, r.max_version));
    EXPECT_FALSE(IsSupported(key, r.max_version + 1));
    EXPECT_FALSE(IsSupported(key, r.min_version - 1));
  }
  EXPECT_EQ(keys.count(static_cast<int16_t>(ApiKey::kSaslHandshake)), 0u);
  EXPECT_FALSE(IsSupported(999, 0));
  EXPECT_FALSE(IsSupported(-1, 0));
  // The floors clients rely on (KAFKA-CLIENTS.md).
  EXPECT_TRUE(IsSupported(0, 3));   // Produce 3: record batch v2
  EXPECT_TRUE(IsSupported(0, 7));   // Produce 7: ZSTD
  EXPECT_TRUE(IsSupported(1, 4));   // Fetch 4
  EXPECT_TRUE(IsSupported(1, 11));  // Fetch 11
  EXPECT_FALSE(IsSupported(9, 6));  // OffsetFetch 6 is flexible
  EXPECT_TRUE(IsSupported(10, 0));  // FindCoordinator 0: consumer groups
  EXPECT_TRUE(IsSupported(22, 0));  // InitProducerId: idempotence
}

TEST(WireApiVersionsTableTest, HeaderVersions) {
  EXPECT_EQ(RequestHeaderVersion(ApiKey::kApiVersions, 3), 2);
  EXPECT_EQ(RequestHeaderVersion(ApiKey::kApiVersions, 2), 1);
  EXPECT_EQ(ResponseHeaderVersion(ApiKey::kApiVersions, 3), 0);
  EXPECT_EQ(RequestHeaderVersion(ApiKey::kMetadata, 8), 1);
  EXPECT_EQ(RequestHeaderVersion(ApiKey::kMetadata, 9), 2);
  EXPECT_EQ(ResponseHeaderVersion(ApiKey::kMetadata, 9), 1);
  EXPECT_EQ(ResponseHeaderVersion(ApiKey::kFetch, 11), 0);
  EXPECT_EQ(ResponseHeaderVersion(ApiKey::kOffsetFetch, 6), 1);
  EXPECT_EQ(RequestHeaderVersion(ApiKey::kSaslHandshake, 1), 1);
}

TEST(WireErrorCodeTest, ValuesAndNamesAreKafkas) {
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kNone), 0);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kUnknownServerError), -1);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kOffsetOutOfRange), 1);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kUnknownTopicOrPartition), 3);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kNotCoordinator), 16);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kRebalanceInProgress), 27);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kUnsupportedVersion), 35);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kTopicAlreadyExists), 36);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kOutOfOrderSequenceNumber), 45);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kDuplicateSequenceNumber), 46);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kKafkaStorageError), 56);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kUnknownProducerId), 59);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kMemberIdRequired), 79);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kFencedInstanceId), 82);
  EXPECT_EQ(static_cast<int16_t>(ErrorCode::kUnknownTopicId), 100);
  EXPECT_STREQ(ErrorCodeName(ErrorCode::kKafkaStorageError), "KAFKA_STORAGE_ERROR");
  EXPECT_STREQ(ErrorCodeName(ErrorCode::kNone), "NONE");
  EXPECT_STREQ(ErrorCodeName(static_cast<ErrorCode>(999)), "UNKNOWN_ERROR_CODE");
  EXPECT_TRUE(IsRetriable(ErrorCode::kKafkaStorageError));
  EXPECT_TRUE(IsRetriable(ErrorCode::kNotCoordinator));
  EXPECT_FALSE(IsRetriable(ErrorCode::kOutOfOrderSequenceNumber));
  EXPECT_STREQ(ApiKeyName(18), "ApiVersions");
  EXPECT_STREQ(ApiKeyName(999), "Unknown");
}

}  // namespace
}  // namespace tally::broker
