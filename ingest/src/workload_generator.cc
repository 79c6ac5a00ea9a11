#include "ingest/workload_generator.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <numeric>
#include <string_view>
#include <utility>

namespace tally::ingest {
namespace {

using schemas::Event;
using schemas::EventType;
using schemas::UnreadKind;

// xoshiro256** seeded through splitmix64: fast, and its output is fixed by
// its definition, unlike std::uniform_int_distribution's.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& word : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n), n > 0 (Lemire's multiply-and-reject).
  uint64_t Uniform(uint64_t n) {
    assert(n > 0);
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1).
  double Double() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  bool Chance(double p) { return Double() < p; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_;
};

// Zipf over ranks 1..n with P(k) ~ 1/k^s, by rejection-inversion (Hörmann and
// Derflinger 1996, as in Apache Commons RNG): O(1) per sample, no table.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s) : n_(n), exponent_(s) {
    assert(n >= 1 && s > 0);
    h_integral_x1_ = HIntegral(1.5) - 1.0;
    h_integral_n_ = HIntegral(static_cast<double>(n) + 0.5);
    s_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
  }

  uint64_t Sample(Rng& rng) const {
    for (;;) {
      const double u = h_integral_n_ + rng.Double() * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      double kd = std::floor(x + 0.5);
      kd = std::clamp(kd, 1.0, static_cast<double>(n_));
      if (kd - x <= s_ || u >= HIntegral(kd + 0.5) - H(kd)) return static_cast<uint64_t>(kd);
    }
  }

 private:
  double H(double x) const { return std::exp(-exponent_ * std::log(x)); }
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1.0 - exponent_) * log_x) * log_x;
  }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - exponent_);
    if (t < -1.0) t = -1.0;  // numerical safety near the lower bound
    return std::exp(Helper1(t) * x);
  }
  // log1p(x)/x and expm1(x)/x, continuous at 0.
  static double Helper1(double x) {
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double Helper2(double x) {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x
                              : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }

  uint64_t n_;
  double exponent_;
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
};

// A bijection of 1..n that spreads popular ranks over the id space. Rank 1
// is id 1, so the most popular post and user are the ones the README's first
// `curl` asks about; the rest are spread (partitioning hashes ids anyway).
class RankScrambler {
 public:
  explicit RankScrambler(uint64_t n) : n_(n) {
    multiplier_ = 0x9e3779b97f4a7c15ULL % n;
    if (multiplier_ == 0) multiplier_ = 1;
    while (std::gcd(multiplier_, n) != 1) multiplier_++;
  }
  uint64_t IdOfRank(uint64_t rank) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(rank - 1) * multiplier_) % n_) + 1;
  }

 private:
  uint64_t n_;
  uint64_t multiplier_;
};

// An edge set the generator remembers so that unlikes, unfollows and
// duplicate likes name edges that exist. Bounded: once full, a new edge
// replaces a random old one (the forgotten edge simply never gets undone).
class EdgeSample {
 public:
  static constexpr size_t kCapacity = 1 << 18;
  bool empty() const { return edges_.empty(); }
  void Add(Rng& rng, uint64_t a, uint64_t b) {
    if (edges_.size() < kCapacity) {
      edges_.emplace_back(a, b);
    } else {
      edges_[rng.Uniform(edges_.size())] = {a, b};
    }
  }
  std::pair<uint64_t, uint64_t> Pick(Rng& rng) const { return edges_[rng.Uniform(edges_.size())]; }
  std::pair<uint64_t, uint64_t> Take(Rng& rng) {
    size_t i = rng.Uniform(edges_.size());
    auto edge = edges_[i];
    edges_[i] = edges_.back();
    edges_.pop_back();
    return edge;
  }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> edges_;
};

// The mix, in events per 10,000. Sums to 10,000.
struct MixEntry {
  EventType type;
  int weight;
};
constexpr std::array<MixEntry, schemas::kEventTypeCount> kMix = {{
    {EventType::kView, 3900},
    {EventType::kLike, 2000},
    {EventType::kUnlike, 150},
    {EventType::kComment, 600},
    {EventType::kRepost, 400},
    {EventType::kPost, 500},
    {EventType::kPostDelete, 30},
    {EventType::kFollow, 800},
    {EventType::kUnfollow, 100},
    {EventType::kMention, 300},
    {EventType::kDm, 400},
    {EventType::kRead, 770},
    {EventType::kNotice, 20},
    {EventType::kRedDot, 30},
}};

constexpr std::array<std::string_view, 6> kChannels = {"home", "discover", "live",
                                                       "shop", "events",   "system.update"};

constexpr double kDuplicateLikeShare = 0.05;
constexpr double kViewWithUserShare = 0.9;
constexpr double kOptionalAuthorShare = 0.9;  // like/repost that carry author_id
constexpr double kRecentPostShare = 0.25;     // engagement on the newest posts, not the pool
constexpr size_t kRecentPosts = 1024;

}  // namespace

struct WorkloadGenerator::State {
  explicit State(const WorkloadOptions& o)
      : options(o),
        rng(o.seed),
        post_rank(o.posts, o.post_zipf_s),
        user_rank(o.users, o.follow_zipf_s),
        post_ids(o.posts),
        user_ids(o.users),
        post_count(o.users, 0),
        next_post_id(o.posts + 1) {
    int total = 0;
    for (const auto& m : kMix) total += m.weight;
    assert(total == 10000);
    (void)total;
    // Prolific authors are the popular users: the initial pool's authors
    // follow the same power law as the follow graph.
    author_of.reserve(o.posts + o.posts / 4);
    for (uint64_t i = 0; i < o.posts; i++) author_of.push_back(PopularUser());
    deleted.assign(o.posts, false);
  }

  uint64_t AnyUser() { return rng.Uniform(options.users) + 1; }
  uint64_t PopularUser() { return user_ids.IdOfRank(user_rank.Sample(rng)); }
  uint64_t OtherUser(uint64_t not_this) {
    uint64_t u = AnyUser();
    return u == not_this ? u % options.users + 1 : u;
  }

  // A post to engage with: mostly Zipf over the initial pool, sometimes one of
  // the posts created recently.
  uint64_t EngagedPost() {
    if (!new_posts.empty() && rng.Chance(kRecentPostShare)) {
      size_t window = std::min(new_posts.size(), kRecentPosts);
      return new_posts[new_posts.size() - 1 - rng.Uniform(window)];
    }
    return post_ids.IdOfRank(post_rank.Sample(rng));
  }

  EventType PickType() {
    int r = static_cast<int>(rng.Uniform(10000));
    for (const auto& m : kMix) {
      if (r < m.weight) return m.type;
      r -= m.weight;
    }
    return EventType::kView;
  }

  void MakePost(Event* e) {
    e->type = EventType::kPost;
    e->author_id = rng.Chance(0.5) ? PopularUser() : AnyUser();
    e->post_id = next_post_id++;
    author_of.push_back(e->author_id);
    deleted.push_back(false);
    new_posts.push_back(e->post_id);
    post_count[e->author_id - 1]++;
  }

  // Only the author deletes, and only a live post the generator created.
  // False when a few random picks found none alive (the caller posts instead).
  bool MakePostDelete(Event* e) {
    for (int attempt = 0; attempt < 8; attempt++) {
      uint64_t post = new_posts[rng.Uniform(new_posts.size())];
      if (deleted[post - 1]) continue;
      deleted[post - 1] = true;
      e->type = EventType::kPostDelete;
      e->post_id = post;
      e->author_id = author_of[post - 1];
      post_count[e->author_id - 1]--;
      return true;
    }
    return false;
  }

  void MakeLike(Event* e) {
    e->type = EventType::kLike;
    if (!likes.empty() && rng.Chance(kDuplicateLikeShare)) {
      std::tie(e->post_id, e->user_id) = likes.Pick(rng);  // a client retry
    } else {
      e->post_id = EngagedPost();
      e->user_id = AnyUser();
      likes.Add(rng, e->post_id, e->user_id);
    }
    if (rng.Chance(kOptionalAuthorShare)) e->author_id = author_of[e->post_id - 1];
  }

  void MakeRead(Event* e) {
    e->type = EventType::kRead;
    e->user_id = AnyUser();
    e->read_kind = static_cast<UnreadKind>(rng.Uniform(schemas::kUnreadKindCount));
    if (e->read_kind == UnreadKind::kNotice && next_notice_id == 1) {
      e->read_kind = UnreadKind::kMention;  // nothing to have read yet
    }
    switch (e->read_kind) {
      case UnreadKind::kNotice:
        // Mostly up to the newest notice, sometimes an older one.
        e->notice_id = rng.Chance(0.8) ? next_notice_id - 1 : rng.Uniform(next_notice_id - 1) + 1;
        break;
      case UnreadKind::kRedDot:
        e->channel = kChannels[rng.Uniform(kChannels.size())];
        break;
      case UnreadKind::kFeed: {
        size_t n = 1 + rng.Uniform(5);
        for (size_t i = 0; i < n; i++) {
          uint64_t followee = PopularUser();
          bool seen = followee == e->user_id;
          for (const auto& [id, count] : e->snapshot) seen = seen || id == followee;
          if (!seen) e->snapshot.emplace_back(followee, post_count[followee - 1]);
        }
        if (e->snapshot.empty()) {
          uint64_t followee = OtherUser(e->user_id);
          e->snapshot.emplace_back(followee, post_count[followee - 1]);
        }
        break;
      }
      default:
        break;
    }
  }

  void Next(Event* e) {
    e->Clear();
    const uint64_t index = generated++;
    e->ts = options.base_ts_ms + static_cast<int64_t>(index) * options.ts_step_ms;
    if (options.with_ids) e->id = fmt::format("g{}-{}", options.seed, index);

    EventType type = PickType();
    // Undo-type events need something to undo; fall back to the "do" type.
    if (type == EventType::kUnlike && likes.empty()) type = EventType::kLike;
    if (type == EventType::kUnfollow && follows.empty()) type = EventType::kFollow;
    if (type == EventType::kPostDelete && new_posts.empty()) type = EventType::kPost;

    switch (type) {
      case EventType::kPost:
        MakePost(e);
        break;
      case EventType::kPostDelete:
        if (!MakePostDelete(e)) MakePost(e);
        break;
      case EventType::kLike:
        MakeLike(e);
        break;
      case EventType::kUnlike:
        e->type = EventType::kUnlike;
        std::tie(e->post_id, e->user_id) = likes.Take(rng);
        break;
      case EventType::kRepost:
        e->type = EventType::kRepost;
        e->post_id = EngagedPost();
        e->user_id = AnyUser();
        if (rng.Chance(kOptionalAuthorShare)) e->author_id = author_of[e->post_id - 1];
        break;
      case EventType::kComment:
        e->type = EventType::kComment;
        e->post_id = EngagedPost();
        e->user_id = AnyUser();
        e->author_id = author_of[e->post_id - 1];
        break;
      case EventType::kView:
        e->type = EventType::kView;
        e->post_id = EngagedPost();
        if (rng.Chance(kViewWithUserShare)) e->user_id = AnyUser();
        break;
      case EventType::kMention: {
        e->type = EventType::kMention;
        e->user_id = AnyUser();
        size_t n = 1 + rng.Uniform(5);
        for (size_t i = 0; i < n; i++) {
          uint64_t target = rng.Chance(0.5) ? PopularUser() : AnyUser();
          if (target == e->user_id || std::find(e->target_ids.begin(), e->target_ids.end(),
                                                target) != e->target_ids.end()) {
            continue;
          }
          e->target_ids.push_back(target);
        }
        if (e->target_ids.empty()) e->target_ids.push_back(OtherUser(e->user_id));
        break;
      }
      case EventType::kDm:
        e->type = EventType::kDm;
        e->from_user_id = AnyUser();
        e->to_user_id = OtherUser(e->from_user_id);
        break;
      case EventType::kFollow:
        e->type = EventType::kFollow;
        e->user_id = AnyUser();
        e->target_id = PopularUser();
        if (e->target_id == e->user_id) e->target_id = OtherUser(e->user_id);
        follows.Add(rng, e->user_id, e->target_id);
        break;
      case EventType::kUnfollow:
        e->type = EventType::kUnfollow;
        std::tie(e->user_id, e->target_id) = follows.Take(rng);
        break;
      case EventType::kNotice:
        e->type = EventType::kNotice;
        e->notice_id = next_notice_id++;
        e->title = fmt::format("system notice {}", e->notice_id);
        break;
      case EventType::kRedDot:
        e->type = EventType::kRedDot;
        e->channel = kChannels[rng.Uniform(kChannels.size())];
        break;
      case EventType::kRead:
        MakeRead(e);
        break;
    }
  }

  WorkloadOptions options;
  Rng rng;
  ZipfSampler post_rank;
  ZipfSampler user_rank;
  RankScrambler post_ids;
  RankScrambler user_ids;
  std::vector<uint64_t> author_of;   // [post_id - 1]
  std::vector<uint32_t> post_count;  // [user_id - 1]: posts created minus deleted
  std::vector<bool> deleted;         // [post_id - 1]: a post_delete was generated
  std::vector<uint64_t> new_posts;   // generated post ids, oldest first
  EdgeSample likes;                  // (post, user)
  EdgeSample follows;                // (user, target)
  uint64_t next_post_id;
  uint64_t next_notice_id = 1;
  uint64_t generated = 0;
};

WorkloadGenerator::WorkloadGenerator(const WorkloadOptions& options) {
  assert(options.users >= 2 && options.posts >= 1 && options.ts_step_ms >= 0);
  assert(options.post_zipf_s > 0 && options.follow_zipf_s > 0);
  state_ = std::make_unique<State>(options);
}

WorkloadGenerator::~WorkloadGenerator() = default;

void WorkloadGenerator::Next(schemas::Event* out) { state_->Next(out); }

uint64_t WorkloadGenerator::generated() const { return state_->generated; }

uint64_t WorkloadGenerator::AuthorOf(uint64_t post_id) const {
  if (post_id == 0 || post_id > state_->author_of.size()) return 0;
  return state_->author_of[post_id - 1];
}

}  // namespace tally::ingest
