#include "sorted_runs_rep.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <unordered_set>
#include <vector>

namespace tally::store {
namespace {

using rocksdb::KeyHandle;
using rocksdb::MemTableRep;
using rocksdb::Slice;

// A run's slot: the entry (RocksDB's length-prefixed internal key and value,
// in the memtable's arena), the first 16 bytes of its user key, zero padded,
// as two big-endian words, and beside the entry's address (which fits in 48
// bits on Linux) the user key's 17th byte and its length. Comparing the
// padded bytes as numbers orders user keys as comparing them bytewise does
// up to ties: if they differ first at position i, either both keys have a
// byte there and it decides, or the shorter key ended before i and is a
// prefix of the other. For user keys of up to 17 bytes (all of tally's
// counters and edges) the slot holds the whole key, so ties of length say
// which is the prefix, and equal keys are two versions of one record; only
// then, or for longer keys, does a comparison read the entry.
struct Slot {
  uint64_t hi;
  uint64_t lo;
  uint64_t tagged;  // bits 0-47 address, 48-55 user key byte 16, 56-63 its length (255: longer)
};

constexpr uint64_t kAddressMask = (uint64_t{1} << 48) - 1;
constexpr uint32_t kWholeKeyBytes = 17;

inline const char* EntryOf(const Slot& s) {
  return reinterpret_cast<const char*>(s.tagged & kAddressMask);
}
inline uint32_t KeyLengthOf(const Slot& s) { return static_cast<uint32_t>(s.tagged >> 56); }
inline uint32_t Byte16Of(const Slot& s) { return static_cast<uint32_t>(s.tagged >> 48) & 0xff; }

inline uint64_t LoadBigEndian(const char* p, size_t n) {  // n <= 8
  unsigned char buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(buf, p, n);
  uint64_t v;
  std::memcpy(&v, buf, sizeof(v));
  return __builtin_bswap64(v);
}

// The slot fields of a user key (the address bits left 0).
inline void DescribeUserKey(const char* key, size_t n, Slot* s) {
  s->hi = LoadBigEndian(key, std::min<size_t>(n, 8));
  s->lo = n > 8 ? LoadBigEndian(key + 8, std::min<size_t>(n - 8, 8)) : 0;
  const uint64_t byte16 = n > 16 ? static_cast<unsigned char>(key[16]) : 0;
  s->tagged = (uint64_t{std::min<size_t>(n, 255)} << 56) | (byte16 << 48);
}

// The user key order of two slots as far as the slots alone tell: <0 or >0
// when they settle it, 0 when the user keys are equal, kUnsettled when only
// the entries can tell (a key longer than 17 bytes, tied on what the slots
// hold).
constexpr int kUnsettled = 2;
inline int CompareUserKeys(const Slot& a, const Slot& b) {
  if (a.hi != b.hi) return a.hi < b.hi ? -1 : 1;
  if (a.lo != b.lo) return a.lo < b.lo ? -1 : 1;
  const uint32_t la = KeyLengthOf(a), lb = KeyLengthOf(b);
  if (la > kWholeKeyBytes || lb > kWholeKeyBytes) return kUnsettled;
  const uint32_t ba = Byte16Of(a), bb = Byte16Of(b);
  if (ba != bb) return ba < bb ? -1 : 1;
  if (la != lb) return la < lb ? -1 : 1;  // the shorter is a prefix of the other
  return 0;
}

// An entry starts with its internal key's length as a varint32; the
// internal key is the user key and an 8-byte (sequence, type) tag.
inline Slot SlotOf(const char* entry) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(entry);
  uint32_t len = 0;
  for (int shift = 0; shift <= 28; shift += 7) {
    uint32_t byte = *p++;
    len |= (byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  assert(len >= 8);
  Slot s;
  DescribeUserKey(reinterpret_cast<const char*>(p), len - 8, &s);
  const uint64_t address = reinterpret_cast<uintptr_t>(entry);
  // User-space addresses on Linux (x86-64, arm64) stay below 2^48 unless a
  // program asks mmap for higher ones; RocksDB's arena does not.
  if ((address & ~kAddressMask) != 0) std::abort();
  s.tagged |= address;
  return s;
}

// A sorted run of slots. Only the newest run grows: its writer stores the
// slot, then the size with release; readers load the size with acquire and
// read slots below it. A run never moves or shrinks while anyone holds it.
class Run {
 public:
  Run(size_t capacity, std::atomic<size_t>* usage)
      : slots_(new Slot[capacity]), capacity_(capacity), usage_(usage) {
    usage_->fetch_add(capacity_ * sizeof(Slot), std::memory_order_relaxed);
  }
  ~Run() { usage_->fetch_sub(capacity_ * sizeof(Slot), std::memory_order_relaxed); }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  size_t size() const { return size_.load(std::memory_order_acquire); }
  size_t capacity() const { return capacity_; }
  const Slot* slots() const { return slots_.get(); }
  Slot* mutable_slots() { return slots_.get(); }
  // Writer only.
  void Append(const Slot& s) {
    size_t n = size_.load(std::memory_order_relaxed);
    assert(n < capacity_);
    slots_[n] = s;
    size_.store(n + 1, std::memory_order_release);
  }
  void Publish(size_t n) { size_.store(n, std::memory_order_release); }

 private:
  std::unique_ptr<Slot[]> slots_;
  const size_t capacity_;
  std::atomic<size_t> size_{0};
  std::atomic<size_t>* usage_;  // the rep's; outlives every run
};

// What readers see: the runs, newest first. Immutable once published.
struct RunSet {
  std::vector<std::shared_ptr<Run>> runs;
};

// LookupKey is internal to RocksDB (db/dbformat.h), declared only in its
// public headers. Its first member is the memtable key (the internal key's
// length as a varint32, then the internal key), and has been since LevelDB;
// the model test reads through it on every point read.
inline const char* MemtableKeyOf(const rocksdb::LookupKey& k) {
  return *reinterpret_cast<const char* const*>(&k);
}

constexpr size_t kMinOpenRun = 1024;
constexpr size_t kMaxOpenRun = 64 * 1024;
// Runs of a memtable of N entries: at most log2(N) + 2 (see CarryMerges).
constexpr int kMaxRuns = 72;

class SortedRunsRep;

// RocksDB's Arena is not a public type, so an iterator RocksDB asks to
// place in its arena lives on the heap instead; RocksDB then runs only its
// destructor, and the memory is freed here, by the thread that destroyed
// it, the next time that thread destroys such an iterator (or exits): the
// destructor has certainly finished by then. At most one per thread waits.
struct Graveyard {
  void* dead = nullptr;
  void Bury(void* memory) {
    ::operator delete(dead);
    dead = memory;
  }
  ~Graveyard() { ::operator delete(dead); }
};
thread_local Graveyard graveyard;

class RunsIterator : public MemTableRep::Iterator {
 public:
  RunsIterator(SortedRunsRep* rep, std::shared_ptr<const RunSet> set, bool in_arena);
  ~RunsIterator() override;

  bool Valid() const override { return current_ >= 0; }
  const char* key() const override {
    assert(Valid());
    return EntryOf(Current());
  }
  void Next() override;
  void Prev() override;
  void Seek(const Slice& internal_key, const char* memtable_key) override;
  void SeekForPrev(const Slice& internal_key, const char* memtable_key) override;
  void SeekToFirst() override;
  void SeekToLast() override;

 private:
  struct Cursor {
    const Slot* slots;
    ptrdiff_t n;
    ptrdiff_t pos;  // -1 .. n; an entry when 0 <= pos < n
  };
  const Slot& Current() const { return cursors_[current_].slots[cursors_[current_].pos]; }
  void FindSmallest();
  void FindLargest();
  void PositionAll(const Slice& internal_key, bool at_or_after);

  SortedRunsRep* const rep_;
  const std::shared_ptr<const RunSet> set_;
  const bool in_arena_;
  Cursor cursors_[kMaxRuns];
  int ncursors_ = 0;
  int current_ = -1;
  bool forward_ = true;
};

class SortedRunsRep : public MemTableRep {
 public:
  SortedRunsRep(const KeyComparator& compare, rocksdb::Allocator* allocator)
      : MemTableRep(allocator), compare_(compare) {
    current_.store(std::make_shared<const RunSet>());
  }
  ~SortedRunsRep() override = default;

  void Insert(KeyHandle handle) override {
    const Slot s = SlotOf(static_cast<const char*>(handle));
    if (open_ != nullptr) {
      const size_t n = open_->size();
      if (n < open_->capacity() && Ascending(open_->slots()[n - 1], s)) {
        open_->Append(s);
        return;
      }
    }
    StartRun(s);
  }

  // RocksDB 7.8's default Get never frees the iterator it reads through
  // (every point read would leak one, and with it a snapshot of the runs).
  void Get(const rocksdb::LookupKey& k, void* callback_args,
           bool (*callback_func)(void* arg, const char* entry)) override {
    const char* memtable_key = MemtableKeyOf(k);
    RunsIterator it(this, Snapshot(), /*in_arena=*/false);
    for (it.Seek(rocksdb::GetLengthPrefixedSlice(memtable_key), memtable_key);
         it.Valid() && callback_func(callback_args, it.key()); it.Next()) {
    }
  }

  bool Contains(const char* key) const override {
    const Slot target = SlotOf(key);
    auto set = Snapshot();
    for (const auto& run : set->runs) {
      const Slot* slots = run->slots();
      const size_t n = run->size();
      const Slot* it =
          std::lower_bound(slots, slots + n, target,
                           [this](const Slot& a, const Slot& b) { return Compare(a, b) < 0; });
      if (it != slots + n && compare_(EntryOf(*it), key) == 0) return true;
    }
    return false;
  }

  // No more inserts: one run, so a flush (and every read until then) walks
  // one array.
  void MarkReadOnly() override {
    if (runs_.size() > 1) {
      // Rounds of pairwise merges of neighbours: O(N log R).
      while (runs_.size() > 1) {
        std::vector<std::shared_ptr<Run>> next;
        for (size_t i = 0; i + 1 < runs_.size(); i += 2)
          next.push_back(Merge(*runs_[i], *runs_[i + 1]));
        if (runs_.size() % 2 == 1) next.push_back(runs_.back());
        runs_ = std::move(next);
      }
      Publish();
    }
    open_ = nullptr;
  }

  size_t ApproximateMemoryUsage() override { return usage_.load(std::memory_order_relaxed); }

  void UniqueRandomSample(const uint64_t num_entries, const uint64_t target_sample_size,
                          std::unordered_set<const char*>* entries) override {
    (void)num_entries;
    auto set = Snapshot();
    size_t total = 0;
    for (const auto& run : set->runs) total += run->size();
    if (total == 0) return;
    std::mt19937_64 rng(total);
    const uint64_t want = std::min<uint64_t>(target_sample_size, total);
    for (uint64_t tries = 0; entries->size() < want && tries < 4 * want; tries++) {
      size_t k = rng() % total;
      for (const auto& run : set->runs) {
        size_t n = run->size();
        if (k < n) {
          entries->insert(EntryOf(run->slots()[k]));
          break;
        }
        k -= n;
      }
    }
  }

  Iterator* GetIterator(rocksdb::Arena* arena) override {
    return new RunsIterator(this, Snapshot(), arena != nullptr);
  }

  // Orders slots as the memtable's comparator orders their entries.
  int Compare(const Slot& a, const Slot& b) const {
    const int c = CompareUserKeys(a, b);
    if (c == -1 || c == 1) return c;
    return compare_(EntryOf(a), EntryOf(b));  // one key's versions, or unsettled
  }
  // Orders a slot against an internal key described by `key`.
  int Compare(const Slot& a, const Slot& key, const Slice& internal_key) const {
    const int c = CompareUserKeys(a, key);
    if (c == -1 || c == 1) return c;
    return compare_(EntryOf(a), internal_key);
  }
  // True if `next` sorts after `last`. A write's records get ever larger
  // sequence numbers, which sort first within a user key: a second version
  // of the same key never extends a run.
  bool Ascending(const Slot& last, const Slot& next) const {
    const int c = CompareUserKeys(last, next);
    if (c == kUnsettled) return compare_(EntryOf(last), EntryOf(next)) < 0;
    return c < 0;
  }

 private:
  std::shared_ptr<const RunSet> Snapshot() const {
    return current_.load(std::memory_order_acquire);
  }

  void Publish() {
    auto set = std::make_shared<RunSet>();
    set->runs = runs_;
    current_.store(std::move(set), std::memory_order_release);
  }

  void StartRun(const Slot& s) {
    size_t capacity = kMinOpenRun;
    if (open_ != nullptr) {
      // A window's records fill one run, so size the next open run after
      // the last one.
      capacity = std::clamp(2 * open_->size(), kMinOpenRun, kMaxOpenRun);
      CarryMerges();
    }
    open_ = std::make_shared<Run>(capacity, &usage_);
    open_->Append(s);
    runs_.insert(runs_.begin(), open_);
    assert(runs_.size() <= static_cast<size_t>(kMaxRuns));
    Publish();
  }

  // Merges the newest run into the next while it is at least half that
  // run's size, so every run is more than twice the size of the one newer
  // than it: at most log2(N) + 1 runs (plus the new open one), and an entry
  // is copied once per doubling of its run.
  void CarryMerges() {
    while (runs_.size() >= 2 && runs_[0]->size() * 2 >= runs_[1]->size()) {
      auto merged = Merge(*runs_[0], *runs_[1]);
      runs_.erase(runs_.begin(), runs_.begin() + 2);
      runs_.insert(runs_.begin(), std::move(merged));
    }
  }

  std::shared_ptr<Run> Merge(const Run& a, const Run& b) {
    const size_t na = a.size(), nb = b.size();
    auto out = std::make_shared<Run>(na + nb, &usage_);
    const Slot* pa = a.slots();
    const Slot* pb = b.slots();
    Slot* po = out->mutable_slots();
    size_t i = 0, j = 0, k = 0;
    // `a` is newer than `b`: every sequence number in it is larger, so of
    // one user key's versions, a's sort first.
    while (i < na && j < nb) {
      int c = CompareUserKeys(pa[i], pb[j]);
      if (c == kUnsettled) c = compare_(EntryOf(pa[i]), EntryOf(pb[j]));
      po[k++] = c <= 0 ? pa[i++] : pb[j++];
    }
    while (i < na) po[k++] = pa[i++];
    while (j < nb) po[k++] = pb[j++];
    out->Publish(k);
    return out;
  }

  const KeyComparator& compare_;
  std::atomic<size_t> usage_{0};  // bytes of live runs (slot arrays)
  std::atomic<std::shared_ptr<const RunSet>> current_;
  // Writer only: the runs, newest first, and the one appends go to.
  std::vector<std::shared_ptr<Run>> runs_;
  std::shared_ptr<Run> open_;
};

RunsIterator::RunsIterator(SortedRunsRep* rep, std::shared_ptr<const RunSet> set, bool in_arena)
    : rep_(rep), set_(std::move(set)), in_arena_(in_arena) {
  for (const auto& run : set_->runs) {
    const ptrdiff_t n = static_cast<ptrdiff_t>(run->size());
    if (n == 0) continue;
    cursors_[ncursors_++] = Cursor{run->slots(), n, n};
  }
}

RunsIterator::~RunsIterator() {
  if (in_arena_) graveyard.Bury(this);
}

void RunsIterator::FindSmallest() {
  current_ = -1;
  for (int i = 0; i < ncursors_; i++) {
    const Cursor& c = cursors_[i];
    if (c.pos < 0 || c.pos >= c.n) continue;
    if (current_ < 0 || rep_->Compare(c.slots[c.pos], Current()) < 0) current_ = i;
  }
}

void RunsIterator::FindLargest() {
  current_ = -1;
  for (int i = 0; i < ncursors_; i++) {
    const Cursor& c = cursors_[i];
    if (c.pos < 0 || c.pos >= c.n) continue;
    if (current_ < 0 || rep_->Compare(c.slots[c.pos], Current()) > 0) current_ = i;
  }
}

// Moving forward, every other cursor rests on its first entry after the
// current one; moving backward, on its last entry before it. Entries are
// distinct (an internal key carries its sequence number), so turning around
// is a step of one for each of them.
void RunsIterator::Next() {
  assert(Valid());
  if (!forward_) {
    for (int i = 0; i < ncursors_; i++) {
      if (i != current_) cursors_[i].pos++;
    }
    forward_ = true;
  }
  Cursor& c = cursors_[current_];
  c.pos++;
  // A run is in key order but its entries sit in the arena in arrival
  // order: a scan (a flush reads every entry) would miss the cache on each
  // one. Ask for one a few slots ahead.
  constexpr ptrdiff_t kPrefetchAhead = 8;
  if (c.pos + kPrefetchAhead < c.n) __builtin_prefetch(EntryOf(c.slots[c.pos + kPrefetchAhead]));
  FindSmallest();
}

void RunsIterator::Prev() {
  assert(Valid());
  if (forward_) {
    for (int i = 0; i < ncursors_; i++) {
      if (i != current_) cursors_[i].pos--;
    }
    forward_ = false;
  }
  cursors_[current_].pos--;
  FindLargest();
}

// Puts every cursor on its first entry >= internal_key (at_or_after), or on
// its last entry <= internal_key.
void RunsIterator::PositionAll(const Slice& internal_key, bool at_or_after) {
  assert(internal_key.size() >= 8);
  Slot key;
  DescribeUserKey(internal_key.data(), internal_key.size() - 8, &key);
  for (int i = 0; i < ncursors_; i++) {
    Cursor& c = cursors_[i];
    const Slot* it = std::partition_point(c.slots, c.slots + c.n, [&](const Slot& s) {
      const int cmp = rep_->Compare(s, key, internal_key);
      return at_or_after ? cmp < 0 : cmp <= 0;
    });
    c.pos = (it - c.slots) - (at_or_after ? 0 : 1);
  }
}

void RunsIterator::Seek(const Slice& internal_key, const char* /*memtable_key*/) {
  PositionAll(internal_key, /*at_or_after=*/true);
  forward_ = true;
  FindSmallest();
}

void RunsIterator::SeekForPrev(const Slice& internal_key, const char* /*memtable_key*/) {
  PositionAll(internal_key, /*at_or_after=*/false);
  forward_ = false;
  FindLargest();
}

void RunsIterator::SeekToFirst() {
  for (int i = 0; i < ncursors_; i++) cursors_[i].pos = 0;
  forward_ = true;
  FindSmallest();
}

void RunsIterator::SeekToLast() {
  for (int i = 0; i < ncursors_; i++) cursors_[i].pos = cursors_[i].n - 1;
  forward_ = false;
  FindLargest();
}

}  // namespace

rocksdb::MemTableRep* SortedRunsRepFactory::CreateMemTableRep(
    const rocksdb::MemTableRep::KeyComparator& compare, rocksdb::Allocator* allocator,
    const rocksdb::SliceTransform* /*transform*/, rocksdb::Logger* /*logger*/) {
  return new SortedRunsRep(compare, allocator);
}

}  // namespace tally::store
