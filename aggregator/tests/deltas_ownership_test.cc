// DeltasOwnership against the embedded broker's group coordinator: several
// members in one process, each polled on a thread of its own, and one in a
// child process (this binary run with --ownership-member) to be killed with
// SIGKILL; a fence is an error the test makes the coordinator answer. The
// tests look at what a user sees: the listener's calls and Owned().
//
// Each test prints how long the group took to settle after a join, a clean
// leave or a kill ("settled after ... ms").
#include "aggregator/deltas_ownership.h"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/kafka.h"
#include "base/log.h"
#include "testing/child_process.h"
#include "testing/embedded_cluster.h"
#include "testing/wait_for.h"

namespace tally::aggregator {
namespace {

constexpr int kPartitions = 16;
constexpr const char* kGroup = "ownership-test";
// Shorter than the embedded broker's 6000 so that the tests stay short: the
// mock coordinator holds each rebalance round for session.timeout.ms - 1000.
constexpr int kSessionMs = 3000;
constexpr int kSettleMs = 30000;

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::string Join(const std::set<int32_t>& s) {
  std::string out;
  for (int32_t p : s) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

base::KafkaOptions MemberKafka(const std::string& brokers) {
  base::KafkaOptions kafka;
  kafka.brokers = brokers;
  kafka.embedded = true;
  kafka.overrides = {{"log_level", "0"}, {"session.timeout.ms", std::to_string(kSessionMs)}};
  return kafka;
}

// `n` one-byte records in every partition of the deltas topic.
void ProduceToEveryPartition(const std::string& brokers, int n) {
  base::KafkaOptions kafka;
  kafka.brokers = brokers;
  kafka.overrides = {{"log_level", "0"}};
  auto conf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, kafka, {});
  ASSERT_TRUE(conf.ok());
  auto producer = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
  ASSERT_TRUE(producer.ok());
  for (int i = 0; i < n; ++i) {
    for (int32_t p = 0; p < kPartitions; ++p) {
      ASSERT_EQ(
          rd_kafka_producev(producer->get(), RD_KAFKA_V_TOPIC(base::kDeltasTopic.data()),
                            RD_KAFKA_V_PARTITION(p), RD_KAFKA_V_VALUE(const_cast<char*>("x"), 1),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
          RD_KAFKA_RESP_ERR_NO_ERROR);
    }
  }
  ASSERT_EQ(rd_kafka_flush(producer->get(), 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
}

// Records what the group tells a member polled by the test itself.
struct Recorder : OwnershipListener {
  void Assigned(std::vector<PartitionStart>*) override {}
  void Revoked(const std::vector<int32_t>& ps) override { revoked.insert(ps.begin(), ps.end()); }
  void Lost(const std::vector<int32_t>& ps) override { lost.insert(ps.begin(), ps.end()); }
  std::set<int32_t> revoked, lost;
};

// Who owns each partition across the members of this process, updated by
// their listeners: an orderly move never gives a partition to a member
// before its owner gave it up.
class Ledger {
 public:
  void Take(int member, int32_t p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = owner_.emplace(p, member);
    if (!fresh) {
      ++double_owned_;
      it->second = member;
    }
  }
  void Give(int member, int32_t p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = owner_.find(p); it != owner_.end() && it->second == member) owner_.erase(it);
  }
  int double_owned() const {
    std::lock_guard<std::mutex> lock(mu_);
    return double_owned_;
  }

 private:
  mutable std::mutex mu_;
  std::map<int32_t, int> owner_;
  int double_owned_ = 0;
};

// One member polled on its own thread; records its listener calls.
class Member : public OwnershipListener {
 public:
  struct Event {
    char kind;  // 'A'ssigned, 'R'evoked, 'L'ost
    std::set<int32_t> partitions;
  };

  // `instance`: group.instance.id, empty for a dynamic member.
  Member(int id, const std::string& brokers, Ledger* ledger, std::string instance = "")
      : id_(id), ledger_(ledger) {
    OwnershipOptions options;
    options.instance_id = std::move(instance);
    options.kafka = MemberKafka(brokers);
    options.group = kGroup;
    options.client_id = "member-" + std::to_string(id);
    auto own = DeltasOwnership::Start(options, this);
    EXPECT_TRUE(own.ok()) << own.status().ToString();
    if (!own.ok()) return;
    own_ = std::move(own).value();
    thread_ = std::thread([this] { Run(); });
  }
  ~Member() override { Stop(/*close=*/true); }

  // Ends the member on its polling thread: a clean Close() or an Abandon().
  void Stop(bool close) {
    if (!thread_.joinable()) return;
    close_ = close;
    stop_ = true;
    thread_.join();
  }

  std::set<int32_t> Owned() const {
    if (!own_) return {};
    auto v = own_->Owned();
    return {v.begin(), v.end()};
  }
  GroupIdentity Identity() const { return own_ ? own_->Identity() : GroupIdentity{}; }
  std::vector<Event> Events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::set<int32_t> MessagePartitions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return message_partitions_;
  }
  int UnownedMessages() const { return unowned_messages_; }

  void Assigned(std::vector<PartitionStart>* starts) override {
    std::set<int32_t> ps;
    for (auto& s : *starts) {
      ps.insert(s.partition);
      ledger_->Take(id_, s.partition);
      s.offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    Record('A', ps);
  }
  void Revoked(const std::vector<int32_t>& partitions) override {
    for (int32_t p : partitions) ledger_->Give(id_, p);
    Record('R', {partitions.begin(), partitions.end()});
  }
  void Lost(const std::vector<int32_t>& partitions) override {
    for (int32_t p : partitions) ledger_->Give(id_, p);
    Record('L', {partitions.begin(), partitions.end()});
  }

 private:
  void Record(char kind, std::set<int32_t> ps) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(Event{kind, std::move(ps)});
  }

  void Run() {
    while (!stop_) {
      base::KafkaMessage m = own_->Poll(50);
      if (!m || m->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
      auto owned = own_->Owned();
      if (std::find(owned.begin(), owned.end(), m->partition) == owned.end()) ++unowned_messages_;
      std::lock_guard<std::mutex> lock(mu_);
      message_partitions_.insert(m->partition);
    }
    if (close_) {
      EXPECT_TRUE(own_->Close().ok());
    } else {
      own_->Abandon();
    }
  }

  const int id_;
  Ledger* const ledger_;
  std::unique_ptr<DeltasOwnership> own_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool close_ = true;
  std::atomic<int> unowned_messages_{0};
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::set<int32_t> message_partitions_;
};

// A member in a child process (this binary with --ownership-member): its
// ownership comes as "owned <p,p,...>" lines on its stdout.
class ChildMember {
 public:
  explicit ChildMember(const std::string& brokers) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    EXPECT_GT(n, 0);
    self[n > 0 ? n : 0] = '\0';
    testing::ChildOptions options;
    options.argv = {self, "--ownership-member", brokers};
    options.stdout_pipe = true;
    EXPECT_TRUE(child_.Start(options).ok());
    reader_ = std::thread([this] {
      while (!done_) {
        std::string line = child_.ReadLine(100);
        if (line.rfind("owned ", 0) != 0) continue;
        std::set<int32_t> ps;
        std::stringstream in(line.substr(6));
        std::string item;
        while (std::getline(in, item, ',')) {
          if (!item.empty()) ps.insert(std::stoi(item));
        }
        std::lock_guard<std::mutex> lock(mu_);
        owned_ = std::move(ps);
      }
    });
  }
  ~ChildMember() {
    done_ = true;
    reader_.join();
  }
  std::set<int32_t> Owned() const {
    std::lock_guard<std::mutex> lock(mu_);
    return owned_;
  }
  void Kill() {
    child_.Kill();
    std::lock_guard<std::mutex> lock(mu_);
    owned_.clear();
  }

 private:
  testing::ChildProcess child_;
  std::thread reader_;
  std::atomic<bool> done_{false};
  mutable std::mutex mu_;
  std::set<int32_t> owned_;
};

// True when the sets are disjoint, cover every partition and have the sizes
// in `sizes` (in any order).
bool Settled(const std::vector<std::set<int32_t>>& sets, std::multiset<size_t> sizes) {
  std::set<int32_t> all;
  std::multiset<size_t> got;
  size_t total = 0;
  for (const auto& s : sets) {
    all.insert(s.begin(), s.end());
    total += s.size();
    got.insert(s.size());
  }
  return total == kPartitions && all.size() == kPartitions && got == sizes;
}

std::set<int32_t> Union(const std::vector<Member::Event>& events, char kind, size_t from = 0) {
  std::set<int32_t> out;
  for (size_t i = from; i < events.size(); ++i) {
    if (events[i].kind == kind)
      out.insert(events[i].partitions.begin(), events[i].partitions.end());
  }
  return out;
}

class DeltasOwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::SetLogLevel(base::LogLevel::kError);
    ASSERT_TRUE(cluster_.CreateTopic(std::string(base::kDeltasTopic), kPartitions).ok());
  }

  // Waits for the members' Owned() to satisfy Settled(); prints the time.
  void ExpectSettles(const std::string& what, Clock::time_point since,
                     const std::function<std::vector<std::set<int32_t>>()>& owned,
                     std::multiset<size_t> sizes) {
    bool settled = testing::WaitFor([&] { return Settled(owned(), sizes); }, kSettleMs);
    std::string state;
    for (const auto& s : owned()) state += " {" + Join(s) + "}";
    EXPECT_TRUE(settled) << what << ": owned" << state;
    std::printf("%s: settled after %lld ms:%s\n", what.c_str(),
                static_cast<long long>(MsSince(since)), state.c_str());
  }

  testing::EmbeddedCluster cluster_;
  Ledger ledger_;
};

TEST_F(DeltasOwnershipTest, JoiningMembersTakeOnlyWhatTheyGetAndReadTheirPartitions) {
  // One record in every partition, for the first member to read.
  ProduceToEveryPartition(cluster_.bootstrap(), 1);

  auto t = Clock::now();
  Member m1(1, cluster_.bootstrap(), &ledger_);
  ExpectSettles("first member", t, [&] { return std::vector{m1.Owned()}; }, {16});
  EXPECT_TRUE(testing::WaitFor([&] { return m1.MessagePartitions().size() == kPartitions; }, 10000))
      << "read from " << m1.MessagePartitions().size() << " partitions";
  GroupIdentity id1 = m1.Identity();
  EXPECT_EQ(id1.group, std::string(kGroup) + "-applier");
  EXPECT_EQ(id1.protocol, "COOPERATIVE");
  EXPECT_GT(id1.generation, 0);
  EXPECT_FALSE(id1.member_id.empty());
  size_t m1_mark = m1.Events().size();

  t = Clock::now();
  Member m2(2, cluster_.bootstrap(), &ledger_);
  ExpectSettles("second member joins", t,
                [&] {
                  return std::vector{m1.Owned(), m2.Owned()};
                },
                {8, 8});
  // The first member gave up exactly what the second took, in order, and
  // was assigned nothing anew: the partitions it kept never stopped.
  auto e1 = m1.Events();
  EXPECT_EQ(Union(e1, 'R', m1_mark), m2.Owned());
  EXPECT_TRUE(Union(e1, 'A', m1_mark).empty());
  EXPECT_TRUE(Union(e1, 'L').empty());
  EXPECT_GT(m1.Identity().generation, id1.generation);
  EXPECT_NE(m1.Identity().member_id, m2.Identity().member_id);
  m1_mark = e1.size();
  size_t m2_mark = m2.Events().size();

  t = Clock::now();
  Member m3(3, cluster_.bootstrap(), &ledger_);
  ExpectSettles("third member joins", t,
                [&] {
                  return std::vector{m1.Owned(), m2.Owned(), m3.Owned()};
                },
                {5, 5, 6});
  e1 = m1.Events();
  auto e2 = m2.Events();
  std::set<int32_t> revoked = Union(e1, 'R', m1_mark);
  std::set<int32_t> revoked2 = Union(e2, 'R', m2_mark);
  revoked.insert(revoked2.begin(), revoked2.end());
  EXPECT_EQ(revoked, m3.Owned());
  EXPECT_TRUE(Union(e1, 'A', m1_mark).empty());
  EXPECT_TRUE(Union(e2, 'A', m2_mark).empty());
  EXPECT_TRUE(Union(e2, 'L').empty());
  EXPECT_EQ(ledger_.double_owned(), 0);
  EXPECT_EQ(m1.UnownedMessages() + m2.UnownedMessages() + m3.UnownedMessages(), 0);
}

TEST_F(DeltasOwnershipTest, AClosingMemberRevokesInOrderAndTheOthersTakeItsPartitions) {
  auto m1 = std::make_unique<Member>(1, cluster_.bootstrap(), &ledger_);
  Member m2(2, cluster_.bootstrap(), &ledger_);
  auto t = Clock::now();
  ExpectSettles("two members start", t,
                [&] {
                  return std::vector{m1->Owned(), m2.Owned()};
                },
                {8, 8});
  std::set<int32_t> had = m1->Owned();
  size_t m2_mark = m2.Events().size();

  t = Clock::now();
  m1->Stop(/*close=*/true);
  // Close() revoked everything in order (the listener could commit), not lost.
  auto e1 = m1->Events();
  ASSERT_FALSE(e1.empty());
  EXPECT_EQ(e1.back().kind, 'R');
  EXPECT_EQ(e1.back().partitions, had);
  EXPECT_TRUE(Union(e1, 'L').empty());
  std::printf("close returned after %lld ms\n", static_cast<long long>(MsSince(t)));
  ExpectSettles("first member leaves", t, [&] { return std::vector{m2.Owned()}; }, {16});
  EXPECT_EQ(Union(m2.Events(), 'A', m2_mark), had);
  EXPECT_TRUE(Union(m2.Events(), 'R').empty());
  EXPECT_EQ(ledger_.double_owned(), 0);
}

TEST_F(DeltasOwnershipTest, AKilledMembersPartitionsMoveAfterTheSessionTimeout) {
  Member m1(1, cluster_.bootstrap(), &ledger_);
  ChildMember child(cluster_.bootstrap());
  auto t = Clock::now();
  ExpectSettles("a member and a child start", t,
                [&] {
                  return std::vector{m1.Owned(), child.Owned()};
                },
                {8, 8});
  size_t m1_mark = m1.Events().size();

  t = Clock::now();
  child.Kill();
  ExpectSettles("the child is killed", t, [&] { return std::vector{m1.Owned()}; }, {16});
  EXPECT_GE(MsSince(t), kSessionMs - 1000) << "moved before the session timeout";
  auto e1 = m1.Events();
  EXPECT_TRUE(Union(e1, 'R', m1_mark).empty());
  EXPECT_TRUE(Union(e1, 'L').empty());
}

TEST_F(DeltasOwnershipTest, ACloseWithFetchedMessagesLeftUnreadEndsCleanly) {
  ProduceToEveryPartition(cluster_.bootstrap(), 100);
  Recorder listener;
  OwnershipOptions options;
  options.kafka = MemberKafka(cluster_.bootstrap());
  options.group = kGroup;
  options.client_id = "unread";
  auto own = DeltasOwnership::Start(options, &listener);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  bool read_one = false;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        base::KafkaMessage m = (*own)->Poll(50);
        read_one = read_one || (m && !m->err);
        return read_one && (*own)->Owned().size() == static_cast<size_t>(kPartitions);
      },
      kSettleMs));
  // Not polled meanwhile: the fetcher fills the consumer's queue, which the
  // close then meets.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  base::Status st = (*own)->Close();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(listener.revoked.size(), static_cast<size_t>(kPartitions));
  EXPECT_TRUE(listener.lost.empty());
}

TEST_F(DeltasOwnershipTest, ACloseThatStallsIsGivenUpAndTheRevocationStillRuns) {
  Recorder listener;
  OwnershipOptions options;
  options.kafka = MemberKafka(cluster_.bootstrap());
  options.group = kGroup;
  options.client_id = "stalling";
  options.close_stall_ms = 1500;
  auto own = DeltasOwnership::Start(options, &listener);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        (void)(*own)->Poll(50);
        return (*own)->Owned().size() == static_cast<size_t>(kPartitions);
      },
      kSettleMs));

  // The coordinator holds its answer to the LeaveGroup for a minute: the
  // close waits for it (as for the assign call librdkafka 2.0.2 waits for
  // forever when an assignment meets a close).
  constexpr int16_t kLeaveGroup = 13;  // the LeaveGroup request's ApiKey
  ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(cluster_.mock(), 1, kLeaveGroup, 1,
                                                         RD_KAFKA_RESP_ERR_NO_ERROR, 60000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  auto t = Clock::now();
  base::Status st = (*own)->Close();
  const int64_t ms = MsSince(t);
  std::printf("close returned after %lld ms: %s\n", static_cast<long long>(ms),
              st.ToString().c_str());
  EXPECT_EQ(st.code(), base::StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_GE(ms, options.close_stall_ms);
  EXPECT_LT(ms, options.close_stall_ms + 5000);
  // What the member owned was revoked in order (its windows committed) first.
  EXPECT_EQ(listener.revoked.size(), static_cast<size_t>(kPartitions));
  EXPECT_TRUE(listener.lost.empty());
  EXPECT_TRUE((*own)->Owned().empty());
  EXPECT_TRUE((*own)->Close().ok());  // a second call is a no-op
}

TEST_F(DeltasOwnershipTest, AMemberTheCoordinatorFencesIsToldItsPartitionsAreLost) {
  Member m1(1, cluster_.bootstrap(), &ledger_);
  auto t = Clock::now();
  ExpectSettles("one member starts", t, [&] { return std::vector{m1.Owned()}; }, {16});

  // The coordinator no longer knows the member's generation (as after a
  // session that expired unseen): its assignment is lost, not revoked.
  constexpr int16_t kHeartbeat = 12;  // the Heartbeat request's ApiKey
  rd_kafka_mock_push_request_errors(cluster_.mock(), kHeartbeat, 1,
                                    RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION);
  t = Clock::now();
  ASSERT_TRUE(testing::WaitFor([&] { return !Union(m1.Events(), 'L').empty(); }, kSettleMs));
  auto e1 = m1.Events();
  EXPECT_EQ(Union(e1, 'L').size(), static_cast<size_t>(kPartitions));
  EXPECT_TRUE(Union(e1, 'R').empty());
  // It rejoins by itself and gets them back.
  ExpectSettles("the fenced member rejoins", t, [&] { return std::vector{m1.Owned()}; }, {16});
}

// Static membership (group.instance.id): the embedded broker does not
// implement its rules (a restarted static member joins as a new one and
// partitions move), so this checks what holds everywhere: a static member
// closes, revoking in order, and its close returns. Its partitions move
// only after the session timeout (a static member sends no LeaveGroup).
TEST_F(DeltasOwnershipTest, StaticMembersCloseInOrder) {
  Member m1(1, cluster_.bootstrap(), &ledger_, "member-a");
  Member m2(2, cluster_.bootstrap(), &ledger_, "member-b");
  auto t = Clock::now();
  ExpectSettles("two static members start", t,
                [&] {
                  return std::vector{m1.Owned(), m2.Owned()};
                },
                {8, 8});
  for (Member* m : {&m1, &m2}) {
    std::set<int32_t> had = m->Owned();
    std::atomic<bool> closed{false};
    t = Clock::now();
    std::thread closer([&] {
      m->Stop(/*close=*/true);
      closed = true;
    });
    if (!testing::WaitFor([&] { return closed.load(); }, 10000)) {
      std::fprintf(stderr, "a static member's Close() did not return in 10 s\n");
      std::_Exit(1);  // the closer cannot be joined
    }
    closer.join();
    std::printf("a static member closed in %lld ms\n", static_cast<long long>(MsSince(t)));
    ASSERT_FALSE(m->Events().empty());
    EXPECT_EQ(m->Events().back().kind, 'R');
    EXPECT_EQ(m->Events().back().partitions, had);
    if (m == &m1) {
      ExpectSettles("a static member leaves", t, [&] { return std::vector{m2.Owned()}; }, {16});
      EXPECT_GE(MsSince(t), kSessionMs - 1000) << "moved before the session timeout";
    }
  }
  EXPECT_EQ(ledger_.double_owned(), 0);
}

// The child member: joins, prints its partitions on each change, polls until killed.
int RunChildMember(const std::string& brokers) {
  base::SetLogLevel(base::LogLevel::kError);
  struct Quiet : OwnershipListener {
    void Assigned(std::vector<PartitionStart>*) override {}
    void Revoked(const std::vector<int32_t>&) override {}
    void Lost(const std::vector<int32_t>&) override {}
  } listener;
  OwnershipOptions options;
  options.kafka = MemberKafka(brokers);
  options.group = kGroup;
  options.client_id = "child";
  auto own = DeltasOwnership::Start(options, &listener);
  if (!own.ok()) return 2;
  std::vector<int32_t> printed = {-1};
  const pid_t parent = getppid();
  // Until killed, or until the test that started it is gone (the broker with it).
  while (getppid() == parent) {
    (void)(*own)->Poll(50);
    auto owned = (*own)->Owned();
    if (owned == printed) continue;
    std::set<int32_t> s(owned.begin(), owned.end());
    std::printf("owned %s\n", Join(s).c_str());
    std::fflush(stdout);
    printed = owned;
  }
  (*own)->Abandon();
  return 0;
}

}  // namespace
}  // namespace tally::aggregator

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--ownership-member") {
    return tally::aggregator::RunChildMember(argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
