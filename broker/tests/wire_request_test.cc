// Known bytes (requests as real clients send them, written out by hand from
// Kafka's message schemas) and hostile input for the request decoder
// (broker/src/wire).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "wire/byte_writer.h"
#include "wire/request.h"

namespace tally::broker {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

// Big-endian helpers to write vectors out by hand.
std::string I16(int16_t v) {
  std::string s;
  ByteWriter(&s).WriteInt16(v);
  return s;
}
std::string I32(int32_t v) {
  std::string s;
  ByteWriter(&s).WriteInt32(v);
  return s;
}
std::string I64(int64_t v) {
  std::string s;
  ByteWriter(&s).WriteInt64(v);
  return s;
}
std::string Str(const std::string& v) { return I16(static_cast<int16_t>(v.size())) + v; }

template <typename T>
const T& BodyAs(const base::Result<Request>& r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::holds_alternative<T>(r->body));
  return std::get<T>(r->body);
}

// Re-encodes a decoded request and checks it gives the same frame body.
void ExpectReencodesTo(const Request& request, const std::string& body) {
  std::string frame = EncodeRequest(request);
  ASSERT_GE(frame.size(), 4u);
  EXPECT_EQ(frame.substr(0, 4), I32(static_cast<int32_t>(body.size())));
  EXPECT_EQ(frame.substr(4), body);
}

// librdkafka 2.0.2 opens every connection with ApiVersions v3
// (rd_kafka_ApiVersionRequest): header v2 with the client id "rdkafka",
// then compact strings ClientSoftwareName and ClientSoftwareVersion.
TEST(WireKnownBytesTest, ApiVersionsV3AsLibrdkafkaSendsIt) {
  std::string body = Bytes({0x00, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01}) + Str("rdkafka") +
                     Bytes({0x00}) + Bytes({0x0b}) + "librdkafka" + Bytes({0x06}) + "2.0.2" +
                     Bytes({0x00});
  auto r = DecodeRequest(body);
  const auto& req = BodyAs<ApiVersionsRequest>(r);
  EXPECT_EQ(r->header.api_key, 18);
  EXPECT_EQ(r->header.api_version, 3);
  EXPECT_EQ(r->header.correlation_id, 1);
  EXPECT_EQ(r->header.client_id, std::optional<std::string>("rdkafka"));
  EXPECT_EQ(req.client_software_name, "librdkafka");
  EXPECT_EQ(req.client_software_version, "2.0.2");
  ExpectReencodesTo(*r, body);
}

// kafka-python 2.0.2's probe: ApiVersions v0 and Metadata v0 with an empty
// topic list, client id "kafka-python-2.0.2".
TEST(WireKnownBytesTest, KafkaPythonProbe) {
  std::string api = I16(18) + I16(0) + I32(1) + Str("kafka-python-2.0.2");
  auto r = DecodeRequest(api);
  BodyAs<ApiVersionsRequest>(r);
  EXPECT_EQ(r->header.client_id, std::optional<std::string>("kafka-python-2.0.2"));
  ExpectReencodesTo(*r, api);

  std::string meta = I16(3) + I16(0) + I32(2) + Str("kafka-python-2.0.2") + I32(0);
  auto m = DecodeRequest(meta);
  const auto& req = BodyAs<MetadataRequest>(m);
  EXPECT_FALSE(req.topics.has_value()) << "v0 empty means every topic";
  EXPECT_TRUE(req.allow_auto_topic_creation);
  ExpectReencodesTo(*m, meta);
}

TEST(WireKnownBytesTest, MetadataV4WithoutAutoCreation) {
  std::string body =
      I16(3) + I16(4) + I32(5) + Str("rdkafka") + I32(1) + Str("tally.events") + Bytes({0x00});
  auto r = DecodeRequest(body);
  const auto& req = BodyAs<MetadataRequest>(r);
  ASSERT_TRUE(req.topics.has_value());
  EXPECT_EQ(*req.topics, std::vector<std::string>{"tally.events"});
  EXPECT_FALSE(req.allow_auto_topic_creation);
  ExpectReencodesTo(*r, body);

  // v1+: null means every topic, empty means none.
  std::string all = I16(3) + I16(1) + I32(6) + Str("c") + I32(-1);
  EXPECT_FALSE(BodyAs<MetadataRequest>(DecodeRequest(all)).topics.has_value());
  std::string none = I16(3) + I16(1) + I32(6) + Str("c") + I32(0);
  auto n = DecodeRequest(none);
  ASSERT_TRUE(BodyAs<MetadataRequest>(n).topics.has_value());
  EXPECT_TRUE(BodyAs<MetadataRequest>(n).topics->empty());
}

TEST(WireKnownBytesTest, ProduceV3) {
  std::string body = I16(0) + I16(3) + I32(7) + Str("p") + I16(-1) /* transactional id */ +
                     I16(-1) /* acks */ + I32(30000) + I32(1) + Str("t") + I32(1) + I32(2) +
                     I32(3) + "abc";
  auto r = DecodeRequest(body);
  const auto& req = BodyAs<ProduceRequest>(r);
  EXPECT_FALSE(req.transactional_id.has_value());
  EXPECT_EQ(req.acks, -1);
  EXPECT_EQ(req.timeout_ms, 30000);
  ASSERT_EQ(req.topics.size(), 1u);
  EXPECT_EQ(req.topics[0].name, "t");
  ASSERT_EQ(req.topics[0].partitions.size(), 1u);
  EXPECT_EQ(req.topics[0].partitions[0].index, 2);
  EXPECT_EQ(req.topics[0].partitions[0].records, std::optional<std::string>("abc"));
  ExpectReencodesTo(*r, body);
}

TEST(WireKnownBytesTest, FetchV4AndV11) {
  std::string v4 = I16(1) + I16(4) + I32(8) + Str("c") + I32(-1) + I32(500) + I32(1) +
                   I32(52428800) + Bytes({0x00}) + I32(1) + Str("t") + I32(1) + I32(0) + I64(5) +
                   I32(1048576);
  auto r = DecodeRequest(v4);
  const auto& req = BodyAs<FetchRequest>(r);
  EXPECT_EQ(req.replica_id, -1);
  EXPECT_EQ(req.max_wait_ms, 500);
  EXPECT_EQ(req.min_bytes, 1);
  EXPECT_EQ(req.max_bytes, 52428800);
  ASSERT_EQ(req.topics.size(), 1u);
  EXPECT_EQ(req.topics[0].partitions[0].fetch_offset, 5);
  EXPECT_EQ(req.topics[0].partitions[0].partition_max_bytes, 1048576);
  ExpectReencodesTo(*r, v4);

  // v11: session id/epoch (7+), leader epoch (9+), log start offset (5+),
  // forgotten topics (7+), rack id (11+).
  std::string v11 = I16(1) + I16(11) + I32(9) + Str("c") + I32(-1) + I32(500) + I32(1) +
                    I32(52428800) + Bytes({0x01}) + I32(0) + I32(-1) + I32(1) + Str("t") + I32(1) +
                    I32(3) + I32(-1) + I64(42) + I64(-1) + I32(1048576) + I32(0) + Str("rack1");
  auto r11 = DecodeRequest(v11);
  const auto& f11 = BodyAs<FetchRequest>(r11);
  EXPECT_EQ(f11.isolation_level, 1);
  EXPECT_EQ(f11.session_id, 0);
  EXPECT_EQ(f11.session_epoch, -1);
  EXPECT_EQ(f11.topics[0].partitions[0].partition, 3);
  EXPECT_EQ(f11.topics[0].partitions[0].current_leader_epoch, -1);
  EXPECT_EQ(f11.topics[0].partitions[0].fetch_offset, 42);
  EXPECT_TRUE(f11.forgotten_topics_data.empty());
  EXPECT_EQ(f11.rack_id, "rack1");
  ExpectReencodesTo(*r11, v11);
}

TEST(WireKnownBytesTest, OffsetCommitV2CarriesRetentionTime) {
  std::string body = I16(8) + I16(2) + I32(10) + Str("c") + Str("g") + I32(3) + Str("m") + I64(-1) +
                     I32(1) + Str("t") + I32(1) + I32(0) + I64(10) + Str("");
  auto r = DecodeRequest(body);
  const auto& req = BodyAs<OffsetCommitRequest>(r);
  EXPECT_EQ(req.group_id, "g");
  EXPECT_EQ(req.generation_id, 3);
  EXPECT_EQ(req.member_id, "m");
  EXPECT_EQ(req.retention_time_ms, -1);
  EXPECT_EQ(req.topics[0].partitions[0].committed_offset, 10);
  EXPECT_EQ(req.topics[0].partitions[0].committed_metadata, std::optional<std::string>(""));
  ExpectReencodesTo(*r, body);
}

TEST(WireKnownBytesTest, JoinGroupV5) {
  std::string body = I16(11) + I16(5) + I32(11) + Str("c") + Str("g") + I32(45000) + I32(300000) +
                     Str("") + I16(-1) + Str("consumer") + I32(1) + Str("range") + I32(2) +
                     Bytes({0x00, 0x01});
  auto r = DecodeRequest(body);
  const auto& req = BodyAs<JoinGroupRequest>(r);
  EXPECT_EQ(req.session_timeout_ms, 45000);
  EXPECT_EQ(req.rebalance_timeout_ms, 300000);
  EXPECT_EQ(req.member_id, "");
  EXPECT_FALSE(req.group_instance_id.has_value());
  EXPECT_EQ(req.protocol_type, "consumer");
  ASSERT_EQ(req.protocols.size(), 1u);
  EXPECT_EQ(req.protocols[0].metadata, Bytes({0x00, 0x01}));
  ExpectReencodesTo(*r, body);
}

TEST(WireKnownBytesTest, ApiVersionsV3ResponseUsesHeaderV0AndCompactArrays) {
  ApiVersionsResponse resp;
  resp.api_keys.push_back({18, 0, 3});
  std::string frame = EncodeResponse(1, resp, 3);
  std::string body = I32(1) /* header v0: no tagged fields */ + I16(0) + Bytes({0x02}) + I16(18) +
                     I16(0) + I16(3) + Bytes({0x00}) + I32(0) + Bytes({0x00});
  EXPECT_EQ(frame, I32(static_cast<int32_t>(body.size())) + body);
}

TEST(WireKnownBytesTest, UnsupportedApiVersionsAnswerIsV0WithTheTable) {
  std::string frame = EncodeResponse(4, MakeUnsupportedApiVersionsResponse(), 0);
  std::string expected = I32(4) + I16(35) + I32(static_cast<int32_t>(ApiVersionsTable().size()));
  for (const ApiVersionRange& r : ApiVersionsTable()) {
    expected += I16(static_cast<int16_t>(r.api_key)) + I16(r.min_version) + I16(r.max_version);
  }
  EXPECT_EQ(frame, I32(static_cast<int32_t>(expected.size())) + expected);
}

TEST(WireKnownBytesTest, MetadataV1Response) {
  MetadataResponse resp;
  resp.brokers.push_back({1, "localhost", 9092, std::nullopt});
  resp.controller_id = 1;
  MetadataResponse::Topic topic;
  topic.name = "t";
  MetadataResponse::Partition p;
  p.partition_index = 0;
  p.leader_id = 1;
  p.replica_nodes = {1};
  p.isr_nodes = {1};
  topic.partitions.push_back(p);
  resp.topics.push_back(topic);
  std::string frame = EncodeResponse(3, resp, 1);
  std::string body = I32(3) + I32(1) + I32(1) + Str("localhost") + I32(9092) + I16(-1) + I32(1) +
                     I32(1) + I16(0) + Str("t") + Bytes({0x00}) + I32(1) + I16(0) + I32(0) +
                     I32(1) + I32(1) + I32(1) + I32(1) + I32(1);
  EXPECT_EQ(frame.substr(4), body);
}

TEST(WireKnownBytesTest, ProduceV7AndFetchV11Responses) {
  ProduceResponse produce;
  produce.topics.push_back({"t", {{0, ErrorCode::kNone, 100, -1, 0}}});
  std::string body =
      I32(9) + I32(1) + Str("t") + I32(1) + I32(0) + I16(0) + I64(100) + I64(-1) + I64(0) + I32(0);
  EXPECT_EQ(EncodeResponse(9, produce, 7).substr(4), body);

  FetchResponse fetch;
  FetchResponse::Partition p;
  p.high_watermark = 10;
  p.last_stable_offset = 10;
  p.log_start_offset = 0;
  p.records = "xyz";
  fetch.responses.push_back({"t", {p}});
  std::string fbody = I32(12) + I32(0) + I16(0) + I32(0) + I32(1) + Str("t") + I32(1) + I32(0) +
                      I16(0) + I64(10) + I64(10) + I64(0) + I32(-1) /* aborted: null */ +
                      I32(-1) /* preferred read replica */ + I32(3) + "xyz";
  EXPECT_EQ(EncodeResponse(12, fetch, 11).substr(4), fbody);
}

TEST(WireHostileInputTest, HugeArrayCountIsCorruptWithoutAllocating) {
  std::string body = I16(0) + I16(7) + I32(1) + Str("c") + I16(-1) + I16(1) + I32(1000) +
                     I32(0x7fffffff) + Str("t");
  auto r = DecodeRequest(body);
  EXPECT_EQ(r.status().code(), base::StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("Produce v7"), std::string::npos) << r.status().ToString();
}

TEST(WireHostileInputTest, NegativeLengthsOtherThanMinusOneAreCorrupt) {
  std::string txn = I16(0) + I16(7) + I32(1) + Str("c") + I16(-2) + I16(1) + I32(1000) + I32(0);
  EXPECT_EQ(DecodeRequest(txn).status().code(), base::StatusCode::kCorruption);
  std::string records = I16(0) + I16(7) + I32(1) + Str("c") + I16(-1) + I16(1) + I32(1000) +
                        I32(1) + Str("t") + I32(1) + I32(0) + I32(-2);
  EXPECT_EQ(DecodeRequest(records).status().code(), base::StatusCode::kCorruption);
  std::string client = I16(3) + I16(1) + I32(1) + I16(-5) + I32(-1);
  EXPECT_EQ(DecodeRequest(client).status().code(), base::StatusCode::kCorruption);
  // -1 is null where null is allowed.
  std::string null_records = I16(0) + I16(7) + I32(1) + Str("c") + I16(-1) + I16(1) + I32(1000) +
                             I32(1) + Str("t") + I32(1) + I32(0) + I32(-1);
  auto ok = DecodeRequest(null_records);
  EXPECT_FALSE(BodyAs<ProduceRequest>(ok).topics[0].partitions[0].records.has_value());
}

TEST(WireHostileInputTest, UnknownApiKeyKeepsTheHeader) {
  std::string body = I16(999) + I16(0) + I32(77) + Str("someone") + "garbage";
  auto r = DecodeRequest(body);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::holds_alternative<UnsupportedRequest>(r->body));
  EXPECT_EQ(r->header.api_key, 999);
  EXPECT_EQ(r->header.correlation_id, 77);
  EXPECT_EQ(r->header.client_id, std::optional<std::string>("someone"));
  // SaslHandshake is known but not supported.
  auto sasl = DecodeRequest(I16(17) + I16(1) + I32(78) + Str("c") + Str("PLAIN"));
  ASSERT_TRUE(sasl.ok());
  EXPECT_TRUE(std::holds_alternative<UnsupportedRequest>(sasl->body));
}

TEST(WireHostileInputTest, VersionsOutsideTheTableAreUnsupported) {
  // ApiVersions v4: the server answers UNSUPPORTED_VERSION in a v0 body.
  std::string api = I16(18) + I16(4) + I32(5) + Str("rdkafka") + Bytes({0x00, 0x01, 0x01, 0x00});
  auto r = DecodeRequest(api);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::holds_alternative<UnsupportedRequest>(r->body));
  EXPECT_EQ(r->header.api_version, 4);
  EXPECT_EQ(r->header.correlation_id, 5);
  // Metadata v9 is flexible: not spoken.
  auto m = DecodeRequest(I16(3) + I16(9) + I32(6) + Str("c") + Bytes({0x00, 0x01, 0x01, 0x00}));
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(std::holds_alternative<UnsupportedRequest>(m->body));
  // Produce v2 is below the table.
  auto p = DecodeRequest(I16(0) + I16(2) + I32(7) + Str("c"));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(std::holds_alternative<UnsupportedRequest>(p->body));
  // Negative version.
  auto neg = DecodeRequest(I16(3) + I16(-1) + I32(8));
  ASSERT_TRUE(neg.ok());
  EXPECT_TRUE(std::holds_alternative<UnsupportedRequest>(neg->body));
  EXPECT_FALSE(neg->header.client_id.has_value());
}

TEST(WireHostileInputTest, ShortHeadersAreCorrupt) {
  for (size_t n = 0; n < 8; n++) {
    std::string body = (I16(18) + I16(0) + I32(1)).substr(0, n);
    EXPECT_EQ(DecodeRequest(body).status().code(), base::StatusCode::kCorruption) << n;
  }
  // Supported key and version but no client id.
  EXPECT_EQ(DecodeRequest(I16(18) + I16(0) + I32(1)).status().code(),
            base::StatusCode::kCorruption);
}

}  // namespace
}  // namespace tally::broker
