#include "ingest/workload_generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ingest/event_publisher.h"
#include "schemas/event.h"

namespace tally::ingest {
namespace {

using schemas::Event;
using schemas::EventType;
using schemas::UnreadKind;

std::vector<std::string> Generate(const WorkloadOptions& options, int n) {
  WorkloadGenerator gen(options);
  std::vector<std::string> out;
  Event e;
  for (int i = 0; i < n; i++) {
    gen.Next(&e);
    out.push_back(schemas::EventToJson(e));
  }
  return out;
}

WorkloadOptions Small(uint64_t seed) {
  WorkloadOptions o;
  o.users = 5000;
  o.posts = 2000;
  o.seed = seed;
  return o;
}

TEST(WorkloadGeneratorTest, SameSeedSameEvents) {
  EXPECT_EQ(Generate(Small(7), 5000), Generate(Small(7), 5000));
}

TEST(WorkloadGeneratorTest, DifferentSeedsDiffer) {
  EXPECT_NE(Generate(Small(7), 100), Generate(Small(8), 100));
}

TEST(WorkloadGeneratorTest, TimestampsFollowTheIndex) {
  WorkloadOptions o = Small(1);
  o.base_ts_ms = 1000;
  o.ts_step_ms = 3;
  o.with_ids = true;
  WorkloadGenerator gen(o);
  Event e;
  for (int64_t i = 0; i < 100; i++) {
    gen.Next(&e);
    EXPECT_EQ(e.ts, 1000 + 3 * i);
    EXPECT_EQ(e.id, "g1-" + std::to_string(i));
  }
  EXPECT_EQ(gen.generated(), 100u);
}

TEST(WorkloadGeneratorTest, EveryTypeAndReadKindAppearsIn10kEvents) {
  for (uint64_t seed : {1, 2, 3, 42}) {
    WorkloadGenerator gen(Small(seed));
    std::map<EventType, int> types;
    std::set<UnreadKind> kinds;
    Event e;
    for (int i = 0; i < 10000; i++) {
      gen.Next(&e);
      types[e.type]++;
      if (e.type == EventType::kRead) kinds.insert(e.read_kind);
    }
    EXPECT_EQ(types.size(), static_cast<size_t>(schemas::kEventTypeCount)) << "seed " << seed;
    EXPECT_EQ(kinds.size(), static_cast<size_t>(schemas::kUnreadKindCount)) << "seed " << seed;
    // Views and likes dominate, as in a real feed.
    EXPECT_GT(types[EventType::kView], types[EventType::kLike]);
    EXPECT_GT(types[EventType::kLike], types[EventType::kComment]);
  }
}

TEST(WorkloadGeneratorTest, EveryEventRoundTripsThroughTheParser) {
  WorkloadGenerator gen(Small(5));
  schemas::EventParser parser;
  Event e;
  Event parsed;
  for (int i = 0; i < 20000; i++) {
    gen.Next(&e);
    std::string json = schemas::EventToJson(e);
    base::Status st = parser.Parse(json, &parsed);
    ASSERT_TRUE(st.ok()) << "event " << i << ": " << json << ": " << st.message();
    EXPECT_EQ(schemas::EventToJson(parsed), json);
    EXPECT_FALSE(DefaultKey(parsed).empty());
  }
}

// The invariants tally's semantics care about: the generator's "undo" events
// undo something that exists, ids are coherent, notices increase.
TEST(WorkloadGeneratorTest, EventsAreCoherent) {
  WorkloadOptions o = Small(11);
  WorkloadGenerator gen(o);
  std::set<std::pair<uint64_t, uint64_t>> likes_seen;    // every like ever generated
  std::set<std::pair<uint64_t, uint64_t>> follows_seen;  // every follow ever generated
  std::set<uint64_t> created;
  std::set<uint64_t> deleted;
  uint64_t last_notice = 0;
  int likes = 0;
  int duplicate_likes = 0;
  Event e;
  for (int i = 0; i < 50000; i++) {
    gen.Next(&e);
    switch (e.type) {
      case EventType::kPost:
        EXPECT_GT(e.post_id, o.posts);
        EXPECT_TRUE(created.insert(e.post_id).second) << "post ids are fresh";
        EXPECT_EQ(gen.AuthorOf(e.post_id), e.author_id);
        break;
      case EventType::kPostDelete:
        EXPECT_TRUE(created.count(e.post_id)) << "only generated posts are deleted";
        EXPECT_TRUE(deleted.insert(e.post_id).second) << "deleted once";
        EXPECT_EQ(gen.AuthorOf(e.post_id), e.author_id) << "by their author";
        break;
      case EventType::kLike:
        likes++;
        if (!likes_seen.insert({e.post_id, e.user_id}).second) duplicate_likes++;
        if (e.author_id != 0) {
          EXPECT_EQ(gen.AuthorOf(e.post_id), e.author_id);
        }
        break;
      case EventType::kUnlike:
        EXPECT_TRUE(likes_seen.count({e.post_id, e.user_id})) << "unlike of a like";
        break;
      case EventType::kComment:
        EXPECT_EQ(gen.AuthorOf(e.post_id), e.author_id) << "comments name the post's author";
        break;
      case EventType::kRepost:
        if (e.author_id != 0) {
          EXPECT_EQ(gen.AuthorOf(e.post_id), e.author_id);
        }
        break;
      case EventType::kFollow:
        EXPECT_NE(e.user_id, e.target_id);
        follows_seen.insert({e.user_id, e.target_id});
        break;
      case EventType::kUnfollow:
        EXPECT_TRUE(follows_seen.count({e.user_id, e.target_id})) << "unfollow of a follow";
        break;
      case EventType::kNotice:
        EXPECT_EQ(e.notice_id, last_notice + 1) << "strictly increasing";
        last_notice = e.notice_id;
        break;
      case EventType::kMention: {
        EXPECT_GE(e.target_ids.size(), 1u);
        EXPECT_LE(e.target_ids.size(), 5u);
        std::set<uint64_t> distinct(e.target_ids.begin(), e.target_ids.end());
        EXPECT_EQ(distinct.size(), e.target_ids.size());
        break;
      }
      case EventType::kDm:
        EXPECT_NE(e.from_user_id, e.to_user_id);
        break;
      case EventType::kRead:
        if (e.read_kind == UnreadKind::kNotice) {
          EXPECT_GE(e.notice_id, 1u);
          EXPECT_LE(e.notice_id, last_notice);
        }
        if (e.read_kind == UnreadKind::kFeed) {
          EXPECT_GE(e.snapshot.size(), 1u);
          EXPECT_LE(e.snapshot.size(), 5u);
        }
        break;
      default:
        break;
    }
    // Every id is inside the configured universe.
    for (uint64_t user : {e.user_id, e.target_id, e.from_user_id, e.to_user_id}) {
      EXPECT_LE(user, o.users);
    }
  }
  double share = static_cast<double>(duplicate_likes) / likes;
  EXPECT_GT(share, 0.03) << "about 5% duplicate likes";
  EXPECT_LT(share, 0.10);
}

TEST(WorkloadGeneratorTest, PostPopularityIsSkewed) {
  WorkloadOptions o = Small(3);
  o.posts = 10000;
  WorkloadGenerator gen(o);
  std::map<uint64_t, int> views;
  int total = 0;
  Event e;
  for (int i = 0; i < 100000; i++) {
    gen.Next(&e);
    if (e.type == EventType::kView) {
      views[e.post_id]++;
      total++;
    }
  }
  std::vector<int> counts;
  for (const auto& [post, n] : views) counts.push_back(n);
  std::sort(counts.rbegin(), counts.rend());
  int top10 = 0;
  for (size_t i = 0; i < 10 && i < counts.size(); i++) top10 += counts[i];
  // Zipf s=1.1 over 10k posts puts roughly a third of the mass on the top 10.
  EXPECT_GT(static_cast<double>(top10) / total, 0.2);
  EXPECT_LT(static_cast<double>(top10) / total, 0.6);
}

}  // namespace
}  // namespace tally::ingest
