// ViewedTables: "has user U viewed post P?" as Bloom filters in tables by
// post-id range, after Weibo's Phantom. False positives are acceptable
// (about the configured rate), memory is not: each partition keeps a few
// fixed-size tables; the newest takes views of new posts until it holds its
// capacity, then it is closed at the highest post id it saw and a new table
// starts above it; when the budget is spent the oldest table (the oldest
// posts) is dropped, after which views of those posts read "not viewed".
// A member of a live table never reads "not viewed".
//
// Each table is a blocked Bloom filter: an item sets k bits inside one
// 512-bit block, so a lookup reads one 4 KiB chunk. Chunks are stored as
// RocksDB records and updated by merge (OR of bit positions), so views are
// blind writes. This class holds the table metadata of one partition and
// decides, deterministically from the order of inserts, where each view goes.
// Thread model: externally synchronized (the applier thread); the static
// probe helpers are pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tally::store {

struct ViewedOptions {
  uint64_t budget_bytes = 4ull << 20;  // per partition
  double fp_rate = 0.01;
};

struct ViewTable {
  uint32_t id = 0;
  uint64_t lo = 0;           // first post id covered
  uint64_t hi = UINT64_MAX;  // one past the last post id covered; UINT64_MAX while open
  uint64_t count = 0;        // items inserted
  uint64_t max_post = 0;     // highest post id inserted
};

// Where an item's bits are: a chunk of a table and bit indexes inside it.
struct ViewProbe {
  uint32_t table_id = 0;
  uint32_t chunk = 0;
  uint16_t bits[16];
  int nbits = 0;
};

inline constexpr uint32_t kViewChunkBytes = 4096;

class ViewedTables {
 public:
  explicit ViewedTables(ViewedOptions options = {});

  // Table size in bytes (a multiple of the chunk size) and the number of
  // items a table takes before it is closed, from the options.
  uint64_t table_bytes() const { return table_bytes_; }
  uint64_t capacity() const { return capacity_; }
  int hashes() const { return k_; }

  // Records a view of `post` by `user`. Fills *probe with the bits to set
  // (probe->nbits == 0 when the post is older than every live table), and
  // *dropped with the ids of tables dropped to stay within the budget (their
  // chunks must be deleted). Marks the metadata dirty.
  void Insert(uint64_t post, uint64_t user, ViewProbe* probe, std::vector<uint32_t>* dropped);

  // The probe for (post, user) against the live tables; false if no live
  // table covers `post`.
  bool Locate(uint64_t post, uint64_t user, ViewProbe* probe) const;

  const std::vector<ViewTable>& tables() const { return tables_; }

  std::string Encode() const;
  // False if `bytes` is not a metadata record.
  bool Decode(std::string_view bytes);

  // Tests the bits of `probe` in `chunk` (kViewChunkBytes bytes, or empty:
  // no bit set yet).
  static bool TestBits(const ViewProbe& probe, std::string_view chunk);

 private:
  void Probe(const ViewTable& t, uint64_t post, uint64_t user, ViewProbe* probe) const;

  ViewedOptions options_;
  uint64_t table_bytes_;
  uint64_t capacity_;
  int k_;
  uint32_t next_id_ = 0;
  std::vector<ViewTable> tables_;  // ascending lo; the last is open
};

}  // namespace tally::store
