// Unit tests of EventPublisher that need no broker. Its behaviour against a
// broker is covered by event_publisher_broker_test.cc (integration).
#include "ingest/event_publisher.h"

#include <gtest/gtest.h>

#include <vector>

#include "schemas/event.h"

namespace tally::ingest {
namespace {

using schemas::Event;
using schemas::EventType;

TEST(DefaultKeyTest, KeysFollowTheSpecOrderingAdvice) {
  Event e;
  e.post_id = 11;
  e.user_id = 22;
  e.author_id = 33;
  e.from_user_id = 44;
  e.target_id = 55;
  e.channel = "home";
  auto key = [&](EventType t) {
    e.type = t;
    return DefaultKey(e);
  };
  EXPECT_EQ(key(EventType::kLike), "11");
  EXPECT_EQ(key(EventType::kUnlike), "11");
  EXPECT_EQ(key(EventType::kRepost), "11");
  EXPECT_EQ(key(EventType::kComment), "11");
  EXPECT_EQ(key(EventType::kView), "11");
  EXPECT_EQ(key(EventType::kFollow), "22");
  EXPECT_EQ(key(EventType::kUnfollow), "22");
  EXPECT_EQ(key(EventType::kRead), "22");
  EXPECT_EQ(key(EventType::kMention), "22");
  EXPECT_EQ(key(EventType::kDm), "44");
  EXPECT_EQ(key(EventType::kPost), "33");
  EXPECT_EQ(key(EventType::kPostDelete), "33");
  EXPECT_EQ(key(EventType::kNotice), "notice");
  EXPECT_EQ(key(EventType::kRedDot), "home");
}

TEST(DefaultKeyTest, LargestIdIsDecimal) {
  Event e;
  e.type = EventType::kLike;
  e.post_id = schemas::kMaxId;
  EXPECT_EQ(DefaultKey(e), "9223372036854775807");
}

PublisherOptions Unreachable(int timeout_ms) {
  PublisherOptions o;
  // Nothing listens on port 1 of loopback: connections are refused at once.
  o.kafka.brokers = "127.0.0.1:1";
  o.kafka.overrides = {{"log_level", "0"}};
  o.delivery_timeout_ms = timeout_ms;
  return o;
}

TEST(EventPublisherTest, RejectsBadSettings) {
  PublisherOptions o = Unreachable(1000);
  o.kafka.overrides.push_back({"no.such.setting", "1"});
  auto p = EventPublisher::Create(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("no.such.setting"), std::string::npos);

  o = Unreachable(1000);
  o.kafka.brokers.clear();
  EXPECT_EQ(EventPublisher::Create(o).status().code(), base::StatusCode::kInvalidArgument);

  o = Unreachable(1000);
  o.topic.clear();
  EXPECT_EQ(EventPublisher::Create(o).status().code(), base::StatusCode::kInvalidArgument);
}

TEST(EventPublisherTest, EmptyPublishSucceedsWithoutABroker) {
  auto p = EventPublisher::Create(Unreachable(1000));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE((*p)->Publish({}).ok());
  EXPECT_TRUE((*p)->Flush(0).ok());
  EXPECT_EQ((*p)->topic(), "tally.events");
}

TEST(EventPublisherTest, UnreachableBrokerIsUnavailableNamingTheRecord) {
  auto p = EventPublisher::Create(Unreachable(500));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<PublishRecord> records = {{"7", R"({"type":"view","ts":1,"post_id":7})"},
                                        {"8", R"({"type":"view","ts":1,"post_id":8})"}};
  base::Status st = (*p)->Publish(records);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), base::StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("record 0 of 2 (key '7')"), std::string::npos) << st.message();
  EXPECT_EQ((*p)->stats().failed, 2u);
  EXPECT_EQ((*p)->stats().delivered, 0u);
}

TEST(EventPublisherTest, AsyncFailuresAreReportedByFlushOnce) {
  auto p = EventPublisher::Create(Unreachable(500));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (int i = 0; i < 10; i++) {
    ASSERT_TRUE((*p)->PublishAsync({"k", R"({"type":"view","ts":1,"post_id":1})"}).ok());
  }
  base::Status st = (*p)->Flush(5000);
  EXPECT_EQ(st.code(), base::StatusCode::kUnavailable) << st.ToString();
  EXPECT_EQ((*p)->pending(), 0u);
  EXPECT_EQ((*p)->stats().failed, 10u);
  EXPECT_TRUE((*p)->Flush(0).ok()) << "the failure was reported once";
}

TEST(EventPublisherTest, FlushTimesOutWhileRecordsArePending) {
  auto p = EventPublisher::Create(Unreachable(1500));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->PublishAsync({"", R"({"type":"view","ts":1,"post_id":1})"}).ok());
  base::Status st = (*p)->Flush(50);
  EXPECT_EQ(st.code(), base::StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("still undelivered"), std::string::npos) << st.message();
  EXPECT_EQ((*p)->pending(), 1u);
}

}  // namespace
}  // namespace tally::ingest
