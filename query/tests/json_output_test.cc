#include <gtest/gtest.h>

#include <string>

#include "query/query_service.h"
#include "schemas/json_escape.h"

namespace tally::query {
namespace {

std::string Json(std::string_view s) {
  std::string out;
  schemas::AppendJsonString(&out, s);
  return out;
}

TEST(JsonOutputTest, EscapesQuotesBackslashesAndControls) {
  EXPECT_EQ(Json("plain"), "\"plain\"");
  EXPECT_EQ(Json("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(Json("\n\r\t"), "\"\\n\\r\\t\"");
  EXPECT_EQ(Json(std::string_view("\x01\x1f\x7f\b\f", 5)), "\"\\u0001\\u001f\x7f\\b\\f\"");
  EXPECT_EQ(Json(std::string_view("a\0b", 3)), "\"a\\u0000b\"");
}

TEST(JsonOutputTest, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(Json("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\"");
  EXPECT_EQ(Json("\xff"), "\"\\ufffd\"");
  EXPECT_EQ(Json("\xc3"), "\"\\ufffd\"");                        // truncated
  EXPECT_EQ(Json("\xc0\xaf"), "\"\\ufffd\\ufffd\"");             // overlong
  EXPECT_EQ(Json("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // surrogate
}

TEST(RenderErrorBodyTest, HasTheContractShapeAndOneLine) {
  EXPECT_EQ(RenderErrorBody("bad_id", "bad post id \"x\""),
            "{\"error\":{\"code\":\"bad_id\",\"message\":\"bad post id \\\"x\\\"\"}}");
  EXPECT_EQ(RenderErrorBody("internal", "first line\nsecond line"),
            "{\"error\":{\"code\":\"internal\",\"message\":\"first line\"}}");
}

TEST(HttpStatusForTest, MapsEveryStatusCode) {
  using base::StatusCode;
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 413);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  for (StatusCode c :
       {StatusCode::kCorruption, StatusCode::kIOError, StatusCode::kFailedPrecondition,
        StatusCode::kOutOfRange, StatusCode::kAborted, StatusCode::kInternal}) {
    EXPECT_EQ(HttpStatusFor(c), 500) << base::StatusCodeName(c);
  }
}

}  // namespace
}  // namespace tally::query
