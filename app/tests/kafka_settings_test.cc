// Every Kafka client a tally command makes gets the --kafka settings (TLS,
// SASL, tuning). Runs the built binary against a `tally broker` with
// `--kafka debug=conf`, which makes librdkafka print each client's final
// configuration when the client is created, and checks that every client
// printed the settings given on the command line (label: integration).
//
// A client built without the user's settings would not have debug=conf
// either and print nothing: so each command's clients are also counted.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "testing/child_process.h"
#include "testing/free_port.h"
#include "testing/temp_dir.h"
#include "testing/wait_for.h"

namespace {

using tally::testing::ChildOptions;
using tally::testing::ChildProcess;
using tally::testing::FreePort;
using tally::testing::TempDir;
using tally::testing::WaitFor;

constexpr char kRack[] = "tally-settings-test-rack";

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// `tally <args>` as a child process, stdout and stderr to `log`.
std::unique_ptr<ChildProcess> StartTally(const std::vector<std::string>& args,
                                         const std::string& log) {
  ChildOptions o;
  o.argv = {TALLY_BINARY};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.log_path = log;
  auto child = std::make_unique<ChildProcess>();
  tally::base::Status st = child->Start(o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return child;
}

// client name ("tally-router#consumer-8") -> its "key = value" lines, from
// librdkafka's "Client configuration:" dumps in a log.
std::map<std::string, std::set<std::string>> ClientConfigs(const std::string& log) {
  std::map<std::string, std::set<std::string>> out;
  static const std::regex kHeader(R"(kafka: (\S+) CONF: \[thrd:app\]: Client configuration:)");
  static const std::regex kLine(R"(kafka: (\S+) CONF: \[thrd:app\]:   (\S+ = .*))");
  std::istringstream in(log);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kHeader)) {
      out[m[1]];
    } else if (std::regex_search(line, m, kLine) && out.count(m[1])) {
      out[m[1]].insert(m[2]);
    }
  }
  return out;
}

class KafkaSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_.path().string();
    int port = FreePort();
    brokers_ = "127.0.0.1:" + std::to_string(port);
    broker_ = StartTally(
        std::vector<std::string>{"broker", "--port", std::to_string(port), "--partitions", "2"},
        dir_ + "/broker.log");
    ASSERT_TRUE(WaitFor(
        [&] { return Slurp(dir_ + "/broker.log").find("bootstrap: ") != std::string::npos; },
        30000))
        << Slurp(dir_ + "/broker.log");
  }
  void TearDown() override {
    broker_.reset();
    if (HasFailure()) temp_.Keep();
  }

  // The settings every client must show.
  std::vector<std::string> KafkaArgs() const {
    return {"--brokers",   brokers_,
            "--log-level", "debug",
            "--kafka",     "debug=conf",
            "--kafka",     std::string("client.rack=") + kRack,
            "--kafka",     "sasl.username=tally-settings-user"};
  }

  // Runs `tally <args> <KafkaArgs()>` until its log shows `clients`
  // configurations (long-running commands are then stopped with SIGTERM) or
  // it exits; checks every configuration; returns the client names.
  std::set<std::string> Run(std::vector<std::string> args, size_t clients, bool exits_by_itself) {
    static int n = 0;
    std::string log = dir_ + "/run" + std::to_string(n++) + ".log";
    for (const auto& a : KafkaArgs()) args.push_back(a);
    auto c = StartTally(args, log);
    if (exits_by_itself) {
      EXPECT_EQ(c->StopWith(0, 60000), 0) << Slurp(log);
    } else {
      EXPECT_TRUE(WaitFor([&] { return ClientConfigs(Slurp(log)).size() >= clients; }, 60000))
          << Slurp(log);
      EXPECT_EQ(c->StopWith(SIGTERM, 30000), 0) << Slurp(log);
    }
    auto configs = ClientConfigs(Slurp(log));
    EXPECT_EQ(configs.size(), clients) << args[0] << ":\n" << Slurp(log);
    std::set<std::string> names;
    for (const auto& [name, lines] : configs) {
      EXPECT_TRUE(lines.count(std::string("client.rack = ") + kRack))
          << args[0] << ": client " << name;
      // librdkafka redacts it in the dump; that it is listed means it was set.
      EXPECT_TRUE(lines.count("sasl.username = [redacted]")) << args[0] << ": client " << name;
      names.insert(name.substr(0, name.find('#')) +
                   name.substr(name.find('#'), name.rfind('-') - name.find('#')));
    }
    return names;
  }

  TempDir temp_{"kafka-settings"};
  std::string dir_;
  std::string brokers_;
  std::unique_ptr<ChildProcess> broker_;
};

TEST_F(KafkaSettingsTest, EveryClientOfEveryCommandGetsTheKafkaSettings) {
  // produce: its producer.
  EXPECT_EQ(Run({"produce", "--gen", "50"}, 1, true), (std::set<std::string>{"rdkafka#producer"}));

  // up --brokers (a cluster member): cluster probe (rdkafka#consumer),
  // admin, publisher (rdkafka#producer), watermarks, router and applier
  // producers and consumers, the applier group's member, the members
  // directory's producer and consumer, and the Kafka health probe
  // (tally-probe).
  const std::string state = dir_ + "/state";
  auto up = Run({"up", "--state-dir", state, "--partitions", "2", "--http",
                 "127.0.0.1:" + std::to_string(FreePort())},
                12, false);
  EXPECT_EQ(
      up, (std::set<std::string>{
              "rdkafka#consumer", "tally-admin#producer", "tally-probe#producer",
              "rdkafka#producer", "tally-watermarks#consumer", "tally-router#producer",
              "tally-router#consumer", "tally-applier#producer", "tally-applier#consumer",
              "tally-applier-group#consumer", "tally-members#producer", "tally-members#consumer"}));

  // aggregate: probe, admin, router and applier producers and consumers, health probe.
  EXPECT_EQ(Run({"aggregate", "--state-dir", dir_ + "/state-agg", "--partitions", "2"}, 7, false),
            (std::set<std::string>{"rdkafka#consumer", "tally-admin#producer", "tally-probe#producer",
                                   "tally-router#producer", "tally-router#consumer",
                                   "tally-applier#producer", "tally-applier#consumer"}));

  // serve --brokers: probe, admin (partition counts), publisher, watermarks, health probe.
  EXPECT_EQ(
      Run({"serve", "--state-dir", state, "--http", "127.0.0.1:" + std::to_string(FreePort())}, 5,
          false),
      (std::set<std::string>{"rdkafka#consumer", "tally-admin#producer", "rdkafka#producer", "tally-probe#producer",
                             "tally-watermarks#consumer"}));

  // replay: probe, admin, its consumer.
  EXPECT_EQ(
      Run({"replay", "--state-dir", dir_ + "/state-replay"}, 3, true),
      (std::set<std::string>{"rdkafka#consumer", "tally-admin#producer", "tally-replay#consumer"}));
}

}  // namespace
