// Replay refuses a log whose start was removed by retention (SPEC section 2)
// unless --allow-partial. The embedded broker keeps only the newest ~5 MiB of
// a partition, which is how the log is truncated here.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <atomic>
#include <filesystem>

#include "aggregator/replay.h"
#include "base/kafka.h"
#include "base/log.h"
#include "schemas/delta.h"
#include "store/state_store.h"
#include "testing/embedded_cluster.h"
#include "testing/temp_dir.h"

namespace tally {
namespace {

namespace fs = std::filesystem;

TEST(ReplayTruncatedTest, RefusesALogThatNoLongerStartsAtZeroUnlessAllowed) {
  base::SetLogLevel(base::LogLevel::kError);
  testing::EmbeddedCluster cluster(1);
  ASSERT_TRUE(cluster.CreateTopic("tally.deltas", 1).ok());
  base::KafkaOptions kafka;
  kafka.brokers = cluster.bootstrap();
  kafka.overrides = {{"log_level", "0"}};

  // ~8 MiB of valid delta batches: the broker drops the oldest.
  {
    auto pconf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, kafka, {{"compression.type", "none"}, {"linger.ms", "0"}});
    ASSERT_TRUE(pconf.ok());
    auto p = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(pconf).value());
    ASSERT_TRUE(p.ok());
    schemas::DeltaBatchBuilder b;
    for (int m = 0; m < 800; m++) {
      uint32_t s = b.StreamIndex("tally.events", 0);
      for (int i = 0; i < 1000; i++) {
        schemas::Delta d;
        d.op = schemas::DeltaOp::kPostCounter;
        d.field = static_cast<uint8_t>(schemas::PostField::kView);
        d.entity = 1 + i;
        d.amount = 1;
        d.source = {s, m * 1000 + i, 0, 1};
        b.Add(d);
      }
      std::string v = b.Finish();
      ASSERT_EQ(rd_kafka_producev(p->get(), RD_KAFKA_V_TOPIC("tally.deltas"), RD_KAFKA_V_PARTITION(0),
                                  RD_KAFKA_V_VALUE(v.data(), v.size()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_END),
                RD_KAFKA_RESP_ERR_NO_ERROR);
      rd_kafka_poll(p->get(), 0);
    }
    ASSERT_EQ(rd_kafka_flush(p->get(), 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
    auto wm = base::QueryWatermarks(p->get(), "tally.deltas", 5000);
    ASSERT_TRUE(wm.ok());
    ASSERT_GT((*wm)[0].low, 0) << "the broker kept everything; the test needs a truncated log";
  }

  testing::TempDir temp("replay-truncated");
  const fs::path& dir = temp.path();
  store::StoreOptions so;
  so.dir = (dir / "a").string();
  so.partitions = 1;
  so.block_cache_bytes = 8 << 20;
  std::atomic<bool> never{false};
  aggregator::ReplayOptions ro;
  ro.kafka = kafka;
  {
    auto s = store::StateStore::Open(so);
    ASSERT_TRUE(s.ok());
    base::Status st = aggregator::Replay(ro, s->get(), &never);
    EXPECT_EQ(st.code(), base::StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("--allow-partial"), std::string::npos) << st.message();
  }
  {
    so.dir = (dir / "b").string();
    auto s = store::StateStore::Open(so);
    ASSERT_TRUE(s.ok());
    ro.allow_partial = true;
    base::Status st = aggregator::Replay(ro, s->get(), &never);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::vector<uint64_t> ids = {1};
    std::vector<store::PostCounts> out;
    ASSERT_TRUE((*s)->GetPostCounts(ids, &out).ok());
    EXPECT_GT(out[0].view, 0);
    EXPECT_LT(out[0].view, 800) << "what retention removed cannot be counted";
  }
}

}  // namespace
}  // namespace tally
