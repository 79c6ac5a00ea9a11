// Model-based randomized test of a tally cluster (SPEC section 6): 3 to 5
// `tally up --brokers` members, real child processes on one `tally broker`,
// go through random membership changes (joins, clean leaves, SIGKILLs,
// restarts of a killed member with its state directory and with an emptied
// one) while random events of every type (model.h) are published to
// tally.events. After each change, once the applier group has settled (the
// members directory on tally.members shows exactly the live members, every
// tally.deltas partition owned by one of them, balanced, nothing
// restoring), every member's answer for every entity of the model must
// equal the model.
//
// Every member must answer every read (forwarding to the others what it
// does not hold), with X-Tally-Member naming live members; GET /v1/cluster
// must list exactly the live members, and GET /v1/watermarks must cover
// every partition with lag 0.
//
// The seed is printed; rerun with TALLY_MODEL_SEED=<seed>. The members log
// at info into the test's temp dir; after a failure it is kept and the
// logs' tails are printed.
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/kafka.h"
#include "base/log.h"
#include "cluster_processes.h"
#include "model.h"
#include "query/peer_client.h"
#include "testing/temp_dir.h"

#ifndef TALLY_BINARY
#define TALLY_BINARY ""
#endif

namespace tally {
namespace {

namespace fs = std::filesystem;
using model::ClusterProcesses;
using model::EventStream;
using model::Member;
using model::Model;
using nlohmann::json;
using schemas::UnreadKind;

constexpr int kPartitions = 4;
// The entities the event streams touch (model.h): posts 1..40 (liked by
// users 1..15), users 1..30.
constexpr uint64_t kPosts = 40, kUsers = 30, kLikers = 15;

enum class Change { kJoin, kLeave, kKill, kRestartKept, kRestartEmptied };

const char* ChangeName(Change c) {
  switch (c) {
    case Change::kJoin:
      return "join";
    case Change::kLeave:
      return "clean leave";
    case Change::kKill:
      return "SIGKILL";
    case Change::kRestartKept:
      return "restart with its state";
    case Change::kRestartEmptied:
      return "restart with an emptied state dir";
  }
  return "?";
}

// One read of SPEC section 4 and the model's answer to it.
struct Query {
  std::string target;
  json want;
};

class ClusterModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::SetLogLevel(base::LogLevel::kWarn);
    t0_ = std::chrono::steady_clock::now();
    const char* env = std::getenv("TALLY_MODEL_SEED");
    seed_ = env ? std::strtoull(env, nullptr, 10) : std::random_device()();
    std::printf("TALLY_MODEL_SEED=%llu\n", static_cast<unsigned long long>(seed_));
    plan_rng_.seed(seed_);
    events_rng_.seed(seed_ + 1);

    const char* bin = std::getenv("TALLY_BINARY");
    binary_ = bin != nullptr && *bin ? bin : TALLY_BINARY;
    ASSERT_TRUE(!binary_.empty() && fs::exists(binary_))
        << "the tally binary (TALLY_BINARY) is not at '" << binary_ << "'";
    model::ClusterProcessesOptions co;
    co.binary = binary_;
    co.dir = dir_.path();
    co.partitions = kPartitions;
    co.progress = [this](const std::string& line) { Progress(line); };
    cluster_ = std::make_unique<ClusterProcesses>(co);
    auto st = cluster_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();

    auto pconf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, cluster_->kafka(),
                                     {{"linger.ms", "2"}, {"enable.idempotence", "true"}});
    ASSERT_TRUE(pconf.ok()) << pconf.status().ToString();
    auto p = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(pconf).value());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    producer_ = std::move(p).value();
    stream_.set_producer(producer_.get());

    query::PeerClientOptions po;
    po.max_connections_per_peer = 8;
    auto client = query::PeerClient::Start(po);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
  }

  void TearDown() override {
    if (publisher_.joinable()) publisher_.join();
    if (HasFailure() && cluster_) {
      cluster_->PrintLogTails();
      dir_.Keep();
      std::printf("the members' state and logs are kept in %s\n", dir_.path().c_str());
    }
    client_.reset();
    producer_.reset();
    cluster_.reset();
    EXPECT_EQ(base::AwaitBackgroundDestroys(30000), 0);
    if (HasFailure()) {
      std::printf("reproduce with TALLY_MODEL_SEED=%llu\n", static_cast<unsigned long long>(seed_));
    }
  }

  // A line of progress, with the wall clock and the seconds since the start.
  void Progress(const std::string& text) {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char clock[32];
    std::strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
    std::printf("[%s +%.1fs] %s\n", clock, Seconds(t0_), text.c_str());
    std::fflush(stdout);
  }

  static double Seconds(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  }

  // 7 or 8 changes with every kind at least once, the live members staying
  // within 2..5 from the 3 at the start.
  std::vector<Change> MakePlan() {
    static constexpr Change kExtra[] = {Change::kJoin, Change::kLeave, Change::kKill};
    for (;;) {
      std::vector<Change> plan = {Change::kJoin, Change::kLeave,       Change::kKill,
                                  Change::kKill, Change::kRestartKept, Change::kRestartEmptied};
      for (int extra = 1 + static_cast<int>(plan_rng_() % 2); extra > 0; extra--) {
        plan.push_back(kExtra[plan_rng_() % 3]);
      }
      std::shuffle(plan.begin(), plan.end(), plan_rng_);
      int live = 3, killed = 0;
      bool ok = true;
      for (Change c : plan) {
        switch (c) {
          case Change::kJoin:
            ok = ok && live < 5;
            live++;
            break;
          case Change::kLeave:
            ok = ok && live > 2;
            live--;
            break;
          case Change::kKill:
            ok = ok && live > 2;
            live--;
            killed++;
            break;
          default:
            ok = ok && killed > 0 && live < 5;
            live++;
            killed--;
            break;
        }
      }
      if (ok) return plan;
    }
  }

  // Publishes `batches` batches of events (every type, some invalid, some
  // retried with ids) on a thread of its own, paced so that they are still
  // arriving while the membership changes. Only that thread touches the
  // stream and the model until StopPublishing(). Resets are published
  // apart (PublishResetsAndConverge): a reset and the increments published
  // before it under other keys (a like's author unread, keyed by the post)
  // come from different input partitions, which SPEC section 2 leaves
  // unordered, and a member that dies holds its input partitions back for
  // a session timeout.
  void StartPublishing(int batches) {
    publisher_ = std::thread([this, batches] {
      for (int i = 0; i < batches; i++) {
        stream_.PublishEvents(kBatchEvents, /*with_invalid=*/true);
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
      }
    });
  }

  void StopPublishing() {
    if (publisher_.joinable()) publisher_.join();
  }

  // Waits until the applier group has settled after `after`
  // (ClusterProcesses::SettledNow()), failing the test if it does not
  // within 90 s.
  bool WaitSettled(const std::string& after) {
    auto took = cluster_->WaitSettled(90);
    if (!took.ok()) {
      ADD_FAILURE() << "after " << after << ": " << took.status().message();
      return false;
    }
    Progress(
        fmt::format("settled {:.1f} s after {}:\n{}", *took, after, cluster_->DescribeDirectory()));
    return true;
  }

  // Every read of the model's entities and what the model answers.
  std::vector<Query> Queries() {
    std::vector<Query> out;
    auto post_json = [&](uint64_t p) {
      auto it = model_.posts.find(p);
      std::array<int64_t, 4> c = it == model_.posts.end() ? std::array<int64_t, 4>{} : it->second;
      return json{
          {"post_id", p}, {"like", c[0]}, {"repost", c[1]}, {"comment", c[2]}, {"view", c[3]}};
    };
    for (uint64_t p = 1; p <= kPosts; p++) {
      out.push_back({"/v1/posts/" + std::to_string(p) + "/counts", post_json(p)});
    }
    {
      // A batch spans every partition: split by owner and asked in parallel.
      std::string ids;
      json posts = json::array();
      for (uint64_t p = 1; p <= kPosts; p++) {
        ids += (p > 1 ? "," : "") + std::to_string(p);
        posts.push_back(post_json(p));
      }
      out.push_back({"/v1/posts/counts?ids=" + ids, json{{"posts", posts}}});
    }
    for (uint64_t u = 1; u <= kUsers; u++) {
      const std::string base = "/v1/users/" + std::to_string(u);
      auto uc = model_.users.find(u);
      std::array<int64_t, 3> c = uc == model_.users.end() ? std::array<int64_t, 3>{} : uc->second;
      out.push_back(
          {base + "/counts",
           json{{"user_id", u}, {"posts", c[0]}, {"followers", c[1]}, {"following", c[2]}}});

      json unread{{"user_id", u}};
      auto un = model_.unread.find(u);
      for (int k = 0; k < schemas::kUnreadCounterKinds; k++) {
        unread[schemas::UnreadKindName(static_cast<UnreadKind>(k))] =
            un == model_.unread.end() ? 0 : un->second[k];
      }
      unread["notice"] = model_.NoticeUnread(u);
      unread["feed"] = model_.FeedUnread(u);
      json dots = json::object();
      for (const auto& [channel, shows] : model_.Dots(u)) dots[channel] = shows;
      unread["red_dots"] = dots;
      out.push_back({base + "/unread", unread});

      json followees = json::object();
      int64_t taken = 0;
      if (auto s = model_.snapshots.find(u); s != model_.snapshots.end()) {
        for (const auto& [f, n] : s->second) followees[std::to_string(f)] = n;
        taken = model_.snapshot_ts[u];
      }
      out.push_back({base + "/feed/snapshot",
                     json{{"user_id", u}, {"taken_ts", taken}, {"followees", followees}}});
    }
    for (uint64_t p = 1; p <= kPosts; p++) {
      for (uint64_t u = 1; u <= kLikers; u++) {
        out.push_back({"/v1/posts/" + std::to_string(p) + "/likes/" + std::to_string(u),
                       json{{"liked", model_.likes.count({p, u}) > 0}}});
      }
    }
    // The filter may say true wrongly, never false wrongly: only the views
    // that happened are asked.
    for (const auto& [p, u] : model_.viewed) {
      out.push_back({"/v1/posts/" + std::to_string(p) + "/views/" + std::to_string(u),
                     json{{"viewed", true}}});
    }
    return out;
  }

  // Asks every live member every query; what differs from the model, one
  // line each (empty when everything agrees). Every member answers every
  // read, naming in X-Tally-Member the live member(s) whose state answered;
  // GET /v1/cluster lists exactly the live members, and GET
  // /v1/watermarks covers every partition with lag 0 (nothing is being
  // published now).
  std::vector<std::string> Differences(const std::vector<Query>& queries) {
    std::vector<std::string> out;
    const std::vector<Member*> live = cluster_->Live();
    std::set<std::string> live_ids;
    for (Member* m : live) live_ids.insert(m->id());
    std::vector<query::PeerRequest> requests;
    requests.reserve(live.size() * queries.size());
    for (Member* m : live) {
      for (const Query& q : queries) requests.push_back({m->url(), q.target, {}});
    }
    std::vector<query::PeerResponse> answers =
        client_->GetAll(std::move(requests), query::PeerClient::In(30000));
    for (size_t qi = 0; qi < queries.size(); qi++) {
      const Query& q = queries[qi];
      for (size_t mi = 0; mi < live.size(); mi++) {
        const query::PeerResponse& r = answers[mi * queries.size() + qi];
        const std::string who = live[mi]->name + " " + q.target;
        if (!r.ok()) {
          out.push_back(who + ": " + r.error);
          continue;
        }
        if (r.status != 200) {
          out.push_back(who + ": HTTP " + std::to_string(r.status) + " " + r.body);
          continue;
        }
        json got = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
        if (got != q.want) {
          out.push_back(who + ": got " + r.body + ", the model says " + q.want.dump());
        }
        const std::string by(r.Header("X-Tally-Member"));  // comma-separated
        size_t at = 0;
        do {
          const size_t comma = std::min(by.find(',', at), by.size());
          if (live_ids.count(by.substr(at, comma - at)) == 0) {
            out.push_back(who + ": X-Tally-Member '" + by + "' names no live member");
            break;
          }
          at = comma + 1;
        } while (at <= by.size());
      }
    }
    for (Member* m : live) {
      auto r = client_->Get(m->url(), "/v1/cluster", {}, query::PeerClient::In(10000));
      std::set<std::string> listed;
      json c = json::parse(r.body, nullptr, false);
      if (r.ok() && r.status == 200 && c.contains("members") && c["members"].is_array()) {
        for (const auto& e : c["members"]) listed.insert(e.value("member", ""));
      }
      if (listed != live_ids) {
        out.push_back(m->name + " /v1/cluster: " + (r.ok() ? r.body : r.error) +
                      " does not list exactly the live members " + cluster_->LiveNames());
      }
      r = client_->Get(m->url(), "/v1/watermarks", {}, query::PeerClient::In(10000));
      json w = json::parse(r.body, nullptr, false);
      std::set<std::pair<std::string, int>> covered;
      if (r.ok() && r.status == 200 && w.contains("partitions") && w["partitions"].is_array()) {
        for (const auto& e : w["partitions"]) {
          covered.insert({e.value("topic", ""), e.value("partition", -1)});
        }
      }
      bool whole = true;
      for (const char* topic : {"tally.events", "tally.deltas"}) {
        for (int p = 0; p < kPartitions; p++) whole = whole && covered.count({topic, p}) > 0;
      }
      if (!whole || !w.contains("lag") || w["lag"] != 0) {
        out.push_back(m->name + " /v1/watermarks: " + (r.ok() ? r.body : r.error) +
                      (whole ? "" : " (does not cover every partition)"));
      }
    }
    return out;
  }

  // Polls until every member answers as the model (the events published
  // last may still be on their way), failing with the differences after
  // `timeout_s`.
  void ExpectConverges(const std::string& after, int timeout_s = 60) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Query> queries = Queries();
    std::vector<std::string> diff;
    int polls = 0;
    while (Seconds(start) < timeout_s) {
      if (std::string exited = cluster_->Exited(); !exited.empty()) {
        ADD_FAILURE() << "after " << after << ": " << exited;
        return;
      }
      polls++;
      diff = Differences(queries);
      if (diff.empty()) {
        Progress(fmt::format(
            "after {}: all {} members answer {} reads as the model; {:.1f} s, {} polls, {} "
            "events so far",
            after, cluster_->Live().size(), queries.size(), Seconds(start), polls,
            stream_.events()));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    std::string lines;
    for (size_t i = 0; i < diff.size() && i < 40; i++) lines += "  " + diff[i] + "\n";
    ADD_FAILURE() << "after " << after << ", " << diff.size()
                  << " answers still differ from the model after " << timeout_s << " s (seed "
                  << seed_ << "; live: " << cluster_->LiveNames() << "):\n"
                  << lines << "the directory shows:\n"
                  << cluster_->DescribeDirectory();
  }

  // Resets of every unread kind, published once everything before them is
  // visible, and checked once they are.
  void PublishResetsAndConverge(const std::string& after) {
    stream_.PublishResets(kResets);
    ExpectConverges(std::to_string(kResets) + " resets after " + after);
  }

  static constexpr int kBatchEvents = 60;
  static constexpr int kResets = 12;
  testing::TempDir dir_{"cluster-model"};
  std::chrono::steady_clock::time_point t0_;
  uint64_t seed_ = 0;
  std::mt19937_64 plan_rng_;    // membership: the plan, who leaves, standbys
  std::mt19937_64 events_rng_;  // the event stream alone, so a seed replays both
  std::string binary_;
  std::unique_ptr<ClusterProcesses> cluster_;
  base::KafkaHandle producer_;
  std::unique_ptr<query::PeerClient> client_;
  Model model_;
  EventStream stream_{&events_rng_, &model_, kPartitions};
  std::thread publisher_;
};

TEST_F(ClusterModelTest, EveryMemberAnswersAsTheModelThroughJoinsLeavesKillsAndRestarts) {
  const std::vector<Change> plan = MakePlan();
  // About one change in three (never the first) comes 1-4 s after the one
  // before, while that one is still rebalancing or restoring: a SIGKILL of
  // a member that is restoring, a leave in the middle of a handoff.
  std::vector<int> overlap_ms(plan.size(), 0);
  for (size_t i = 1; i < plan.size(); i++) {
    if (plan_rng_() % 3 == 0) overlap_ms[i] = 1000 + static_cast<int>(plan_rng_() % 3000);
  }
  std::string names;
  for (size_t i = 0; i < plan.size(); i++) {
    names += std::string(i ? ", " : "") + ChangeName(plan[i]) +
             (overlap_ms[i] ? fmt::format(" ({} ms after the one before)", overlap_ms[i]) : "");
  }
  Progress("plan: 3 members, then " + names);

  // Three members, one at least keeping a standby of each partition.
  StartPublishing(4);
  for (int i = 0; i < 3; i++) {
    Member& m = cluster_->AddMember(i == 1 ? 1 : static_cast<int>(plan_rng_() % 2));
    auto st = cluster_->StartMember(m, /*empty_state=*/true);
    ASSERT_TRUE(st.ok()) << st.ToString();
    Progress(fmt::format("started {} ({}{})", m.name, m.id(), m.standbys ? ", --standbys 1" : ""));
  }
  const bool settled = WaitSettled("the first 3 members started");
  StopPublishing();
  ASSERT_TRUE(settled);
  ExpectConverges("the start");
  ASSERT_FALSE(HasFailure());
  PublishResetsAndConverge("the start");
  ASSERT_FALSE(HasFailure());

  for (size_t step = 0; step < plan.size(); step++) {
    const Change c = plan[step];
    if (!publisher_.joinable()) StartPublishing(8);
    std::vector<Member*> live = cluster_->Live();
    std::string what;
    switch (c) {
      case Change::kJoin: {
        Member& m = cluster_->AddMember(static_cast<int>(plan_rng_() % 2));
        auto st = cluster_->StartMember(m, /*empty_state=*/true);
        ASSERT_TRUE(st.ok()) << st.ToString();
        what = "join of " + m.name + " (" + m.id() + (m.standbys ? ", --standbys 1" : "") + ")";
        break;
      }
      case Change::kLeave: {
        Member* m = live[plan_rng_() % live.size()];
        const auto start = std::chrono::steady_clock::now();
        const int code = cluster_->Leave(*m, 60000);
        EXPECT_EQ(code, 0) << m->name << " did not exit 0 within 60 s of SIGTERM";
        what = fmt::format("clean leave of {} (exit {} after {:.1f} s)", m->name, code,
                           Seconds(start));
        break;
      }
      case Change::kKill: {
        Member* m = live[plan_rng_() % live.size()];
        cluster_->Kill(*m);
        what = "SIGKILL of " + m->name;
        break;
      }
      case Change::kRestartKept:
      case Change::kRestartEmptied: {
        std::vector<Member*> killed = cluster_->Killed();
        Member* m = killed[plan_rng_() % killed.size()];
        auto st = cluster_->StartMember(*m, /*empty_state=*/c == Change::kRestartEmptied);
        ASSERT_TRUE(st.ok()) << st.ToString();
        what =
            std::string(c == Change::kRestartKept ? "restart of " : "restart (state emptied) of ") +
            m->name;
        break;
      }
    }
    const std::string label =
        "step " + std::to_string(step + 1) + "/" + std::to_string(plan.size()) + ", " + what;
    Progress(label + "; live: " + cluster_->LiveNames());
    if (step + 1 < plan.size() && overlap_ms[step + 1] > 0) {
      // Not a wait for something to happen: the next change is meant to
      // land in the middle of this one, whatever state it is in.
      std::this_thread::sleep_for(std::chrono::milliseconds(overlap_ms[step + 1]));
      const std::string exited = cluster_->Exited();
      ASSERT_TRUE(exited.empty()) << exited;
      continue;
    }
    const bool ok = WaitSettled(label);
    StopPublishing();
    ASSERT_TRUE(ok);
    ExpectConverges(label);
    ASSERT_FALSE(HasFailure());
    PublishResetsAndConverge(label);
    ASSERT_FALSE(HasFailure());
  }

  // The streams did exercise every shape.
  EXPECT_FALSE(model_.notices.empty());
  EXPECT_EQ(model_.dots.size(), 3u);
  EXPECT_FALSE(model_.snapshots.empty());
  EXPECT_FALSE(model_.likes.empty());
  EXPECT_FALSE(model_.notice_read.empty());
  EXPECT_GT(stream_.event_copies(), 0u);
  Progress(fmt::format("done: {} membership changes, {} events, {} invalid records", plan.size(),
                       stream_.events(), stream_.invalid()));
}

}  // namespace
}  // namespace tally
