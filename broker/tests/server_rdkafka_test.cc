// The broker with librdkafka's C API: an idempotent producer, group
// consumers (range and cooperative-sticky), restarts on the same log
// directory, watermarks and offsets by time, the admin API, and Metadata
// without auto-creation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "server_test_util.h"
#include "testing/temp_dir.h"
#include "testing/wait_for.h"

namespace tally::broker::test {
namespace {

using testing::TempDir;
using testing::WaitFor;

// Every delivered record exactly once, in order per partition, and nothing
// else.
void ExpectSameRecords(const std::vector<Msg>& delivered, const std::vector<Msg>& consumed) {
  std::map<int32_t, std::vector<std::pair<int64_t, std::string>>> want, got;
  for (const Msg& m : delivered) {
    ASSERT_EQ(m.err, 0) << m.value;
    want[m.partition].push_back({m.offset, m.value});
  }
  for (const Msg& m : consumed) got[m.partition].push_back({m.offset, m.value});
  for (auto& [p, v] : want) std::sort(v.begin(), v.end());
  EXPECT_EQ(want, got);
}

class GroupTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GroupTest, IdempotentProduceGroupReadsOnceAndResumesAfterRestart) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  const std::string cluster = broker->cluster_id();
  ASSERT_TRUE(broker->CreateTopic("events", 4).ok());
  std::vector<Msg> delivered;
  {
    Producer producer(broker->bootstrap(), {{"enable.idempotence", "true"}});
    for (int i = 0; i < 400; i++) {
      ASSERT_TRUE(
          producer.Produce("events", -1, "k" + std::to_string(i % 37), "v" + std::to_string(i)));
    }
    ASSERT_TRUE(producer.Flush(10000));
    ASSERT_EQ(producer.reports().size(), 400u);
    EXPECT_EQ(producer.failed(), 0);
    delivered = producer.reports();
  }
  const Conf assignor = {{"partition.assignment.strategy", GetParam()}};
  {
    Consumer consumer(broker->bootstrap(), "g1", assignor);
    consumer.Subscribe({"events"});
    std::vector<Msg> got = consumer.Read(400, 15000);
    ASSERT_EQ(got.size(), 400u);
    // Nothing more than what was produced.
    EXPECT_FALSE(consumer.PollOnce(300).has_value());
    ExpectSameRecords(delivered, got);
    EXPECT_EQ(consumer.Commit(), RD_KAFKA_RESP_ERR_NO_ERROR);
    consumer.Close();
  }
  ASSERT_TRUE(broker->Stop().ok());
  broker.reset();

  broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  EXPECT_EQ(broker->cluster_id(), cluster);
  std::vector<Msg> more;
  {
    Producer producer(broker->bootstrap(), {{"enable.idempotence", "true"}});
    for (int i = 400; i < 500; i++) {
      ASSERT_TRUE(producer.Produce("events", -1, "k", "v" + std::to_string(i)));
    }
    ASSERT_TRUE(producer.Flush(10000));
    EXPECT_EQ(producer.failed(), 0);
    more = producer.reports();
  }
  Consumer consumer(broker->bootstrap(), "g1", assignor);
  consumer.Subscribe({"events"});
  std::vector<Msg> got = consumer.Read(100, 15000);
  ASSERT_EQ(got.size(), 100u);
  EXPECT_FALSE(consumer.PollOnce(300).has_value());
  ExpectSameRecords(more, got);
}

INSTANTIATE_TEST_SUITE_P(Assignors, GroupTest, ::testing::Values("range", "cooperative-sticky"),
                         [](const auto& info) {
                           return info.param == "range" ? "Range" : "CooperativeSticky";
                         });

TEST(ServerRdkafkaTest, TwoConsumersSplitPartitionsAndRebalanceWhenOneLeaves) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("split", 4).ok());
  Consumer a(broker->bootstrap(), "g2");
  a.Subscribe({"split"});
  ASSERT_TRUE(WaitFor(
      [&] {
        a.PollOnce(20);
        return a.Assignment().size() == 4;
      },
      10000));
  auto b = std::make_unique<Consumer>(broker->bootstrap(), "g2");
  b->Subscribe({"split"});
  ASSERT_TRUE(WaitFor(
      [&] {
        a.PollOnce(20);
        b->PollOnce(20);
        std::vector<int32_t> pa = a.Assignment(), pb = b->Assignment();
        std::set<int32_t> all(pa.begin(), pa.end());
        all.insert(pb.begin(), pb.end());
        return pa.size() == 2 && pb.size() == 2 && all.size() == 4;
      },
      15000));
  b->Close();
  b.reset();
  EXPECT_TRUE(WaitFor(
      [&] {
        a.PollOnce(20);
        return a.Assignment().size() == 4;
      },
      10000));
}

TEST(ServerRdkafkaTest, WatermarksAndOffsetsForTimes) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("times", 1).ok());
  Producer producer(broker->bootstrap(), {{"linger.ms", "0"}});
  for (int i = 0; i < 10; i++) {
    // One batch per record so each has its own timestamp range.
    ASSERT_TRUE(producer.Produce("times", 0, "", "r" + std::to_string(i), 1000000 + i * 1000));
    ASSERT_TRUE(producer.Flush(5000));
  }
  EXPECT_EQ(producer.failed(), 0);
  int64_t low = -5, high = -5;
  ASSERT_EQ(rd_kafka_query_watermark_offsets(producer.handle(), "times", 0, &low, &high, 5000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(low, 0);
  EXPECT_EQ(high, 10);
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, "times", 0)->offset = 1000000 + 3500;
  ASSERT_EQ(rd_kafka_offsets_for_times(producer.handle(), list, 5000), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(list->elems[0].err, RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(list->elems[0].offset, 4);
  list->elems[0].offset = 1000000 + 99000;  // after every record
  ASSERT_EQ(rd_kafka_offsets_for_times(producer.handle(), list, 5000), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(list->elems[0].offset, -1);
  rd_kafka_topic_partition_list_destroy(list);
}

// Runs an admin operation and returns its result event (caller destroys).
rd_kafka_event_t* WaitAdmin(rd_kafka_queue_t* q, rd_kafka_event_type_t type) {
  for (int i = 0; i < 100; i++) {
    rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 100);
    if (ev == nullptr) continue;
    if (rd_kafka_event_type(ev) == type) return ev;
    rd_kafka_event_destroy(ev);
  }
  return nullptr;
}

std::map<std::string, rd_kafka_resp_err_t> CreateTopics(
    rd_kafka_t* rk,
    const std::vector<std::tuple<std::string, int, std::string, std::string>>& topics) {
  std::vector<rd_kafka_NewTopic_t*> nts;
  char err[256];
  for (const auto& [name, partitions, key, value] : topics) {
    rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(name.c_str(), partitions, 1, err, sizeof(err));
    if (!key.empty()) rd_kafka_NewTopic_set_config(nt, key.c_str(), value.c_str());
    nts.push_back(nt);
  }
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, nts.data(), nts.size(), nullptr, q);
  rd_kafka_event_t* ev = WaitAdmin(q, RD_KAFKA_EVENT_CREATETOPICS_RESULT);
  std::map<std::string, rd_kafka_resp_err_t> out;
  if (ev != nullptr) {
    size_t n = 0;
    const rd_kafka_topic_result_t** res =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    for (size_t i = 0; i < n; i++) {
      out[rd_kafka_topic_result_name(res[i])] = rd_kafka_topic_result_error(res[i]);
    }
    rd_kafka_event_destroy(ev);
  }
  rd_kafka_NewTopic_destroy_array(nts.data(), nts.size());
  rd_kafka_queue_destroy(q);
  return out;
}

TEST(ServerRdkafkaTest, AdminCreateTopicsAndDescribeConfigs) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  Producer admin(broker->bootstrap());
  auto res = CreateTopics(admin.handle(), {{"made", 3, "retention.ms", "123456"},
                                           {"badcfg", 1, "retention.ms", "soon"},
                                           {"bad/name", 1, "", ""}});
  EXPECT_EQ(res["made"], RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(res["badcfg"], RD_KAFKA_RESP_ERR_INVALID_CONFIG);
  EXPECT_EQ(res["bad/name"], RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION);
  res = CreateTopics(admin.handle(), {{"made", 3, "", ""}});
  EXPECT_EQ(res["made"], RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS);

  rd_kafka_ConfigResource_t* rs[2] = {rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, "made"),
                                      rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_BROKER, "0")};
  rd_kafka_queue_t* q = rd_kafka_queue_new(admin.handle());
  rd_kafka_DescribeConfigs(admin.handle(), rs, 2, nullptr, q);
  rd_kafka_event_t* ev = WaitAdmin(q, RD_KAFKA_EVENT_DESCRIBECONFIGS_RESULT);
  ASSERT_NE(ev, nullptr);
  size_t n = 0;
  const rd_kafka_ConfigResource_t** out =
      rd_kafka_DescribeConfigs_result_resources(rd_kafka_event_DescribeConfigs_result(ev), &n);
  ASSERT_EQ(n, 2u);
  std::map<std::string, std::string> topic_configs, broker_configs;
  for (size_t i = 0; i < n; i++) {
    EXPECT_EQ(rd_kafka_ConfigResource_error(out[i]), RD_KAFKA_RESP_ERR_NO_ERROR);
    size_t cn = 0;
    const rd_kafka_ConfigEntry_t** entries = rd_kafka_ConfigResource_configs(out[i], &cn);
    auto& target = rd_kafka_ConfigResource_type(out[i]) == RD_KAFKA_RESOURCE_TOPIC ? topic_configs
                                                                                   : broker_configs;
    for (size_t j = 0; j < cn; j++) {
      const char* v = rd_kafka_ConfigEntry_value(entries[j]);
      target[rd_kafka_ConfigEntry_name(entries[j])] = v == nullptr ? "" : v;
    }
  }
  EXPECT_EQ(topic_configs["retention.ms"], "123456");
  EXPECT_EQ(topic_configs["cleanup.policy"], "delete");
  EXPECT_EQ(broker_configs["num.partitions"], "16");
  rd_kafka_event_destroy(ev);
  rd_kafka_ConfigResource_destroy_array(rs, 2);
  rd_kafka_queue_destroy(q);

  // The created topic is in Metadata at once, with its partitions.
  const rd_kafka_metadata_t* md = nullptr;
  ASSERT_EQ(rd_kafka_metadata(admin.handle(), 1, nullptr, &md, 5000), RD_KAFKA_RESP_ERR_NO_ERROR);
  bool found = false;
  for (int i = 0; i < md->topic_cnt; i++) {
    if (std::string(md->topics[i].topic) == "made") {
      found = true;
      EXPECT_EQ(md->topics[i].partition_cnt, 3);
    }
  }
  EXPECT_TRUE(found);
  ASSERT_EQ(md->broker_cnt, 1);
  EXPECT_EQ(md->brokers[0].id, 0);
  EXPECT_EQ(md->brokers[0].port, broker->port());
  rd_kafka_metadata_destroy(md);
}

bool HasTopic(rd_kafka_t* rk, const std::string& topic) {
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk, 1, nullptr, &md, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) return false;
  bool found = false;
  for (int i = 0; i < md->topic_cnt; i++) found |= topic == md->topics[i].topic;
  rd_kafka_metadata_destroy(md);
  return found;
}

TEST(ServerRdkafkaTest, MetadataWithoutAutoCreateDoesNotCreate) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  Consumer consumer(broker->bootstrap(), "g3", {{"allow.auto.create.topics", "false"}});
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(consumer.handle(), "ghost", nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  ASSERT_EQ(rd_kafka_metadata(consumer.handle(), 0, rkt, &md, 5000), RD_KAFKA_RESP_ERR_NO_ERROR);
  ASSERT_EQ(md->topic_cnt, 1);
  EXPECT_EQ(md->topics[0].err, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(rkt);
  EXPECT_FALSE(HasTopic(consumer.handle(), "ghost"));

  // A producer allows auto-creation: the topic appears with the default
  // partition count.
  Producer producer(broker->bootstrap());
  ASSERT_TRUE(producer.Produce("ghost", -1, "", "boo"));
  ASSERT_TRUE(producer.Flush(10000));
  EXPECT_EQ(producer.failed(), 0);
  EXPECT_TRUE(HasTopic(consumer.handle(), "ghost"));
  BrokerStats stats = broker->Stats();
  int partitions = 0;
  for (const auto& p : stats.partitions) partitions += p.topic == "ghost";
  EXPECT_EQ(partitions, 16);
  EXPECT_GE(stats.produce_requests, 1);
  EXPECT_EQ(stats.produce_records, 1);
}

}  // namespace
}  // namespace tally::broker::test
