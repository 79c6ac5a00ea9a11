// The broker with command-line clients: kcat (metadata, produce, consume,
// a group member) and kafka-python (admin, producer, group consumer).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "server_test_util.h"
#include "testing/temp_dir.h"

namespace tally::broker::test {
namespace {

using testing::TempDir;

constexpr const char* kKcat = "/usr/bin/kcat";

TEST(ServerToolsTest, Kcat) {
  if (::access(kKcat, X_OK) != 0) GTEST_SKIP() << "kcat is not installed at " << kKcat;
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("lines", 1).ok());
  const std::string b = broker->bootstrap();
  int rc = 0;
  std::string out = RunShell(std::string(kKcat) + " -b " + b + " -L -m 5", &rc, true);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("broker 0 at " + b), std::string::npos) << out;
  EXPECT_NE(out.find("topic \"lines\" with 1 partitions"), std::string::npos) << out;

  const std::string input = (dir.path() / "input.txt").string();
  std::ofstream(input) << "one\ntwo\nthree\n";
  out = RunShell(std::string(kKcat) + " -b " + b + " -P -t lines -m 10 < " + input, &rc, true);
  ASSERT_EQ(rc, 0) << out;

  out = RunShell(
      "timeout 20 " + std::string(kKcat) + " -b " + b + " -C -t lines -o beginning -e -q -m 10",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "one\ntwo\nthree\n");

  out = RunShell("timeout 20 " + std::string(kKcat) + " -b " + b +
                     " -G kgroup -o beginning -e -q -m 10 -X heartbeat.interval.ms=200 lines",
                 &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "one\ntwo\nthree\n");
}

TEST(ServerToolsTest, KafkaPython) {
  // Debian's interpreter, where python3-kafka installs: a python3 earlier
  // in PATH (pyenv, a venv) may not have it.
  int rc = 0;
  RunShell("/usr/bin/python3 -c 'import kafka'", &rc, true);
  if (rc != 0) GTEST_SKIP() << "kafka-python is missing (Debian package python3-kafka)";
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  const std::string out =
      RunShell("timeout 60 /usr/bin/python3 " TALLY_BROKER_TESTS_DIR "/server_kafka_python.py " +
                   broker->bootstrap() + " pytopic pygroup",
               &rc, true);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
  BrokerStats stats = broker->Stats();
  int64_t end = 0;
  for (const auto& p : stats.partitions) {
    if (p.topic == "pytopic") end += p.high_watermark;
  }
  EXPECT_EQ(end, 20);
}

}  // namespace
}  // namespace tally::broker::test
