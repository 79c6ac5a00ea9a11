// The broker SIGKILLed at random instants while three idempotent producers
// write and a consumer group commits. The broker runs in a child process
// (broker_main.cc) with its default group commit (log_flush_ms 2) and is
// restarted on the same log directory and port after each kill. At the end:
// every acknowledged record is in the log exactly once, at the offset its
// delivery report gave, each producer's records are in order in every
// partition, no value is there twice, and the group's committed offsets are
// at least the last ones whose commit was acknowledged.
//
// TALLY_CRASH_SEED=N repeats a run; the seed is printed on stdout.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "server_test_util.h"
#include "testing/child_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_for.h"

namespace tally::broker::test {
namespace {

using testing::TempDir;
using testing::WaitFor;

constexpr char kTopic[] = "crash";
constexpr char kGroup[] = "crash-group";
constexpr int32_t kPartitions = 4;
constexpr int kProducers = 3;
// Per producer: records queued per second, and at most this many without a
// delivery report, so that a down broker does not pile up a backlog.
constexpr int64_t kRecordsPerSecond = 2000;
constexpr int64_t kMaxUnanswered = 2000;

// What one producer thread leaves for the checks.
struct ProducerRun {
  std::vector<Msg> reports;
  int64_t queued = 0;
  bool flushed = false;
};

// Queues "p<id>-<seq>" records (partition (seq + id) % kPartitions) at a
// bounded rate until `stop`, then waits for every delivery report.
void RunProducer(const std::string& bootstrap, int id, const std::atomic<bool>& stop,
                 std::atomic<int64_t>* acked, ProducerRun* out) {
  Producer producer(bootstrap, {{"enable.idempotence", "true"},
                                {"message.timeout.ms", "60000"},
                                {"linger.ms", "2"},
                                {"topic.metadata.refresh.interval.ms", "1000"}});
  const int64_t start = base::SteadyMs();
  int64_t seq = 0;
  size_t counted = 0;
  while (!stop.load()) {
    const int64_t target = (base::SteadyMs() - start) * kRecordsPerSecond / 1000;
    while (seq < target && seq - static_cast<int64_t>(producer.reports().size()) < kMaxUnanswered) {
      const auto partition = static_cast<int32_t>((seq + id) % kPartitions);
      if (!producer.Produce(kTopic, partition, "", fmt::format("p{}-{}", id, seq))) break;
      seq++;
    }
    producer.Poll(5);
    for (; counted < producer.reports().size(); counted++) {
      if (producer.reports()[counted].err == 0) acked->fetch_add(1);
    }
  }
  out->flushed = producer.Flush(30000);
  out->reports = producer.reports();
  out->queued = seq;
}

// What the group consumer thread leaves for the checks.
struct GroupRun {
  std::map<int32_t, int64_t> acked_commits;  // the highest acknowledged, per partition
  std::atomic<int> commits_ok{0};            // read by the test thread while it runs
  int commits_failed = 0;
  int64_t consumed = 0;
};

void OnCommit(rd_kafka_t*, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* offsets,
              void* opaque) {
  auto* run = static_cast<GroupRun*>(opaque);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR || offsets == nullptr) {
    run->commits_failed++;
    return;
  }
  run->commits_ok++;
  for (int i = 0; i < offsets->cnt; i++) {
    const rd_kafka_topic_partition_t& e = offsets->elems[i];
    if (e.err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
    int64_t& best = run->acked_commits.try_emplace(e.partition, -1).first->second;
    best = std::max(best, e.offset);
  }
}

// Commits the positions of the assigned partitions synchronously (the
// callback runs inside rd_kafka_commit_queue with a null queue).
void CommitPositions(rd_kafka_t* rk, GroupRun* run) {
  rd_kafka_topic_partition_list_t* assigned = nullptr;
  if (rd_kafka_assignment(rk, &assigned) != RD_KAFKA_RESP_ERR_NO_ERROR) return;
  rd_kafka_position(rk, assigned);
  rd_kafka_topic_partition_list_t* commit = rd_kafka_topic_partition_list_new(assigned->cnt);
  for (int i = 0; i < assigned->cnt; i++) {
    const rd_kafka_topic_partition_t& e = assigned->elems[i];
    if (e.offset >= 0)
      rd_kafka_topic_partition_list_add(commit, e.topic, e.partition)->offset = e.offset;
  }
  if (commit->cnt > 0) rd_kafka_commit_queue(rk, commit, nullptr, &OnCommit, run);
  rd_kafka_topic_partition_list_destroy(commit);
  rd_kafka_topic_partition_list_destroy(assigned);
}

void RunGroupConsumer(const std::string& bootstrap, const std::atomic<bool>& stop, GroupRun* out) {
  Consumer consumer(bootstrap, kGroup, {{"topic.metadata.refresh.interval.ms", "1000"}});
  consumer.Subscribe({kTopic});
  int64_t next_commit = base::SteadyMs() + 50;
  while (!stop.load()) {
    if (consumer.PollOnce(20).has_value()) out->consumed++;
    if (base::SteadyMs() >= next_commit) {
      CommitPositions(consumer.handle(), out);
      next_commit = base::SteadyMs() + 50;
    }
  }
  consumer.Close();
}

// Stops and joins the client threads however the test leaves.
struct Clients {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  void Join() {
    stop.store(true);
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
  }
  ~Clients() { Join(); }
};

uint32_t Seed() {
  if (const char* s = std::getenv("TALLY_CRASH_SEED")) {
    return static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
  }
  return std::random_device{}();
}

// "p<id>-<seq>" -> {id, seq}.
std::pair<int, int64_t> ParseValue(const std::string& v) {
  const size_t dash = v.find('-');
  return {std::stoi(v.substr(1, dash - 1)), std::stoll(v.substr(dash + 1))};
}

TEST(ServerCrashTest, AcknowledgedRecordsAndCommitsSurviveRandomKills) {
  const uint32_t seed = Seed();
  std::printf("server_crash_test: seed %u (TALLY_CRASH_SEED=%u repeats it)\n", seed, seed);
  std::fflush(stdout);
  std::mt19937 rng(seed);
  TempDir dir("broker-crash");
  const std::filesystem::path log_dir = dir.path() / "log";
  auto child = std::make_unique<testing::ChildProcess>();
  const std::string bootstrap = StartBrokerChild(child.get(), log_dir, 0);
  ASSERT_FALSE(bootstrap.empty());
  const int port = PortOf(bootstrap);
  ASSERT_TRUE(CreateTopicRaw(port, kTopic, kPartitions));

  std::atomic<int64_t> acked{0};
  std::vector<ProducerRun> runs(kProducers);
  GroupRun group;
  const int64_t began = base::SteadyMs();
  {
    Clients clients;
    for (int id = 0; id < kProducers; id++) {
      clients.threads.emplace_back(RunProducer, bootstrap, id, std::cref(clients.stop), &acked,
                                   &runs[static_cast<size_t>(id)]);
    }
    clients.threads.emplace_back(RunGroupConsumer, bootstrap, std::cref(clients.stop), &group);
    ASSERT_TRUE(WaitFor([&] { return acked.load() >= 500; }, 15000)) << "no traffic before kills";

    const int kills = 4 + static_cast<int>(rng() % 2);
    std::uniform_int_distribution<int> pause_ms(50, 400);
    for (int k = 0; k < kills; k++) {
      // Each broker sees some commits, so that a kill may land on one.
      const int commits = group.commits_ok.load();
      WaitFor([&] { return group.commits_ok.load() > commits; }, 5000);
      // The random instant itself is what is tested; nothing is ordered by it.
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(rng)));
      child->Kill();
      child = std::make_unique<testing::ChildProcess>();
      if (StartBrokerChild(child.get(), log_dir, port).empty()) dir.Keep();
      ASSERT_TRUE(child->Running()) << "restart " << k + 1 << " failed; see " << dir.path();
    }
    // After the last restart, enough traffic to see every client recover.
    const int64_t before = acked.load();
    ASSERT_TRUE(WaitFor([&] { return acked.load() >= before + 1500; }, 20000))
        << "producers did not recover after the last restart";
    const int commits_before = group.commits_ok.load();
    WaitFor([&] { return group.commits_ok > commits_before; }, 5000);
    clients.Join();
    std::printf("server_crash_test: %d kills in %lld ms\n", kills,
                static_cast<long long>(base::SteadyMs() - began));
  }

  // The whole log, from offset 0, with no group.
  std::vector<Msg> log = ReadWholeLog(bootstrap, kTopic, kPartitions, 30000);
  std::map<std::string, std::vector<std::pair<int32_t, int64_t>>> where;
  std::map<int32_t, std::map<int, int64_t>> last_seq;  // partition -> producer -> seq
  for (const Msg& m : log) {
    where[m.value].push_back({m.partition, m.offset});
    auto [id, seq] = ParseValue(m.value);
    auto [it, fresh] = last_seq[m.partition].try_emplace(id, seq);
    if (!fresh) {
      EXPECT_GT(seq, it->second) << "partition " << m.partition << " offset " << m.offset << ": "
                                 << m.value << " after seq " << it->second;
      it->second = seq;
    }
  }
  for (const auto& [value, at] : where) {
    EXPECT_EQ(at.size(), 1u) << value << " is in the log " << at.size() << " times";
  }

  int64_t ok = 0, failed = 0;
  for (int id = 0; id < kProducers; id++) {
    const ProducerRun& run = runs[static_cast<size_t>(id)];
    EXPECT_TRUE(run.flushed) << "producer " << id;
    EXPECT_EQ(static_cast<int64_t>(run.reports.size()), run.queued) << "producer " << id;
    std::map<int32_t, std::pair<int64_t, int64_t>> prev;  // partition -> {seq, offset}
    for (const Msg& r : run.reports) {
      if (r.err != 0) {
        failed++;
        continue;
      }
      ok++;
      auto it = where.find(r.value);
      ASSERT_NE(it, where.end()) << r.value << " was acknowledged at " << r.partition << "/"
                                 << r.offset << " but is not in the log";
      EXPECT_EQ(it->second[0], std::make_pair(r.partition, r.offset)) << r.value;
      const int64_t seq = ParseValue(r.value).second;
      // Reports of one partition come in the order the producer queued.
      auto [p, fresh] = prev.try_emplace(r.partition, seq, r.offset);
      if (!fresh) {
        EXPECT_GT(seq, p->second.first) << r.value;
        EXPECT_GT(r.offset, p->second.second) << r.value << " after seq " << p->second.first;
        p->second = {seq, r.offset};
      }
    }
  }
  EXPECT_EQ(failed, 0) << "delivery reports with an error (idempotent, 60 s timeout)";
  // Every queued record was acknowledged, so the log holds nothing else.
  EXPECT_EQ(static_cast<int64_t>(log.size()), ok);

  // The committed offsets, asked of the last broker.
  Consumer asker(bootstrap, kGroup);
  for (const auto& [partition, offset] : group.acked_commits) {
    const int64_t committed = CommittedOffset(asker.handle(), kTopic, partition);
    EXPECT_GE(committed, offset) << "partition " << partition;
  }
  EXPECT_GT(group.commits_ok.load(), 0) << "no commit was acknowledged, so none was checked";

  std::printf(
      "server_crash_test: %lld acknowledged, %lld failed, %zu records in the log; group consumed "
      "%lld, commits %d acknowledged %d failed\n",
      static_cast<long long>(ok), static_cast<long long>(failed), log.size(),
      static_cast<long long>(group.consumed), group.commits_ok.load(), group.commits_failed);
  if (HasFailure()) dir.Keep();  // the log and the children's stderr
}

}  // namespace
}  // namespace tally::broker::test
