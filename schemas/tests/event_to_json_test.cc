#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "schemas/event.h"

namespace tally::schemas {
namespace {

// A random valid event of type `t`: ids anywhere in 1..2^63-1, strings with
// quotes, backslashes, control characters and multi-byte UTF-8.
Event RandomEvent(EventType t, std::mt19937_64& rng) {
  auto id = [&] {
    switch (rng() % 3) {
      case 0:
        return uint64_t{1} + rng() % 1000;
      case 1:
        return kMaxId;
      default:
        return uint64_t{1} + rng() % kMaxId;
    }
  };
  auto text = [&](size_t max_len) {
    // "" stands for NUL, which a C string cannot hold.
    static const char* kPieces[] = {"a",
                                    "Z",
                                    "\"",
                                    "\\",
                                    "/",
                                    "\n",
                                    "\t",
                                    "\x01",
                                    "\x1f",
                                    "",
                                    "\xC3\xA9",
                                    "\xE4\xB8\xAD",
                                    "\xF0\x9F\x98\x80",
                                    " "};
    std::string s;
    const size_t n = rng() % (max_len + 1);
    for (size_t i = 0; i < n; ++i) {
      const char* p = kPieces[rng() % std::size(kPieces)];
      if (*p == '\0') {
        s.push_back('\0');
      } else {
        s += p;
      }
    }
    return s;
  };
  Event e;
  e.type = t;
  e.ts = static_cast<int64_t>(rng() % (static_cast<uint64_t>(kMaxTs) + 1));
  if (rng() % 2) {  // an event id: 1..64 printable ASCII characters
    e.id.resize(1 + rng() % kMaxEventIdLength);
    for (char& c : e.id) c = static_cast<char>(' ' + rng() % 95);
  }
  switch (t) {
    case EventType::kPost:
    case EventType::kPostDelete:
      e.author_id = id();
      e.post_id = id();
      break;
    case EventType::kLike:
    case EventType::kRepost:
    case EventType::kComment:
      e.post_id = id();
      e.user_id = id();
      if (rng() % 2) e.author_id = id();
      break;
    case EventType::kUnlike:
      e.post_id = id();
      e.user_id = id();
      break;
    case EventType::kView:
      e.post_id = id();
      if (rng() % 2) e.user_id = id();
      break;
    case EventType::kMention:
      e.user_id = id();
      for (size_t i = 0, n = 1 + rng() % kMaxMentionTargets; i < n; ++i) {
        e.target_ids.push_back(id());
      }
      break;
    case EventType::kDm:
      e.from_user_id = id();
      e.to_user_id = id();
      break;
    case EventType::kFollow:
    case EventType::kUnfollow:
      e.user_id = id();
      e.target_id = id();
      break;
    case EventType::kNotice:
      e.notice_id = id();
      e.title = text(200);  // at most 200 code points
      break;
    case EventType::kRedDot:
      e.channel = std::string(1 + rng() % 64, "az09_.-"[rng() % 7]);
      break;
    case EventType::kRead:
      e.user_id = id();
      e.read_kind = static_cast<UnreadKind>(rng() % kUnreadKindCount);
      if (e.read_kind == UnreadKind::kNotice) e.notice_id = id();
      if (e.read_kind == UnreadKind::kRedDot) e.channel = "home";
      if (e.read_kind == UnreadKind::kFeed) {
        // Keys must be distinct: a JSON object has no duplicate keys.
        for (uint64_t i = 0, n = rng() % 50; i < n; ++i) e.snapshot.emplace_back(i + 1, rng() % 9);
      }
      break;
  }
  return e;
}

TEST(EventToJsonTest, RendersCompactJsonWithNumericIds) {
  Event e;
  e.type = EventType::kLike;
  e.ts = 1700000000000;
  e.id = "t\"1\n";
  e.post_id = kMaxId;
  e.user_id = 3;
  EXPECT_EQ(EventToJson(e),
            R"({"type":"like","ts":1700000000000,"id":"t\"1\n","post_id":9223372036854775807,)"
            R"("user_id":3})");

  Event r;
  r.type = EventType::kRead;
  r.ts = 5;
  r.user_id = 1;
  r.read_kind = UnreadKind::kFeed;
  r.snapshot = {{8, 3}, {10, 0}};
  EXPECT_EQ(EventToJson(r),
            R"({"type":"read","ts":5,"user_id":1,"kind":"feed","snapshot":{"8":3,"10":0}})");
}

TEST(EventToJsonTest, EscapesEveryControlCharacter) {
  Event e;
  e.type = EventType::kNotice;
  e.ts = 1;
  e.notice_id = 2;
  for (int c = 0; c < 0x20; ++c) e.title.push_back(static_cast<char>(c));
  e.title += "\"\\/\x7f\xC3\xA9";
  const std::string json = EventToJson(e);
  for (char c : json) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << json;
  EXPECT_NE(json.find(R"(\u0000\u0001)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"(\b\t\n\u000b\f\r)"), std::string::npos) << json;
  EventParser parser;
  Event back;
  ASSERT_TRUE(parser.Parse(json, &back).ok()) << json;
  EXPECT_EQ(back, e);
}

TEST(EventToJsonTest, RoundTripsEveryTypeRandomly) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  EventParser parser;
  Event back;
  std::string json;
  for (int i = 0; i < 5000; ++i) {
    const Event e = RandomEvent(static_cast<EventType>(i % kEventTypeCount), rng);
    json.clear();
    AppendEventJson(e, &json);
    const base::Status st = parser.Parse(json, &back);
    ASSERT_TRUE(st.ok()) << "seed " << seed << ": " << st.ToString() << "\n" << json;
    ASSERT_EQ(back, e) << "seed " << seed << ": " << json;
    ASSERT_EQ(EventToJson(back), json) << "seed " << seed;
  }
}

TEST(EventToJsonTest, AppendAppends) {
  Event e;
  e.type = EventType::kRedDot;
  e.ts = 9;
  e.channel = "c";
  std::string out = "x";
  AppendEventJson(e, &out);
  EXPECT_EQ(out, R"(x{"type":"red_dot","ts":9,"channel":"c"})");
}

}  // namespace
}  // namespace tally::schemas
