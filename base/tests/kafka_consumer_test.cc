// MakeConsumer's settings, read back from the client librdkafka made (no
// broker needed: a client connects only when it has something to ask).
#include "base/kafka_consumer.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace tally::base {
namespace {

std::string FetchWait(bool embedded, bool short_wait,
                      std::vector<std::pair<std::string, std::string>> overrides = {}) {
  KafkaOptions kafka;
  kafka.brokers = "127.0.0.1:9";
  kafka.embedded = embedded;
  kafka.overrides = std::move(overrides);
  kafka.overrides.emplace_back("log_level", "0");
  ConsumerSettings settings;
  settings.group = "kafka-consumer-test";
  settings.short_fetch_wait = short_wait;
  auto consumer = MakeConsumer(kafka, settings);
  EXPECT_TRUE(consumer.ok()) << consumer.status().ToString();
  if (!consumer.ok()) return "";
  char value[64];
  size_t size = sizeof(value);
  EXPECT_EQ(rd_kafka_conf_get(rd_kafka_conf(consumer->get()), "fetch.wait.max.ms", value, &size),
            RD_KAFKA_CONF_OK);
  return value;
}

TEST(MakeConsumerTest, AShortFetchWaitIsTenMsOnTheEmbeddedBrokerAndAHundredOnKafka) {
  EXPECT_EQ(FetchWait(/*embedded=*/true, /*short_wait=*/true), "10");
  EXPECT_EQ(FetchWait(/*embedded=*/false, /*short_wait=*/true), "100");
  EXPECT_EQ(FetchWait(/*embedded=*/false, /*short_wait=*/false), "500");  // librdkafka's
  // --kafka wins.
  EXPECT_EQ(FetchWait(/*embedded=*/false, /*short_wait=*/true, {{"fetch.wait.max.ms", "250"}}),
            "250");
}

}  // namespace
}  // namespace tally::base
