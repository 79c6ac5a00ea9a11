// Integration tests of the embedded broker with tally's publisher and plain
// librdkafka clients, all in-process (label: integration).
#include "embedded_broker.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/kafka.h"
#include "base/log.h"
#include "ingest/event_publisher.h"
#include "testing/free_port.h"

namespace tally::app {
namespace {

using testing::FreePort;

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
  auto conf = base::MakeKafkaConf(RD_KAFKA_CONSUMER, 
      options, {{"group.id", "tally-test-reader"}, {"enable.auto.commit", "false"}});
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

class EmbeddedBrokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::SetLogLevel(base::LogLevel::kWarn);
    EmbeddedBrokerOptions options;
    options.port = FreePort();
    options.partitions = kPartitions;
    auto broker = EmbeddedBroker::Start(options);
    ASSERT_TRUE(broker.ok()) << broker.status().ToString();
    broker_ = std::move(broker).value();
    port_ = options.port;
  }

  base::KafkaOptions Kafka() const {
    base::KafkaOptions k;
    k.brokers = broker_->bootstrap();
    return k;
  }

  std::unique_ptr<EmbeddedBroker> broker_;
  int port_ = 0;
};

TEST_F(EmbeddedBrokerTest, BootstrapIsTheForwarderAndMetadataNamesTheRealBroker) {
  EXPECT_EQ(broker_->bootstrap(), "127.0.0.1:" + std::to_string(port_));
  EXPECT_NE(broker_->broker_address(), broker_->bootstrap());
  EXPECT_EQ(broker_->broker_address().rfind("127.0.0.1:", 0), 0u);
  ASSERT_NE(broker_->mock(), nullptr);

  // A client that only knows the fixed port sees every topic.
  auto conf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, Kafka(), {});
  ASSERT_TRUE(conf.ok());
  auto rk = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
  ASSERT_TRUE(rk.ok());
  for (auto topic : {base::kEventsTopic, base::kDeltasTopic, base::kDlqTopic}) {
    auto n = base::PartitionCount(rk->get(), topic, 10000);
    ASSERT_TRUE(n.ok()) << topic << ": " << n.status().ToString();
    EXPECT_EQ(*n, kPartitions) << topic;
  }
  auto meta = base::PartitionCount(rk->get(), base::kMetaTopic, 10000);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(*meta, 1);
}

TEST_F(EmbeddedBrokerTest, IncarnationIsReadableAsTheClusterIdentity) {
  const std::string& inc = broker_->incarnation();
  ASSERT_EQ(inc.size(), 32u);
  EXPECT_EQ(inc.find_first_not_of("0123456789abcdef"), std::string::npos) << inc;

  auto ident = base::FetchClusterIdentity(Kafka(), 10000);
  ASSERT_TRUE(ident.ok()) << ident.status().ToString();
  EXPECT_TRUE(ident->embedded);
  EXPECT_EQ(ident->incarnation, inc);

  // Another broker is another incarnation.
  auto other = EmbeddedBroker::Start({});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_NE((*other)->incarnation(), inc);
  base::KafkaOptions k;
  k.brokers = (*other)->bootstrap();  // port 0: the mock's own listener
  EXPECT_EQ(k.brokers, (*other)->broker_address());
  auto other_ident = base::FetchClusterIdentity(k, 10000);
  ASSERT_TRUE(other_ident.ok()) << other_ident.status().ToString();
  EXPECT_EQ(other_ident->incarnation, (*other)->incarnation());
}

TEST_F(EmbeddedBrokerTest, PublishedRecordsArriveOncePerKeyInOrderOnTheJavaPartition) {
  ingest::PublisherOptions po;
  po.kafka = Kafka();
  auto publisher = ingest::EventPublisher::Create(po);
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
  std::vector<ingest::PublishRecord> batch;
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

TEST_F(EmbeddedBrokerTest, RecordsWithoutKeyAreSpreadAndDelivered) {
  ingest::PublisherOptions po;
  po.kafka = Kafka();
  auto publisher = ingest::EventPublisher::Create(po);
  ASSERT_TRUE(publisher.ok());
  std::vector<ingest::PublishRecord> batch(200, {"", R"({"type":"red_dot","ts":1,"channel":"x"})"});
  ASSERT_TRUE((*publisher)->Publish(batch).ok());
  auto got = ReadAll(broker_->bootstrap(), std::string(base::kEventsTopic), kPartitions, 200);
  EXPECT_EQ(got.size(), 200u);
}

TEST_F(EmbeddedBrokerTest, TakenPortIsAClearError) {
  EmbeddedBrokerOptions options;
  options.port = port_;
  auto second = EmbeddedBroker::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), base::StatusCode::kIOError);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(port_)), std::string::npos)
      << second.status().message();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos)
      << second.status().message();
}

TEST_F(EmbeddedBrokerTest, StopIsIdempotentAndFreesThePort) {
  broker_->Stop();
  broker_->Stop();
  EXPECT_EQ(broker_->mock(), nullptr);
  EmbeddedBrokerOptions options;
  options.port = port_;
  options.partitions = 2;
  auto again = EmbeddedBroker::Start(options);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_NE((*again)->incarnation(), broker_->incarnation());
}

// Thread ids of this process whose name (comm) is `name`.
std::vector<pid_t> ThreadsNamed(const std::string& name) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string n;
    if (std::getline(comm, n) && n == name) out.push_back(std::stoi(e.path().filename().string()));
  }
  return out;
}

// A process-directed SIGTERM or SIGUSR1 may be handed to any thread that
// does not block it. The mock cluster's thread ends for good when a signal
// interrupts its poll(), and the broker could then never be stopped (tally
// broker hung on SIGTERM right after a SIGUSR1). Its thread must block them.
TEST_F(EmbeddedBrokerTest, ASignalToTheMockClustersThreadDoesNotEndIt) {
  // A handler without SA_RESTART, as the process's own SIGINT/SIGTERM ones.
  struct sigaction sa {
  }, old{};
  sa.sa_handler = [](int) {};
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  std::vector<pid_t> mock_threads = ThreadsNamed("rdk:mock");
  ASSERT_EQ(mock_threads.size(), 1u);
  for (int i = 0; i < 5; i++) {
    if (syscall(SYS_tgkill, getpid(), mock_threads[0], SIGUSR2) != 0) break;  // gone
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(ThreadsNamed("rdk:mock"), mock_threads)
      << "the mock cluster's thread ended on a signal";
  // It still serves: a client gets metadata through it.
  auto rk = base::MakeKafkaHandle(RD_KAFKA_PRODUCER,
                                  base::MakeKafkaConf(RD_KAFKA_PRODUCER, Kafka(), {}).value());
  ASSERT_TRUE(rk.ok());
  EXPECT_TRUE(base::PartitionCount(rk->get(), "tally.events", 5000).ok());
  rk->reset();
  // And stops: done on a thread of its own, so a hang fails the test
  // instead of holding it (the thread is then left behind).
  std::atomic<bool> stopped{false};
  std::thread([this, &stopped] {
    broker_->Stop();
    stopped.store(true);
  }).detach();
  for (int i = 0; i < 250 && !stopped.load(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGUSR2, &old, nullptr);
  ASSERT_TRUE(stopped.load()) << "the embedded broker did not stop within 5 s";
}

TEST_F(EmbeddedBrokerTest, BadOptionsAreRejected) {
  EmbeddedBrokerOptions options;
  options.partitions = 0;
  EXPECT_EQ(EmbeddedBroker::Start(options).status().code(), base::StatusCode::kInvalidArgument);
  options.partitions = 1;
  options.port = 70000;
  EXPECT_EQ(EmbeddedBroker::Start(options).status().code(), base::StatusCode::kInvalidArgument);
  options.port = FreePort();
  options.host = "not-an-ip";
  EXPECT_EQ(EmbeddedBroker::Start(options).status().code(), base::StatusCode::kInvalidArgument);
}

#ifdef TALLY_KCAT
// The acceptance check users run by hand: kcat sees the topics through the
// fixed port.
TEST_F(EmbeddedBrokerTest, KcatListsMetadataThroughTheFixedPort) {
  std::string cmd = std::string(TALLY_KCAT) + " -b " + broker_->bootstrap() + " -L -m 10 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("topic \"tally.events\" with 4 partitions"), std::string::npos) << out;
  EXPECT_NE(out.find("topic \"tally.meta\" with 1 partitions"), std::string::npos) << out;
  EXPECT_NE(out.find(broker_->broker_address()), std::string::npos) << out;
}
#else
TEST_F(EmbeddedBrokerTest, KcatListsMetadataThroughTheFixedPort) {
  GTEST_SKIP() << "kcat not found at configure time";
}
#endif

}  // namespace
}  // namespace tally::app
