#include "json_text.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::schemas::internal {
namespace {

TEST(ParseIdStringTest, AcceptsExactlyCanonicalDecimalsInRange) {
  uint64_t v = 0;
  EXPECT_EQ(ParseIdString("1", &v), IdStringCheck::kOk);
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(ParseIdString("9223372036854775807", &v), IdStringCheck::kOk);
  EXPECT_EQ(v, 9223372036854775807u);
  EXPECT_EQ(ParseIdString("999999999999999999", &v), IdStringCheck::kOk);   // 18 digits
  EXPECT_EQ(ParseIdString("1000000000000000000", &v), IdStringCheck::kOk);  // 19 digits
  EXPECT_EQ(ParseIdString("9223372036854775806", &v), IdStringCheck::kOk);

  v = 42;
  EXPECT_EQ(ParseIdString("0", &v), IdStringCheck::kOutOfRange);
  EXPECT_EQ(ParseIdString("9223372036854775808", &v), IdStringCheck::kOutOfRange);
  EXPECT_EQ(ParseIdString("9300000000000000000", &v), IdStringCheck::kOutOfRange);
  EXPECT_EQ(ParseIdString("10000000000000000000", &v), IdStringCheck::kOutOfRange);
  EXPECT_EQ(ParseIdString(std::string(100, '9'), &v), IdStringCheck::kOutOfRange);
  for (const char* bad : {"", "01", "00", "+1", "-1", " 1", "1 ", "1\n", "1.0", "1e3", "0x1",
                          "\xEF\xBC\x91" /* fullwidth 1 */}) {
    EXPECT_EQ(ParseIdString(bad, &v), IdStringCheck::kMalformed) << bad;
  }
  EXPECT_EQ(v, 42u) << "untouched unless kOk";
}

TEST(IsJsonNumberTest, FollowsRfc8259) {
  for (const char* ok : {"0", "-0", "1", "-1", "10", "1.5", "0.5", "1e3", "1E+3", "1e-3", "-0.0e0",
                         "123456789012345678901234567890"}) {
    EXPECT_TRUE(IsJsonNumber(ok)) << ok;
  }
  for (const char* bad : {"", "-", "01", "-01", "1.", ".5", "+1", "1e", "1e+", "1.e3", "0x1", "1 ",
                          "NaN", "Infinity", "1_0", "--1", "1e3.0"}) {
    EXPECT_FALSE(IsJsonNumber(bad)) << bad;
  }
}

TEST(ClassifyJsonNumberTest, TellsPlainIntegersFromTheRest) {
  for (const char* i : {"0", "7", "10", "123456789012345678901234567890"}) {
    EXPECT_EQ(ClassifyJsonNumber(i), JsonNumber::kInteger) << i;
  }
  for (const char* i : {"-0", "-7", "-123456789012345678901234567890"}) {
    EXPECT_EQ(ClassifyJsonNumber(i), JsonNumber::kNegativeInteger) << i;
  }
  for (const char* o : {"1.5", "5.0", "1e3", "-1E-3", "0.0", "-0.0e0"}) {
    EXPECT_EQ(ClassifyJsonNumber(o), JsonNumber::kOther) << o;
  }
  for (const char* bad : {"", "-", "01", "1.", "1e", "+1", "1 "}) {
    EXPECT_EQ(ClassifyJsonNumber(bad), JsonNumber::kInvalid) << bad;
  }
}

TEST(TrimTrailingJsonWhitespaceTest, TrimsOnlyJsonWhitespace) {
  EXPECT_EQ(TrimTrailingJsonWhitespace("1 \t\r\n"), "1");
  EXPECT_EQ(TrimTrailingJsonWhitespace("1\f"), "1\f");
  EXPECT_EQ(TrimTrailingJsonWhitespace("  "), "");
}

TEST(IsChannelNameTest, MatchesThePattern) {
  EXPECT_TRUE(IsChannelName("a"));
  EXPECT_TRUE(IsChannelName("a.b-c_d09"));
  EXPECT_TRUE(IsChannelName(std::string(64, 'x')));
  EXPECT_FALSE(IsChannelName(std::string(65, 'x')));
  EXPECT_FALSE(IsChannelName(""));
  EXPECT_FALSE(IsChannelName("A"));
  EXPECT_FALSE(IsChannelName("a b"));
  EXPECT_FALSE(IsChannelName("a\n"));
  EXPECT_FALSE(IsChannelName("\xC3\xA9"));
}

TEST(CountCodePointsTest, CountsCodePointsNotBytes) {
  EXPECT_EQ(CountCodePoints(""), 0u);
  EXPECT_EQ(CountCodePoints("abc"), 3u);
  EXPECT_EQ(CountCodePoints("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"), 3u);
  EXPECT_EQ(CountCodePoints(std::string("\0", 1)), 1u);
}

TEST(AppendJsonStringTest, Escapes) {
  std::string out;
  AppendJsonString(&out, std::string("a\"b\\c/\x01\x1f\x7f\n\0\xC3\xA9", 13));
  EXPECT_EQ(out, std::string("\"a\\\"b\\\\c/\\u0001\\u001f\x7f\\n\\u0000\xC3\xA9\""));
}

TEST(AppendQuotedForReasonTest, CutsLongValuesAtACodePointBoundary) {
  std::string out;
  AppendQuotedForReason(&out, "short");
  EXPECT_EQ(out, "\"short\"");
  out.clear();
  std::string s(63, 'a');
  s += "\xC3\xA9\xC3\xA9";  // the 64-byte cut falls inside a 2-byte character
  AppendQuotedForReason(&out, s);
  EXPECT_EQ(out, "\"" + std::string(63, 'a') + "\"...");
}

}  // namespace
}  // namespace tally::schemas::internal
