// A broker (MockKafka) with tally.events and tally.deltas, a real state and
// a WatermarkSource over both: the fixture of the tests that read
// watermarks against Kafka (watermarks_test, visibility_waiter_test).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <utility>

#include "mock_kafka.h"
#include "query/watermarks.h"
#include "store/state_store.h"
#include "test_state.h"

namespace tally::query::testing {

class WatermarkFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    kafka_.CreateTopic("tally.events", 2);
    kafka_.CreateTopic("tally.deltas", kTestPartitions);
    auto s = store::StateStore::Open(TestStoreOptions(dir_.path()));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    source_ = NewSource();
  }

  // A source over the fixture's broker and state that has made no claims
  // yet (WatermarkSource holds its rows at what it claimed before).
  std::unique_ptr<WatermarkSource> NewSource() {
    WatermarkOptions o;
    o.kafka.brokers = kafka_.brokers();
    o.kafka.embedded = true;
    o.kafka.overrides = {{"log_level", "0"}};
    auto w = WatermarkSource::Create(o, store_.get());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(w).value() : nullptr;
  }

  // Commits `partition`'s progress as an applier window would.
  void SetProgress(uint32_t partition, int64_t next, int64_t max_ts,
                   std::map<schemas::SourceStream, store::SourceMark> marks) {
    store::PartitionBatch b;
    store::Progress p;
    p.next_deltas_offset = next;
    p.max_event_ts = max_ts;
    p.marks = std::move(marks);
    b.SetProgress(p);
    ASSERT_TRUE(store_->partition(partition)->Commit(&b).ok());
  }

  TempDir dir_;
  MockKafka kafka_;
  std::unique_ptr<store::StateStore> store_;
  std::unique_ptr<WatermarkSource> source_;
};

}  // namespace tally::query::testing
