#include "store/viewed_tables.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>

namespace tally::store {
namespace {

// An in-memory stand-in for the chunk records: the bits the store would OR in.
struct Chunks {
  std::unordered_map<uint64_t, std::string> chunks;
  void Set(const ViewProbe& p) {
    std::string& c = chunks[(uint64_t{p.table_id} << 32) | p.chunk];
    if (c.empty()) c.assign(kViewChunkBytes, '\0');
    for (int i = 0; i < p.nbits; i++) c[p.bits[i] >> 3] |= static_cast<char>(1u << (p.bits[i] & 7));
  }
  bool Test(const ViewedTables& t, uint64_t post, uint64_t user) const {
    ViewProbe p;
    if (!t.Locate(post, user, &p)) return false;
    auto it = chunks.find((uint64_t{p.table_id} << 32) | p.chunk);
    return it != chunks.end() && ViewedTables::TestBits(p, it->second);
  }
};

// Fills a table to its capacity and measures the false-positive rate on
// pairs never inserted: it must stay near the configured 1 %, and no
// inserted pair may ever read "not viewed".
TEST(ViewedTablesTest, FalsePositiveRateNearConfiguredAtCapacity) {
  ViewedOptions o;
  o.budget_bytes = 4 << 20;  // 1 MiB tables
  o.fp_rate = 0.01;
  ViewedTables t(o);
  Chunks c;
  std::vector<uint32_t> dropped;
  const uint64_t n = t.capacity() - 1;  // stay in the first table
  for (uint64_t i = 0; i < n; i++) {
    ViewProbe p;
    t.Insert(1 + i % 50000, 1000000 + i, &p, &dropped);
    ASSERT_GT(p.nbits, 0);
    c.Set(p);
  }
  ASSERT_EQ(t.tables().size(), 1u);
  for (uint64_t i = 0; i < n; i += 7) ASSERT_TRUE(c.Test(t, 1 + i % 50000, 1000000 + i)) << "false no at " << i;
  uint64_t fp = 0;
  const uint64_t trials = 400000;
  for (uint64_t i = 0; i < trials; i++) fp += c.Test(t, 1 + i % 50000, 900000000 + i);
  double rate = static_cast<double>(fp) / trials;
  std::printf("viewed filter: capacity %llu items per %llu-byte table, k=%d, measured false-positive rate %.4f%%\n",
              static_cast<unsigned long long>(t.capacity()), static_cast<unsigned long long>(t.table_bytes()),
              t.hashes(), rate * 100);
  EXPECT_LT(rate, 0.0125);
  EXPECT_GT(rate, 0.002) << "suspiciously low: is the filter sized as configured?";
}

TEST(ViewedTablesTest, TablesRollByPostIdAndTheOldestIsDropped) {
  ViewedOptions o;
  o.budget_bytes = 4 * kViewChunkBytes;  // four one-chunk tables
  ViewedTables t(o);
  Chunks c;
  std::vector<uint32_t> dropped;
  uint64_t post = 1;
  while (dropped.empty()) {
    ViewProbe p;
    t.Insert(post, 7, &p, &dropped);
    if (p.nbits) c.Set(p);
    post++;
  }
  EXPECT_EQ(dropped.front(), 0u);
  EXPECT_EQ(t.tables().size(), 4u);
  // Views of the oldest posts are forgotten; the newest are remembered.
  EXPECT_FALSE(c.Test(t, 1, 7));
  EXPECT_TRUE(c.Test(t, post - 1, 7));
  for (size_t i = 1; i < t.tables().size(); i++) EXPECT_EQ(t.tables()[i].lo, t.tables()[i - 1].hi);
  // Metadata survives encoding.
  ViewedTables back(o);
  ASSERT_TRUE(back.Decode(t.Encode()));
  EXPECT_EQ(back.tables().size(), t.tables().size());
  EXPECT_EQ(back.tables().back().lo, t.tables().back().lo);
}

}  // namespace
}  // namespace tally::store
