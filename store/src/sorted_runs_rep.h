// SortedRunsRepFactory: a RocksDB memtable representation for writers that
// commit sorted batches, as the applier does (every window's records, in
// key order, in one WriteBatch per partition).
//
// RocksDB's default memtable is a skip list. Inserting a window of a few
// thousand keys into a memtable that already holds a hundred thousand walks
// the list from the top for nearly every key (the keys of a window are far
// apart in the list), each step a cache miss: at a steady load that search
// was 40 % of `tally up`'s CPU, 2-3 us a record.
//
// This one keeps the memtable as a few sorted runs of entry pointers, the
// newest first. A key that sorts after the last one appended extends the
// open run (an append); any other starts a new run. When a run is sealed,
// runs of similar size are merged, as a binary counter carries, so a memtable
// of N entries has at most log2(N) + 1 runs and each entry is copied about
// log2(N / window) times, sequentially. Each slot of a run holds the first 16
// bytes of its user key beside the pointer, so comparisons mostly stay in
// the run's own array instead of following the pointer. When the memtable
// turns immutable, its runs are merged into one, so a flush reads one array.
// Reads (Get, iterators) see a snapshot of the runs and merge them on the
// fly; they may run on any thread while the one writer appends.
//
// Requirements: the column family's user comparator orders keys bytewise
// (RocksDB's default), and memtable writes are not concurrent
// (allow_concurrent_memtable_write = false; RocksDB checks it).
//
// Thread model: as any MemTableRep: one writer at a time (RocksDB's write
// thread), reads concurrent with it and with each other.
#pragma once

#include <rocksdb/memtablerep.h>

namespace tally::store {

class SortedRunsRepFactory : public rocksdb::MemTableRepFactory {
 public:
  using rocksdb::MemTableRepFactory::CreateMemTableRep;
  rocksdb::MemTableRep* CreateMemTableRep(const rocksdb::MemTableRep::KeyComparator& compare,
                                          rocksdb::Allocator* allocator,
                                          const rocksdb::SliceTransform* transform,
                                          rocksdb::Logger* logger) override;
  const char* Name() const override { return "TallySortedRunsRepFactory"; }
  bool IsInsertConcurrentlySupported() const override { return false; }
  bool CanHandleDuplicatedKey() const override { return false; }
};

}  // namespace tally::store
