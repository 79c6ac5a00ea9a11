#include "counter_cache.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

namespace tally::store {

namespace {
enum : uint8_t { kEmpty = 0, kPending = 1, kValid = 2 };
constexpr int kWays = 4;
}  // namespace

struct CounterCache::Entry {
  uint64_t id;
  uint8_t kind;
  uint8_t state;
  uint8_t referenced;  // clock bit
  uint8_t unused[5];
  // kValid: the values. kPending: values[0] holds the lease.
  int64_t values[kMaxFields];
};

struct CounterCache::Bucket {
  std::atomic<uint32_t> lock;
  uint32_t hand;        // clock hand
  uint64_t next_lease;  // leases of this bucket; 0 is never granted
  // Set (under the lock) when a way is first taken, never cleared: lets
  // Invalidate pass over a bucket no reader has used without writing to it.
  std::atomic<uint8_t> used;
  uint8_t pad[47];
  Entry ways[kWays];

  void Lock() {
    for (int spins = 0; lock.exchange(1, std::memory_order_acquire) != 0;) {
      while (lock.load(std::memory_order_relaxed) != 0) {
        // The holder may have been preempted (the machine may have fewer
        // cores than threads): spin briefly, then give the core away.
        if (++spins < 64) {
          _mm_pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void Unlock() { lock.store(0, std::memory_order_release); }

  Entry* Find(char kind, uint64_t id) {
    for (Entry& e : ways) {
      if (e.state != kEmpty && e.id == id && e.kind == static_cast<uint8_t>(kind)) return &e;
    }
    return nullptr;
  }
  // An empty way, else the first unreferenced one from the hand (clearing
  // reference bits on the way).
  Entry* Victim() {
    for (Entry& e : ways) {
      if (e.state == kEmpty) return &e;
    }
    for (;;) {
      Entry& e = ways[hand];
      hand = (hand + 1) % kWays;
      if (!e.referenced) return &e;
      e.referenced = 0;
    }
  }
};
CounterCache::CounterCache(uint64_t capacity_bytes) {
  static_assert(sizeof(Entry) == 64);
  static_assert(sizeof(Bucket) == 64 + kWays * 64);
  nbuckets_ = std::max<uint64_t>(1, capacity_bytes / sizeof(Bucket));
  // Anonymous memory is zero, and all-zero is a valid empty bucket
  // (unlocked, every way kEmpty). Buckets are hit at random, so with 4 KiB
  // pages nearly every early access faults a page in and later ones miss
  // the TLB: ask for transparent huge pages (2 MiB-aligned), where the
  // kernel allows them (`madvise` or `always` mode); otherwise this is plain
  // memory. Measured on ingest, where commits drop records from all over
  // the cache: 16k page faults for the default 64 MiB become 32.
  constexpr size_t kHuge = size_t{2} << 20;
  mapped_bytes_ = nbuckets_ * sizeof(Bucket) + kHuge;
  memory_ =
      ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory_ == MAP_FAILED) throw std::bad_alloc();
  uintptr_t p = reinterpret_cast<uintptr_t>(memory_);
  p = (p + kHuge - 1) & ~uintptr_t{kHuge - 1};
  buckets_ = reinterpret_cast<Bucket*>(p);
  // Advice only: a kernel without THP leaves the region as it is.
  (void)::madvise(buckets_, nbuckets_ * sizeof(Bucket), MADV_HUGEPAGE);
}

CounterCache::~CounterCache() { ::munmap(memory_, mapped_bytes_); }

size_t CounterCache::entries() const { return nbuckets_ * kWays; }

CounterCache::Bucket* CounterCache::BucketOf(char kind, uint64_t id) const {
  // A 64-bit mix (splitmix64's finalizer), then Lemire's range reduction.
  uint64_t h = id ^ (static_cast<uint64_t>(static_cast<uint8_t>(kind)) << 56);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return &buckets_[static_cast<size_t>((static_cast<unsigned __int128>(h) * nbuckets_) >> 64)];
}

bool CounterCache::Lookup(char kind, uint64_t id, int64_t* v, int n, uint64_t* lease) {
  Bucket* b = BucketOf(kind, id);
  b->Lock();
  Entry* e = b->Find(kind, id);
  if (e != nullptr && e->state == kValid) {
    std::memcpy(v, e->values, sizeof(int64_t) * static_cast<size_t>(n));
    e->referenced = 1;
    b->Unlock();
    return true;
  }
  // Missing, or another reader's lease: this reader takes it over (the
  // other one's fill then does nothing), so a reader that never fills
  // (its read failed) does not keep the record out of the cache.
  if (e == nullptr) {
    e = b->Victim();
    e->id = id;
    e->kind = static_cast<uint8_t>(kind);
    e->referenced = 0;
    b->used.store(1, std::memory_order_relaxed);
  }
  e->state = kPending;
  *lease = ++b->next_lease;
  e->values[0] = static_cast<int64_t>(*lease);
  b->Unlock();
  // Pairs with the fence in BeginInvalidate: the caller reads RocksDB next,
  // and either that read sees a commit or the commit's Invalidate sees
  // `used` (and then the lease, under the lock). Without the fence the
  // store of `used` could still sit in this core's store buffer while the
  // read of RocksDB's sequence goes ahead (the store-load reordering x86
  // allows), and both sides would miss each other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return false;
}

void CounterCache::Fill(char kind, uint64_t id, const int64_t* v, int n, uint64_t lease) {
  Bucket* b = BucketOf(kind, id);
  b->Lock();
  Entry* e = b->Find(kind, id);
  if (e != nullptr && e->state == kPending && e->values[0] == static_cast<int64_t>(lease)) {
    std::memcpy(e->values, v, sizeof(int64_t) * static_cast<size_t>(n));
    std::fill(e->values + n, e->values + kMaxFields, 0);
    e->state = kValid;
    e->referenced = 1;
  }
  b->Unlock();
}

void CounterCache::BeginInvalidate() { std::atomic_thread_fence(std::memory_order_seq_cst); }

void CounterCache::Invalidate(char kind, uint64_t id) {
  Bucket* b = BucketOf(kind, id);
  // A bucket no reader ever used holds nothing to drop. Reading it instead
  // of locking it also keeps its page unwritten: a commit touches records
  // all over the cache, and on ingest the first write to each huge page
  // (the kernel zeroing 2 MiB) was 6 % of tally's CPU.
  if (b->used.load(std::memory_order_relaxed) == 0) return;
  b->Lock();
  if (Entry* e = b->Find(kind, id)) e->state = kEmpty;
  b->Unlock();
}

std::shared_ptr<const CounterCache::RedDots> CounterCache::LookupRedDots(uint64_t* lease) {
  std::lock_guard<std::mutex> l(red_dots_mu_);
  *lease = red_dots_generation_;
  return red_dots_;
}

void CounterCache::FillRedDots(std::shared_ptr<const RedDots> dots, uint64_t lease) {
  std::lock_guard<std::mutex> l(red_dots_mu_);
  if (lease == red_dots_generation_) red_dots_ = std::move(dots);
}

void CounterCache::InvalidateRedDots() {
  std::lock_guard<std::mutex> l(red_dots_mu_);
  red_dots_generation_++;
  red_dots_.reset();
}

void CounterCache::Clear() {
  InvalidateRedDots();
  for (size_t i = 0; i < nbuckets_; i++) {
    Bucket* b = &buckets_[i];
    b->Lock();
    for (Entry& e : b->ways) e.state = kEmpty;
    b->Unlock();
  }
}

void CounterCache::ClearIf(const std::function<bool(uint64_t id)>& drop) {
  for (size_t i = 0; i < nbuckets_; i++) {
    Bucket* b = &buckets_[i];
    if (b->used.load(std::memory_order_relaxed) == 0) continue;  // never held anything
    b->Lock();
    for (Entry& e : b->ways) {
      if (e.state != kEmpty && drop(e.id)) e.state = kEmpty;
    }
    b->Unlock();
  }
}

}  // namespace tally::store
