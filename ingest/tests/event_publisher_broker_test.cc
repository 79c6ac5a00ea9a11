// EventPublisher against tally's own Kafka broker (broker/, in-process,
// its log in a temporary directory) read back by a plain librdkafka
// consumer: keyed records land on the Java client's partition, once each,
// in order per key (label: integration).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/kafka.h"
#include "base/log.h"
#include "broker/broker.h"
#include "ingest/event_publisher.h"
#include "testing/temp_dir.h"

namespace tally::ingest {
namespace {

constexpr int kPartitions = 4;

// Kafka's Java DefaultPartitioner for a keyed record:
// toPositive(murmur2(key)) % partitions.
int JavaPartition(const std::string& key, int partitions) {
  const uint32_t m = 0x5bd1e995;
  const int r = 24;
  const auto* data = reinterpret_cast<const uint8_t*>(key.data());
  const uint32_t length = static_cast<uint32_t>(key.size());
  uint32_t h = 0x9747b28c ^ length;
  for (uint32_t i = 0; i + 4 <= length; i += 4) {
    uint32_t k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) |
                 (static_cast<uint32_t>(data[i + 3]) << 24);
    k *= m;
    k ^= k >> r;
    k *= m;
    h *= m;
    h ^= k;
  }
  uint32_t tail = length & ~3u;
  switch (length % 4) {
    case 3:
      h ^= data[tail + 2] << 16;
      [[fallthrough]];
    case 2:
      h ^= data[tail + 1] << 8;
      [[fallthrough]];
    case 1:
      h ^= data[tail];
      h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return static_cast<int>((h & 0x7fffffff) % static_cast<uint32_t>(partitions));
}

struct ConsumedRecord {
  int32_t partition;
  int64_t offset;
  std::string key;
  std::string value;
};

// Reads every partition of `topic` from the beginning with a plain
// librdkafka consumer (no group) until `expected` records arrived.
std::vector<ConsumedRecord> ReadAll(const std::string& brokers, const std::string& topic,
                                    int partitions, size_t expected) {
  base::KafkaOptions options;
  options.brokers = brokers;
  // assign() needs a group id; this consumer never joins or commits.
  auto conf =
      base::MakeKafkaConf(RD_KAFKA_CONSUMER, options,
                          {{"group.id", "tally-test-reader"}, {"enable.auto.commit", "false"}});
  EXPECT_TRUE(conf.ok()) << conf.status().ToString();
  auto rk = base::MakeKafkaHandle(RD_KAFKA_CONSUMER, std::move(conf).value());
  EXPECT_TRUE(rk.ok()) << rk.status().ToString();
  rd_kafka_poll_set_consumer(rk->get());
  base::KafkaPartitionList parts(rd_kafka_topic_partition_list_new(partitions));
  for (int p = 0; p < partitions; p++) {
    rd_kafka_topic_partition_list_add(parts.get(), topic.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  }
  EXPECT_EQ(rd_kafka_assign(rk->get(), parts.get()), RD_KAFKA_RESP_ERR_NO_ERROR);
  std::vector<ConsumedRecord> out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (out.size() < expected && std::chrono::steady_clock::now() < deadline) {
    base::KafkaMessage m(rd_kafka_consumer_poll(rk->get(), 100));
    if (!m || m->err) continue;
    out.push_back({m->partition, m->offset,
                   std::string(static_cast<const char*>(m->key), m->key_len),
                   std::string(static_cast<const char*>(m->payload), m->len)});
  }
  rd_kafka_consumer_close(rk->get());
  return out;
}

class PublisherOnABrokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::SetLogLevel(base::LogLevel::kWarn);
    broker::BrokerOptions options;
    options.log_dir = dir_.path();
    auto broker = broker::Broker::Start(options);
    ASSERT_TRUE(broker.ok()) << broker.status().ToString();
    broker_ = std::move(broker).value();
    ASSERT_TRUE(broker_->CreateTopic(std::string(base::kEventsTopic), kPartitions).ok());
  }

  base::KafkaOptions Kafka() const {
    base::KafkaOptions k;
    k.brokers = broker_->bootstrap();
    return k;
  }

  testing::TempDir dir_;
  std::unique_ptr<broker::Broker> broker_;
};

TEST_F(PublisherOnABrokerTest, PublishedRecordsArriveOncePerKeyInOrderOnTheJavaPartition) {
  PublisherOptions po;
  po.kafka = Kafka();
  auto publisher = EventPublisher::Create(po);
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();

  constexpr int kKeys = 50;
  constexpr int kPerKey = 100;
  // Asynchronous bulk first, then one synchronous batch per key on top.
  for (int seq = 0; seq < kPerKey; seq++) {
    for (int k = 1; k <= kKeys; k++) {
      std::string value = "{\"type\":\"view\",\"ts\":" + std::to_string(seq) +
                          ",\"post_id\":" + std::to_string(k) + "}";
      ASSERT_TRUE((*publisher)->PublishAsync({std::to_string(k), value}).ok());
    }
  }
  ASSERT_TRUE((*publisher)->Flush(30000).ok());
  std::vector<PublishRecord> batch;
  for (int k = 1; k <= kKeys; k++) {
    batch.push_back({std::to_string(k), "{\"type\":\"view\",\"ts\":" + std::to_string(kPerKey) +
                                            ",\"post_id\":" + std::to_string(k) + "}"});
  }
  base::Status st = (*publisher)->Publish(batch);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const size_t total = kKeys * (kPerKey + 1);
  EXPECT_EQ((*publisher)->stats().delivered, total);
  EXPECT_EQ((*publisher)->stats().failed, 0u);

  std::vector<ConsumedRecord> got =
      ReadAll(broker_->bootstrap(), std::string(base::kEventsTopic), kPartitions, total);
  ASSERT_EQ(got.size(), total);
  std::map<std::string, int> next_seq;
  for (const auto& r : got) {
    EXPECT_EQ(r.partition, JavaPartition(r.key, kPartitions)) << "key " << r.key;
    std::string expect = "{\"type\":\"view\",\"ts\":" + std::to_string(next_seq[r.key]) +
                         ",\"post_id\":" + r.key + "}";
    EXPECT_EQ(r.value, expect) << "key " << r.key << " out of order or duplicated";
    next_seq[r.key]++;
  }
  EXPECT_EQ(next_seq.size(), static_cast<size_t>(kKeys));
  for (const auto& [key, n] : next_seq) EXPECT_EQ(n, kPerKey + 1) << "key " << key;
}

TEST_F(PublisherOnABrokerTest, RecordsWithoutKeyAreSpreadAndDelivered) {
  PublisherOptions po;
  po.kafka = Kafka();
  auto publisher = EventPublisher::Create(po);
  ASSERT_TRUE(publisher.ok());
  std::vector<PublishRecord> batch(200, {"", R"({"type":"red_dot","ts":1,"channel":"x"})"});
  ASSERT_TRUE((*publisher)->Publish(batch).ok());
  auto got = ReadAll(broker_->bootstrap(), std::string(base::kEventsTopic), kPartitions, 200);
  EXPECT_EQ(got.size(), 200u);
}

}  // namespace
}  // namespace tally::ingest
