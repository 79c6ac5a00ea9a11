#include "request_target.h"

#include <gtest/gtest.h>

#include <string>

namespace tally::query {
namespace {

TEST(ParseIdTest, AcceptsCanonicalDecimalsInRange) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseId("1", &v));
  EXPECT_EQ(v, 1u);
  EXPECT_TRUE(ParseId("1234567890", &v));
  EXPECT_EQ(v, 1234567890u);
  EXPECT_TRUE(ParseId("9223372036854775807", &v));
  EXPECT_EQ(v, 9223372036854775807ULL);
}

TEST(ParseIdTest, RejectsEverythingElse) {
  uint64_t v = 77;
  for (const char* bad : {"",
                          "0",
                          "00",
                          "01",
                          "007",
                          "-1",
                          "+1",
                          " 1",
                          "1 ",
                          "1e3",
                          "0x10",
                          "1.0",
                          "abc",
                          "1a",
                          "9223372036854775808",
                          "18446744073709551615",
                          "18446744073709551616",
                          "99999999999999999999",
                          "%31",
                          "１"}) {
    EXPECT_FALSE(ParseId(bad, &v)) << bad;
  }
  EXPECT_EQ(v, 77u);  // untouched on failure
}

TEST(SplitTargetTest, SeparatesPathAndQuery) {
  std::string_view path, query;
  SplitTarget("/v1/posts/counts?ids=1,2", &path, &query);
  EXPECT_EQ(path, "/v1/posts/counts");
  EXPECT_EQ(query, "ids=1,2");
  SplitTarget("/healthz", &path, &query);
  EXPECT_EQ(path, "/healthz");
  EXPECT_EQ(query, "");
  SplitTarget("/a?", &path, &query);
  EXPECT_EQ(path, "/a");
  EXPECT_EQ(query, "");
}

TEST(SplitPathTest, SplitsOnSlashesWithoutNormalizing) {
  PathSegments p = SplitPath("/v1/posts/7/counts");
  ASSERT_TRUE(p.ok);
  ASSERT_EQ(p.count, 4);
  EXPECT_EQ(p.segment[0], "v1");
  EXPECT_EQ(p.segment[3], "counts");

  p = SplitPath("/v1/info/");
  ASSERT_TRUE(p.ok);
  ASSERT_EQ(p.count, 3);
  EXPECT_EQ(p.segment[2], "");

  p = SplitPath("/");
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.count, 1);

  EXPECT_FALSE(SplitPath("").ok);
  EXPECT_FALSE(SplitPath("v1/info").ok);
  EXPECT_FALSE(SplitPath("http://host/v1/info").ok);
  EXPECT_FALSE(SplitPath("/1/2/3/4/5/6/7/8/9").ok);
  EXPECT_TRUE(SplitPath("/1/2/3/4/5/6/7/8").ok);
}

TEST(PercentDecodeTest, DecodesAndRejectsMalformedEscapes) {
  std::string out;
  EXPECT_TRUE(PercentDecode("1%2C2%2c3+x", &out));
  EXPECT_EQ(out, "1,2,3 x");
  EXPECT_FALSE(PercentDecode("%", &out));
  EXPECT_FALSE(PercentDecode("%4", &out));
  EXPECT_FALSE(PercentDecode("ab%zz", &out));
  EXPECT_TRUE(PercentDecode("%41", &out));
  EXPECT_EQ(out, "A");
}

TEST(FindQueryParamTest, FindsOneParameterIgnoringOthers) {
  bool found = false;
  std::string value;
  ASSERT_TRUE(FindQueryParam("x=1&ids=1%2C2&&y", "ids", &found, &value).ok());
  EXPECT_TRUE(found);
  EXPECT_EQ(value, "1,2");

  ASSERT_TRUE(FindQueryParam("x=1", "ids", &found, &value).ok());
  EXPECT_FALSE(found);
  ASSERT_TRUE(FindQueryParam("", "ids", &found, &value).ok());
  EXPECT_FALSE(found);
  ASSERT_TRUE(FindQueryParam("ids", "ids", &found, &value).ok());
  EXPECT_TRUE(found);
  EXPECT_EQ(value, "");
  ASSERT_TRUE(FindQueryParam("i%64s=5", "ids", &found, &value).ok());
  EXPECT_TRUE(found);
  EXPECT_EQ(value, "5");
}

TEST(FindQueryParamTest, RejectsRepeatsAndBadEscapes) {
  bool found = false;
  std::string value;
  EXPECT_EQ(FindQueryParam("ids=1&ids=2", "ids", &found, &value).code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_EQ(FindQueryParam("ids=1%zz", "ids", &found, &value).code(),
            base::StatusCode::kInvalidArgument);
  EXPECT_EQ(FindQueryParam("a%=1&ids=1", "ids", &found, &value).code(),
            base::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tally::query
