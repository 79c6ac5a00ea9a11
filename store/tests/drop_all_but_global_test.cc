// PartitionBatch::DropAllButGlobal, read back from the partition's RocksDB
// itself: after it the partition holds what a global-only copy holds
// (keys.h: kGlobalEntity's notices and red dots, the event ids, the
// progress, the notice count and the mark) and nothing else, whatever
// kinds of records it held before.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/merge_operator.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "store/state_store.h"
#include "testing/temp_dir.h"

namespace tally::store {
namespace {

// Resolves merges to any value: the test reads keys only.
class AnyMerge : public rocksdb::MergeOperator {
 public:
  bool FullMergeV2(const MergeOperationInput&, MergeOperationOutput* out) const override {
    out->new_value.clear();
    return true;
  }
  const char* Name() const override { return "tally.counter"; }
};

TEST(DropAllButGlobalTest, LeavesOnlyTheGlobalEntityTheEventIdsAndTheProgress) {
  testing::TempDir temp("drop-global");
  StoreOptions o;
  o.dir = temp.path().string();
  o.partitions = 1;  // every entity in the partition of kGlobalEntity
  {
    auto s = StateStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::unique_ptr<StateStore> store = std::move(s).value();
    PartitionBatch b;
    // As many ops as the widest counter record has fields.
    static_assert(schemas::kUnreadCounterKinds >= schemas::kPostFieldCount &&
                  schemas::kUnreadCounterKinds >= schemas::kUserFieldCount);
    CounterOp ops[schemas::kUnreadCounterKinds];
    for (CounterOp& op : ops) op = CounterOp::Add(1);
    b.MergePostCounters(7, ops);
    b.MergeUserCounters(8, ops);
    b.MergeUnreadCounters(8, ops);
    b.PutLike(7, 8);
    b.PutFollow(8, 9);
    b.PutEventId(0xabcdef, 100, 42);
    b.PutNotice(3, "hello");
    b.SetNoticeRead(8, 3, 100);
    b.MaxRedDot("discover", 100);
    b.MaxUserRedDot(8, "discover", 90);
    const std::pair<uint64_t, uint64_t> followees[] = {{9, 1}};
    b.PutFeedSnapshot(8, 100, followees, 1);
    b.SetViewBits(1, 0, {3, 5});
    b.PutViewedTables(ViewedTables());
    Progress progress;
    progress.next_deltas_offset = 12;
    b.SetProgress(progress);
    ASSERT_TRUE(store->partition(0)->Commit(&b).ok());

    PartitionBatch drop;
    drop.DropAllButGlobal();
    drop.SetGlobalOnly(true);
    ASSERT_TRUE(store->partition(0)->Commit(&drop).ok());
    // What readers see at once, through the read cache.
    std::vector<PostCounts> posts;
    const uint64_t post = 7;
    ASSERT_TRUE(store->GetPostCounts(std::span<const uint64_t>(&post, 1), &posts).ok());
    EXPECT_EQ(posts[0].like, 0);
    EXPECT_TRUE(store->partition(0)->HasNotice(3));
    EXPECT_TRUE(*store->partition(0)->LoadGlobalOnly());
    EXPECT_EQ(store->partition(0)->LoadProgress()->next_deltas_offset, 12);
  }

  rocksdb::Options options;
  options.merge_operator = std::make_shared<AnyMerge>();
  rocksdb::DB* raw = nullptr;
  const std::string db_dir = (temp.path() / "partition-000").string();
  ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(options, db_dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  std::set<char> kinds;
  std::set<std::string> meta;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string key = it->key().ToString();
    if (key[0] == '\0') {
      meta.insert(key.substr(1));
    } else {
      kinds.insert(key[0]);
    }
  }
  ASSERT_TRUE(it->status().ok()) << it->status().ToString();
  EXPECT_EQ(kinds, (std::set<char>{'N', 'd', 'i'}));
  EXPECT_EQ(meta, (std::set<std::string>{"global-only", "notices", "progress"}));
}

}  // namespace
}  // namespace tally::store
