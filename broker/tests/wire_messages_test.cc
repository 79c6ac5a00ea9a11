// Round trips of every message struct at every version the codec knows, and
// strict prefixes of each encoding rejected (broker/src/wire).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "wire/admin_messages.h"
#include "wire/api_versions.h"
#include "wire/group_messages.h"
#include "wire/produce_fetch_messages.h"
#include "wire/request.h"

namespace tally::broker {
namespace {

int16_t MaxVersion(ApiKey key) {
  for (const ApiVersionRange& r : ApiVersionsTable()) {
    if (r.api_key == key) return r.max_version;
  }
  return -1;
}

template <typename T>
std::string EncodeBody(const T& message, int16_t version) {
  std::string out;
  ByteWriter writer(&out);
  message.Encode(writer, version);
  return out;
}

template <typename T>
class WireMessageTest : public ::testing::Test {};

using AllMessages = ::testing::Types<
    ProduceRequest, ProduceResponse, FetchRequest, FetchResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, JoinGroupRequest, JoinGroupResponse, HeartbeatRequest,
    HeartbeatResponse, LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
    DescribeGroupsRequest, DescribeGroupsResponse, ListGroupsRequest, ListGroupsResponse,
    ApiVersionsRequest, ApiVersionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DeleteRecordsRequest, DeleteRecordsResponse,
    InitProducerIdRequest, InitProducerIdResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    AlterConfigsRequest, AlterConfigsResponse>;
TYPED_TEST_SUITE(WireMessageTest, AllMessages);

// Every field present at a version comes back exactly; the decoder consumes
// exactly what the encoder wrote. Versions below the supported minimum are
// included: the codec still knows their layout.
TYPED_TEST(WireMessageTest, FilledMessageRoundTripsAtEveryVersion) {
  int16_t max = MaxVersion(TypeParam::kApiKey);
  ASSERT_GE(max, 0);
  for (int16_t v = 0; v <= max; v++) {
    TypeParam original;
    original.FillForTest(v);
    std::string bytes = EncodeBody(original, v);
    ByteReader reader(bytes);
    TypeParam decoded;
    base::Status st = decoded.Decode(reader, v);
    ASSERT_TRUE(st.ok()) << "v" << v << ": " << st.ToString();
    EXPECT_EQ(reader.remaining(), 0u) << "v" << v;
    EXPECT_TRUE(decoded == original) << "v" << v;
    EXPECT_EQ(EncodeBody(decoded, v), bytes) << "v" << v;
  }
}

TYPED_TEST(WireMessageTest, DefaultMessageRoundTripsAtEveryVersion) {
  int16_t max = MaxVersion(TypeParam::kApiKey);
  for (int16_t v = 0; v <= max; v++) {
    TypeParam original;
    std::string bytes = EncodeBody(original, v);
    ByteReader reader(bytes);
    TypeParam decoded;
    ASSERT_TRUE(decoded.Decode(reader, v).ok()) << "v" << v;
    EXPECT_EQ(reader.remaining(), 0u);
    EXPECT_TRUE(decoded == original) << "v" << v;
  }
}

// A decoder is deterministic, so any strict prefix of a valid encoding must
// run out of bytes: an error, never a crash or a read past the end (ASan).
TYPED_TEST(WireMessageTest, EveryTruncationIsAnError) {
  int16_t max = MaxVersion(TypeParam::kApiKey);
  for (int16_t v = 0; v <= max; v++) {
    TypeParam original;
    original.FillForTest(v);
    std::string bytes = EncodeBody(original, v);
    for (size_t n = 0; n < bytes.size(); n++) {
      // A copy of exactly n bytes, so ASan sees any read past the end.
      std::string prefix = bytes.substr(0, n);
      ByteReader reader(prefix);
      TypeParam decoded;
      base::Status st = decoded.Decode(reader, v);
      EXPECT_EQ(st.code(), base::StatusCode::kCorruption) << "v" << v << " n=" << n;
    }
  }
}

template <typename T>
class WireRequestFrameTest : public ::testing::Test {};

using AllRequests =
    ::testing::Types<ProduceRequest, FetchRequest, ListOffsetsRequest, MetadataRequest,
                     OffsetCommitRequest, OffsetFetchRequest, FindCoordinatorRequest,
                     JoinGroupRequest, HeartbeatRequest, LeaveGroupRequest, SyncGroupRequest,
                     DescribeGroupsRequest, ListGroupsRequest, ApiVersionsRequest,
                     CreateTopicsRequest, DeleteTopicsRequest, DeleteRecordsRequest,
                     InitProducerIdRequest, DescribeConfigsRequest, AlterConfigsRequest>;
TYPED_TEST_SUITE(WireRequestFrameTest, AllRequests);

int16_t MinVersion(ApiKey key) {
  for (const ApiVersionRange& r : ApiVersionsTable()) {
    if (r.api_key == key) return r.min_version;
  }
  return -1;
}

// Whole frames through DecodeRequest at every supported version, and every
// truncated frame body rejected as corrupt (not as unsupported) once the
// first 8 header bytes are there.
TYPED_TEST(WireRequestFrameTest, FramesRoundTripAndTruncationsAreCorrupt) {
  ApiKey key = TypeParam::kApiKey;
  for (int16_t v = MinVersion(key); v <= MaxVersion(key); v++) {
    Request request;
    request.header = RequestHeader{static_cast<int16_t>(key), v, 1000 + v, "test-client"};
    TypeParam body;
    body.FillForTest(v);
    request.body = body;
    std::string frame = EncodeRequest(request);
    ASSERT_GE(frame.size(), 4u);
    std::string body_bytes = frame.substr(4);
    auto decoded = DecodeRequest(body_bytes);
    ASSERT_TRUE(decoded.ok()) << "v" << v << ": " << decoded.status().ToString();
    EXPECT_TRUE(*decoded == request) << "v" << v;
    ASSERT_TRUE(std::holds_alternative<TypeParam>(decoded->body));
    for (size_t n = 0; n < body_bytes.size(); n++) {
      std::string prefix = body_bytes.substr(0, n);
      auto truncated = DecodeRequest(prefix);
      EXPECT_EQ(truncated.status().code(), base::StatusCode::kCorruption) << "v" << v << " n=" << n;
    }
    auto trailing = DecodeRequest(body_bytes + "x");
    EXPECT_EQ(trailing.status().code(), base::StatusCode::kCorruption) << "v" << v;
  }
}

TEST(WireResponseFrameTest, EveryResponseRoundTripsThroughFrames) {
  auto check = [](auto response) {
    using T = decltype(response);
    for (int16_t v = MinVersion(T::kApiKey); v <= MaxVersion(T::kApiKey); v++) {
      response.FillForTest(v);
      std::string frame = EncodeResponse(77, ResponseBody(response), v);
      ASSERT_GE(frame.size(), 8u);
      int32_t correlation_id = 0;
      auto decoded =
          DecodeResponse(T::kApiKey, v, std::string_view(frame).substr(4), &correlation_id);
      ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
      EXPECT_EQ(correlation_id, 77);
      ASSERT_TRUE(std::holds_alternative<T>(*decoded));
      EXPECT_TRUE(std::get<T>(*decoded) == response);
      EXPECT_EQ(ResponseApiKey(*decoded), T::kApiKey);
    }
  };
  check(ProduceResponse());
  check(FetchResponse());
  check(ListOffsetsResponse());
  check(MetadataResponse());
  check(OffsetCommitResponse());
  check(OffsetFetchResponse());
  check(FindCoordinatorResponse());
  check(JoinGroupResponse());
  check(HeartbeatResponse());
  check(LeaveGroupResponse());
  check(SyncGroupResponse());
  check(DescribeGroupsResponse());
  check(ListGroupsResponse());
  check(ApiVersionsResponse());
  check(CreateTopicsResponse());
  check(DeleteTopicsResponse());
  check(DeleteRecordsResponse());
  check(InitProducerIdResponse());
  check(DescribeConfigsResponse());
  check(AlterConfigsResponse());
}

}  // namespace
}  // namespace tally::broker
