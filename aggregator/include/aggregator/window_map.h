// WindowMap: the hash map an applier window coalesces into (key -> pending
// ops), reused from window to window.
//
// A window touches thousands of keys and is then cleared; std::unordered_map
// allocated and freed a node per key per window, which was ~5 % of ingest's
// CPU. Here the entries live in one vector in insertion order (so a commit
// walks them, or sorts them, without chasing pointers) and an open-addressing
// index of positions points into it. clear() is O(1): every index slot
// carries the generation it was written in, and clearing starts a new one.
// Memory grows to the largest window seen and is kept.
//
// Thread model: externally synchronized (confined to the applier thread).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "base/hash.h"

namespace tally::aggregator {

// Hashes of the window keys: a uint64_t entity id, or a pair of them (edges).
struct WindowKeyHash {
  // Consecutive ids spread over the whole index.
  static uint64_t Mix(uint64_t h) { return base::SplitMix64(h); }
  uint64_t operator()(uint64_t k) const { return Mix(k); }
  uint64_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
    return Mix(k.first ^ Mix(k.second + 0x9e3779b97f4a7c15ULL));
  }
};

template <typename K, typename V>
class WindowMap {
 public:
  using Entry = std::pair<K, V>;

  // The value of `k`, value-initialized (V{}) and appended if absent. The
  // reference is valid until the next insertion, SortByKey() or clear().
  V& operator[](const K& k) {
    if ((entries_.size() + 1) * 2 > slots_.size()) Grow();
    size_t i = Home(k);
    for (;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.gen != gen_) {
        s.gen = gen_;
        s.index = static_cast<uint32_t>(entries_.size());
        entries_.emplace_back(k, V{});
        return entries_.back().second;
      }
      if (entries_[s.index].first == k) return entries_[s.index].second;
    }
  }

  // The value of `k`, or null if absent. Valid as operator[]'s reference is.
  const V* find(const K& k) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = Home(k);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.gen != gen_) return nullptr;
      if (entries_[s.index].first == k) return &entries_[s.index].second;
    }
  }

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  // The entries, in insertion order (or key order after SortByKey()).
  typename std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  typename std::vector<Entry>::const_iterator end() const { return entries_.end(); }

  // Puts the entries in ascending key order; lookups keep working.
  void SortByKey() {
    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.first < b.first; });
    Reindex();
  }

  // Forgets every entry; keeps the memory.
  void clear() {
    entries_.clear();
    NextGeneration();
  }

 private:
  struct Slot {
    uint32_t gen;    // the entry is this map's only if gen == gen_
    uint32_t index;  // into entries_
  };

  size_t Home(const K& k) const { return static_cast<size_t>(WindowKeyHash()(k)) & mask_; }

  void NextGeneration() {
    if (++gen_ == 0) {  // wrapped: slots written 2^32 generations ago would look current
      std::memset(static_cast<void*>(slots_.data()), 0, slots_.size() * sizeof(Slot));
      gen_ = 1;
    }
  }

  void Grow() {
    slots_.assign(std::max<size_t>(64, slots_.size() * 2), Slot{0, 0});
    mask_ = slots_.size() - 1;
    gen_ = 1;
    Reindex();
  }

  // Rebuilds the index over entries_ as they are now ordered.
  void Reindex() {
    NextGeneration();
    for (uint32_t e = 0; e < entries_.size(); e++) {
      size_t i = Home(entries_[e].first);
      while (slots_[i].gen == gen_) i = (i + 1) & mask_;
      slots_[i] = Slot{gen_, e};
    }
  }

  std::vector<Slot> slots_;  // a power of two long, at most half full
  size_t mask_ = 0;
  uint32_t gen_ = 1;
  std::vector<Entry> entries_;
};

}  // namespace tally::aggregator
