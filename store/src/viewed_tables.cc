#include "store/viewed_tables.h"

#include <algorithm>
#include <cmath>

#include "keys.h"

namespace tally::store {

namespace {

constexpr uint32_t kBlockBits = 512;
constexpr uint32_t kBlocksPerChunk = kViewChunkBytes * 8 / kBlockBits;

inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

ViewedTables::ViewedTables(ViewedOptions options) : options_(options) {
  // Four tables per budget: the oldest quarter of the memory is what a roll frees.
  uint64_t per_table = std::max<uint64_t>(options_.budget_bytes / 4, kViewChunkBytes);
  table_bytes_ = per_table / kViewChunkBytes * kViewChunkBytes;
  double p = std::clamp(options_.fp_rate, 1e-6, 0.5);
  double ln2 = std::log(2.0);
  // Bits per item of a classic Bloom filter at rate p, plus a margin for the
  // uneven load of 512-bit blocks (measured: the test checks the rate).
  double bits_per_item = -std::log(p) / (ln2 * ln2) * 1.05;
  k_ = std::clamp(static_cast<int>(std::lround(-std::log(p) / ln2)), 1, 16);
  capacity_ = std::max<uint64_t>(1, static_cast<uint64_t>(table_bytes_ * 8 / bits_per_item));
}

void ViewedTables::Probe(const ViewTable& t, uint64_t post, uint64_t user, ViewProbe* probe) const {
  uint64_t h1 = Mix(post * 0x9e3779b97f4a7c15ULL ^ Mix(user + t.id));
  uint64_t h2 = Mix(h1 ^ 0x5bd1e9955bd1e995ULL) | 1;
  uint64_t blocks = table_bytes_ * 8 / kBlockBits;
  uint64_t block = h1 % blocks;
  probe->table_id = t.id;
  probe->chunk = static_cast<uint32_t>(block / kBlocksPerChunk);
  uint32_t base = static_cast<uint32_t>(block % kBlocksPerChunk) * kBlockBits;
  probe->nbits = k_;
  uint64_t h = h2;
  for (int i = 0; i < k_; i++) {
    probe->bits[i] = static_cast<uint16_t>(base + (h % kBlockBits));
    h = Mix(h + i);
  }
}

void ViewedTables::Insert(uint64_t post, uint64_t user, ViewProbe* probe, std::vector<uint32_t>* dropped) {
  probe->nbits = 0;
  if (tables_.empty()) tables_.push_back(ViewTable{next_id_++, 0, UINT64_MAX, 0, 0});
  ViewTable* t = nullptr;
  for (auto it = tables_.rbegin(); it != tables_.rend(); ++it) {
    if (post >= it->lo && post < it->hi) {
      t = &*it;
      break;
    }
  }
  if (!t) return;  // older than every live table: forgotten by design
  Probe(*t, post, user, probe);
  t->count++;
  t->max_post = std::max(t->max_post, post);
  ViewTable& open = tables_.back();
  if (open.count >= capacity_ && open.max_post < UINT64_MAX - 1) {
    open.hi = open.max_post + 1;
    tables_.push_back(ViewTable{next_id_++, open.hi, UINT64_MAX, 0, 0});
    while (tables_.size() * table_bytes_ > std::max(options_.budget_bytes, table_bytes_)) {
      dropped->push_back(tables_.front().id);
      tables_.erase(tables_.begin());
    }
  }
}

bool ViewedTables::Locate(uint64_t post, uint64_t user, ViewProbe* probe) const {
  for (auto it = tables_.rbegin(); it != tables_.rend(); ++it) {
    if (post >= it->lo && post < it->hi) {
      Probe(*it, post, user, probe);
      return true;
    }
  }
  return false;
}

bool ViewedTables::TestBits(const ViewProbe& probe, std::string_view chunk) {
  if (chunk.size() != kViewChunkBytes) return false;
  for (int i = 0; i < probe.nbits; i++) {
    uint16_t b = probe.bits[i];
    if (!(static_cast<uint8_t>(chunk[b >> 3]) & (1u << (b & 7)))) return false;
  }
  return true;
}

std::string ViewedTables::Encode() const {
  std::string out;
  out.push_back(1);
  PutVarint64(&out, table_bytes_);
  PutVarint64(&out, next_id_);
  PutVarint64(&out, tables_.size());
  for (const auto& t : tables_) {
    PutVarint64(&out, t.id);
    PutVarint64(&out, t.lo);
    PutVarint64(&out, t.hi);
    PutVarint64(&out, t.count);
    PutVarint64(&out, t.max_post);
  }
  return out;
}

bool ViewedTables::Decode(std::string_view in) {
  if (in.empty() || in[0] != 1) return false;
  size_t pos = 1;
  uint64_t tb, next, n;
  if (!GetVarint64(in, &pos, &tb) || !GetVarint64(in, &pos, &next) || !GetVarint64(in, &pos, &n)) return false;
  // Tables keep the size they were made with; a changed --viewed-bytes
  // applies to the tables made from now on... only when sizes agree, so
  // refuse silently mixing: keep the stored size.
  if (tb % kViewChunkBytes != 0 || tb == 0) return false;
  if (tb != table_bytes_) {
    double bits_per_item = static_cast<double>(table_bytes_ * 8) / capacity_;
    table_bytes_ = tb;
    capacity_ = std::max<uint64_t>(1, static_cast<uint64_t>(tb * 8 / bits_per_item));
  }
  std::vector<ViewTable> tables;
  for (uint64_t i = 0; i < n; i++) {
    ViewTable t;
    uint64_t id;
    if (!GetVarint64(in, &pos, &id) || !GetVarint64(in, &pos, &t.lo) || !GetVarint64(in, &pos, &t.hi) ||
        !GetVarint64(in, &pos, &t.count) || !GetVarint64(in, &pos, &t.max_post)) {
      return false;
    }
    t.id = static_cast<uint32_t>(id);
    tables.push_back(t);
  }
  if (pos != in.size()) return false;
  next_id_ = static_cast<uint32_t>(next);
  tables_ = std::move(tables);
  return true;
}

}  // namespace tally::store
