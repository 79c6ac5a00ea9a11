#include "base/hot_keys.h"

#include <algorithm>
#include <climits>
#include <unordered_map>
#include <utility>

#include "base/hash.h"

namespace tally::base {

namespace {

size_t RoundUpPow2(size_t n) {
  size_t p = 8;
  while (p < n) p <<= 1;
  return p;
}

int64_t SecondOf(int64_t ms) { return ms >= 0 ? ms / 1000 : (ms - 999) / 1000; }

}  // namespace

HotKeys::HotKeys(size_t capacity, int window_s)
    : capacity_(RoundUpPow2(capacity)),
      index_(2 * capacity_, 0),
      index_mask_(2 * capacity_ - 1),
      window_s_(std::max(window_s, 1)),
      ring_(static_cast<size_t>(window_s_)),
      ring_second_(static_cast<size_t>(window_s_), INT64_MIN) {
  heap_.reserve(capacity_);
  for (auto& r : ring_) r.reserve(capacity_);
}

HotKeys::Locked HotKeys::Lock(int64_t now_ms) { return Locked(this, SecondOf(now_ms)); }

void HotKeys::Locked::Add(uint64_t key, uint64_t weight) {
  if (weight > 0) h_->AddLocked(key, weight);
}

size_t HotKeys::IndexOf(uint64_t key) const {
  for (size_t i = SplitMix64(key) & index_mask_;; i = (i + 1) & index_mask_) {
    const uint32_t at = index_[i];
    if (at == 0 || heap_[at - 1].key == key) return i;
  }
}

void HotKeys::EraseIndex(size_t slot) {
  // Backward-shift deletion keeps every probe sequence unbroken without
  // tombstones.
  index_[slot] = 0;
  for (size_t i = (slot + 1) & index_mask_; index_[i] != 0; i = (i + 1) & index_mask_) {
    const uint32_t at = index_[i];
    index_[i] = 0;
    index_[IndexOf(heap_[at - 1].key)] = at;
  }
}

void HotKeys::SwapHeap(size_t a, size_t b) {
  // Found before the swap: IndexOf compares the keys the slots point at.
  const size_t slot_a = IndexOf(heap_[a].key), slot_b = IndexOf(heap_[b].key);
  std::swap(heap_[a], heap_[b]);
  index_[slot_a] = static_cast<uint32_t>(b + 1);
  index_[slot_b] = static_cast<uint32_t>(a + 1);
}

void HotKeys::SiftDown(size_t i) {
  const size_t n = heap_.size();
  for (;;) {
    size_t least = i;
    const size_t l = 2 * i + 1, r = l + 1;
    if (l < n && heap_[l].weight < heap_[least].weight) least = l;
    if (r < n && heap_[r].weight < heap_[least].weight) least = r;
    if (least == i) return;
    SwapHeap(i, least);
    i = least;
  }
}

void HotKeys::AddLocked(uint64_t key, uint64_t weight) {
  size_t slot = IndexOf(key);
  if (index_[slot] != 0) {
    const size_t at = index_[slot] - 1;
    heap_[at].weight += weight;
    SiftDown(at);  // a weight only grows: it can only sink in a min-heap
    return;
  }
  if (heap_.size() < capacity_) {
    // Room left: a new slot, sifted up to its place in the min-heap.
    heap_.push_back(Slot{key, weight});
    index_[slot] = static_cast<uint32_t>(heap_.size());
    for (size_t i = heap_.size() - 1; i > 0;) {
      const size_t parent = (i - 1) / 2;
      if (heap_[parent].weight <= heap_[i].weight) break;
      SwapHeap(i, parent);
      i = parent;
    }
    return;
  }
  // Full: the lightest key gives its slot up, and the new key inherits its
  // weight (space-saving's over-estimate, which keeps heavy keys held).
  EraseIndex(IndexOf(heap_[0].key));
  heap_[0].key = key;
  heap_[0].weight += weight;
  index_[IndexOf(key)] = 1;
  SiftDown(0);
}

void HotKeys::CloseSecond() {
  if (second_ == INT64_MIN) return;
  const size_t r = static_cast<size_t>(((second_ % window_s_) + window_s_) % window_s_);
  ring_[r].assign(heap_.begin(), heap_.end());  // capacity reserved: no allocation
  ring_second_[r] = second_;
  heap_.clear();
  std::fill(index_.begin(), index_.end(), 0);
}

void HotKeys::AdvanceTo(int64_t second) {
  if (second <= second_) return;
  CloseSecond();
  second_ = second;
}

std::vector<HotKey> HotKeys::Top(size_t n, int64_t now_ms) {
  std::unordered_map<uint64_t, uint64_t> sums;
  {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t now = SecondOf(now_ms);
    AdvanceTo(now);
    for (const Slot& s : heap_) sums[s.key] += s.weight;
    for (size_t r = 0; r < ring_.size(); r++) {
      // The window: the current second and the window_s - 1 before it.
      if (ring_second_[r] == INT64_MIN || ring_second_[r] <= now - window_s_) continue;
      for (const Slot& s : ring_[r]) sums[s.key] += s.weight;
    }
  }
  std::vector<HotKey> out;
  out.reserve(sums.size());
  for (const auto& [k, w] : sums) out.push_back(HotKey{k, w});
  auto heavier = [](const HotKey& a, const HotKey& b) {
    return a.weight != b.weight ? a.weight > b.weight : a.key < b.key;
  };
  if (out.size() > n) {
    std::partial_sort(out.begin(), out.begin() + static_cast<ptrdiff_t>(n), out.end(), heavier);
    out.resize(n);
  } else {
    std::sort(out.begin(), out.end(), heavier);
  }
  return out;
}

}  // namespace tally::base
