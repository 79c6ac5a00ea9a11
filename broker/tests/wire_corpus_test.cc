// The seed corpus of the request decoder's fuzz target (requests as
// librdkafka 2.0.2 and kafka-python 2.0.2 send them), its round trip, and a
// deterministic byte-mutation pass over it (broker/src/wire).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "wire/byte_writer.h"
#include "wire/request.h"

namespace tally::broker {
namespace {

// CRC-32C (Castagnoli), bit by bit: only to make realistic record batches.
uint32_t Crc32c(const std::string& data) {
  uint32_t crc = 0xffffffff;
  for (unsigned char c : data) {
    crc ^= c;
    for (int i = 0; i < 8; i++) crc = (crc >> 1) ^ (0x82f63b78 & (0 - (crc & 1)));
  }
  return ~crc;
}

// A record batch of format v2 as librdkafka frames one: `count` records with
// a key and a value, no compression, optionally idempotent.
std::string RecordBatch(int count, int64_t producer_id, int32_t base_sequence) {
  std::string records;
  ByteWriter rw(&records);
  for (int i = 0; i < count; i++) {
    std::string rec;
    ByteWriter w(&rec);
    w.WriteInt8(0);     // attributes
    w.WriteVarlong(i);  // timestamp delta
    w.WriteVarint(i);   // offset delta
    std::string key = "user-" + std::to_string(i);
    std::string value = "{\"type\":\"like\",\"n\":" + std::to_string(i) + "}";
    w.WriteVarint(static_cast<int32_t>(key.size()));
    w.WriteRaw(key);
    w.WriteVarint(static_cast<int32_t>(value.size()));
    w.WriteRaw(value);
    w.WriteVarint(0);  // headers
    rw.WriteVarint(static_cast<int32_t>(rec.size()));
    rw.WriteRaw(rec);
  }
  std::string after_crc;
  ByteWriter a(&after_crc);
  a.WriteInt16(0);              // attributes: no compression, CreateTime
  a.WriteInt32(count - 1);      // last offset delta
  a.WriteInt64(1700000000000);  // base timestamp
  a.WriteInt64(1700000000000 + count - 1);
  a.WriteInt64(producer_id);
  a.WriteInt16(producer_id >= 0 ? 0 : -1);
  a.WriteInt32(base_sequence);
  a.WriteInt32(count);
  a.WriteRaw(records);
  std::string batch;
  ByteWriter b(&batch);
  b.WriteInt64(0);  // base offset: the broker assigns it
  b.WriteInt32(static_cast<int32_t>(4 + 1 + 4 + after_crc.size()));
  b.WriteInt32(-1);  // partition leader epoch
  b.WriteInt8(2);    // magic
  b.WriteUint32(Crc32c(after_crc));
  b.WriteRaw(after_crc);
  return batch;
}

Request MakeRequest(int16_t version, int32_t correlation_id, RequestBody body,
                    std::string client_id = "rdkafka") {
  Request r;
  r.header.api_version = version;
  r.header.correlation_id = correlation_id;
  r.header.client_id = std::move(client_id);
  r.body = std::move(body);
  std::visit(
      [&](const auto& b) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(b)>, UnsupportedRequest>) {
          r.header.api_key = static_cast<int16_t>(std::decay_t<decltype(b)>::kApiKey);
        }
      },
      r.body);
  return r;
}

// Requests as librdkafka 2.0.2 (and kafka-python 2.0.2) send them: the seed
// corpus of the request decoder's fuzz target, one file each.
std::vector<std::pair<std::string, Request>> CorpusRequests() {
  std::vector<std::pair<std::string, Request>> out;
  ApiVersionsRequest api3{"librdkafka", "2.0.2"};
  out.emplace_back("api_versions_v3", MakeRequest(3, 1, api3));
  out.emplace_back("api_versions_v0_kafka_python",
                   MakeRequest(0, 1, ApiVersionsRequest{}, "kafka-python-2.0.2"));
  MetadataRequest meta4;
  meta4.topics = std::vector<std::string>{"tally.events", "tally.deltas"};
  meta4.allow_auto_topic_creation = false;
  out.emplace_back("metadata_v4", MakeRequest(4, 2, meta4));
  out.emplace_back("metadata_v0_kafka_python",
                   MakeRequest(0, 2, MetadataRequest{}, "kafka-python-2.0.2"));
  MetadataRequest meta1_all;
  out.emplace_back("metadata_v1_all", MakeRequest(1, 3, meta1_all));

  ProduceRequest produce;
  produce.acks = -1;
  produce.timeout_ms = 30000;
  produce.topics.push_back(
      {"tally.events", {{0, RecordBatch(3, 1000, 0)}, {1, RecordBatch(1, 1000, 5)}}});
  out.emplace_back("produce_v7", MakeRequest(7, 4, produce));
  ProduceRequest produce3;
  produce3.acks = 1;
  produce3.timeout_ms = 5000;
  produce3.topics.push_back({"t", {{0, RecordBatch(2, -1, -1)}}});
  out.emplace_back("produce_v3", MakeRequest(3, 5, produce3));

  FetchRequest fetch;
  fetch.max_wait_ms = 500;
  fetch.min_bytes = 1;
  fetch.max_bytes = 52428800;
  fetch.topics.push_back({"tally.events", {{0, -1, 42, -1, 1048576}, {1, -1, 0, -1, 1048576}}});
  out.emplace_back("fetch_v11", MakeRequest(11, 6, fetch));
  out.emplace_back("fetch_v4", MakeRequest(4, 7, fetch));

  ListOffsetsRequest list;
  list.topics.push_back({"tally.events", {{0, -1, -1, 1}}});
  out.emplace_back("list_offsets_v2", MakeRequest(2, 8, list));
  list.topics[0].partitions[0].timestamp = -2;
  out.emplace_back("list_offsets_v0", MakeRequest(0, 9, list));
  out.emplace_back("list_offsets_v5", MakeRequest(5, 10, list));

  out.emplace_back("find_coordinator_v2",
                   MakeRequest(2, 11, FindCoordinatorRequest{"tally-agg", 0}));
  out.emplace_back("find_coordinator_v0",
                   MakeRequest(0, 11, FindCoordinatorRequest{"g", 0}, "kafka-python-2.0.2"));

  // A consumer protocol subscription (version 1, topics, no user data, no
  // owned partitions) as the protocol metadata.
  std::string subscription;
  {
    ByteWriter w(&subscription);
    w.WriteInt16(1);
    w.WriteInt32(1);
    w.WriteString("tally.events");
    w.WriteNullableBytes(std::nullopt);
    w.WriteInt32(0);
  }
  JoinGroupRequest join;
  join.group_id = "tally-agg";
  join.session_timeout_ms = 45000;
  join.rebalance_timeout_ms = 300000;
  join.protocol_type = "consumer";
  join.protocols = {{"cooperative-sticky", subscription}, {"range", subscription}};
  out.emplace_back("join_group_v5", MakeRequest(5, 12, join));
  join.member_id = "rdkafka-6f1c0f6e-3c1d-4a7c-9d55-0e4d2c1c5b11";
  out.emplace_back("join_group_v5_member", MakeRequest(5, 13, join));

  std::string assignment;
  {
    ByteWriter w(&assignment);
    w.WriteInt16(1);
    w.WriteInt32(1);
    w.WriteString("tally.events");
    w.WriteInt32(2);
    w.WriteInt32(0);
    w.WriteInt32(1);
    w.WriteNullableBytes(std::nullopt);
  }
  SyncGroupRequest sync;
  sync.group_id = "tally-agg";
  sync.generation_id = 1;
  sync.member_id = join.member_id;
  sync.assignments = {{join.member_id, assignment}};
  out.emplace_back("sync_group_v3", MakeRequest(3, 14, sync));
  out.emplace_back("heartbeat_v3",
                   MakeRequest(3, 15, HeartbeatRequest{"tally-agg", 1, join.member_id, {}}));
  out.emplace_back("leave_group_v1",
                   MakeRequest(1, 16, LeaveGroupRequest{"tally-agg", join.member_id}));

  OffsetCommitRequest commit;
  commit.group_id = "tally-agg";
  commit.generation_id = 1;
  commit.member_id = join.member_id;
  commit.topics.push_back(
      {"tally.events", {{0, 43, -1, -1, std::string()}, {1, 7, -1, -1, std::string()}}});
  out.emplace_back("offset_commit_v7", MakeRequest(7, 17, commit));
  out.emplace_back("offset_commit_v2", MakeRequest(2, 18, commit));

  OffsetFetchRequest offset_fetch;
  offset_fetch.group_id = "tally-agg";
  offset_fetch.topics = std::vector<OffsetFetchRequest::Topic>{{"tally.events", {0, 1}}};
  out.emplace_back("offset_fetch_v5", MakeRequest(5, 19, offset_fetch));
  out.emplace_back("offset_fetch_v1", MakeRequest(1, 20, offset_fetch));

  out.emplace_back("describe_groups_v4",
                   MakeRequest(4, 21, DescribeGroupsRequest{{"tally-agg"}, false}));
  out.emplace_back("list_groups_v2", MakeRequest(2, 22, ListGroupsRequest{}));

  CreateTopicsRequest create;
  create.topics.push_back(
      {"tally.deltas", 8, 1, {}, {{"retention.ms", "-1"}, {"cleanup.policy", "delete"}}});
  create.timeout_ms = 30000;
  out.emplace_back("create_topics_v4", MakeRequest(4, 23, create));
  out.emplace_back("delete_topics_v3",
                   MakeRequest(3, 24, DeleteTopicsRequest{{"old.topic"}, 30000}));
  DeleteRecordsRequest del;
  del.topics.push_back({"tally.events", {{0, 40}}});
  del.timeout_ms = 30000;
  out.emplace_back("delete_records_v1", MakeRequest(1, 25, del));
  out.emplace_back("init_producer_id_v1",
                   MakeRequest(1, 26, InitProducerIdRequest{std::nullopt, 60000}));
  DescribeConfigsRequest describe;
  describe.resources.push_back({2, "tally.events", std::nullopt});
  describe.resources.push_back({4, "1", std::vector<std::string>{"log.retention.ms"}});
  out.emplace_back("describe_configs_v2", MakeRequest(2, 27, describe));
  AlterConfigsRequest alter;
  alter.resources.push_back({2, "tally.events", {{"retention.ms", "86400000"}}});
  out.emplace_back("alter_configs_v1", MakeRequest(1, 28, alter));
  return out;
}

// Every corpus request decodes back to itself. With TALLY_WIRE_WRITE_CORPUS
// set to a directory, this test also (re)writes the checked-in corpus there
// (broker/fuzz/corpus/request_decoder), one frame body per file.
TEST(WireCorpusTest, CorpusRequestsRoundTrip) {
  const char* dir = std::getenv("TALLY_WIRE_WRITE_CORPUS");
  for (const auto& [name, request] : CorpusRequests()) {
    std::string frame = EncodeRequest(request);
    std::string body = frame.substr(4);
    auto decoded = DecodeRequest(body);
    ASSERT_TRUE(decoded.ok()) << name << ": " << decoded.status().ToString();
    EXPECT_FALSE(std::holds_alternative<UnsupportedRequest>(decoded->body)) << name;
    EXPECT_TRUE(*decoded == request) << name;
    if (dir != nullptr) {
      std::ofstream f(std::filesystem::path(dir) / name, std::ios::binary);
      f.write(body.data(), static_cast<std::streamsize>(body.size()));
      ASSERT_TRUE(f.good()) << name;
    }
  }
}

// A small deterministic mutation fuzz beside the libFuzzer target: every
// byte of every corpus request replaced by a few values must decode or fail
// cleanly, and whatever decodes must round-trip.
TEST(WireHostileInputTest, MutatedCorpusNeverCrashesAndRoundTrips) {
  int decoded_count = 0;
  for (const auto& [name, request] : CorpusRequests()) {
    std::string body = EncodeRequest(request).substr(4);
    for (size_t i = 0; i < body.size(); i++) {
      for (int value : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
        std::string mutated = body;
        mutated[i] = static_cast<char>(value);
        auto r = DecodeRequest(mutated);
        if (!r.ok() || std::holds_alternative<UnsupportedRequest>(r->body)) continue;
        decoded_count++;
        auto again = DecodeRequest(EncodeRequest(*r).substr(4));
        ASSERT_TRUE(again.ok()) << name << " byte " << i;
        EXPECT_TRUE(*again == *r) << name << " byte " << i;
      }
    }
  }
  EXPECT_GT(decoded_count, 0);
}

}  // namespace
}  // namespace tally::broker
