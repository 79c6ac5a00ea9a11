// A broker for query/ tests: an EmbeddedCluster (tally_testing) with the
// client side these tests need: produce, commit, read back. Test-only;
// every failure is a gtest failure. Thread model: externally synchronized.
#pragma once

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ingest/event_publisher.h"
#include "testing/embedded_cluster.h"

namespace tally::query::testing {

struct ReadRecord {
  int32_t partition = 0;
  int64_t offset = 0;
  std::string key;
  std::string value;
};

class MockKafka {
 public:
  std::string brokers() const { return cluster_.bootstrap(); }
  // For fault injection (rd_kafka_mock_*).
  rd_kafka_mock_cluster_t* mock() const { return cluster_.mock(); }

  // tally's publisher to this cluster, as the HTTP tier uses it; null (and
  // a test failure) if it cannot be created.
  std::unique_ptr<ingest::EventPublisher> NewPublisher() {
    ingest::PublisherOptions po;
    po.kafka.brokers = brokers();
    po.kafka.embedded = true;
    po.kafka.overrides = {{"log_level", "0"}};
    auto publisher = ingest::EventPublisher::Create(po);
    if (!publisher.ok()) {
      ADD_FAILURE() << publisher.status().ToString();
      return nullptr;
    }
    return std::move(publisher).value();
  }

  void CreateTopic(const std::string& topic, int partitions) {
    base::Status st = cluster_.CreateTopic(topic, partitions);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // Produces `n` records to topic/partition and waits for their acks.
  void Produce(const std::string& topic, int32_t partition, int n) {
    rd_kafka_t* p = NewClient(RD_KAFKA_PRODUCER, {});
    for (int i = 0; i < n; i++) {
      std::string value = fmt::format("v{}", i);
      ASSERT_EQ(
          rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
                            RD_KAFKA_V_VALUE(value.data(), value.size()),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
          RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    EXPECT_EQ(rd_kafka_flush(p, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(p);
  }

  // Commits `offsets` (topic, partition) -> offset for consumer group `group`,
  // with commit metadata from `metadata` where it has the partition.
  void Commit(const std::string& group,
              const std::map<std::pair<std::string, int32_t>, int64_t>& offsets,
              const std::map<std::pair<std::string, int32_t>, std::string>& metadata = {}) {
    rd_kafka_t* c =
        NewClient(RD_KAFKA_CONSUMER, {{"group.id", group}, {"enable.auto.commit", "false"}});
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(8);
    for (const auto& [tp, off] : offsets) {
      rd_kafka_topic_partition_t* e =
          rd_kafka_topic_partition_list_add(list, tp.first.c_str(), tp.second);
      e->offset = off;
      if (auto md = metadata.find(tp); md != metadata.end()) {
        e->metadata = strdup(md->second.c_str());  // freed with the list
        e->metadata_size = md->second.size();
      }
    }
    EXPECT_EQ(rd_kafka_commit(c, list, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_destroy(c);
  }

  // Reads every record of `topic` (all `partitions`) from the beginning.
  std::vector<ReadRecord> ReadAll(const std::string& topic, int partitions) {
    rd_kafka_t* c = NewClient(
        RD_KAFKA_CONSUMER, {{"enable.partition.eof", "true"}, {"group.id", "query-test-reader"}});
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++) {
      rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    EXPECT_EQ(rd_kafka_assign(c, list), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    std::vector<ReadRecord> out;
    int eofs = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (eofs < partitions && std::chrono::steady_clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(c, 100);
      if (!m) continue;
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        eofs++;
      } else if (!m->err) {
        ReadRecord r;
        r.partition = m->partition;
        r.offset = m->offset;
        if (m->key) r.key.assign(static_cast<const char*>(m->key), m->key_len);
        if (m->payload) r.value.assign(static_cast<const char*>(m->payload), m->len);
        out.push_back(std::move(r));
      }
      rd_kafka_message_destroy(m);
    }
    EXPECT_EQ(eofs, partitions) << "timed out reading " << topic;
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    return out;
  }

 private:
  rd_kafka_t* NewClient(rd_kafka_type_t type, const std::map<std::string, std::string>& settings) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers().c_str(), err, sizeof(err));
    rd_kafka_conf_set(conf, "log_level", "0", err, sizeof(err));
    for (const auto& [k, v] : settings) {
      EXPECT_EQ(rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)), RD_KAFKA_CONF_OK)
          << err;
    }
    rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof(err));
    EXPECT_NE(rk, nullptr) << err;
    return rk;
  }

  ::tally::testing::EmbeddedCluster cluster_;
};

}  // namespace tally::query::testing
