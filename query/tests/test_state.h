// A small state for query/ tests, written the way the applier writes it
// (store::PartitionBatch, one commit per partition touched).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "schemas/delta.h"
#include "store/state_store.h"
#include "testing/temp_dir.h"

namespace tally::query::testing {

// The query tests name it testing::TempDir from inside tally::query.
using ::tally::testing::TempDir;

inline constexpr uint32_t kTestPartitions = 4;

inline store::StoreOptions TestStoreOptions(const std::string& dir) {
  store::StoreOptions o;
  o.dir = dir;
  o.partitions = kTestPartitions;
  o.block_cache_bytes = 8 << 20;
  return o;
}

// Opens the test store in `dir`, with the state of FillTestState() when
// `fill`. A store that cannot be opened leaves no test to run: the binary
// prints why and aborts.
void FillTestState(store::StateStore* s);
inline std::unique_ptr<store::StateStore> OpenTestStore(const std::string& dir, bool fill = true) {
  auto s = store::StateStore::Open(TestStoreOptions(dir));
  if (!s.ok()) {
    std::fprintf(stderr, "opening the test store in %s: %s\n", dir.c_str(),
                 s.status().ToString().c_str());
    std::abort();
  }
  std::unique_ptr<store::StateStore> store = std::move(s).value();
  if (fill) FillTestState(store.get());
  return store;
}

// Commits one batch to the partition owning `entity`.
template <typename Fn>
void CommitTo(store::StateStore* s, uint64_t entity, Fn&& fill) {
  store::PartitionBatch b;
  fill(&b);
  uint32_t p = schemas::PartitionOf(entity, s->partitions());
  base::Status st = s->partition(p)->Commit(&b);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// Post 7: like 3, repost 2, comment 1, view 10. Post 2^63-1: like 1.
// User 42: posts 5, followers 2, following 1; unread mention..follower = 1..6.
// User 42 likes post 7.
inline void FillTestState(store::StateStore* s) {
  using store::CounterOp;
  CommitTo(s, 7, [](store::PartitionBatch* b) {
    CounterOp ops[4] = {CounterOp::Add(3), CounterOp::Add(2), CounterOp::Add(1),
                        CounterOp::Add(10)};
    b->MergePostCounters(7, ops);
    b->PutLike(7, 42);
  });
  CommitTo(s, 9223372036854775807ULL, [](store::PartitionBatch* b) {
    CounterOp ops[4] = {CounterOp::Add(1), {}, {}, {}};
    b->MergePostCounters(9223372036854775807ULL, ops);
  });
  CommitTo(s, 42, [](store::PartitionBatch* b) {
    CounterOp user[3] = {CounterOp::Add(5), CounterOp::Add(2), CounterOp::Add(1)};
    b->MergeUserCounters(42, user);
    CounterOp unread[6] = {CounterOp::Add(1), CounterOp::Add(2), CounterOp::Add(3),
                           CounterOp::Add(4), CounterOp::Add(5), CounterOp::Add(6)};
    b->MergeUnreadCounters(42, unread);
  });
}

}  // namespace tally::query::testing
