// The merge operator through RocksDB itself: operands merged in memtables,
// across flushes and by compaction give the value of applying them in order.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/table_properties.h>

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

// CompactAll leaves every partition as compaction output in its last level:
// merge operands folded, no table file that was there before the call. Here
// each reopen turns the WAL into an L0 file of posts in an id range of its
// own, and CompactAll's flush makes the fourth, which lets RocksDB schedule
// an automatic compaction that may move a file overlapping no other to the
// last level as it is (a trivial move) while the manual compaction starts.
TEST(MergeOperatorTest, CompactAllFoldsEveryOperandEvenWhenFlushesDoNotOverlap) {
  for (int round = 0; round < 3; round++) {
    testing::TempDir temp("compact-all-test");
    StoreOptions o;
    o.dir = temp.path().string();
    o.partitions = 1;
    uint64_t id = 1;
    for (int file = 0; file < 4; file++) {
      auto s = StateStore::Open(o);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      auto store = std::move(s).value();
      PartitionBatch b;
      for (int i = 0; i < 2000; i++, id++) {
        CounterOp ops[4] = {CounterOp::Add(1), CounterOp::Add(2), CounterOp::Add(3),
                            CounterOp::Add(4)};
        b.MergePostCounters(id, ops);
      }
      ASSERT_TRUE(store->partition(0)->Commit(&b).ok());
      if (file == 3) {
        ASSERT_TRUE(store->CompactAll().ok());
      }
    }
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(),
                                             (temp.path() / "partition-000").string(), &raw)
                    .ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::ColumnFamilyMetaData meta;
    db->GetColumnFamilyMetaData(&meta);
    for (const auto& level : meta.levels) {
      if (level.level != meta.levels.back().level) {
        EXPECT_TRUE(level.files.empty()) << "round " << round << ": files in level " << level.level;
      }
    }
    rocksdb::TablePropertiesCollection props;
    ASSERT_TRUE(db->GetPropertiesOfAllTables(&props).ok());
    for (const auto& [file, p] : props) {
      EXPECT_EQ(p->num_merge_operands, 0u) << "round " << round << ": " << file;
    }
  }
}

}  // namespace
}  // namespace tally::store
