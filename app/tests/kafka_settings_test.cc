// Every Kafka client a tally command makes gets the --kafka settings (TLS,
// SASL, tuning). Runs the built binary against a `tally broker` with
// `--kafka debug=conf`, which makes librdkafka print each client's final
// configuration when the client is created, and checks that every client
// printed the settings given on the command line (label: integration).
//
// A client built without the user's settings would not have debug=conf
// either and print nothing: so each command's clients are also counted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using tally::app::testing::FreePort;
using tally::app::testing::WaitFor;

constexpr char kRack[] = "tally-settings-test-rack";

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// `tally <args>` as a child process, stdout and stderr to `log`.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& log) {
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv{const_cast<char*>(TALLY_BINARY)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(TALLY_BINARY, argv.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Sends `sig` (unless 0) and waits up to `timeout_ms` for the exit; the
  // exit code, or -1.
  int Stop(int sig, int timeout_ms) {
    if (sig) kill(pid_, sig);
    int status = 0;
    if (!WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout_ms)) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
};

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
    dir_ = ::testing::TempDir() + "/tally_kafka_settings." + std::to_string(getpid());
    ASSERT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()), 0);
    int port = FreePort();
    brokers_ = "127.0.0.1:" + std::to_string(port);
    broker_ = std::make_unique<Child>(
        std::vector<std::string>{"broker", "--port", std::to_string(port), "--partitions", "2"},
        dir_ + "/broker.log");
    ASSERT_TRUE(WaitFor(
        [&] { return Slurp(dir_ + "/broker.log").find("bootstrap: ") != std::string::npos; },
        30000))
        << Slurp(dir_ + "/broker.log");
  }
  void TearDown() override {
    broker_.reset();
    if (!HasFailure()) std::system(("rm -rf " + dir_).c_str());
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
    Child c(args, log);
    if (exits_by_itself) {
      EXPECT_EQ(c.Stop(0, 60000), 0) << Slurp(log);
    } else {
      EXPECT_TRUE(WaitFor([&] { return ClientConfigs(Slurp(log)).size() >= clients; }, 60000))
          << Slurp(log);
      EXPECT_EQ(c.Stop(SIGTERM, 30000), 0) << Slurp(log);
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

  std::string dir_;
  std::string brokers_;
  std::unique_ptr<Child> broker_;
};

TEST_F(KafkaSettingsTest, EveryClientOfEveryCommandGetsTheKafkaSettings) {
  // produce: its producer.
  EXPECT_EQ(Run({"produce", "--gen", "50"}, 1, true), (std::set<std::string>{"rdkafka#producer"}));

  // up: cluster probe (rdkafka#consumer), admin, publisher
  // (rdkafka#producer), watermarks, router and applier producers and
  // consumers, and the Kafka health probe (tally-probe).
  const std::string state = dir_ + "/state";
  auto up = Run({"up", "--state-dir", state, "--partitions", "2", "--http",
                 "127.0.0.1:" + std::to_string(FreePort())},
                9, false);
  EXPECT_EQ(up, (std::set<std::string>{"rdkafka#consumer", "tally-admin#producer", "tally-probe#producer",
                                       "rdkafka#producer", "tally-watermarks#consumer",
                                       "tally-router#producer", "tally-router#consumer",
                                       "tally-applier#producer", "tally-applier#consumer"}));

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
