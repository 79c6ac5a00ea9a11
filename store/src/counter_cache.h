// CounterCache: decoded counter records (post, user and unread counters,
// and the global red-dot table) of a writable store, kept in memory in front
// of RocksDB.
//
// A counter record is a stack of merge operands until compaction folds it,
// so a RocksDB read of a busy post walks the memtables and levels and merges
// what it finds; the HTTP tier asks for the same records over and over.
// The cache holds the merged values of records read recently, and the
// writer drops a record from it in Partition::Commit, after the WriteBatch
// is in RocksDB and before Commit returns, so a read that starts after a
// commit returned never sees the value from before it.
//
// A read that misses takes a lease (a token) before it reads RocksDB, and
// fills the entry only if the lease is still the entry's when it is done:
// an Invalidate in between (a commit of that record) drops the entry and
// with it the lease, so a value read before a commit can never be stored
// after it. (Leases as in "Scaling Memcache at Facebook", NSDI 2013.)
//
// Fixed memory, set-associative: buckets of four 64-byte entries, each
// bucket with its own spin lock (held for a few dozen instructions);
// replacement by a clock over the bucket. Nothing is allocated after
// construction; the memory is asked to be transparent huge pages.
//
// Thread model: safe for concurrent use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tally::store {

// The kind of the cache entry that sums up a user's notice-read, red-dot
// click and feed snapshot records for an unread view (state_store_read.cc);
// not a RocksDB record kind. A commit that writes one of those records drops
// the entry like a counter record's.
inline constexpr char kUnreadSummaryKind = 'U';

class CounterCache {
 public:
  static constexpr int kMaxFields = 6;

  // About `capacity_bytes` of entries (at least one bucket).
  explicit CounterCache(uint64_t capacity_bytes);
  ~CounterCache();
  CounterCache(const CounterCache&) = delete;
  CounterCache& operator=(const CounterCache&) = delete;

  // If (kind, id) is cached, copies its n (<= kMaxFields) values to v and
  // returns true. Otherwise returns false with *lease set: pass it to Fill
  // with the values read from RocksDB after this call.
  bool Lookup(char kind, uint64_t id, int64_t* v, int n, uint64_t* lease);
  // Stores v[0..n) for (kind, id) if `lease` is still held (no Invalidate
  // of the record, and no later lease of it, since Lookup granted it).
  void Fill(char kind, uint64_t id, const int64_t* v, int n, uint64_t lease);
  // Drops (kind, id) and any lease on it. Call after the record changed,
  // and after a BeginInvalidate() that follows the change: a commit calls
  // BeginInvalidate() once after its write, then Invalidate() per record.
  void BeginInvalidate();
  void Invalidate(char kind, uint64_t id);
  // Drops everything.
  void Clear();
  // Drops every record (and lease) whose id satisfies `drop` (a partition
  // that closed: its records must not be served, nor come back stale when
  // it opens again), leaving the rest. The red-dot table is not a record:
  // InvalidateRedDots drops it.
  void ClearIf(const std::function<bool(uint64_t id)>& drop);

  size_t entries() const;  // capacity, in records

  // The global red-dot table (channel -> dot time, every channel), read by
  // every unread request. The same protocol: LookupRedDots returns the
  // table if cached, else null with *lease set for FillRedDots;
  // InvalidateRedDots after a commit that changed a dot.
  using RedDots = std::vector<std::pair<std::string, int64_t>>;
  std::shared_ptr<const RedDots> LookupRedDots(uint64_t* lease);
  void FillRedDots(std::shared_ptr<const RedDots> dots, uint64_t lease);
  void InvalidateRedDots();

 private:
  struct Entry;
  struct Bucket;
  Bucket* BucketOf(char kind, uint64_t id) const;

  std::mutex red_dots_mu_;
  std::shared_ptr<const RedDots> red_dots_;  // null: not cached
  uint64_t red_dots_generation_ = 0;         // bumped by InvalidateRedDots

  void* memory_ = nullptr;  // mmap'd, mapped_bytes_ long
  size_t mapped_bytes_ = 0;
  Bucket* buckets_ = nullptr;
  size_t nbuckets_ = 0;
};

}  // namespace tally::store
