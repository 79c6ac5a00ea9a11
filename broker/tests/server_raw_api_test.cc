// APIs no client test above reaches, through a raw connection and the wire
// codec: InitProducerId across restarts, DeleteRecords, DeleteTopics,
// ListOffsets v0, commits outside group management with OffsetFetch,
// ListGroups and DescribeGroups, AlterConfigs and CreateTopics' checks.
#include <gtest/gtest.h>

#include <string>

#include "server_test_util.h"
#include "testing/temp_dir.h"

namespace tally::broker::test {
namespace {

using testing::TempDir;

template <typename T>
T Ask(RawConn& c, RequestBody body, int16_t version) {
  auto r = c.RoundTrip(std::move(body), version);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return T();
  return std::get<T>(*r);
}

TEST(ServerRawApiTest, ProducerIdsAreNeverReusedAcrossRestarts) {
  TempDir dir("broker-server");
  int64_t first = -1;
  {
    auto broker = StartBroker(dir.path());
    ASSERT_NE(broker, nullptr);
    RawConn c(broker->port());
    auto a = Ask<InitProducerIdResponse>(c, InitProducerIdRequest{}, 1);
    auto b = Ask<InitProducerIdResponse>(c, InitProducerIdRequest{}, 0);
    EXPECT_EQ(a.error_code, ErrorCode::kNone);
    EXPECT_EQ(a.producer_epoch, 0);
    EXPECT_EQ(b.producer_id, a.producer_id + 1);
    first = a.producer_id;
    InitProducerIdRequest txn;
    txn.transactional_id = "txn-1";
    EXPECT_NE(Ask<InitProducerIdResponse>(c, txn, 1).error_code, ErrorCode::kNone);
  }
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  RawConn c(broker->port());
  auto again = Ask<InitProducerIdResponse>(c, InitProducerIdRequest{}, 1);
  EXPECT_EQ(again.error_code, ErrorCode::kNone);
  EXPECT_GT(again.producer_id, first + 1);
}

ListOffsetsRequest Offsets(const std::string& topic, int64_t timestamp) {
  ListOffsetsRequest r;
  auto& t = r.topics.emplace_back();
  t.name = topic;
  ListOffsetsRequest::Partition p;
  p.timestamp = timestamp;
  t.partitions.push_back(p);
  return r;
}

TEST(ServerRawApiTest, DeleteRecordsListOffsetsAndDeleteTopics) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("d", 1).ok());
  RawConn c(broker->port());
  ProduceRequest p;
  p.acks = 1;
  p.topics.push_back({"d", {{0, MakeBatch({"a", "b", "c", "d"}, 5000)}}});
  auto produced = Ask<ProduceResponse>(c, p, 3);
  ASSERT_EQ(produced.topics.at(0).partitions.at(0).error_code, ErrorCode::kNone);

  auto latest = Ask<ListOffsetsResponse>(c, Offsets("d", -1), 0);
  EXPECT_EQ(latest.topics.at(0).partitions.at(0).old_style_offsets, std::vector<int64_t>{4});
  auto by_time = Ask<ListOffsetsResponse>(c, Offsets("d", 4000), 1);
  EXPECT_EQ(by_time.topics.at(0).partitions.at(0).offset, 0);
  auto none = Ask<ListOffsetsResponse>(c, Offsets("d", 9000), 5);
  EXPECT_EQ(none.topics.at(0).partitions.at(0).offset, -1);

  DeleteRecordsRequest del;
  del.topics.push_back({"d", {{0, 2}}});
  auto deleted = Ask<DeleteRecordsResponse>(c, del, 1);
  EXPECT_EQ(deleted.topics.at(0).partitions.at(0).error_code, ErrorCode::kNone);
  EXPECT_EQ(deleted.topics.at(0).partitions.at(0).low_watermark, 2);
  del.topics[0].partitions[0].offset = 99;
  deleted = Ask<DeleteRecordsResponse>(c, del, 1);
  EXPECT_EQ(deleted.topics.at(0).partitions.at(0).error_code, ErrorCode::kOffsetOutOfRange);
  auto earliest = Ask<ListOffsetsResponse>(c, Offsets("d", -2), 2);
  EXPECT_EQ(earliest.topics.at(0).partitions.at(0).offset, 2);

  DeleteTopicsRequest dt;
  dt.topic_names = {"d", "never"};
  auto dropped = Ask<DeleteTopicsResponse>(c, dt, 1);
  ASSERT_EQ(dropped.responses.size(), 2u);
  EXPECT_EQ(dropped.responses[0].error_code, ErrorCode::kNone);
  EXPECT_EQ(dropped.responses[1].error_code, ErrorCode::kUnknownTopicOrPartition);
  MetadataRequest md;
  md.topics = std::vector<std::string>{"d"};
  md.allow_auto_topic_creation = false;
  auto meta = Ask<MetadataResponse>(c, md, 4);
  ASSERT_EQ(meta.topics.size(), 1u);
  EXPECT_EQ(meta.topics[0].error_code, ErrorCode::kUnknownTopicOrPartition);
  md.topics = std::vector<std::string>{};
  EXPECT_TRUE(Ask<MetadataResponse>(c, md, 1).topics.empty());  // v1+: none
}

TEST(ServerRawApiTest, SimpleCommitsAndGroupListings) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("t", 2).ok());
  RawConn c(broker->port());
  OffsetCommitRequest commit;
  commit.group_id = "plain";
  commit.topics.push_back({"t", {{0, 5, -1, -1, "meta"}, {1, 9, -1, -1, std::nullopt}}});
  commit.topics.push_back({"nope", {{0, 1, -1, -1, std::nullopt}}});
  auto committed = Ask<OffsetCommitResponse>(c, commit, 2);
  ASSERT_EQ(committed.topics.size(), 2u);
  EXPECT_EQ(committed.topics[0].partitions[0].error_code, ErrorCode::kNone);
  EXPECT_EQ(committed.topics[0].partitions[1].error_code, ErrorCode::kNone);
  EXPECT_EQ(committed.topics[1].partitions[0].error_code, ErrorCode::kUnknownTopicOrPartition);

  OffsetFetchRequest fetch;
  fetch.group_id = "plain";
  fetch.topics = std::nullopt;  // every committed partition (v2+)
  auto offsets = Ask<OffsetFetchResponse>(c, fetch, 5);
  ASSERT_EQ(offsets.topics.size(), 1u);
  ASSERT_EQ(offsets.topics[0].partitions.size(), 2u);
  EXPECT_EQ(offsets.topics[0].partitions[0].committed_offset, 5);
  EXPECT_EQ(offsets.topics[0].partitions[0].metadata, "meta");
  EXPECT_EQ(offsets.topics[0].partitions[1].committed_offset, 9);

  auto groups = Ask<ListGroupsResponse>(c, ListGroupsRequest{}, 2);
  ASSERT_EQ(groups.groups.size(), 1u);
  EXPECT_EQ(groups.groups[0].group_id, "plain");
  DescribeGroupsRequest describe;
  describe.groups = {"plain", "ghost"};
  auto described = Ask<DescribeGroupsResponse>(c, describe, 4);
  ASSERT_EQ(described.groups.size(), 2u);
  EXPECT_EQ(described.groups[0].group_state, "Empty");
  EXPECT_EQ(described.groups[1].group_state, "Dead");

  FindCoordinatorRequest find;
  find.key = "plain";
  auto coordinator = Ask<FindCoordinatorResponse>(c, find, 2);
  EXPECT_EQ(coordinator.node_id, 0);
  EXPECT_EQ(coordinator.port, broker->port());
}

TEST(ServerRawApiTest, CreateTopicsChecksAndAlterConfigs) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  RawConn c(broker->port());
  CreateTopicsRequest create;
  create.topics.push_back({"ok", 2, 1, {}, {{"cleanup.policy", "compact"}}});
  create.topics.push_back({"zero", 0, 1, {}, {}});
  create.topics.push_back({"rf3", 1, 3, {}, {}});
  create.topics.push_back({"dup", 1, 1, {}, {}});
  create.topics.push_back({"dup", 1, 1, {}, {}});
  create.topics.push_back({"..", 1, 1, {}, {}});
  auto created = Ask<CreateTopicsResponse>(c, create, 4);
  ASSERT_EQ(created.topics.size(), 6u);
  EXPECT_EQ(created.topics[0].error_code, ErrorCode::kNone);
  EXPECT_EQ(created.topics[1].error_code, ErrorCode::kInvalidPartitions);
  EXPECT_EQ(created.topics[2].error_code, ErrorCode::kInvalidReplicationFactor);
  EXPECT_EQ(created.topics[3].error_code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(created.topics[5].error_code, ErrorCode::kInvalidTopicException);
  EXPECT_TRUE(created.topics[5].error_message.has_value());

  CreateTopicsRequest dry;
  dry.validate_only = true;
  dry.topics.push_back({"dry", 1, 1, {}, {}});
  EXPECT_EQ(Ask<CreateTopicsResponse>(c, dry, 1).topics.at(0).error_code, ErrorCode::kNone);
  MetadataRequest md;
  md.topics = std::vector<std::string>{"dry"};
  md.allow_auto_topic_creation = false;
  EXPECT_EQ(Ask<MetadataResponse>(c, md, 4).topics.at(0).error_code,
            ErrorCode::kUnknownTopicOrPartition);

  AlterConfigsRequest alter;
  alter.resources.push_back({kResourceTypeTopic, "ok", {{"retention.ms", "1000"}}});
  alter.resources.push_back({kResourceTypeTopic, "ok", {{"retention.ms", "never"}}});
  auto altered = Ask<AlterConfigsResponse>(c, alter, 1);
  ASSERT_EQ(altered.responses.size(), 2u);
  EXPECT_EQ(altered.responses[0].error_code, ErrorCode::kNone);
  EXPECT_EQ(altered.responses[1].error_code, ErrorCode::kInvalidConfig);
  DescribeConfigsRequest describe;
  describe.resources.push_back(
      {kResourceTypeTopic, "ok", std::vector<std::string>{"retention.ms", "cleanup.policy"}});
  auto configs = Ask<DescribeConfigsResponse>(c, describe, 1);
  ASSERT_EQ(configs.results.size(), 1u);
  ASSERT_EQ(configs.results[0].configs.size(), 2u);
  // Sorted by name; AlterConfigs replaced the whole set, so compact is gone.
  EXPECT_EQ(configs.results[0].configs[0].name, "cleanup.policy");
  EXPECT_EQ(configs.results[0].configs[0].value, "delete");
  EXPECT_EQ(configs.results[0].configs[1].value, "1000");
  EXPECT_EQ(configs.results[0].configs[1].config_source, 1);
}

}  // namespace
}  // namespace tally::broker::test
