// Post counter pages (keys.h): the encoding, reads of many posts of one
// page, and the conversion of a state of format 1 (a record a post).
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "keys.h"
#include "store/state_store.h"
#include "testing/temp_dir.h"

namespace tally::store {
namespace {

namespace fs = std::filesystem;
using Counts = std::array<int64_t, 4>;

PagedPost Post(uint64_t slot, Counts v) {
  PagedPost p;
  p.slot = slot;
  std::copy(v.begin(), v.end(), p.v);
  return p;
}

TEST(PostPagesTest, PageBitsGiveSixtyFourIdsOfASequenceToEachPartition) {
  EXPECT_EQ(PostPageBits(1), 6);
  EXPECT_EQ(PostPageBits(2), 7);
  EXPECT_EQ(PostPageBits(16), 10);
  EXPECT_EQ(PostPageBits(17), 11);
  EXPECT_EQ(PostPageBits(4096), 18);
  std::string a, b;
  EncodePostPageKey(1023, 10, &a);
  EncodePostPageKey(0, 10, &b);
  EXPECT_EQ(a, b);
  EncodePostPageKey(1024, 10, &b);
  EXPECT_LT(a, b);
  EXPECT_EQ(PostSlot(1024 + 5, 10), 5u);
}

TEST(PostPagesTest, APageFindsEachPostAndZerosForOthers) {
  std::vector<PagedPost> posts = {Post(0, {1, 2, 3, 4}), Post(7, {0, 0, 0, 300}),
                                  Post(1000, {5, 0, 1 << 20, 9})};
  std::string page;
  EncodePostPage(posts, &page);
  std::vector<PagedPost> back;
  ASSERT_TRUE(DecodePostPage(page, &back));
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[2].slot, 1000u);
  EXPECT_EQ(back[2].v[2], 1 << 20);
  int64_t v[4];
  ASSERT_TRUE(FindInPostPage(page, 7, v));
  EXPECT_EQ((Counts{v[0], v[1], v[2], v[3]}), (Counts{0, 0, 0, 300}));
  for (uint64_t absent : {1u, 8u, 999u, 1001u}) {
    v[0] = 99;
    ASSERT_TRUE(FindInPostPage(page, absent, v));
    EXPECT_EQ((Counts{v[0], v[1], v[2], v[3]}), (Counts{0, 0, 0, 0})) << absent;
  }
  // An empty page, and damage: a truncated one, trailing bytes, a slot
  // that does not move forward.
  std::string empty;
  EncodePostPage({}, &empty);
  ASSERT_TRUE(FindInPostPage(empty, 3, v));
  EXPECT_FALSE(DecodePostPage(page.substr(0, page.size() - 1), &back));
  EXPECT_FALSE(FindInPostPage(page.substr(0, page.size() - 1), 1000, v));
  EXPECT_FALSE(DecodePostPage(page + '\0', &back));
  std::string repeated;
  EncodePostPage({Post(4, {1, 1, 1, 1}), Post(4, {2, 2, 2, 2})}, &repeated);
  EXPECT_FALSE(DecodePostPage(repeated, &back));
}

TEST(PostPagesTest, OperandsRoundTripAndRejectAnotherVersion) {
  PagedPostOps ops[2];
  ops[0].slot = 3;
  ops[0].ops[1] = CounterOp::Add(-2);
  ops[1].slot = 900;
  ops[1].ops[0] = CounterOp::Reset();
  ops[1].ops[3] = CounterOp{false, 5, 7};
  std::string operand;
  EncodePostPageOps(ops, 2, &operand);
  std::vector<PagedPostOps> back;
  ASSERT_TRUE(DecodePostPageOps(operand, &back));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].ops[1].add, -2);
  EXPECT_EQ(back[1].slot, 900u);
  EXPECT_TRUE(back[1].ops[0].reset);
  EXPECT_EQ(back[1].ops[3].floor, 7);
  operand[0] = 1;  // a counter record's operand
  EXPECT_FALSE(DecodePostPageOps(operand, &back));
}

// Dense ids (many posts a page) and sparse ones (one a page), some posts
// merged twice in a batch, read in batches that ask a page for several
// posts and for posts it does not hold: from memtables, and compacted.
TEST(PostPagesTest, ReadsOfManyPostsOfAPageMatchTheirOps) {
  testing::TempDir temp("post-pages-test");
  StoreOptions o;
  o.dir = temp.path().string();
  o.partitions = 16;
  o.read_cache_bytes = 0;  // every read from RocksDB
  auto s = StateStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto store = std::move(s).value();
  std::mt19937_64 rng(7);
  std::map<uint64_t, Counts> model;
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; id <= 3000; id++) ids.push_back(id);
  for (uint64_t k = 1; k <= 200; k++) ids.push_back(k << 40);
  for (int round = 0; round < 20; round++) {
    std::vector<PartitionBatch> batches(16);
    for (int i = 0; i < 2000; i++) {
      const uint64_t id = ids[rng() % ids.size()];
      CounterOp ops[4];
      const int f = static_cast<int>(rng() % 4);
      ops[f] = rng() % 20 == 0 ? CounterOp::Reset()
                               : CounterOp::Add(static_cast<int64_t>(rng() % 5) - 1);
      batches[schemas::PartitionOf(id, 16)].MergePostCounters(id, ops);
      model[id][f] = ops[f].Apply(model[id][f]);
    }
    for (uint32_t p = 0; p < 16; p++) ASSERT_TRUE(store->partition(p)->Commit(&batches[p]).ok());
  }
  auto check = [&](const char* when) {
    std::vector<uint64_t> asked = ids;
    asked.push_back(3001);               // never counted, in a page that holds others
    asked.push_back(uint64_t{5} << 40);  // counted, asked twice
    asked.push_back(uint64_t{5} << 40);
    std::vector<PostCounts> out;
    ASSERT_TRUE(store->GetPostCounts(asked, &out).ok());
    for (size_t i = 0; i < asked.size(); i++) {
      auto it = model.find(asked[i]);
      const Counts want = it == model.end() ? Counts{} : it->second;
      ASSERT_EQ((Counts{out[i].like, out[i].repost, out[i].comment, out[i].view}), want)
          << "post " << asked[i] << ", " << when;
    }
  };
  check("in memtables");
  ASSERT_TRUE(store->CompactAll().ok());
  check("compacted");
}

// A state written by a tally of format 1 keeps a record a post; a writer
// converts each partition as it opens it, and a read-only store waits for
// that.
TEST(PostPagesTest, AWriterConvertsAStateOfFormatOne) {
  testing::TempDir temp("format-one-test");
  StoreOptions o;
  o.dir = temp.path().string();
  o.partitions = 2;
  {
    auto s = StateStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  // What format 1 wrote: 'p' records (some with merge operands on top) and
  // TALLY's format 1.
  std::map<uint64_t, Counts> model;
  for (uint32_t p = 0; p < 2; p++) {
    rocksdb::Options ro;
    rocksdb::DB* raw = nullptr;
    char name[32];
    std::snprintf(name, sizeof(name), "partition-%03u", p);
    ASSERT_TRUE(rocksdb::DB::Open(ro, (temp.path() / name).string(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    // Dense ids (many a page), then sparse ones: a page each, more than
    // the conversion writes in one batch.
    std::vector<uint64_t> ids;
    for (uint64_t id = 1; id <= 25000; id += 1 + id % 3) ids.push_back(id);
    for (uint64_t k = 200; k < 25000; k++) ids.push_back(k << 8);
    for (uint64_t id : ids) {
      if (schemas::PartitionOf(id, 2) != p) continue;
      Counts c = {static_cast<int64_t>(id % 1000), 0, static_cast<int64_t>(id % 7),
                  static_cast<int64_t>(id)};
      std::string key, value;
      EncodeKey(RecordKind::kPostCounters, id, &key);
      EncodeCounters(c.data(), 4, &value);
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, value).ok());
      model[id] = c;
    }
  }
  {
    std::ofstream f(temp.path() / "TALLY", std::ios::trunc);
    f << R"({"format": 1, "partitions": 2, "cluster": ""})"
      << "\n";
  }
  StoreOptions ro = o;
  ro.read_only = true;
  ro.partitions = 0;
  auto refused = StateStore::Open(ro);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("start `tally up` or `tally aggregate`"),
            std::string::npos)
      << refused.status().ToString();

  auto s = StateStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto store = std::move(s).value();
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : model) ids.push_back(id);
  std::vector<PostCounts> out;
  ASSERT_TRUE(store->GetPostCounts(ids, &out).ok());
  for (size_t i = 0; i < ids.size(); i++) {
    ASSERT_EQ((Counts{out[i].like, out[i].repost, out[i].comment, out[i].view}), model[ids[i]])
        << "post " << ids[i];
  }
  // Counted on after the conversion.
  PartitionBatch b;
  CounterOp like[4] = {CounterOp::Add(1)};
  b.MergePostCounters(ids[0], like);
  ASSERT_TRUE(store->partition(schemas::PartitionOf(ids[0], 2))->Commit(&b).ok());
  ASSERT_TRUE(store->GetPostCounts({ids.data(), 1}, &out).ok());
  EXPECT_EQ(out[0].like, model[ids[0]][0] + 1);
  store.reset();

  std::ifstream f(temp.path() / "TALLY");
  std::string meta((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(meta.find("\"format\": 2"), std::string::npos) << meta;
  auto reader = StateStore::Open(ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  // No record of format 1 is left.
  for (uint32_t p = 0; p < 2; p++) {
    rocksdb::DB* raw = nullptr;
    char name[32];
    std::snprintf(name, sizeof(name), "partition-%03u", p);
    rocksdb::Options opts;
    ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(opts, (temp.path() / name).string(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    it->Seek("p");
    EXPECT_TRUE(!it->Valid() || it->key()[0] != 'p') << "partition " << p;
  }
}

}  // namespace
}  // namespace tally::store
