#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "schemas/event.h"

namespace tally::schemas {
namespace {

using base::Status;

class EventParserTest : public ::testing::Test {
 protected:
  Status Parse(std::string_view json) { return parser_.Parse(json, &event_); }

  // Expects `json` to be accepted; returns the event.
  const Event& Valid(std::string_view json) {
    const Status st = Parse(json);
    EXPECT_TRUE(st.ok()) << json << "\n  -> " << st.ToString();
    return event_;
  }

  // Expects `json` to be rejected with a reason containing `reason_part`.
  void Invalid(std::string_view json, std::string_view reason_part = "") {
    const Status st = Parse(json);
    ASSERT_FALSE(st.ok()) << "accepted: " << json;
    EXPECT_EQ(st.code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(reason_part), std::string::npos)
        << json << "\n  reason: " << st.message() << "\n  wanted: " << reason_part;
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
    EXPECT_EQ(event_, Event{}) << "a rejected parse must leave the event cleared";
  }

  // {"type":"like","ts":5,"post_id":2,"user_id":3<extra>}
  static std::string Like(std::string_view extra = "") {
    return std::string(R"({"type":"like","ts":5,"post_id":2,"user_id":3)") + std::string(extra) +
           "}";
  }
  // A like with post_id set to the JSON text `v`.
  static std::string LikePost(std::string_view v) {
    return std::string(R"({"type":"like","ts":5,"user_id":3,"post_id":)") + std::string(v) + "}";
  }

  EventParser parser_;
  Event event_;
};

TEST_F(EventParserTest, ParsesEveryType) {
  struct Case {
    const char* json;
    Event want;
  };
  auto make = [](EventType t, auto fill) {
    Event e;
    e.type = t;
    e.ts = 7;
    fill(e);
    return e;
  };
  const std::vector<Case> cases = {
      {R"({"type":"post","ts":7,"author_id":1,"post_id":2})",
       make(EventType::kPost, [](Event& e) { e.author_id = 1, e.post_id = 2; })},
      {R"({"type":"post_delete","ts":7,"author_id":1,"post_id":2})",
       make(EventType::kPostDelete, [](Event& e) { e.author_id = 1, e.post_id = 2; })},
      {R"({"type":"like","ts":7,"post_id":2,"user_id":3,"author_id":1})",
       make(EventType::kLike, [](Event& e) { e.post_id = 2, e.user_id = 3, e.author_id = 1; })},
      {R"({"type":"like","ts":7,"post_id":2,"user_id":3})",
       make(EventType::kLike, [](Event& e) { e.post_id = 2, e.user_id = 3; })},
      {R"({"type":"unlike","ts":7,"post_id":2,"user_id":3})",
       make(EventType::kUnlike, [](Event& e) { e.post_id = 2, e.user_id = 3; })},
      {R"({"type":"repost","ts":7,"post_id":2,"user_id":3,"author_id":1})",
       make(EventType::kRepost, [](Event& e) { e.post_id = 2, e.user_id = 3, e.author_id = 1; })},
      {R"({"type":"comment","ts":7,"post_id":2,"user_id":3})",
       make(EventType::kComment, [](Event& e) { e.post_id = 2, e.user_id = 3; })},
      {R"({"type":"view","ts":7,"post_id":2})",
       make(EventType::kView, [](Event& e) { e.post_id = 2; })},
      {R"({"type":"view","ts":7,"post_id":2,"user_id":3})",
       make(EventType::kView, [](Event& e) { e.post_id = 2, e.user_id = 3; })},
      {R"({"type":"mention","ts":7,"user_id":3,"target_ids":[4,"5",4]})",
       make(EventType::kMention,
            [](Event& e) {
              e.user_id = 3, e.target_ids = {4, 5, 4};
            })},
      {R"({"type":"dm","ts":7,"from_user_id":6,"to_user_id":7})",
       make(EventType::kDm, [](Event& e) { e.from_user_id = 6, e.to_user_id = 7; })},
      {R"({"type":"follow","ts":7,"user_id":3,"target_id":8})",
       make(EventType::kFollow, [](Event& e) { e.user_id = 3, e.target_id = 8; })},
      {R"({"type":"unfollow","ts":7,"user_id":3,"target_id":8})",
       make(EventType::kUnfollow, [](Event& e) { e.user_id = 3, e.target_id = 8; })},
      {R"({"type":"notice","ts":7,"notice_id":9,"title":"hi"})",
       make(EventType::kNotice, [](Event& e) { e.notice_id = 9, e.title = "hi"; })},
      {R"({"type":"red_dot","ts":7,"channel":"home.feed-2_x"})",
       make(EventType::kRedDot, [](Event& e) { e.channel = "home.feed-2_x"; })},
      {R"({"type":"read","ts":7,"user_id":3,"kind":"dm"})",
       make(EventType::kRead, [](Event& e) { e.user_id = 3, e.read_kind = UnreadKind::kDm; })},
      {R"({"type":"read","ts":7,"user_id":3,"kind":"notice","notice_id":9})",
       make(EventType::kRead,
            [](Event& e) { e.user_id = 3, e.read_kind = UnreadKind::kNotice, e.notice_id = 9; })},
      {R"({"type":"read","ts":7,"user_id":3,"kind":"red_dot","channel":"c"})",
       make(EventType::kRead,
            [](Event& e) { e.user_id = 3, e.read_kind = UnreadKind::kRedDot, e.channel = "c"; })},
      {R"({"type":"read","ts":7,"user_id":3,"kind":"feed","snapshot":{"8":3,"10":0}})",
       make(EventType::kRead,
            [](Event& e) {
              e.user_id = 3, e.read_kind = UnreadKind::kFeed, e.snapshot = {{8, 3}, {10, 0}};
            })},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Valid(c.json), c.want) << c.json;
  }
}

TEST_F(EventParserTest, EachRequiredFieldMissingIsNamed) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {R"({"ts":1,"author_id":1,"post_id":2})", "type"},
      {R"({"type":"post","author_id":1,"post_id":2})", "ts"},
      {R"({"type":"post","ts":1,"post_id":2})", "author_id"},
      {R"({"type":"post","ts":1,"author_id":1})", "post_id"},
      {R"({"type":"post_delete","ts":1,"post_id":2})", "author_id"},
      {R"({"type":"post_delete","ts":1,"author_id":1})", "post_id"},
      {R"({"type":"like","ts":1,"user_id":3})", "post_id"},
      {R"({"type":"like","ts":1,"post_id":2})", "user_id"},
      {R"({"type":"unlike","ts":1,"post_id":2})", "user_id"},
      {R"({"type":"unlike","ts":1,"user_id":3})", "post_id"},
      {R"({"type":"repost","ts":1,"post_id":2})", "user_id"},
      {R"({"type":"comment","ts":1,"user_id":2})", "post_id"},
      {R"({"type":"view","ts":1,"user_id":3})", "post_id"},
      {R"({"type":"mention","ts":1,"target_ids":[1]})", "user_id"},
      {R"({"type":"mention","ts":1,"user_id":3})", "target_ids"},
      {R"({"type":"dm","ts":1,"to_user_id":3})", "from_user_id"},
      {R"({"type":"dm","ts":1,"from_user_id":3})", "to_user_id"},
      {R"({"type":"follow","ts":1,"target_id":3})", "user_id"},
      {R"({"type":"follow","ts":1,"user_id":3})", "target_id"},
      {R"({"type":"unfollow","ts":1,"user_id":3})", "target_id"},
      {R"({"type":"notice","ts":1,"title":"x"})", "notice_id"},
      {R"({"type":"red_dot","ts":1})", "channel"},
      {R"({"type":"read","ts":1,"kind":"dm"})", "user_id"},
      {R"({"type":"read","ts":1,"user_id":3})", "kind"},
      {R"({"type":"read","ts":1,"user_id":3,"kind":"notice"})", "notice_id"},
      {R"({"type":"read","ts":1,"user_id":3,"kind":"red_dot"})", "channel"},
      {R"({"type":"read","ts":1,"user_id":3,"kind":"feed"})", "snapshot"},
  };
  for (const Case& c : cases) {
    Invalid(c.json, std::string("missing field ") + c.field);
  }
}

TEST_F(EventParserTest, IdsAsNumbersAndDecimalStrings) {
  EXPECT_EQ(Valid(LikePost("42")).post_id, 42u);
  EXPECT_EQ(Valid(LikePost(R"("42")")).post_id, 42u);
  EXPECT_EQ(Valid(LikePost(R"("\u0034\u0032")")).post_id, 42u) << "escapes are decoded first";
}

TEST_F(EventParserTest, IdBoundaries) {
  EXPECT_EQ(Valid(LikePost("1")).post_id, 1u);
  EXPECT_EQ(Valid(LikePost("9223372036854775807")).post_id, kMaxId);
  EXPECT_EQ(Valid(LikePost(R"("9223372036854775807")")).post_id, kMaxId);
  EXPECT_EQ(Valid(LikePost(R"("1")")).post_id, 1u);

  Invalid(LikePost("0"), "field post_id: id out of range");
  Invalid(LikePost("9223372036854775808"), "field post_id: id out of range");
  Invalid(LikePost("18446744073709551615"), "field post_id: id out of range");
  Invalid(LikePost("18446744073709551616"), "field post_id: id out of range");
  Invalid(LikePost("-1"), "field post_id: id out of range");
  Invalid(LikePost("-9223372036854775809"), "field post_id: id out of range");
  Invalid(LikePost(R"("0")"), "field post_id: id out of range");
  Invalid(LikePost(R"("9223372036854775808")"), "field post_id: id out of range");
  Invalid(LikePost(R"("01")"), "field post_id: not a canonical decimal id");
  Invalid(LikePost(R"(" 1")"), "field post_id: not a canonical decimal id");
  Invalid(LikePost(R"("1 ")"), "field post_id: not a canonical decimal id");
  Invalid(LikePost(R"("1\n")"), "field post_id: not a canonical decimal id");
  Invalid(LikePost(R"("+1")"), "field post_id");
  Invalid(LikePost(R"("-1")"), "field post_id");
  Invalid(LikePost(R"("1.5")"), "field post_id");
  Invalid(LikePost(R"("")"), "field post_id");
  Invalid(LikePost("1.5"), "field post_id: expected an id");
  Invalid(LikePost("true"), "field post_id: expected an id");
  Invalid(LikePost("null"), "field post_id: expected an id");
  Invalid(LikePost("[1]"), "field post_id: expected an id");
  Invalid(LikePost("{}"), "field post_id: expected an id");
}

TEST_F(EventParserTest, IntegralFloatsAreIntegersAsInJsonSchema) {
  EXPECT_EQ(Valid(LikePost("1.0")).post_id, 1u);
  EXPECT_EQ(Valid(LikePost("1e3")).post_id, 1000u);
  EXPECT_EQ(Valid(LikePost("1E0")).post_id, 1u);
  EXPECT_EQ(Valid(LikePost("10e-1")).post_id, 1u);
  EXPECT_EQ(Valid(LikePost("9223372036854774784.0")).post_id, 9223372036854774784u);
  // Rounds to the double 2^63: out of range, as in Python.
  Invalid(LikePost("9223372036854775807.0"), "id out of range");
  Invalid(LikePost("1e19"), "id out of range");
  Invalid(LikePost("1e400"), "id out of range");
  Invalid(LikePost("0.0"), "id out of range");
  Invalid(LikePost("-0"), "id out of range");
}

TEST_F(EventParserTest, TsRange) {
  EXPECT_EQ(Valid(R"({"type":"view","ts":0,"post_id":1})").ts, 0);
  EXPECT_EQ(Valid(R"({"type":"view","ts":253402300799999,"post_id":1})").ts, kMaxTs);
  EXPECT_EQ(Valid(R"({"type":"view","ts":-0,"post_id":1})").ts, 0);
  EXPECT_EQ(Valid(R"({"type":"view","ts":-0.0,"post_id":1})").ts, 0);
  EXPECT_EQ(Valid(R"({"type":"view","ts":1.5e3,"post_id":1})").ts, 1500);
  Invalid(R"({"type":"view","ts":253402300800000,"post_id":1})", "field ts: out of range");
  Invalid(R"({"type":"view","ts":-1,"post_id":1})", "field ts: out of range");
  Invalid(R"({"type":"view","ts":1.5,"post_id":1})", "field ts: expected an integer");
  Invalid(R"({"type":"view","ts":"1","post_id":1})", "field ts: expected an integer");
  Invalid(R"({"type":"view","ts":true,"post_id":1})", "field ts: expected an integer");
}

TEST_F(EventParserTest, EventIdIsOneTo64PrintableAsciiCharacters) {
  EXPECT_EQ(Valid(Like("")).id, "");  // absent
  EXPECT_EQ(Valid(Like(R"(,"id":"z")")).id, "z");
  EXPECT_EQ(Valid(Like(R"(,"id":" ")")).id, " ");
  EXPECT_EQ(Valid(Like(R"(,"id":"a\"b\\c~")")).id, "a\"b\\c~");
  EXPECT_EQ(Valid(Like(R"(,"id":"\u0041")")).id, "A");  // an escape of a printable character
  const std::string id64(kMaxEventIdLength, '~');
  EXPECT_EQ(Valid(Like(R"(,"id":")" + id64 + "\"")).id, id64);

  constexpr const char* kBad = "is not 1..64 printable ASCII characters";
  Invalid(Like(R"(,"id":"")"), std::string(R"(field id: "" )") + kBad);
  Invalid(Like(R"(,"id":")" + std::string(65, 'x') + "\""), kBad);
  // A long id is cut in the reason, which stays one short line.
  Invalid(Like(R"(,"id":")" + std::string(5000, 'y') + "\""),
          R"(field id: ")" + std::string(64, 'y') + R"("... is not 1..64)");
  Invalid(Like(R"(,"id":"a\u0001b")"), R"(field id: "a\u0001b" is not)");
  Invalid(Like(R"(,"id":"a\u0000")"), kBad);
  Invalid(Like(R"(,"id":"a\n")"), kBad);
  Invalid(Like(R"(,"id":"a\t")"), kBad);
  Invalid(Like(R"(,"id":"\u007f")"), kBad);
  Invalid(Like(",\"id\":\"\xC3\xA9\""), kBad);  // é, raw UTF-8
  Invalid(Like(R"(,"id":"\u00e9")"), kBad);     // é, escaped
  Invalid(Like(R"(,"id":"\ud83d\ude00")"), kBad);
  Invalid(Like(R"(,"id":5)"), "field id: expected a string");
  Invalid(Like(R"(,"id":null)"), "field id: expected a string");
}

TEST_F(EventParserTest, BadEventIdIsRejectedWhateverTheType) {
  Invalid(R"({"type":"notice","ts":1,"notice_id":1,"id":""})", "field id:");
  Invalid(R"({"type":"read","ts":1,"user_id":1,"kind":"like","id":"\u00ff"})", "field id:");
  // The type may come last: the id is still checked.
  Invalid(R"({"id":"","ts":1,"post_id":1,"type":"view"})", "field id:");
}

TEST_F(EventParserTest, UnknownAndBadTypes) {
  Invalid(R"({"type":"poke","ts":1})", R"(unknown type "poke")");
  Invalid(R"({"type":"","ts":1})", R"(unknown type "")");
  Invalid(R"({"type":"POST","ts":1})", "unknown type");
  Invalid(R"({"type":5,"ts":1})", "field type: expected a string");
  Invalid(R"({"type":null,"ts":1})", "field type: expected a string");
  // A hostile type name still gives a short, one-line reason.
  Invalid(R"({"type":"a\nb)" + std::string(500, 'x') + R"(","ts":1})", R"(unknown type "a\nb)");
  EXPECT_LT(
      parser_.Parse(R"({"type":")" + std::string(5000, 'x') + R"("})", &event_).message().size(),
      120u);
}

TEST_F(EventParserTest, InvalidJson) {
  Invalid("", "not valid JSON");
  Invalid("   ", "not valid JSON");
  Invalid("{", "not valid JSON");
  Invalid(R"({"type":)", "not valid JSON");
  Invalid(R"({"type":"like",})", "not valid JSON");
  Invalid(R"({"type" "like"})", "not valid JSON");
  Invalid(R"({'type':'like'})", "not valid JSON");
  Invalid(Like() + "x", "not valid JSON");
  Invalid(Like() + "}", "not valid JSON: trailing content");
  Invalid(Like() + Like(), "not valid JSON");
  Invalid("\xEF\xBB\xBF" + Like(), "byte order mark");
  Invalid("[" + Like() + "]", "not a JSON object");
  Invalid("5", "not a JSON object");
  Invalid("null", "not a JSON object");
  Invalid(R"("like")", "not a JSON object");
  Invalid("true", "not a JSON object");
  Invalid("false ", "not a JSON object");
  // Text that only starts like a literal is not JSON at all.
  Invalid("this is not json", "not valid JSON: unexpected character");
  Invalid("nothing", "not valid JSON: unexpected character");
  Invalid("nullx", "not valid JSON: unexpected character");
  Invalid(Like(R"(,"x":NaN)"), "not valid JSON");
  Invalid(Like(R"(,"x":-Infinity)"), "not valid JSON");
  EXPECT_TRUE(Parse(" \t\r\n" + Like() + "\n ").ok());
  Invalid("\f" + Like(), "not valid JSON");
}

TEST_F(EventParserTest, NulBytes) {
  using namespace std::string_literals;
  Invalid(Like() + "\0"s, "not valid JSON");
  Invalid("\0"s + Like(), "not valid JSON");
  Invalid(Like(",\"x\":\"a\0b\""s), "not valid JSON");
  Invalid("{\"type\":\"like\"\0,\"ts\":1}"s, "not valid JSON");
  // An escaped NUL is a character like any other.
  EXPECT_EQ(Valid(R"({"type":"notice","ts":1,"notice_id":2,"title":"a\u0000b"})").title, "a\0b"s);
}

TEST_F(EventParserTest, InvalidUtf8) {
  Invalid(Like(",\"x\":\"\xFF\""), "invalid UTF-8");
  Invalid(Like(",\"\xFE\":1"), "invalid UTF-8");
  Invalid(Like(",\"x\":\"\xC0\xAF\""), "invalid UTF-8");      // overlong '/'
  Invalid(Like(",\"x\":\"\xED\xA0\x80\""), "invalid UTF-8");  // encoded surrogate
  Invalid(Like(",\"x\":\"\xE2\x82\""), "invalid UTF-8");      // truncated
  Invalid(R"({"type":"notice","ts":1,"notice_id":2,"title":")"
          "\xF4\x90\x80\x80\"}",
          "invalid UTF-8");
  EXPECT_EQ(
      Valid("{\"type\":\"notice\",\"ts\":1,\"notice_id\":2,\"title\":\"\xF0\x9F\x98\x80\"}").title,
      "\xF0\x9F\x98\x80");
}

TEST_F(EventParserTest, LoneSurrogateEscapesAreRejectedEverywhere) {
  Invalid(Like(R"(,"x":"\ud800")"), "not valid JSON");
  Invalid(Like(R"(,"x":"\udc00")"), "not valid JSON");
  Invalid(Like(R"(,"x":"\ud800\u0041")"), "not valid JSON");
  Invalid(Like(R"(,"\udfff":1)"), "not valid JSON");
  Invalid(Like(R"(,"id":"\ud800")"), "not valid JSON");
  EXPECT_EQ(Valid(R"({"type":"notice","ts":1,"notice_id":1,"title":"\ud83d\ude00"})").title,
            "\xF0\x9F\x98\x80");
}

TEST_F(EventParserTest, DuplicateKeysAreRejectedInEveryObject) {
  Invalid(Like(R"(,"type":"like")"), R"(duplicate field "type")");
  Invalid(Like(R"(,"post_id":2)"), R"(duplicate field "post_id")");
  Invalid(Like(R"(,"title":1,"title":2)"), R"(duplicate field "title")");
  Invalid(Like(R"(,"x":1,"y":2,"x":1)"), R"(duplicate field "x")");
  Invalid(Like(R"(,"\u0074s":5)"), R"(duplicate field "ts")");
  Invalid(Like(R"(,"x":{"a":1,"b":{},"a":2})"), R"(duplicate field "a")");
  Invalid(Like(R"(,"x":[{"a":1},{"a":1,"a":1}])"), R"(duplicate field "a")");
  Invalid(R"({"type":"read","ts":1,"user_id":1,"kind":"feed","snapshot":{"1":1,"\u0031":1}})",
          R"(duplicate field "1")");
  EXPECT_TRUE(Parse(Like(R"(,"x":{"a":1},"y":{"a":{"a":1}})")).ok());
}

TEST_F(EventParserTest, UnknownFieldsAreIgnoredButMustBeValidJson) {
  EXPECT_TRUE(Parse(Like(R"(,"extra":{"a":[1,2.5e-3,null,true,false,"s",{}]})")).ok());
  EXPECT_TRUE(Parse(Like(R"(,"big":123456789012345678901234567890,"inf":1e400)")).ok());
  EXPECT_TRUE(Parse(Like(R"(,"x":-0e-0,"y":"\/\b\f\n\r\t")")).ok());
  Invalid(Like(R"(,"x":nul)"), "not valid JSON");
  Invalid(Like(R"(,"x":truex)"), "not valid JSON");
  Invalid(Like(R"(,"x":01)"), "not valid JSON: malformed number");
  Invalid(Like(R"(,"x":1.)"), "not valid JSON: malformed number");
  Invalid(Like(R"(,"x":-)"), "not valid JSON: malformed number");
  Invalid(Like(R"(,"x":"\x")"), "not valid JSON");
  Invalid(Like(R"(,"x":[1,])"), "not valid JSON");
  Invalid(Like(R"(,"x":{"a"})"), "not valid JSON");
}

TEST_F(EventParserTest, FieldsTheTypeDoesNotUseAreIgnoredWhateverTheirValue) {
  const Event& dm = Valid(R"({"post_id":true,"type":"dm","ts":1,"from_user_id":1,"to_user_id":2,)"
                          R"("title":5,"target_ids":"x","snapshot":[],"kind":"?"})");
  EXPECT_EQ(dm.post_id, 0u);
  EXPECT_TRUE(dm.title.empty());
  const Event& post = Valid(R"({"type":"post","ts":1,"author_id":1,"post_id":2,"user_id":1e400,)"
                            R"("channel":"home","target_ids":[1,2]})");
  EXPECT_EQ(post.user_id, 0u);
  EXPECT_TRUE(post.channel.empty());
  EXPECT_TRUE(post.target_ids.empty());
}

TEST_F(EventParserTest, TypeMayComeLast) {
  const Event& e = Valid(R"({"ts":3,"post_id":"2","user_id":3,"type":"unlike"})");
  EXPECT_EQ(e.type, EventType::kUnlike);
  EXPECT_EQ(e.post_id, 2u);
}

TEST_F(EventParserTest, EscapedKeysMatchFields) {
  EXPECT_EQ(Valid(R"({"\u0074ype":"p\u006fst","ts":1,"author_id":1,"post\u005fid":2})").post_id,
            2u);
}

TEST_F(EventParserTest, NestingDepthIsBounded) {
  auto nested = [&](int depth) {  // the event object is depth 1
    const int k = depth - 1;
    return Like(",\"x\":" + std::string(k, '[') + std::string(k, ']'));
  };
  EXPECT_TRUE(Parse(nested(kMaxJsonDepth)).ok());
  Invalid(nested(kMaxJsonDepth + 1), "nesting deeper than 64");
  Invalid(nested(5000), "not valid JSON");
}

TEST_F(EventParserTest, MentionTargets) {
  std::string ids = "1";
  for (int i = 2; i <= 100; ++i) ids.append(",").append(std::to_string(i));
  const Event& e = Valid(R"({"type":"mention","ts":1,"user_id":1,"target_ids":[)" + ids + "]}");
  ASSERT_EQ(e.target_ids.size(), 100u);
  EXPECT_EQ(e.target_ids.back(), 100u);
  Invalid(R"({"type":"mention","ts":1,"user_id":1,"target_ids":[)" + ids + ",101]}",
          "field target_ids: expected 1..100 ids");
  Invalid(R"({"type":"mention","ts":1,"user_id":1,"target_ids":[]})",
          "field target_ids: expected 1..100 ids");
  Invalid(R"({"type":"mention","ts":1,"user_id":1,"target_ids":[4,5,0]})",
          "field target_ids[2]: id out of range");
  Invalid(R"({"type":"mention","ts":1,"user_id":1,"target_ids":4})",
          "field target_ids: expected an array of ids");
  EXPECT_EQ(Valid(R"({"type":"mention","ts":1,"user_id":1,"target_ids":[7,"7",7.0]})").target_ids,
            (std::vector<uint64_t>{7, 7, 7}));
}

TEST_F(EventParserTest, NoticeTitleLengthCountsCodePoints) {
  auto notice = [](const std::string& title) {
    return R"({"type":"notice","ts":1,"notice_id":2,"title":")" + title + "\"}";
  };
  std::string e_acute;
  for (int i = 0; i < 1024; ++i) e_acute += "\xC3\xA9";
  EXPECT_TRUE(Parse(notice(std::string(1024, 'a'))).ok());
  EXPECT_TRUE(Parse(notice(e_acute)).ok());
  Invalid(notice(std::string(1025, 'a')), "field title: longer than 1024 characters");
  Invalid(notice(e_acute + "a"), "field title: longer than 1024 characters");
  Invalid(R"({"type":"notice","ts":1,"notice_id":2,"title":5})", "field title: expected a string");
}

TEST_F(EventParserTest, Channels) {
  auto dot = [](const std::string& c) {
    return R"({"type":"red_dot","ts":1,"channel":")" + c + "\"}";
  };
  EXPECT_EQ(Valid(dot(std::string(64, 'z'))).channel, std::string(64, 'z'));
  EXPECT_TRUE(Parse(dot("a.b-c_9")).ok());
  Invalid(dot(std::string(65, 'z')), "field channel");
  Invalid(dot(""), "field channel");
  Invalid(dot("A"), R"(field channel: "A" is not 1..64 characters)");
  Invalid(dot("a b"), "field channel");
  Invalid(dot("a\\n"), "field channel");
}

TEST_F(EventParserTest, ReadKinds) {
  Invalid(R"({"type":"read","ts":1,"user_id":1,"kind":"poke"})",
          R"(field kind: unknown kind "poke")");
  Invalid(R"({"type":"read","ts":1,"user_id":1,"kind":7})", "field kind: expected a string");
  // notice_id, channel and snapshot are validated whenever present...
  Invalid(R"({"type":"read","ts":1,"user_id":1,"kind":"dm","notice_id":0})", "field notice_id");
  Invalid(R"({"type":"read","ts":1,"user_id":1,"kind":"dm","channel":"A"})", "field channel");
  Invalid(R"({"type":"read","ts":1,"user_id":1,"kind":"dm","snapshot":{"01":1}})",
          R"(field snapshot: key "01" is not a canonical decimal id)");
  // ...but stored only for the kind that uses them.
  const Event& e = Valid(
      R"({"type":"read","ts":1,"user_id":1,"kind":"dm","notice_id":4,"channel":"c","snapshot":{"1":1}})");
  EXPECT_EQ(e.notice_id, 0u);
  EXPECT_TRUE(e.channel.empty());
  EXPECT_TRUE(e.snapshot.empty());
  for (int k = 0; k < kUnreadKindCount; ++k) {
    const auto kind = static_cast<UnreadKind>(k);
    const std::string json = std::string(R"({"type":"read","ts":1,"user_id":1,"kind":")") +
                             UnreadKindName(kind) +
                             R"(","notice_id":4,"channel":"c","snapshot":{"1":1}})";
    EXPECT_EQ(Valid(json).read_kind, kind) << json;
  }
}

TEST_F(EventParserTest, FeedSnapshot) {
  auto feed = [](const std::string& snapshot) {
    return R"({"type":"read","ts":1,"user_id":1,"kind":"feed","snapshot":)" + snapshot + "}";
  };
  EXPECT_TRUE(Valid(feed("{}")).snapshot.empty());
  EXPECT_EQ(Valid(feed(R"({"9223372036854775807":9223372036854775807,"2":0,"3":1.0})")).snapshot,
            (std::vector<std::pair<uint64_t, uint64_t>>{{kMaxId, kMaxId}, {2, 0}, {3, 1}}));
  Invalid(feed(R"({"0":1})"), "field snapshot: key \"0\"");
  Invalid(feed(R"({" 1":1})"), "field snapshot: key \" 1\"");
  Invalid(feed(R"({"1":-1})"), R"(field snapshot["1"]: count out of range)");
  Invalid(feed(R"({"1":1.5})"), R"(field snapshot["1"]: expected an integer)");
  Invalid(feed(R"({"1":"1"})"), R"(field snapshot["1"]: expected an integer)");
  Invalid(feed(R"({"1":9223372036854775808})"), "count out of range");
  Invalid(feed("[]"), "field snapshot: expected an object");
  std::string big = "{";
  for (int i = 1; i <= 10001; ++i) {
    if (i > 1) big += ",";
    big.append("\"").append(std::to_string(i)).append("\":").append(std::to_string(i));
  }
  EXPECT_EQ(Valid(feed(big.substr(0, big.rfind(',')) + "}")).snapshot.size(), 10000u);
  Invalid(feed(big + "}"), "field snapshot: more than 10000 entries");
}

TEST_F(EventParserTest, ReuseLeavesNothingBehind) {
  ASSERT_TRUE(Parse(R"({"type":"mention","ts":1,"id":"t","user_id":1,"target_ids":[1,2,3]})").ok());
  const Event& e = Valid(R"({"type":"view","ts":2,"post_id":5})");
  Event want;
  want.type = EventType::kView;
  want.ts = 2;
  want.post_id = 5;
  EXPECT_EQ(e, want);
}

TEST_F(EventParserTest, LargeInputsGrowTheBuffers) {
  const std::string pad(1 << 20, ' ');
  const Event& e = Valid(R"({"type":"view","ts":2,"post_id":5,"pad":")" + pad + "\"}");
  EXPECT_EQ(e.post_id, 5u);
  EXPECT_TRUE(Parse(R"({"type":"view","ts":2,"post_id":5})").ok());
}

TEST(EventNamesTest, RoundTrip) {
  for (int i = 0; i < kEventTypeCount; ++i) {
    EventType t;
    ASSERT_TRUE(ParseEventType(EventTypeName(static_cast<EventType>(i)), &t));
    EXPECT_EQ(static_cast<int>(t), i);
  }
  for (int i = 0; i < kUnreadKindCount; ++i) {
    UnreadKind k;
    ASSERT_TRUE(ParseUnreadKind(UnreadKindName(static_cast<UnreadKind>(i)), &k));
    EXPECT_EQ(static_cast<int>(k), i);
  }
  EventType t;
  UnreadKind k;
  EXPECT_FALSE(ParseEventType("poke", &t));
  EXPECT_FALSE(ParseUnreadKind("posts", &k));
  EXPECT_STREQ(EventTypeName(EventType::kPostDelete), "post_delete");
  EXPECT_STREQ(UnreadKindName(UnreadKind::kRedDot), "red_dot");
}

}  // namespace
}  // namespace tally::schemas
