// Model-based randomized test of the whole counting pipeline: random event
// streams (every counter type, duplicate likes, unlikes, follows/unfollows,
// unread increments and resets, notices in no order on random partitions,
// some ids repeated, invalid records) go through the real Router
// and Applier against the embedded broker (librdkafka's mock cluster,
// in-process), and the state must equal a naive reference model that applies
// the same events one by one. The seed is printed on failure; rerun with
// TALLY_MODEL_SEED=<seed>.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "aggregator/applier.h"
#include "aggregator/replay.h"
#include "aggregator/router.h"
#include "base/kafka.h"
#include "base/log.h"
#include "model.h"
#include "schemas/delta.h"
#include "schemas/deltas_position.h"
#include "schemas/event.h"
#include "store/state_store.h"
#include "testing/embedded_cluster.h"
#include "testing/temp_dir.h"

namespace tally {
namespace {

namespace fs = std::filesystem;
using model::Model;
using schemas::Event;
using schemas::EventType;
using schemas::UnreadKind;

constexpr int kPartitions = 4;

class PipelineModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::SetLogLevel(base::LogLevel::kWarn);
    const char* env = std::getenv("TALLY_MODEL_SEED");
    seed_ = env ? std::strtoull(env, nullptr, 10) : std::random_device()();
    std::printf("TALLY_MODEL_SEED=%llu\n", static_cast<unsigned long long>(seed_));
    rng_.seed(seed_);

    cluster_ = std::make_unique<testing::EmbeddedCluster>(1);
    mock_ = cluster_->mock();
    for (const char* t : {"tally.events", "tally.deltas", "tally.dlq"}) {
      base::Status st = cluster_->CreateTopic(t, kPartitions);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    kafka_.brokers = cluster_->bootstrap();
    kafka_.embedded = true;
    kafka_.overrides.push_back({"log_level", "3"});

    store_ = OpenStore(dir_.path() / "live");

    auto pconf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, kafka_, {{"linger.ms", "2"}, {"enable.idempotence", "true"}});
    ASSERT_TRUE(pconf.ok());
    auto p = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(pconf).value());
    ASSERT_TRUE(p.ok());
    producer_ = std::move(p).value();
    stream_.set_producer(producer_.get());
  }

  void TearDown() override {
    StopPipeline();
    store_.reset();
    producer_.reset();
    cluster_.reset();
    mock_ = nullptr;
    // A router that gave up at stop destroys its consumer in the background;
    // with the cluster gone, that ends.
    EXPECT_EQ(base::AwaitBackgroundDestroys(30000), 0);
    if (HasFailure()) std::printf("reproduce with TALLY_MODEL_SEED=%llu\n", static_cast<unsigned long long>(seed_));
  }

  std::unique_ptr<store::StateStore> OpenStore(const fs::path& d) {
    store::StoreOptions o;
    o.dir = d.string();
    o.partitions = kPartitions;
    o.block_cache_bytes = 16 << 20;
    auto s = store::StateStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  void StartPipeline() {
    stop_.store(false);
    threads_.emplace_back([this] {
      aggregator::RouterOptions ro;
      ro.kafka = kafka_;
      ro.deltas_partitions = kPartitions;
      ro.group = router_group_;
      ro.linger_ms = 5;
      aggregator::Router router(ro);
      auto st = router.Run(&stop_);
      EXPECT_TRUE(st.ok()) << st.ToString();
    });
    threads_.emplace_back([this] {
      aggregator::ApplierOptions ao;
      ao.kafka = kafka_;
      ao.flush_ms = 1 + static_cast<int>(rng_seeded_flush_ % 40);
      ao.key_budget = 50 + rng_seeded_flush_ % 500;
      aggregator::Applier applier(ao, store_.get());
      auto st = applier.Run(&stop_);
      EXPECT_TRUE(st.ok()) << st.ToString();
    });
  }

  // The router and the applier with short windows, each on a thread of its
  // own that leaves its status in (*statuses)[0] and [1] and decrements
  // *running when its stage returns (a test times the stop by it).
  void StartStages(bool whole_topics, std::atomic<int>* running,
                   std::vector<base::Status>* statuses) {
    stop_.store(false);
    running->store(2);
    threads_.emplace_back([this, whole_topics, running, statuses] {
      aggregator::RouterOptions ro;
      ro.kafka = kafka_;
      ro.deltas_partitions = kPartitions;
      ro.linger_ms = 5;
      ro.whole_topics = whole_topics;
      (*statuses)[0] = aggregator::Router(ro).Run(&stop_);
      (*running)--;
    });
    threads_.emplace_back([this, running, statuses] {
      aggregator::ApplierOptions ao;
      ao.kafka = kafka_;
      ao.flush_ms = 5;
      (*statuses)[1] = aggregator::Applier(ao, store_.get()).Run(&stop_);
      (*running)--;
    });
  }

  // Tells the stages StartStages() started to stop and returns the seconds
  // until both returned, waiting at most `bound_s`.
  double StopAndTime(const std::atomic<int>& running, int bound_s) {
    const auto t0 = std::chrono::steady_clock::now();
    stop_.store(true);
    while (running.load() > 0 &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(bound_s)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  void StopPipeline() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  // Messages in tally.deltas, all partitions (0 while the broker cannot say).
  int64_t DeltasInTopic() {
    auto wm = base::QueryWatermarks(producer_.get(), "tally.deltas", 5000);
    int64_t sum = 0;
    if (wm.ok()) {
      for (const auto& p : *wm) sum += p.high;
    }
    return sum;
  }

  // Differences between `s` and the model; empty when equal.
  std::string Diff(store::StateStore* s, bool include_unread = true) {
    std::string out;
    std::vector<uint64_t> ids;
    for (uint64_t p = 1; p <= 40; p++) ids.push_back(p);
    std::vector<store::PostCounts> pc;
    if (!s->GetPostCounts(ids, &pc).ok()) return "read failed";
    for (size_t i = 0; i < ids.size(); i++) {
      auto m = model_.posts.count(ids[i]) ? model_.posts[ids[i]] : std::array<int64_t, 4>{};
      std::array<int64_t, 4> got = {pc[i].like, pc[i].repost, pc[i].comment, pc[i].view};
      if (m != got) {
        out += "post " + std::to_string(ids[i]) + " like/repost/comment/view model=" + std::to_string(m[0]) + "/" +
               std::to_string(m[1]) + "/" + std::to_string(m[2]) + "/" + std::to_string(m[3]) + " got=" +
               std::to_string(got[0]) + "/" + std::to_string(got[1]) + "/" + std::to_string(got[2]) + "/" +
               std::to_string(got[3]) + "\n";
      }
    }
    for (uint64_t u = 1; u <= 30; u++) {
      auto uc = s->GetUserCounts(u);
      auto ur = s->GetUnreadCounters(u);
      if (!uc.ok() || !ur.ok()) return "read failed";
      auto m = model_.users.count(u) ? model_.users[u] : std::array<int64_t, 3>{};
      std::array<int64_t, 3> got = {uc->posts, uc->followers, uc->following};
      if (m != got) {
        out += "user " + std::to_string(u) + " posts/followers/following model=" + std::to_string(m[0]) + "/" +
               std::to_string(m[1]) + "/" + std::to_string(m[2]) + " got=" + std::to_string(got[0]) + "/" +
               std::to_string(got[1]) + "/" + std::to_string(got[2]) + "\n";
      }
      auto mu = model_.unread.count(u) ? model_.unread[u] : std::array<int64_t, 6>{};
      if (include_unread) {
        auto view = s->GetUnread(u);
        if (!view.ok()) return "read failed";
        if (view->notice != model_.NoticeUnread(u)) {
          out += "user " + std::to_string(u) + " unread notice model=" + std::to_string(model_.NoticeUnread(u)) +
                 " got=" + std::to_string(view->notice) + "\n";
        }
        if (view->feed != model_.FeedUnread(u)) {
          out += "user " + std::to_string(u) + " unread feed model=" + std::to_string(model_.FeedUnread(u)) +
                 " got=" + std::to_string(view->feed) + "\n";
        }
        if (view->red_dots != model_.Dots(u)) out += "user " + std::to_string(u) + " red dots differ\n";
      }
      for (int k = 0; k < 6 && include_unread; k++) {
        if (mu[k] != ur->counts[k]) {
          out += "user " + std::to_string(u) + " unread " + schemas::UnreadKindName(static_cast<UnreadKind>(k)) +
                 " model=" + std::to_string(mu[k]) + " got=" + std::to_string(ur->counts[k]) + "\n";
        }
      }
      for (uint64_t p = 1; p <= 40; p++) {
        auto liked = s->IsLiked(p, u);
        if (!liked.ok() || *liked != (model_.likes.count({p, u}) > 0)) {
          out += "like edge " + std::to_string(p) + "," + std::to_string(u) + " differs\n";
        }
      }
    }
    for (const auto& [post, user] : model_.viewed) {
      auto v = s->MaybeViewed(post, user);
      if (!v.ok() || !*v) out += "viewed " + std::to_string(post) + "," + std::to_string(user) + " reads false\n";
    }
    return out;
  }

  // Polls until the state equals the model (the pipeline is asynchronous).
  void ExpectConverges(store::StateStore* s, int timeout_ms = 90000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    std::string diff;
    while (std::chrono::steady_clock::now() < deadline) {
      diff = Diff(s);
      if (diff.empty()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "state differs from the model (seed " << seed_ << "):\n"
           << diff.substr(0, 3000) << Triage();
  }

  // Calls `fn` with every record of `topic` from its start to its end (in
  // each partition's order) and returns whether every partition's end was
  // reached within `timeout_s`.
  bool ForEachRecord(const char* topic, const std::function<void(const rd_kafka_message_t&)>& fn,
                     int timeout_s = 30) {
    auto conf = base::MakeKafkaConf(RD_KAFKA_CONSUMER, kafka_,
                                    {{"enable.partition.eof", "true"}, {"group.id", "reader"}});
    auto c = base::MakeKafkaHandle(RD_KAFKA_CONSUMER, std::move(conf).value());
    if (!c.ok()) return false;
    base::KafkaPartitionList l(rd_kafka_topic_partition_list_new(kPartitions));
    for (int p = 0; p < kPartitions; p++) {
      rd_kafka_topic_partition_list_add(l.get(), topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    if (rd_kafka_assign(c->get(), l.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) return false;
    int eofs = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (eofs < kPartitions && std::chrono::steady_clock::now() < deadline) {
      base::KafkaMessage m(rd_kafka_consumer_poll(c->get(), 100));
      if (!m) continue;
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        eofs++;
      } else if (!m->err) {
        fn(*m);
      }
    }
    rd_kafka_consumer_close(c->get());
    return eofs == kPartitions;
  }

  // The router's last commits say, per input partition and deltas partition,
  // where the deltas of the committed records lie (schemas/deltas_position.h);
  // /v1/watermarks relies on it. It must be true of what tally.deltas holds,
  // copies from earlier routers included: every delta of a committed record
  // at or before `last` in its partition, and of a record below
  // `first_input` at or before `previous`. Returns the deltas checked.
  int ExpectCommittedPositionsHold() {
    auto conf = base::MakeKafkaConf(RD_KAFKA_CONSUMER, kafka_, {{"group.id", router_group_}});
    auto c = base::MakeKafkaHandle(RD_KAFKA_CONSUMER, std::move(conf).value());
    EXPECT_TRUE(c.ok());
    if (!c.ok()) return 0;
    base::KafkaPartitionList l(rd_kafka_topic_partition_list_new(kPartitions));
    for (int p = 0; p < kPartitions; p++)
      rd_kafka_topic_partition_list_add(l.get(), "tally.events", p);
    EXPECT_EQ(rd_kafka_committed(c->get(), l.get(), 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    std::map<int32_t, std::pair<int64_t, std::vector<schemas::DeltasPosition>>> committed;
    for (int i = 0; i < l->cnt; i++) {
      const rd_kafka_topic_partition_t& e = l->elems[i];
      if (e.err || e.offset < 0) continue;
      auto positions = schemas::DecodeDeltasPositions(
          std::string_view(static_cast<const char*>(e.metadata), e.metadata_size));
      EXPECT_TRUE(positions.ok()) << positions.status().ToString();
      if (positions.ok()) committed[e.partition] = {e.offset, std::move(positions).value()};
    }
    int checked = 0;
    EXPECT_TRUE(ForEachRecord("tally.deltas", [&](const rd_kafka_message_t& m) {
      schemas::DeltaBatchReader reader;
      ASSERT_TRUE(reader.Open(std::string_view(static_cast<const char*>(m.payload), m.len)).ok());
      schemas::Delta d;
      while (reader.Next(&d)) {
        const schemas::SourceStream& s = reader.streams()[d.source.stream];
        if (s.topic != "tally.events") continue;  // derived: the deltas rows cover those
        auto c = committed.find(s.partition);
        if (c == committed.end() || d.source.offset >= c->second.first) continue;
        for (const schemas::DeltasPosition& pos : c->second.second) {
          if (pos.partition != static_cast<uint32_t>(m.partition)) continue;
          EXPECT_LE(m.offset, pos.last)
              << "tally.events/" << s.partition << " offset " << d.source.offset
              << " has a delta at tally.deltas/" << m.partition << " offset " << m.offset
              << " past the committed position";
          if (d.source.offset < pos.first_input) {
            EXPECT_LE(m.offset, pos.previous)
                << "tally.events/" << s.partition << " offset " << d.source.offset << " (below "
                << pos.first_input << ") has a delta at tally.deltas/" << m.partition << " offset "
                << m.offset;
          }
          checked++;
        }
      }
    }));
    return checked;
  }

  // The model of what tally.events holds: every record applied in the log's
  // order within each partition (the events' effects commute across
  // partitions). Across a broker outage an idempotent producer's retry can
  // leave a batch in the log twice (librdkafka 2.0.2's mock cluster does not
  // always deduplicate it: seen as five events at offsets 4912-4916 and again
  // at 4917-4921), and tally must count what the log holds. Every event
  // published must be there: fails the test otherwise. Sets `*twice` to the
  // number of events the log holds more than once.
  Model ModelFromInput(int* twice) {
    Model m;
    *twice = 0;
    schemas::EventParser parser;
    Event e;
    std::set<int64_t> seen;
    const bool whole = ForEachRecord("tally.events", [&](const rd_kafka_message_t& msg) {
      auto st = parser.Parse(std::string_view(static_cast<const char*>(msg.payload), msg.len), &e);
      EXPECT_TRUE(st.ok()) << st.ToString();
      if (!st.ok()) return;
      m.Apply(e);
      if (!seen.insert(e.ts).second) ++*twice;
    });
    EXPECT_TRUE(whole) << "tally.events could not be read to its end";
    EXPECT_EQ(seen.size(), stream_.events()) << "events published that tally.events does not hold";
    return m;
  }

  // Where a difference comes from: events twice in the input topic (a
  // producer's retry the broker did not deduplicate), or tally.deltas
  // holding it (a replay shows it too), or only the live state.
  std::string Triage() {
    std::string out = "\ntriage:\n";
    std::map<std::string, std::vector<std::string>> by_ts;  // "ts":N -> partition/offset
    int64_t records = 0;
    ForEachRecord("tally.events", [&](const rd_kafka_message_t& m) {
      records++;
      std::string_view v(static_cast<const char*>(m.payload), m.len);
      size_t at = v.find("\"ts\":17");
      if (at == std::string_view::npos) return;
      size_t end = v.find_first_not_of("0123456789", at + 5);
      by_ts[std::string(v.substr(at, end - at))].push_back(std::to_string(m.partition) + "/" +
                                                           std::to_string(m.offset));
    });
    out += "  tally.events holds " + std::to_string(records) + " records; " +
           std::to_string(stream_.events()) + " valid events were published, and " +
           std::to_string(stream_.invalid()) + " invalid records\n";
    int dups = 0;
    for (const auto& [ts, where] : by_ts) {
      if (where.size() < 2) continue;
      if (dups++ < 10) {
        out += "  twice in the input: " + ts + " at";
        for (const auto& w : where) out += " " + w;
        out += "\n";
      }
    }
    out += "  events in the input more than once: " + std::to_string(dups) + "\n";
    for (bool from_input : {false, true}) {
      aggregator::ReplayOptions ro;
      ro.kafka = kafka_;
      ro.from_input = from_input;
      const fs::path d_dir = dir_.path() / ((from_input ? "triage-input-" : "triage-deltas-") +
                                            std::to_string(triages_++));
      fs::remove_all(d_dir);
      auto rebuilt = OpenStore(d_dir);
      if (!rebuilt) return out;
      std::atomic<bool> never{false};
      auto st = aggregator::Replay(ro, rebuilt.get(), &never);
      std::string d = st.ok() ? Diff(rebuilt.get(), /*include_unread=*/!from_input) : st.ToString();
      out += std::string("  a replay ") + (from_input ? "from the input topic" : "of tally.deltas") +
             (d.empty() ? " equals the model\n" : " differs:\n" + d.substr(0, 1500));
    }
    return out;
  }

  std::string router_group_ = "tally";
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  uint64_t rng_seeded_flush_ = 0;
  int triages_ = 0;
  std::unique_ptr<testing::EmbeddedCluster> cluster_;
  rd_kafka_mock_cluster_t* mock_ = nullptr;  // cluster_'s, for fault injection
  base::KafkaOptions kafka_;
  base::KafkaHandle producer_;
  testing::TempDir dir_{"model"};
  std::unique_ptr<store::StateStore> store_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  Model model_;
  model::EventStream stream_{&rng_, &model_, kPartitions};
};

TEST_F(PipelineModelTest, RandomStreamsMatchTheModelThroughRestartsAndReplay) {
  rng_seeded_flush_ = rng_();
  StartPipeline();
  stream_.PublishEvents(3000, /*with_invalid=*/true);
  ExpectConverges(store_.get());
  stream_.PublishResets(40);
  ExpectConverges(store_.get());

  // A clean restart in the middle of a stream, the store reopened (the
  // notice list is read back from RocksDB).
  stream_.PublishEvents(1500, true);
  StopPipeline();
  store_.reset();
  store_ = OpenStore(dir_.path() / "live");
  ASSERT_NE(store_, nullptr);
  rng_seeded_flush_ = rng_();
  StartPipeline();
  stream_.PublishEvents(1500, true);
  ExpectConverges(store_.get());
  // Positions vouch for an earlier router's deltas too.
  EXPECT_GT(ExpectCommittedPositionsHold(), 1000);

  // Every delta sent again: a router in a new group has no committed
  // offsets and re-routes the whole input. Nothing may count twice.
  StopPipeline();
  router_group_ = "tally-rewound";
  StartPipeline();
  stream_.PublishResets(30);
  ExpectConverges(store_.get());
  stream_.PublishEvents(1000, true);
  ExpectConverges(store_.get());
  // The rewound router's positions cover the first routers' copies.
  EXPECT_GT(ExpectCommittedPositionsHold(), 1000);
  StopPipeline();

  // The stream did exercise every shape (notices: ~100 of 300 ids, some
  // of them published more than once).
  EXPECT_GT(model_.notices.size(), 50u);
  EXPECT_GT(stream_.event_copies(), 100u);  // retried events with ids were in the stream
  EXPECT_EQ(model_.dots.size(), 3u);
  EXPECT_FALSE(model_.snapshots.empty());
  EXPECT_GT(model_.viewed.size(), 100u);
  EXPECT_FALSE(model_.notice_read.empty());

  // The invalid records are in the DLQ, with their reason.
  {
    int dlq = 0, with_reason = 0;
    EXPECT_TRUE(ForEachRecord(
        "tally.dlq",
        [&](const rd_kafka_message_t& m) {
          dlq++;
          rd_kafka_headers_t* h = nullptr;
          const void* v;
          size_t sz;
          if (!rd_kafka_message_headers(&m, &h) &&
              !rd_kafka_header_get_last(h, "tally.reason", &v, &sz) && sz > 0) {
            with_reason++;
          }
        },
        20));
    // The rewind re-routed everything, so each invalid record may be there twice (at least once).
    EXPECT_GE(dlq, stream_.invalid());
    EXPECT_EQ(with_reason, dlq);
  }

  // Replay from tally.deltas into an empty directory gives the same state.
  aggregator::ReplayOptions ro;
  ro.kafka = kafka_;
  auto rebuilt = OpenStore(dir_.path() / "replay");
  std::atomic<bool> never{false};
  auto st = aggregator::Replay(ro, rebuilt.get(), &never);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Diff(rebuilt.get()), "");
  auto live_progress = store_->LoadAllProgress();
  auto replay_progress = rebuilt->LoadAllProgress();
  ASSERT_TRUE(live_progress.ok() && replay_progress.ok());
  for (int p = 0; p < kPartitions; p++) {
    EXPECT_EQ((*live_progress)[p].next_deltas_offset, (*replay_progress)[p].next_deltas_offset);
  }

  // Re-deriving from the input topics gives the same counts (the events'
  // order within each key is kept). Unread counts are left out: a reset and
  // the increments around it come from different input partitions, whose
  // interleaving a re-derivation may change (SPEC section 2, "Order").
  ro.from_input = true;
  auto derived = OpenStore(dir_.path() / "from-input");
  st = aggregator::Replay(ro, derived.get(), &never);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Diff(derived.get(), /*include_unread=*/false), "");
}

// A window is written only once the broker has acknowledged the deltas it
// derived (a follow's +1 to the target's followers): written first, a crash
// or a failed delivery would lose the derived delta for good, since the
// window's source deltas are never applied again. Here the delivery of
// every derived delta fails: the applier must stop with that error and
// leave the follow unwritten, to be applied again (and derived again) by
// the next applier.
TEST_F(PipelineModelTest, AWindowIsNotWrittenBeforeItsDerivedDeltasAreAcknowledged) {
  Event e;
  e.type = EventType::kFollow;
  e.ts = 1700000000000;
  e.user_id = 1;
  e.target_id = 2;
  stream_.Produce(model::EventStream::KeyOf(e), schemas::EventToJson(e));
  ASSERT_EQ(rd_kafka_flush(producer_.get(), 30000), RD_KAFKA_RESP_ERR_NO_ERROR);

  // Route it into tally.deltas, then stop the router.
  stop_.store(false);
  std::thread router_thread([this] {
    aggregator::RouterOptions ro;
    ro.kafka = kafka_;
    ro.deltas_partitions = kPartitions;
    ro.linger_ms = 5;
    aggregator::Router router(ro);
    EXPECT_TRUE(router.Run(&stop_).ok());
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (DeltasInTopic() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop_.store(true);
  router_thread.join();
  const int64_t routed = DeltasInTopic();
  ASSERT_GT(routed, 0);

  // From now on the broker refuses every produce: the applier's derived
  // delta is the only one.
  std::vector<rd_kafka_resp_err_t> refusals(50, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
  rd_kafka_mock_push_request_errors_array(mock_, /*Produce*/ 0, refusals.size(), refusals.data());

  stop_.store(false);
  std::atomic<bool> applier_done{false};
  base::Status applier_status;
  std::thread applier_thread([&] {
    aggregator::ApplierOptions ao;
    ao.kafka = kafka_;
    ao.flush_ms = 5;
    aggregator::Applier applier(ao, store_.get());
    applier_status = applier.Run(&stop_);
    applier_done.store(true);
  });
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!applier_done.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool stopped_by_itself = applier_done.load();
  stop_.store(true);
  applier_thread.join();
  EXPECT_TRUE(stopped_by_itself) << "the applier went on after a derived delta was lost";
  EXPECT_FALSE(applier_status.ok());
  EXPECT_NE(applier_status.message().find("derived delta delivery"), std::string::npos)
      << applier_status.ToString();

  // Nothing of the follow was written: neither side's count, nor the
  // deltas offsets past it.
  for (uint64_t u : {1, 2}) {
    auto uc = store_->GetUserCounts(u);
    ASSERT_TRUE(uc.ok()) << uc.status().ToString();
    EXPECT_EQ(uc->following, 0) << "user " << u;
    EXPECT_EQ(uc->followers, 0) << "user " << u;
  }
  EXPECT_TRUE(store_->GetFollowees(1).value().empty());
}

// SIGTERM during a broker outage: records are in flight (routed deltas not
// yet acknowledged, derived deltas not yet acknowledged), and the pipeline
// must still stop within seconds, not wait for the broker forever. What it
// left unacknowledged is uncommitted, so once the broker is back a new
// pipeline routes and applies it again: every count ends exact.
TEST_F(PipelineModelTest, AStopDuringABrokerOutageEndsInSecondsAndLosesNothing) {
  rng_seeded_flush_ = rng_();
  std::atomic<int> running{0};
  std::vector<base::Status> statuses(2);
  StartStages(/*whole_topics=*/false, &running, &statuses);
  // A stream the pipeline is busy with when the broker goes away: the
  // producer keeps what it cannot deliver and delivers it once the broker
  // is back.
  std::atomic<bool> publishing{true};
  std::thread publisher([&] {
    while (publishing.load()) {
      for (int i = 0; i < 10; i++) {
        Event e = stream_.RandomEvent();
        model_.Apply(e);
        stream_.ProduceEvent(e);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(rd_kafka_flush(producer_.get(), 60000), RD_KAFKA_RESP_ERR_NO_ERROR);
  });
  // Down once the pipeline is routing and applying.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (DeltasInTopic() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(rd_kafka_mock_broker_set_down(mock_, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  const double stop_s = StopAndTime(running, 45);
  EXPECT_EQ(rd_kafka_mock_broker_set_up(mock_, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  for (auto& t : threads_) t.join();
  threads_.clear();
  publishing.store(false);
  publisher.join();
  int twice = 0;
  model_ = ModelFromInput(&twice);
  if (twice > 0) {
    std::printf("the broker kept %d events twice (a producer retry it did not deduplicate); "
                "the model counts them as often as the log holds them\n", twice);
  }
  std::printf("stopped in %.2f s; router: %s; applier: %s\n", stop_s,
              statuses[0].ToString().c_str(), statuses[1].ToString().c_str());
  EXPECT_LT(stop_s, 30.0) << "the pipeline waited for the broker after it was told to stop";
  for (const base::Status& st : statuses) {
    EXPECT_TRUE(st.ok() || st.code() == base::StatusCode::kAborted) << st.ToString();
  }

  StartPipeline();
  ExpectConverges(store_.get());
}

// The broker takes records but its group coordinator does not answer offset
// commits (a coordinator that moved or hangs; in an outage commits wait for a
// coordinator the same way). A stop must not wait for those answers: the
// input offsets stay uncommitted, and the next pipeline routes those records
// again and counts them once.
TEST_F(PipelineModelTest, AStopWhileOffsetCommitsGoUnansweredEndsInSecondsAndLosesNothing) {
  for (bool whole_topics : {true, false}) {
    SCOPED_TRACE(whole_topics ? "tally up's router (whole topics)"
                              : "tally aggregate's router (group)");
    rng_seeded_flush_ = rng_();
    std::atomic<int> running{0};
    std::vector<base::Status> statuses(2);
    StartStages(whole_topics, &running, &statuses);
    stream_.PublishEvents(300, /*with_invalid=*/false);
    ExpectConverges(store_.get());

    // The next OffsetCommit is answered after 40 s, and with it every later
    // one on that connection (the mock broker answers in order).
    ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(mock_, 1, /*OffsetCommit*/ 8, 1,
                                                           RD_KAFKA_RESP_ERR_NO_ERROR, 40000),
              RD_KAFKA_RESP_ERR_NO_ERROR);
    stream_.PublishEvents(300, /*with_invalid=*/false);
    ExpectConverges(store_.get());

    const double stop_s = StopAndTime(running, 60);
    for (auto& t : threads_) t.join();
    threads_.clear();
    std::printf("stopped in %.2f s; router: %s; applier: %s\n", stop_s,
                statuses[0].ToString().c_str(), statuses[1].ToString().c_str());
    EXPECT_LT(stop_s, 15.0) << "the router waited for offset commits after it was told to stop";
    EXPECT_TRUE(statuses[0].ok() || statuses[0].code() == base::StatusCode::kAborted)
        << statuses[0].ToString();
    EXPECT_TRUE(statuses[1].ok()) << statuses[1].ToString();

    // A new pipeline routes the uncommitted records again; the counts stay exact.
    StartPipeline();
    stream_.PublishEvents(100, /*with_invalid=*/false);
    ExpectConverges(store_.get());
    StopPipeline();
  }
}

}  // namespace
}  // namespace tally
