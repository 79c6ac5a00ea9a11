#include "base/flags.h"

#include <gtest/gtest.h>

namespace tally::base {
namespace {

TEST(FlagSetTest, ParsesEveryKindOfFlag) {
  std::string brokers = "x";
  int64_t parts = 16;
  bool verbose = false;
  std::vector<std::string> topics = {"tally.events"};
  FlagSet fs("tally test", "testing");
  fs.String("brokers", &brokers, "b");
  fs.Int("partitions", &parts, "p");
  fs.Bool("verbose", &verbose, "v");
  fs.Repeated("input-topic", &topics, "t");
  const char* argv[] = {"--brokers=a:1", "--partitions", "4", "--verbose", "--input-topic", "t1",
                        "--input-topic=t2", "pos"};
  bool help = false;
  ASSERT_TRUE(fs.Parse(8, const_cast<char**>(argv), &help).ok());
  EXPECT_FALSE(help);
  EXPECT_EQ(brokers, "a:1");
  EXPECT_EQ(parts, 4);
  EXPECT_TRUE(verbose);
  EXPECT_EQ(topics, (std::vector<std::string>{"t1", "t2"}));
  EXPECT_EQ(fs.positional(), (std::vector<std::string>{"pos"}));
  EXPECT_TRUE(fs.WasSet("brokers"));
}

TEST(FlagSetTest, RejectsUnknownFlagAndBadNumber) {
  int64_t n = 0;
  FlagSet fs("tally test", "testing");
  fs.Int("n", &n, "n");
  bool help = false;
  const char* a1[] = {"--nope"};
  EXPECT_EQ(fs.Parse(1, const_cast<char**>(a1), &help).code(), StatusCode::kInvalidArgument);
  const char* a2[] = {"--n", "12x"};
  EXPECT_EQ(fs.Parse(2, const_cast<char**>(a2), &help).code(), StatusCode::kInvalidArgument);
  const char* a3[] = {"--n"};
  EXPECT_EQ(fs.Parse(1, const_cast<char**>(a3), &help).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tally::base
