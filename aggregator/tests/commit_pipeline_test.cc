// The router's commit rule against the embedded broker (librdkafka's mock
// cluster): input offsets are committed only up to the oldest generation the
// broker has not acknowledged, never after a failed delivery, and all of
// them once everything is acknowledged. Delivery reports are made by hand,
// so the order they arrive in is the test's; the commits are real.
#include "commit_pipeline.h"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <memory>
#include <string>
#include <vector>

#include "base/kafka.h"
#include "base/kafka_consumer.h"
#include "base/log.h"
#include "schemas/delta.h"
#include "schemas/deltas_position.h"
#include "testing/embedded_cluster.h"

namespace tally::aggregator {
namespace {

constexpr uint32_t kDeltasPartitions = 2;
constexpr const char* kInput = "tally.events";
constexpr const char* kDeltas = "tally.deltas";

class CommitPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::SetLogLevel(base::LogLevel::kError);
    ASSERT_TRUE(cluster_.CreateTopic(kInput, 2).ok());
    ASSERT_TRUE(cluster_.CreateTopic(kDeltas, kDeltasPartitions).ok());
    kafka_.brokers = cluster_.bootstrap();
    kafka_.embedded = true;
    kafka_.overrides = {{"log_level", "0"}};

    base::ConsumerSettings cs;
    cs.group = "commit-pipeline-test";
    auto c = base::MakeConsumer(kafka_, cs);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    consumer_ = std::move(c).value();
    // A topic handle for the hand-made delivery reports (a failure names it).
    auto p = base::MakeKafkaHandle(
        RD_KAFKA_PRODUCER, std::move(base::MakeKafkaConf(RD_KAFKA_PRODUCER, kafka_, {})).value());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    producer_ = std::move(p).value();
    deltas_rkt_.reset(rd_kafka_topic_new(producer_.get(), kDeltas, nullptr));
    pipeline_ = std::make_unique<CommitPipeline>(consumer_.get(), kDeltasPartitions, "test");
  }

  void TearDown() override {
    pipeline_.reset();
    deltas_rkt_.reset();
    producer_.reset();
    if (consumer_)
      rd_kafka_destroy_flags(consumer_.release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  }

  // One sealed generation: input partition `partition` routed up to `next`,
  // published as one deltas message to deltas partition 0 (tracked). Returns
  // the message's opaque, for Ack().
  void* Generation(int32_t partition, int64_t next) {
    pipeline_->Routed(kInput, partition, next);
    schemas::DeltaBatchBuilder b;
    schemas::Delta d;
    d.entity = 1;
    d.amount = 1;
    d.source.stream = b.StreamIndex(kInput, partition);
    d.source.offset = next - 1;
    b.Add(d);
    const uintptr_t slot = pipeline_->Track(0, b);
    EXPECT_NE(slot, 0u);
    void* tag = pipeline_->Tag(slot);
    pipeline_->Produced();
    pipeline_->Seal();
    return tag;
  }

  // The broker's delivery report for the message tagged `tag`, put at
  // `offset` of deltas partition 0 (or failed with `err`).
  void Ack(void* tag, int64_t offset, rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_message_t m{};
    m.err = err;
    m.rkt = deltas_rkt_.get();
    m.partition = 0;
    m.offset = err ? -1 : offset;
    m._private = tag;
    pipeline_->OnDelivery(m);
  }

  // Reaps, waiting for the commits to be answered.
  base::Status Reap() { return pipeline_->Reap(/*sync_commit=*/true, nullptr); }

  // The offset the group has committed for input partition `partition`
  // (RD_KAFKA_OFFSET_INVALID: none), and its metadata in `*metadata`.
  int64_t Committed(int32_t partition, std::string* metadata = nullptr) {
    base::KafkaPartitionList list(rd_kafka_topic_partition_list_new(1));
    rd_kafka_topic_partition_list_add(list.get(), kInput, partition);
    EXPECT_EQ(rd_kafka_committed(consumer_.get(), list.get(), 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    const rd_kafka_topic_partition_t& e = list->elems[0];
    EXPECT_EQ(e.err, RD_KAFKA_RESP_ERR_NO_ERROR);
    if (metadata != nullptr) {
      metadata->assign(static_cast<const char*>(e.metadata), e.metadata ? e.metadata_size : 0);
    }
    return e.offset;
  }

  tally::testing::EmbeddedCluster cluster_;
  base::KafkaOptions kafka_;
  base::KafkaHandle consumer_;
  base::KafkaHandle producer_;
  base::KafkaTopic deltas_rkt_;
  std::unique_ptr<CommitPipeline> pipeline_;
};

TEST_F(CommitPipelineTest, OutOfOrderAcksCommitOnlyUpToTheOldestUnacknowledgedGeneration) {
  void* g0 = Generation(0, 10);
  void* g1 = Generation(0, 20);
  void* g2 = Generation(0, 30);
  EXPECT_EQ(pipeline_->InFlight(), 3u);

  Ack(g2, 102);
  Ack(g1, 101);
  ASSERT_TRUE(Reap().ok());
  EXPECT_EQ(Committed(0), RD_KAFKA_OFFSET_INVALID)
      << "g0 is not acknowledged: nothing may be committed";
  EXPECT_EQ(pipeline_->InFlight(), 3u);
  EXPECT_TRUE(pipeline_->OldestOutstanding());

  Ack(g0, 100);
  ASSERT_TRUE(Reap().ok());
  EXPECT_EQ(Committed(0), 30);
  EXPECT_EQ(pipeline_->InFlight(), 0u);
  EXPECT_EQ(pipeline_->commits_in_flight(), 0);
}

TEST_F(CommitPipelineTest, AnAckedGenerationWaitsBehindAnOlderOneStillInFlight) {
  void* g0 = Generation(0, 10);
  void* g1 = Generation(0, 20);
  void* g2 = Generation(0, 30);
  Ack(g0, 100);
  Ack(g2, 102);
  ASSERT_TRUE(Reap().ok());
  EXPECT_EQ(Committed(0), 10) << "only g0: g1 is still in flight";
  EXPECT_EQ(pipeline_->InFlight(), 2u);

  Ack(g1, 101);
  ASSERT_TRUE(Reap().ok());
  EXPECT_EQ(Committed(0), 30);
}

TEST_F(CommitPipelineTest, AFailedDeliveryStopsCommitsAndIsReported) {
  void* g0 = Generation(0, 10);
  void* g1 = Generation(0, 20);
  void* g2 = Generation(0, 30);
  Ack(g0, 100);
  ASSERT_TRUE(Reap().ok());
  ASSERT_EQ(Committed(0), 10);

  Ack(g1, -1, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  Ack(g2, 102);
  base::Status st = Reap();
  EXPECT_EQ(st.code(), base::StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("delivery to tally.deltas/0 failed"), std::string::npos)
      << st.message();
  EXPECT_EQ(pipeline_->failure(), st.message());
  EXPECT_EQ(Committed(0), 10) << "nothing after a failed delivery is committed";

  // However many generations are acknowledged later.
  void* g3 = Generation(0, 40);
  Ack(g3, 103);
  EXPECT_FALSE(Reap().ok());
  EXPECT_EQ(Committed(0), 10);
}

TEST_F(CommitPipelineTest, ACleanDrainCommitsEverything) {
  std::vector<void*> tags;
  for (int i = 0; i < 6; i++) tags.push_back(Generation(i % 2, 10 * (i + 1)));
  // Acknowledged in reverse: none can be committed before the last report.
  for (int i = 5; i >= 0; i--) {
    Ack(tags[static_cast<size_t>(i)], 100 + i);
    if (i > 0) {
      ASSERT_TRUE(pipeline_->Reap(/*sync_commit=*/false, nullptr).ok());
      EXPECT_EQ(pipeline_->InFlight(), 6u);
    }
  }
  ASSERT_TRUE(Reap().ok());
  EXPECT_EQ(pipeline_->InFlight(), 0u);
  EXPECT_EQ(pipeline_->commits_in_flight(), 0);
  std::string metadata;
  EXPECT_EQ(Committed(0, &metadata), 50);
  EXPECT_EQ(Committed(1), 60);

  // The commit says where partition 0's deltas lie: its last message (g4,
  // at 104) and the one before it (g2, at 102).
  auto positions = schemas::DecodeDeltasPositions(metadata);
  ASSERT_TRUE(positions.ok()) << positions.status().ToString();
  ASSERT_FALSE(positions->empty());
  EXPECT_EQ((*positions)[0].partition, 0u);
  EXPECT_EQ((*positions)[0].last, 104);
  EXPECT_EQ((*positions)[0].previous, 102);
}

}  // namespace
}  // namespace tally::aggregator
