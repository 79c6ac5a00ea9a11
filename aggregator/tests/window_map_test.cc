#include "aggregator/window_map.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace tally::aggregator {
namespace {

TEST(WindowMapTest, InsertsValueInitializedAndFindsAgain) {
  WindowMap<uint64_t, int64_t> m;
  EXPECT_EQ(m.find(7), nullptr);
  EXPECT_EQ(m[7], 0);
  m[7] += 3;
  m[9] = 1;
  ASSERT_NE(m.find(7), nullptr);
  EXPECT_EQ(*m.find(7), 3);
  EXPECT_EQ(*m.find(9), 1);
  EXPECT_EQ(m.find(8), nullptr);
  EXPECT_EQ(m.size(), 2u);
}

TEST(WindowMapTest, ClearForgetsEverythingAndTheMapIsReusable) {
  WindowMap<uint64_t, int64_t> m;
  for (uint64_t k = 0; k < 1000; k++) m[k] = static_cast<int64_t>(k);
  m.clear();
  EXPECT_TRUE(m.empty());
  for (uint64_t k = 0; k < 1000; k++) EXPECT_EQ(m.find(k), nullptr) << k;
  EXPECT_EQ(m[5], 0);
  EXPECT_EQ(m.size(), 1u);
}

TEST(WindowMapTest, SortByKeyOrdersEntriesAndKeepsLookups) {
  WindowMap<std::pair<uint64_t, uint64_t>, bool> m;
  m[{3, 1}] = true;
  m[{1, 9}] = false;
  m[{1, 2}] = true;
  m.SortByKey();
  std::vector<std::pair<uint64_t, uint64_t>> keys;
  for (const auto& [k, v] : m) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::pair<uint64_t, uint64_t>>{{1, 2}, {1, 9}, {3, 1}}));
  ASSERT_NE(m.find({1, 9}), nullptr);
  EXPECT_FALSE(*m.find({1, 9}));
  m[{0, 0}] = true;  // inserting after a sort still works
  EXPECT_EQ(m.size(), 4u);
  EXPECT_TRUE(*m.find({3, 1}));
}

// The map against std::map over many windows of random keys: growth,
// collisions (keys that differ only in high bits), sorts and clears.
TEST(WindowMapTest, MatchesAModelOverManyWindows) {
  const uint32_t seed = std::random_device()();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  WindowMap<uint64_t, int64_t> m;
  for (int window = 0; window < 200; window++) {
    std::map<uint64_t, int64_t> model;
    const size_t ops = rng() % 5000;
    const uint64_t space = 1 + rng() % 3000;
    for (size_t i = 0; i < ops; i++) {
      uint64_t k = (rng() % space) << (rng() % 2 ? 40 : 0);
      if (rng() % 4 == 0) {
        const int64_t* v = m.find(k);
        auto it = model.find(k);
        ASSERT_EQ(v != nullptr, it != model.end()) << "window " << window << " key " << k;
        if (v != nullptr) {
          ASSERT_EQ(*v, it->second);
        }
      } else {
        int64_t add = static_cast<int64_t>(rng() % 100);
        m[k] += add;
        model[k] += add;
      }
      if (rng() % 2000 == 0) m.SortByKey();
    }
    ASSERT_EQ(m.size(), model.size()) << "window " << window;
    m.SortByKey();
    auto it = model.begin();
    for (const auto& [k, v] : m) {
      ASSERT_EQ(k, it->first);
      ASSERT_EQ(v, it->second);
      ++it;
    }
    m.clear();
  }
}

}  // namespace
}  // namespace tally::aggregator
