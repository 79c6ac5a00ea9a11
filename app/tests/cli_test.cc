// Drives the built `tally` binary: `tally broker` as a child process, then
// `tally produce` against it, as a user would (label: integration).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <string>

#include "base/kafka.h"
#include "testing/child_process.h"
#include "testing/free_port.h"
#include "testing/temp_dir.h"
#include "testing/wait_for.h"

namespace {

using tally::testing::ChildOptions;
using tally::testing::ChildProcess;
using tally::testing::FreePort;
using tally::testing::WaitFor;

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Runs `tally <args>` through the shell, capturing stdout and stderr.
RunResult Tally(const std::string& args, const std::string& stdin_path = "/dev/null") {
  std::string dir = ::testing::TempDir();
  // Per process: ctest runs each test of this file as its own process, in parallel.
  const std::string suffix = "." + std::to_string(::getpid());
  std::string out = dir + "/tally_cli_out" + suffix, err = dir + "/tally_cli_err" + suffix;
  std::string cmd =
      std::string(TALLY_BINARY) + " " + args + " <" + stdin_path + " >" + out + " 2>" + err;
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

// `tally broker` on `port`, its stdout on a pipe for the bootstrap line.
ChildOptions BrokerOptions(int port, const std::string& log_dir) {
  ChildOptions o;
  o.argv = {TALLY_BINARY, "broker",      "--port", std::to_string(port), "--partitions",
            "4",          "--log-level", "warn",   "--log-dir",          log_dir};
  o.stdout_pipe = true;
  return o;
}

int64_t EventsInTopic(const std::string& brokers) {
  tally::base::KafkaOptions k;
  k.brokers = brokers;
  auto conf = tally::base::MakeKafkaConf(RD_KAFKA_PRODUCER, k, {});
  auto rk = tally::base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
  auto marks = tally::base::QueryWatermarks(rk->get(), tally::base::kEventsTopic, 10000);
  if (!marks.ok()) return -1;
  int64_t n = 0;
  for (const auto& m : *marks) n += m.high - m.low;
  return n;
}

TEST(CliTest, VersionHelpAndUnknownCommand) {
  RunResult v = Tally("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("tally ", 0), 0u) << v.out;

  RunResult h = Tally("--help");
  EXPECT_EQ(h.exit_code, 0);
  for (const char* cmd : {"up", "broker", "produce", "aggregate", "serve", "replay"}) {
    EXPECT_NE(h.out.find(cmd), std::string::npos) << cmd;
  }

  RunResult u = Tally("frobnicate");
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_NE(u.err.find("unknown command 'frobnicate'"), std::string::npos) << u.err;
  EXPECT_NE(u.err.find("usage: tally"), std::string::npos) << u.err;

  RunResult none = Tally("");
  EXPECT_EQ(none.exit_code, 2);

  RunResult bh = Tally("produce --help");
  EXPECT_EQ(bh.exit_code, 0);
  EXPECT_NE(bh.out.find("--gen"), std::string::npos) << bh.out;

  RunResult bad = Tally("broker --no-such-flag");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown flag --no-such-flag"), std::string::npos) << bad.err;
}

TEST(CliTest, VisibleTimeoutIsAFlagOfBothHttpCommandsAndBelowTheRequestTimeout) {
  for (const char* cmd : {"up", "serve"}) {
    RunResult help = Tally(std::string(cmd) + " --help");
    EXPECT_NE(help.out.find("--visible-timeout-ms"), std::string::npos) << cmd;
    RunResult r =
        Tally(std::string(cmd) + " --visible-timeout-ms 30000 --request-timeout-ms 30000");
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_NE(r.err.find("--visible-timeout-ms 30000 must be below --request-timeout-ms 30000"),
              std::string::npos)
        << r.err;
    r = Tally(std::string(cmd) + " --visible-timeout-ms 0");
    EXPECT_EQ(r.exit_code, 2) << cmd;
  }
}

TEST(CliTest, BrokerThenProduceLinesAndGeneratedEvents) {
  const int port = FreePort();
  const std::string brokers = "127.0.0.1:" + std::to_string(port);
  tally::testing::TempDir dir("cli");
  ChildProcess broker;
  ASSERT_TRUE(broker.Start(BrokerOptions(port, (dir.path() / "log").string())).ok());
  ASSERT_EQ(broker.ReadLine(20000), "bootstrap: " + brokers);

  // A second broker on the same port fails plainly, and one on the same
  // log directory too.
  RunResult taken = Tally("broker --port " + std::to_string(port) + " --log-dir " +
                          (dir.path() / "log2").string());
  EXPECT_EQ(taken.exit_code, 1);
  EXPECT_NE(taken.err.find("already in use"), std::string::npos) << taken.err;
  RunResult locked = Tally("broker --port 0 --log-dir " + (dir.path() / "log").string());
  EXPECT_EQ(locked.exit_code, 1);
  EXPECT_NE(locked.err.find((dir.path() / "log").string()), std::string::npos) << locked.err;

  // Lines mode: 3 valid, 2 invalid, blank lines ignored.
  std::string input = ::testing::TempDir() + "/tally_cli_lines." + std::to_string(::getpid()) + ".jsonl";
  {
    std::ofstream f(input);
    f << R"({"type":"like","ts":1,"post_id":1,"user_id":2})"
      << "\n"
      << R"({"type":"like","ts":1,"post_id":1})"
      << "\n"
      << "\n"
      << R"({"type":"follow","ts":2,"user_id":"3","target_id":4})"
      << "\r\n"
      << "not json\n"
      << "   \n"
      << R"({"type":"notice","ts":3,"notice_id":1})";  // no final newline
  }
  RunResult lines = Tally("produce --brokers " + brokers + " --file " + input);
  EXPECT_EQ(lines.exit_code, 0) << lines.err;
  EXPECT_EQ(lines.out, "published 3 events (2 invalid lines skipped)\n");
  EXPECT_NE(lines.err.find("line 2: missing field user_id"), std::string::npos) << lines.err;
  EXPECT_NE(lines.err.find("line 5: "), std::string::npos) << lines.err;
  EXPECT_EQ(lines.err.find("line 3"), std::string::npos) << "blank lines are not errors";

  // The same through stdin.
  RunResult piped = Tally("produce --brokers " + brokers, input);
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.out, "published 3 events (2 invalid lines skipped)\n");

  RunResult gen = Tally("produce --brokers " + brokers + " --gen 2000 --seed 3 --users 100");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(gen.out.rfind("published 2000 events in ", 0), 0u) << gen.out;

  EXPECT_TRUE(WaitFor([&] { return EventsInTopic(brokers) == 2006; }, 10000))
      << EventsInTopic(brokers);

  RunResult missing = Tally("produce --brokers " + brokers + " --file /no/such/file");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("/no/such/file"), std::string::npos) << missing.err;

  EXPECT_EQ(broker.StopWith(SIGTERM, 10000), 0) << "SIGTERM stops the broker cleanly";
}

TEST(CliTest, ProduceToADeadBrokerFailsWithExitOne) {
  RunResult r = Tally("produce --brokers 127.0.0.1:" + std::to_string(FreePort()) +
                      " --gen 10 --kafka message.timeout.ms=1000 --kafka log_level=0");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("published 0 events", 0), 0u) << r.out;
}

}  // namespace
