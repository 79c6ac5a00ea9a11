#include "ingest/events_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tally::ingest {
namespace {

std::string Like(size_t post, size_t user) {
  std::string s = R"({"type":"like","ts":1700000000000,"post_id":)";
  s += std::to_string(post);
  s += R"(,"user_id":)";
  s += std::to_string(user);
  s += "}";
  return s;
}

// Concatenation without `"literal" + std::string`, which GCC 12 flags with a
// false -Wrestrict at -O3.
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string s;
  (s.append(parts), ...);
  return s;
}

class EventsRequestParserTest : public ::testing::Test {
 protected:
  // Parses `body` expecting failure; returns the message.
  std::string Error(const std::string& body) {
    std::vector<PublishRecord> out = {{"stale", "stale"}};
    base::Status st = parser_.Parse(body, &out);
    EXPECT_FALSE(st.ok()) << body;
    EXPECT_EQ(st.code(), base::StatusCode::kInvalidArgument);
    EXPECT_TRUE(out.empty()) << "all-or-nothing: nothing returned on error";
    return st.message();
  }

  EventsRequestParser parser_;
  std::vector<PublishRecord> out_;
};

TEST_F(EventsRequestParserTest, SingleObjectIsEventZeroWithItsOwnText) {
  std::string body = Cat("  ", Like(7, 3), "\n");
  ASSERT_TRUE(parser_.Parse(body, &out_).ok());
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_EQ(out_[0].key, "7");
  EXPECT_EQ(out_[0].value, Like(7, 3));
}

TEST_F(EventsRequestParserTest, ArrayKeepsOrderKeysAndRawTextByteForByte) {
  // Ids as strings and extra fields survive untouched: the value is the
  // client's text, not a re-rendering.
  std::string follow =
      R"({ "type": "follow", "ts": 5, "user_id": "42", "target_id": 9, "x": [1, {"y": null}] })";
  std::string notice = R"({"type":"notice","ts":6,"notice_id":3,"title":"h\u00e9llo, [world]"})";
  std::string body = Cat("[", Like(1, 2), " ,\n\t", follow, ",", notice, "  ]");
  ASSERT_TRUE(parser_.Parse(body, &out_).ok());
  ASSERT_EQ(out_.size(), 3u);
  EXPECT_EQ(out_[0].key, "1");
  EXPECT_EQ(out_[0].value, Like(1, 2));
  EXPECT_EQ(out_[1].key, "42");
  EXPECT_EQ(out_[1].value, follow);
  EXPECT_EQ(out_[2].key, "notice");
  EXPECT_EQ(out_[2].value, notice);
}

TEST_F(EventsRequestParserTest, FollowsAndUnfollowsNameTheEntityTheirDerivedEffectsGoTo) {
  std::string body = Cat("[", Like(1, 2), R"(,{"type":"follow","ts":5,"user_id":42,"target_id":9})",
                         R"(,{"type":"unfollow","ts":6,"user_id":43,"target_id":"10"}])");
  ASSERT_TRUE(parser_.Parse(body, &out_).ok());
  ASSERT_EQ(out_.size(), 3u);
  EXPECT_EQ(out_[0].derived_entity, 0u);
  EXPECT_EQ(out_[1].derived_entity, 9u);
  EXPECT_EQ(out_[2].derived_entity, 10u);
}

TEST_F(EventsRequestParserTest, ReusedParserReplacesOutput) {
  ASSERT_TRUE(parser_.Parse(Cat("[", Like(1, 1), ",", Like(2, 2), "]"), &out_).ok());
  ASSERT_TRUE(parser_.Parse(Like(3, 3), &out_).ok());
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_EQ(out_[0].key, "3");
}

TEST_F(EventsRequestParserTest, AcceptsExactlyTheMaximum) {
  std::string body = "[";
  for (size_t i = 0; i < kMaxEventsPerRequest; i++) {
    if (i > 0) body += ',';
    body += Like(i + 1, 1);
  }
  body += "]";
  ASSERT_TRUE(parser_.Parse(body, &out_).ok());
  EXPECT_EQ(out_.size(), kMaxEventsPerRequest);
  EXPECT_EQ(out_.back().key, std::to_string(kMaxEventsPerRequest));
}

TEST_F(EventsRequestParserTest, RejectsMoreThanTheMaximum) {
  std::string body = "[";
  for (size_t i = 0; i <= kMaxEventsPerRequest; i++) {
    if (i > 0) body += ',';
    body += Like(i + 1, 1);
  }
  body += "]";
  EXPECT_EQ(Error(body), "more than 1000 events");
}

TEST_F(EventsRequestParserTest, NamesTheFirstInvalidEventAndPublishesNothing) {
  std::string bad = R"({"type":"like","ts":1,"post_id":5})";
  std::string body = Cat("[", Like(1, 1), ",", Like(2, 2), ",", Like(3, 3), ",", bad, ",",
                         R"({"type":"poke","ts":1})", "]");
  EXPECT_EQ(Error(body), "event 3: missing field user_id");
}

TEST_F(EventsRequestParserTest, InvalidSingleObjectIsEventZero) {
  EXPECT_EQ(Error(R"({"type":"poke","ts":1})"), "event 0: unknown type \"poke\"");
}

TEST_F(EventsRequestParserTest, NonObjectElement) {
  EXPECT_EQ(Error(Cat("[", Like(1, 1), ", 17]")), "event 1: not a JSON object");
  EXPECT_EQ(Error(Cat("[[", Like(1, 1), "]]")), "event 0: not a JSON object");
  EXPECT_EQ(Error("[null]"), "event 0: not a JSON object");
}

TEST_F(EventsRequestParserTest, EmptyBodiesAndArrays) {
  EXPECT_EQ(Error(""), "empty body");
  EXPECT_EQ(Error(" \n "), "empty body");
  EXPECT_EQ(Error("[]"), "empty array");
  EXPECT_EQ(Error(" [ ] "), "empty array");
}

TEST_F(EventsRequestParserTest, ScalarsAreNotEvents) {
  EXPECT_EQ(Error("17"), "body is not a JSON object or array");
  EXPECT_EQ(Error("\"like\""), "body is not a JSON object or array");
  EXPECT_EQ(Error("true"), "body is not a JSON object or array");
}

TEST_F(EventsRequestParserTest, MalformedJson) {
  for (std::string body : {
           std::string("hello"),
           Cat("[", Like(1, 1)),
           Cat("[", Like(1, 1), ","),
           Cat("[", Like(1, 1), ",]"),
           Cat("[", Like(1, 1), "] x"),
           Cat("[", Like(1, 1), "]]"),
           Cat(Like(1, 1), " x"),
           Cat(Like(1, 1), Like(2, 2)),
           Cat("[", Like(1, 1), " ", Like(2, 2), "]"),
           std::string(R"([{"type":"like","ts":1,"post_id":1,"user_id":tru}])"),
           std::string(R"([{"type":"like","ts":1,"post_id":1,"user_id":1])"),
       }) {
    std::string msg = Error(body);
    EXPECT_TRUE(msg.find("not valid JSON") != std::string::npos ||
                msg.find("not a JSON object") != std::string::npos)
        << body << " -> " << msg;
  }
}

}  // namespace
}  // namespace tally::ingest
