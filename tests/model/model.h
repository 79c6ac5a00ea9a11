// The model of tally's model-based tests: a naive reference of SPEC
// sections 1-3 (Model, one std::map per kind of state, applying one event
// at a time) and the random event streams both the pipeline test and the
// cluster test drive tally and the model with (EventStream: every event
// type, duplicate likes, unlikes, follows/unfollows, unread increments and
// resets, notices in no order on random partitions, retried events with
// ids, invalid records), published to tally.events with a Kafka producer.
//
// Test-only, header-only (GoogleTest assertions inside). Thread model:
// externally synchronized.
#pragma once

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "schemas/event.h"

namespace tally::model {

using schemas::Event;
using schemas::EventType;
using schemas::UnreadKind;

// The reference: SPEC sections 1-3 applied one event at a time.
struct Model {
  std::map<uint64_t, std::array<int64_t, 4>> posts;   // like, repost, comment, view
  std::map<uint64_t, std::array<int64_t, 3>> users;   // posts, followers, following
  std::map<uint64_t, std::array<int64_t, 6>> unread;  // mention..follower
  std::set<std::pair<uint64_t, uint64_t>> likes, follows;
  std::set<uint64_t> notices;                // the list: a set of ids
  std::map<uint64_t, uint64_t> notice_read;  // user -> last-read id
  std::map<std::string, int64_t> dots;       // channel -> global time
  std::map<std::pair<uint64_t, std::string>, int64_t> clicks;
  std::map<uint64_t, std::map<uint64_t, uint64_t>> snapshots;
  std::map<uint64_t, int64_t> snapshot_ts;  // user -> ts of the read that took it
  std::set<std::pair<uint64_t, uint64_t>> viewed;

  int64_t NoticeUnread(uint64_t u) const {
    auto it = notice_read.find(u);
    if (it == notice_read.end()) return 0;
    return std::distance(notices.upper_bound(it->second), notices.end());
  }
  int64_t FeedUnread(uint64_t u) {
    auto it = snapshots.find(u);
    if (it == snapshots.end()) return 0;
    int64_t sum = 0;
    for (const auto& [f, then] : it->second) {
      if (!follows.count({u, f})) continue;
      int64_t now = users.count(f) ? users[f][0] : 0;
      sum += std::max<int64_t>(0, now - static_cast<int64_t>(then));
    }
    return sum;
  }
  std::vector<std::pair<std::string, bool>> Dots(uint64_t u) const {
    std::vector<std::pair<std::string, bool>> out;
    for (const auto& [ch, ts] : dots) {
      auto c = clicks.find({u, ch});
      out.emplace_back(ch, c == clicks.end() || c->second < ts);
    }
    return out;
  }
  // What a feed reset would snapshot now.
  std::vector<std::pair<uint64_t, uint64_t>> CurrentFolloweePosts(uint64_t u) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto& [a, b] : follows) {
      if (a == u) out.emplace_back(b, users.count(b) ? users[b][0] : 0);
    }
    return out;
  }

  void Apply(const Event& e) {
    auto un = [&](uint64_t u, UnreadKind k) { unread[u][static_cast<int>(k)]++; };
    switch (e.type) {
      case EventType::kPost:
        users[e.author_id][0]++;
        break;
      case EventType::kPostDelete:
        users[e.author_id][0] = std::max<int64_t>(0, users[e.author_id][0] - 1);
        break;
      case EventType::kLike:
        if (likes.insert({e.post_id, e.user_id}).second) posts[e.post_id][0]++;
        if (e.author_id) un(e.author_id, UnreadKind::kLike);
        break;
      case EventType::kUnlike:
        if (likes.erase({e.post_id, e.user_id})) posts[e.post_id][0]--;
        break;
      case EventType::kRepost:
        posts[e.post_id][1]++;
        if (e.author_id) un(e.author_id, UnreadKind::kRepost);
        break;
      case EventType::kComment:
        posts[e.post_id][2]++;
        if (e.author_id) un(e.author_id, UnreadKind::kComment);
        break;
      case EventType::kView:
        posts[e.post_id][3]++;
        if (e.user_id) viewed.insert({e.post_id, e.user_id});
        break;
      case EventType::kNotice:
        notices.insert(e.notice_id);  // however late; a repeated id changes nothing
        break;
      case EventType::kRedDot:
        dots[e.channel] = std::max(dots[e.channel], e.ts);
        break;
      case EventType::kMention: {
        std::set<uint64_t> t(e.target_ids.begin(), e.target_ids.end());
        for (uint64_t u : t) un(u, UnreadKind::kMention);
        break;
      }
      case EventType::kDm:
        un(e.to_user_id, UnreadKind::kDm);
        break;
      case EventType::kFollow:
        if (follows.insert({e.user_id, e.target_id}).second) {
          users[e.user_id][2]++;
          users[e.target_id][1]++;
          un(e.target_id, UnreadKind::kFollower);
        }
        break;
      case EventType::kUnfollow:
        if (follows.erase({e.user_id, e.target_id})) {
          users[e.user_id][2]--;
          users[e.target_id][1]--;
        }
        break;
      case EventType::kRead:
        if (static_cast<int>(e.read_kind) < schemas::kUnreadCounterKinds) {
          unread[e.user_id][static_cast<int>(e.read_kind)] = 0;
        } else if (e.read_kind == UnreadKind::kNotice) {
          notice_read[e.user_id] = e.notice_id;
        } else if (e.read_kind == UnreadKind::kRedDot) {
          int64_t& t = clicks[{e.user_id, e.channel}];
          t = std::max(t, e.ts);
        } else {
          snapshots[e.user_id] = std::map<uint64_t, uint64_t>(e.snapshot.begin(), e.snapshot.end());
          snapshot_ts[e.user_id] = e.ts;
        }
        break;
      default:
        break;
    }
  }
};

// Random events drawn from a borrowed generator, applied to a borrowed
// Model and published to tally.events (keyed as SPEC section 2 recommends)
// through a borrowed producer; all three must outlive the stream. The
// generator's draws depend only on its seed, so a seed replays a stream.
class EventStream {
 public:
  static constexpr const char* kChannels[] = {"discover", "games", "live.now"};
  // Notice ids are drawn from 1..kNoticeIds.
  static constexpr uint64_t kNoticeIds = 300;

  // `partitions`: of tally.events, for the records put on a random one.
  EventStream(std::mt19937_64* rng, Model* model, int partitions)
      : rng_(*rng), model_(*model), partitions_(partitions) {}

  // The producer to publish with (a handle of RD_KAFKA_PRODUCER); set
  // before any Produce.
  void set_producer(rd_kafka_t* producer) { producer_ = producer; }

  // Valid events made so far (each has ts 1700000000000 + its number).
  uint64_t events() const { return counter_; }
  // Invalid records published so far.
  int invalid() const { return invalid_; }
  // Records published that repeat an event with an id.
  uint64_t event_copies() const { return event_copies_; }

  uint64_t Id(uint64_t n) { return 1 + rng_() % n; }

  Event RandomEvent() {
    Event e;
    e.ts = 1700000000000 + static_cast<int64_t>(counter_++);
    int r = rng_() % 100;
    if (r < 10) {
      e.type = EventType::kPost;
      e.author_id = Id(30);
      e.post_id = Id(1000);
    } else if (r < 13) {
      e.type = EventType::kPostDelete;
      e.author_id = Id(30);
      e.post_id = Id(1000);
    } else if (r < 35) {
      e.type = EventType::kLike;
      e.post_id = Id(40);
      e.user_id = Id(15);
      e.author_id = rng_() % 2 ? Id(30) : 0;
    } else if (r < 42) {
      e.type = EventType::kUnlike;
      e.post_id = Id(40);
      e.user_id = Id(15);
    } else if (r < 50) {
      e.type = EventType::kRepost;
      e.post_id = Id(40);
      e.user_id = Id(30);
      e.author_id = Id(30);
    } else if (r < 58) {
      e.type = EventType::kComment;
      e.post_id = Id(40);
      e.user_id = Id(30);
      e.author_id = rng_() % 3 ? Id(30) : 0;
    } else if (r < 68) {
      e.type = EventType::kView;
      e.post_id = Id(40);
      e.user_id = rng_() % 2 ? Id(30) : 0;
    } else if (r < 74) {
      e.type = EventType::kMention;
      e.user_id = Id(30);
      int n = 1 + rng_() % 4;
      for (int i = 0; i < n; i++) e.target_ids.push_back(Id(30));
    } else if (r < 79) {
      e.type = EventType::kDm;
      e.from_user_id = Id(30);
      e.to_user_id = Id(30);
    } else if (r < 90) {
      e.type = EventType::kFollow;
      e.user_id = Id(12);
      e.target_id = Id(12);
    } else if (r < 96) {
      e.type = EventType::kUnfollow;
      e.user_id = Id(12);
      e.target_id = Id(12);
    } else if (r < 98) {
      e.type = EventType::kNotice;
      // Ids in no order, some repeated; ProduceEvent puts each on a random
      // partition, so they also reach the global partition in no order.
      e.notice_id = 1 + rng_() % kNoticeIds;
    } else {
      e.type = EventType::kRedDot;
      e.channel = kChannels[rng_() % 3];
    }
    return e;
  }

  // The key SPEC section 2 recommends, so non-commuting effects keep their order.
  static std::string KeyOf(const Event& e) {
    switch (e.type) {
      case EventType::kLike:
      case EventType::kUnlike:
        return "p" + std::to_string(e.post_id);
      case EventType::kPost:
      case EventType::kPostDelete:
        return "u" + std::to_string(e.author_id);
      default:
        return "u" + std::to_string(e.user_id);
    }
  }

  // Publishes `value` with `key` (none when empty) to `partition` (the
  // partitioner's choice by default).
  void Produce(const std::string& key, const std::string& value,
               int32_t partition = RD_KAFKA_PARTITION_UA) {
    for (;;) {
      auto err = rd_kafka_producev(producer_, RD_KAFKA_V_TOPIC("tally.events"),
                                   RD_KAFKA_V_PARTITION(partition),
                                   RD_KAFKA_V_KEY(key.empty() ? nullptr : key.data(), key.size()),
                                   RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                                   RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(producer_, 10);
        continue;
      }
      ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR);
      return;
    }
  }

  // Publishes `e` keyed as SPEC section 2 recommends, but a notice without
  // a key on a random partition: the list must not depend on their order.
  void ProduceEvent(const Event& e) {
    if (e.type == EventType::kNotice) {
      Produce("", schemas::EventToJson(e), static_cast<int32_t>(rng_() % partitions_));
    } else {
      Produce(KeyOf(e), schemas::EventToJson(e));
    }
  }

  // Publishes `n` random events (with `with_invalid`, about one in 50
  // records instead invalid), applies them to the model, and waits for the
  // broker's acknowledgement of all.
  void PublishEvents(int n, bool with_invalid) {
    for (int i = 0; i < n; i++) {
      if (with_invalid && rng_() % 50 == 0) {
        static const char* kBad[] = {"not json",
                                     "{\"type\":\"poke\",\"ts\":1}",
                                     "{\"type\":\"like\",\"ts\":1}",
                                     "{\"type\":\"view\",\"ts\":1,\"post_id\":0}",
                                     "[1,2]",
                                     ""};
        Produce("x", kBad[rng_() % 6]);
        invalid_++;
        continue;
      }
      Event e = RandomEvent();
      model_.Apply(e);
      // Some events carry an id and are published again, as a producer
      // retrying after an unclear answer would: on any partition, later.
      // Only events whose effects commute with everything around them: a
      // retried like landing after the unlike that followed it (or a post
      // after a post_delete, which stops at 0) is a reorder, not a duplicate.
      const bool commutes = e.type == EventType::kView || e.type == EventType::kRepost ||
                            e.type == EventType::kComment || e.type == EventType::kMention ||
                            e.type == EventType::kDm;
      if (commutes && rng_() % 6 == 0) {
        e.id = "retry-" + std::to_string(counter_);
        ProduceEvent(e);
        for (int copies = static_cast<int>(rng_() % 3); copies > 0; copies--) {
          Produce("", schemas::EventToJson(e), static_cast<int32_t>(rng_() % partitions_));
          event_copies_++;
        }
      } else {
        ProduceEvent(e);
      }
    }
    ASSERT_EQ(rd_kafka_flush(producer_, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
  }

  // Resets of every unread kind for random users, published alone so their
  // order against increments is known; applied to the model, acknowledged.
  void PublishResets(int n) {
    for (int i = 0; i < n; i++) {
      Event e;
      e.type = EventType::kRead;
      e.ts = 1700000000000 + static_cast<int64_t>(counter_++);
      e.user_id = Id(30);
      e.read_kind = static_cast<UnreadKind>(rng_() % schemas::kUnreadKindCount);
      if (e.read_kind == UnreadKind::kNotice) {
        e.notice_id = 1 + rng_() % (kNoticeIds + 2);
      } else if (e.read_kind == UnreadKind::kRedDot) {
        e.channel = kChannels[rng_() % 3];
      } else if (e.read_kind == UnreadKind::kFeed) {
        e.user_id = Id(12);  // the users with follows
        e.snapshot = model_.CurrentFolloweePosts(e.user_id);
      }
      model_.Apply(e);
      Produce(KeyOf(e), schemas::EventToJson(e));
    }
    ASSERT_EQ(rd_kafka_flush(producer_, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
  }

 private:
  std::mt19937_64& rng_;
  Model& model_;
  const int partitions_;
  rd_kafka_t* producer_ = nullptr;
  uint64_t counter_ = 0;
  int invalid_ = 0;
  uint64_t event_copies_ = 0;  // records that repeat an event with an id
};

}  // namespace tally::model
