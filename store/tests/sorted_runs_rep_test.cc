// SortedRunsRepFactory against RocksDB's own skip list: the same random
// writes go to two databases that differ only in their memtable, and every
// read (point reads at snapshots, merges, iterators walked both ways) must
// answer the same. Then a writer and concurrent readers, for what a model
// cannot show: readers never see a partial or torn view.
#include "sorted_runs_rep.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/merge_operator.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "testing/temp_dir.h"

namespace tally::store {
namespace {

namespace fs = std::filesystem;

// Concatenation: associative, and order-sensitive, so a merge that took its
// operands in the wrong order shows.
class ConcatOperator : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& /*key*/, const rocksdb::Slice* existing,
             const rocksdb::Slice& value, std::string* new_value,
             rocksdb::Logger* /*logger*/) const override {
    new_value->clear();
    if (existing != nullptr) {
      new_value->assign(existing->data(), existing->size());
      new_value->push_back(',');
    }
    new_value->append(value.data(), value.size());
    return true;
  }
  const char* Name() const override { return "ConcatOperator"; }
};

class SortedRunsRepTest : public ::testing::Test {
 protected:
  void TearDown() override {
    model_.reset();
    runs_.reset();
  }

  rocksdb::Options MakeOptions(bool sorted_runs) {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.merge_operator = std::make_shared<ConcatOperator>();
    o.write_buffer_size = 64 << 10;  // many memtable switches and flushes
    o.max_write_buffer_number = 4;
    o.memtable_whole_key_filtering = true;
    o.memtable_prefix_bloom_size_ratio = 0.05;
    if (sorted_runs) {
      o.memtable_factory = std::make_shared<SortedRunsRepFactory>();
      o.allow_concurrent_memtable_write = false;
    }
    return o;
  }

  void Open() {
    model_.reset();
    runs_.reset();
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(MakeOptions(false), (dir_ / "skiplist").string(), &db).ok());
    model_.reset(db);
    ASSERT_TRUE(rocksdb::DB::Open(MakeOptions(true), (dir_ / "runs").string(), &db).ok());
    runs_.reset(db);
  }

  testing::TempDir temp_{"sorted-runs"};
  const fs::path& dir_ = temp_.path();
  std::unique_ptr<rocksdb::DB> model_;  // RocksDB's skip list
  std::unique_ptr<rocksdb::DB> runs_;   // the one under test
};

// Keys of 0 to 24 bytes that share long prefixes (so slots tie on their
// 16-byte prefix and the comparator must settle them), and tally-shaped ones
// (a kind byte and big-endian ids).
std::string RandomKey(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: {
      std::string k(rng() % 25, 'k');
      for (auto& c : k) c = static_cast<char>('a' + rng() % 3);
      return k;
    }
    case 1: {
      std::string k = "prefix-shared-by-many-";  // 22 bytes
      k.push_back(static_cast<char>(rng() % 4));
      if (rng() % 2) k.push_back(static_cast<char>(rng() % 256));
      return k;
    }
    default: {
      std::string k(rng() % 2 ? 9 : 17, '\0');
      k[0] = static_cast<char>('p' + rng() % 3);
      uint64_t id = rng() % 600;
      for (int i = 0; i < 8; i++) k[8 - i] = static_cast<char>((id >> (8 * i)) & 0xff);
      if (k.size() == 17) {
        uint64_t member = rng() % 300;
        for (int i = 0; i < 8; i++) k[16 - i] = static_cast<char>((member >> (8 * i)) & 0xff);
      }
      return k;
    }
  }
}

void ExpectSameGet(rocksdb::DB* a, rocksdb::DB* b, const rocksdb::ReadOptions& ro,
                   const std::string& key, uint64_t seed) {
  std::string va, vb;
  rocksdb::Status sa = a->Get(ro, key, &va);
  rocksdb::Status sb = b->Get(ro, key, &vb);
  ASSERT_EQ(sa.code(), sb.code()) << "seed " << seed << " key "
                                  << rocksdb::Slice(key).ToString(true);
  if (sa.ok()) {
    ASSERT_EQ(va, vb) << "seed " << seed << " key " << rocksdb::Slice(key).ToString(true);
  }
}

// Walks both iterators with the same random moves, both ways.
void ExpectSameWalk(rocksdb::Iterator* a, rocksdb::Iterator* b, std::mt19937_64& rng,
                    uint64_t seed) {
  for (int step = 0; step < 60; step++) {
    int move = static_cast<int>(rng() % 8);
    std::string target = RandomKey(rng);
    switch (move) {
      case 0:
        a->SeekToFirst();
        b->SeekToFirst();
        break;
      case 1:
        a->SeekToLast();
        b->SeekToLast();
        break;
      case 2:
        a->Seek(target);
        b->Seek(target);
        break;
      case 3:
        a->SeekForPrev(target);
        b->SeekForPrev(target);
        break;
      case 4:
      case 5:
        if (a->Valid()) a->Next();
        if (b->Valid()) b->Next();
        break;
      default:
        if (a->Valid()) a->Prev();
        if (b->Valid()) b->Prev();
        break;
    }
    ASSERT_EQ(a->Valid(), b->Valid()) << "seed " << seed << " step " << step << " move " << move;
    if (!a->Valid()) continue;
    ASSERT_EQ(a->key().ToString(), b->key().ToString()) << "seed " << seed << " step " << step;
    ASSERT_EQ(a->value().ToString(), b->value().ToString()) << "seed " << seed << " step " << step;
  }
  ASSERT_TRUE(a->status().ok());
  ASSERT_TRUE(b->status().ok());
}

TEST_F(SortedRunsRepTest, AnswersAsRocksDBsSkipListDoesOverRandomWrites) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  Open();
  std::vector<const rocksdb::Snapshot*> snaps_model, snaps_runs;
  uint64_t value_no = 0;
  for (int round = 0; round < 400; round++) {
    // A batch: sorted like the applier's windows most of the time, in any
    // order sometimes; puts, merges (operands pile up across runs), deletes.
    const int n = 1 + static_cast<int>(rng() % 200);
    std::vector<std::string> keys;
    for (int i = 0; i < n; i++) keys.push_back(RandomKey(rng));
    if (rng() % 4 != 0) std::sort(keys.begin(), keys.end());
    rocksdb::WriteBatch wb;
    for (const auto& k : keys) {
      std::string v = std::to_string(++value_no);
      switch (rng() % 10) {
        case 0:
          wb.Delete(k);
          break;
        case 1:
        case 2:
          wb.Put(k, v);
          break;
        default:
          wb.Merge(k, v);
          break;
      }
    }
    ASSERT_TRUE(model_->Write(rocksdb::WriteOptions(), &wb).ok());
    ASSERT_TRUE(runs_->Write(rocksdb::WriteOptions(), &wb).ok());

    if (rng() % 10 == 0 && snaps_model.size() < 8) {
      snaps_model.push_back(model_->GetSnapshot());
      snaps_runs.push_back(runs_->GetSnapshot());
    }
    // Point reads, now and at an older snapshot.
    for (int i = 0; i < 20; i++) {
      ASSERT_NO_FATAL_FAILURE(
          ExpectSameGet(model_.get(), runs_.get(), rocksdb::ReadOptions(), RandomKey(rng), seed));
    }
    if (!snaps_model.empty()) {
      size_t s = rng() % snaps_model.size();
      rocksdb::ReadOptions ra, rb;
      ra.snapshot = snaps_model[s];
      rb.snapshot = snaps_runs[s];
      for (int i = 0; i < 10; i++) {
        std::string k = RandomKey(rng);
        std::string va, vb;
        ASSERT_EQ(model_->Get(ra, k, &va).code(), runs_->Get(rb, k, &vb).code()) << "seed " << seed;
        ASSERT_EQ(va, vb) << "seed " << seed;
      }
      if (rng() % 3 == 0) {
        std::unique_ptr<rocksdb::Iterator> a(model_->NewIterator(ra)), b(runs_->NewIterator(rb));
        ASSERT_NO_FATAL_FAILURE(ExpectSameWalk(a.get(), b.get(), rng, seed));
      }
    }
    {
      std::unique_ptr<rocksdb::Iterator> a(model_->NewIterator(rocksdb::ReadOptions()));
      std::unique_ptr<rocksdb::Iterator> b(runs_->NewIterator(rocksdb::ReadOptions()));
      ASSERT_NO_FATAL_FAILURE(ExpectSameWalk(a.get(), b.get(), rng, seed));
    }
    if (rng() % 50 == 0) {
      // Flushes read the immutable memtable through its iterator.
      ASSERT_TRUE(model_->Flush(rocksdb::FlushOptions()).ok());
      ASSERT_TRUE(runs_->Flush(rocksdb::FlushOptions()).ok());
    }
    if (rng() % 100 == 0) {
      // Reopening replays the WAL through Insert.
      for (size_t s = 0; s < snaps_model.size(); s++) {
        model_->ReleaseSnapshot(snaps_model[s]);
        runs_->ReleaseSnapshot(snaps_runs[s]);
      }
      snaps_model.clear();
      snaps_runs.clear();
      Open();
    }
  }
  // A full scan, in order, of everything.
  std::unique_ptr<rocksdb::Iterator> a(model_->NewIterator(rocksdb::ReadOptions()));
  std::unique_ptr<rocksdb::Iterator> b(runs_->NewIterator(rocksdb::ReadOptions()));
  size_t count = 0;
  for (a->SeekToFirst(), b->SeekToFirst(); a->Valid(); a->Next(), b->Next(), count++) {
    ASSERT_TRUE(b->Valid()) << "seed " << seed;
    ASSERT_EQ(a->key().ToString(), b->key().ToString()) << "seed " << seed;
    ASSERT_EQ(a->value().ToString(), b->value().ToString()) << "seed " << seed;
  }
  EXPECT_FALSE(b->Valid()) << "seed " << seed;
  EXPECT_GT(count, 100u);
  for (size_t s = 0; s < snaps_model.size(); s++) {
    model_->ReleaseSnapshot(snaps_model[s]);
    runs_->ReleaseSnapshot(snaps_runs[s]);
  }
}

// One writer commits sorted batches that bump every key of a window to the
// window's number; readers on other threads must see, for each key, a value
// that never goes back, and scans whose keys are strictly increasing and
// agree within the scan (one snapshot).
TEST_F(SortedRunsRepTest, ConcurrentReadersSeeWholeWindowsInOrder) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(MakeOptions(true), (dir_ / "runs").string(), &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  constexpr int kKeys = 2000;
  auto key_of = [](int i) {
    std::string k(9, 'p');
    for (int b = 0; b < 8; b++) k[8 - b] = static_cast<char>((uint64_t(i) >> (8 * b)) & 0xff);
    return k;
  };
  std::atomic<bool> stop{false};
  std::atomic<int> violations{0};
  std::atomic<int64_t> reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; r++) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r);
      std::vector<int64_t> last(kKeys, 0);
      while (!stop.load()) {
        if (rng() % 8 == 0) {
          // A scan at one snapshot: every key written by a window is there
          // with that window's value or a later one, in order.
          std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
          std::string prev;
          int64_t max_seen = 0;
          for (it->SeekToFirst(); it->Valid(); it->Next()) {
            std::string k = it->key().ToString();
            if (!prev.empty() && !(prev < k)) violations++;
            prev = k;
            int64_t v = std::stoll(it->value().ToString());
            max_seen = std::max(max_seen, v);
          }
          for (it->SeekToLast(); it->Valid(); it->Prev()) {
            if (std::stoll(it->value().ToString()) > max_seen) violations++;  // same snapshot
          }
        } else {
          int i = static_cast<int>(rng() % kKeys);
          std::string v;
          rocksdb::Status s = db->Get(rocksdb::ReadOptions(), key_of(i), &v);
          if (s.ok()) {
            int64_t n = std::stoll(v);
            if (n < last[i]) violations++;
            last[i] = n;
          } else if (!s.IsNotFound() || last[i] != 0) {
            violations++;
          }
        }
        reads++;
      }
    });
  }
  std::mt19937_64 rng(42);
  for (int window = 1; window <= 3000; window++) {
    std::vector<int> ids;
    for (int i = 0; i < 300; i++) ids.push_back(static_cast<int>(rng() % kKeys));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    rocksdb::WriteBatch wb;
    for (int i : ids) wb.Put(key_of(i), std::to_string(window));
    ASSERT_TRUE(db->Write(rocksdb::WriteOptions(), &wb).ok());
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(reads.load(), 1000);
}

}  // namespace
}  // namespace tally::store
