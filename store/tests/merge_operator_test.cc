// The merge operator through RocksDB itself: operands merged in memtables,
// across flushes and by compaction give the value of applying them in order.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "store/state_store.h"
#include "testing/temp_dir.h"

namespace tally::store {
namespace {

namespace fs = std::filesystem;

TEST(MergeOperatorTest, CountersMatchSequentialApplicationAcrossFlushesAndCompaction) {
  testing::TempDir temp("merge-test");
  const fs::path& dir = temp.path();
  StoreOptions o;
  o.dir = dir.string();
  o.partitions = 1;
  o.write_buffer_bytes = 64 << 10;  // small memtables: many flushes
  auto s = StateStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto store = std::move(s).value();
  std::mt19937_64 rng(99);
  std::map<uint64_t, std::array<int64_t, 4>> model;
  for (int round = 0; round < 400; round++) {
    PartitionBatch b;
    for (int i = 0; i < 50; i++) {
      uint64_t post = 1 + rng() % 200;
      CounterOp ops[4];
      int f = rng() % 4;
      int r = rng() % 10;
      ops[f] = r == 0 ? CounterOp::Reset() : CounterOp::Add(r < 4 ? -1 : static_cast<int64_t>(rng() % 3));
      b.MergePostCounters(post, ops);
      auto& m = model[post];
      m[f] = ops[f].Apply(m[f]);
    }
    ASSERT_TRUE(store->partition(0)->Commit(&b).ok());
    if (round == 200) {
      ASSERT_TRUE(store->CompactAll().ok());
    }
  }
  auto check = [&] {
    for (const auto& [post, m] : model) {
      std::vector<uint64_t> ids = {post};
      std::vector<PostCounts> out;
      ASSERT_TRUE(store->GetPostCounts(ids, &out).ok());
      ASSERT_EQ((std::array<int64_t, 4>{out[0].like, out[0].repost, out[0].comment, out[0].view}), m)
          << "post " << post;
    }
  };
  check();
  ASSERT_TRUE(store->CompactAll().ok());
  check();
  store.reset();
}

}  // namespace
}  // namespace tally::store
