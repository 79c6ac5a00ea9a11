// HotKeys: the heaviest keys of the last minute, in bounded memory.
//
// A writer adds (key, weight) pairs; a reader asks for the top N keys by
// total weight over the last `window_s` seconds. tally feeds it the post
// increments each applier window applied (one pair per post per window, never
// per event), and the status page shows the hottest posts: hot keys are where
// a counter service breaks first.
//
// Each second is summarized by a space-saving sketch (Metwally, Agrawal and El
// Abbadi, 2005) of `capacity` keys: a key already held gains the weight; a new
// key takes the slot of the lightest one and inherits its weight (its
// over-estimate). Any key heavier than total/capacity within a second is
// held, and a held key's count is at most its true weight plus the evicted
// weight it inherited. When a second ends, its sketch is copied into a ring of
// `window_s` summaries; Top() sums them. Memory is fixed at construction:
// (window_s + 1) x capacity x ~24 bytes; Add() never allocates.
//
// Thread model: safe for concurrent use (one mutex; a writer takes it once
// per batch through Lock(), a reader once per Top()).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace tally::base {

struct HotKey {
  uint64_t key = 0;
  uint64_t weight = 0;  // summed over the window; an upper bound (see above)
};

class HotKeys {
 public:
  // `capacity` keys per second (rounded up to a power of two, at least 8),
  // summaries kept for `window_s` seconds (at least 1).
  explicit HotKeys(size_t capacity = 256, int window_s = 60);
  HotKeys(const HotKeys&) = delete;
  HotKeys& operator=(const HotKeys&) = delete;

  // A writer's hold on the sketch: Add() through it, then let it go. Holds
  // the mutex for its lifetime; keep it to one batch (a window's keys).
  class Locked {
   public:
    // Adds `weight` (> 0; 0 is ignored) to `key`'s count in the current
    // second. No allocation.
    void Add(uint64_t key, uint64_t weight);

   private:
    friend class HotKeys;
    Locked(HotKeys* h, int64_t second) : h_(h), lock_(h->mu_) { h->AdvanceTo(second); }
    HotKeys* h_;
    std::lock_guard<std::mutex> lock_;
  };

  // Takes the mutex and moves the sketch to the second of `now_ms` (a
  // steady clock's milliseconds), closing the seconds that ended.
  Locked Lock(int64_t now_ms);

  // The `n` heaviest keys of the last window_s seconds before `now_ms`
  // (current second included), heaviest first, ties by key. Allocates;
  // for readers (an HTTP request), not for the hot path.
  std::vector<HotKey> Top(size_t n, int64_t now_ms);

  int window_s() const { return window_s_; }

 private:
  struct Slot {
    uint64_t key = 0;
    uint64_t weight = 0;
  };
  // The current second's sketch: a min-heap of slots by weight, and an
  // open-addressing index key -> heap position + 1 (0: empty).
  void AddLocked(uint64_t key, uint64_t weight);
  void SiftDown(size_t i);
  void SwapHeap(size_t a, size_t b);
  size_t IndexOf(uint64_t key) const;  // index_ slot holding key, or the empty one it would take
  void EraseIndex(size_t slot);
  void AdvanceTo(int64_t second);  // closes the seconds before `second`
  void CloseSecond();              // copies the sketch into the ring, empties it

  std::mutex mu_;
  size_t capacity_;
  std::vector<Slot> heap_;       // size() <= capacity_
  std::vector<uint32_t> index_;  // 2 x capacity_ entries
  size_t index_mask_;
  int window_s_;
  int64_t second_ = INT64_MIN;  // the second heap_ sums
  // Per second: its summary (heaviest first is not needed: Top() sums) and
  // which second it is (INT64_MIN: none).
  std::vector<std::vector<Slot>> ring_;
  std::vector<int64_t> ring_second_;
};

}  // namespace tally::base
