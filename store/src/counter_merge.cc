#include "counter_merge.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "keys.h"
#include "store/viewed_tables.h"

namespace tally::store {
namespace {
constexpr int kMaxFields = 8;
}

namespace {
bool SetBits(const rocksdb::Slice& operand, std::string* bitmap) {
  if (operand.size() == 0 || operand[0] != 2 || operand.size() % 2 != 1) return false;
  for (size_t i = 1; i + 1 < operand.size(); i += 2) {
    uint16_t b = static_cast<uint8_t>(operand[i]) | (static_cast<uint16_t>(static_cast<uint8_t>(operand[i + 1])) << 8);
    if (b >= kViewChunkBytes * 8) return false;
    (*bitmap)[b >> 3] = static_cast<char>(static_cast<uint8_t>((*bitmap)[b >> 3]) | (1u << (b & 7)));
  }
  return true;
}

// Applies the ops of one page operand to the posts of a page, in place
// (both by ascending slot; a post the page does not hold yet starts from
// zeros). An operand touches a few of a page's posts: a read that merges a
// hot page's operands pays for those, not for the whole page each time.
void ApplyPageOps(const std::vector<PagedPostOps>& ops, std::vector<PagedPost>* page) {
  auto from = page->begin();
  for (const PagedPostOps& o : ops) {
    from = std::lower_bound(from, page->end(), o.slot,
                            [](const PagedPost& p, uint64_t slot) { return p.slot < slot; });
    if (from == page->end() || from->slot != o.slot) {
      PagedPost p;
      p.slot = o.slot;
      from = page->insert(from, p);
    }
    for (int f = 0; f < schemas::kPostFieldCount; f++) from->v[f] = o.ops[f].Apply(from->v[f]);
  }
}

// Composes two page operands (b after a), by ascending slot.
void ComposePageOps(const std::vector<PagedPostOps>& a, const std::vector<PagedPostOps>& b,
                    std::vector<PagedPostOps>* out) {
  out->clear();
  size_t i = 0;
  for (const PagedPostOps& o : b) {
    for (; i < a.size() && a[i].slot < o.slot; i++) out->push_back(a[i]);
    if (i < a.size() && a[i].slot == o.slot) {
      PagedPostOps c = a[i++];
      for (int f = 0; f < schemas::kPostFieldCount; f++) c.ops[f].Then(o.ops[f]);
      out->push_back(c);
    } else {
      out->push_back(o);
    }
  }
  out->insert(out->end(), a.begin() + static_cast<std::ptrdiff_t>(i), a.end());
}

bool FullMergePage(const rocksdb::MergeOperator::MergeOperationInput& in, std::string* out) {
  // Compactions merge every page they hold: no allocation per page.
  thread_local std::vector<PagedPost> page;
  thread_local std::vector<PagedPostOps> ops;
  page.clear();
  if (in.existing_value != nullptr &&
      !DecodePostPage(std::string_view(in.existing_value->data(), in.existing_value->size()),
                      &page)) {
    return false;
  }
  for (const rocksdb::Slice& operand : in.operand_list) {
    if (!DecodePostPageOps(std::string_view(operand.data(), operand.size()), &ops)) return false;
    ApplyPageOps(ops, &page);
  }
  EncodePostPage(page, out);
  return true;
}

bool PartialMergePage(const std::deque<rocksdb::Slice>& operands, std::string* out) {
  thread_local std::vector<PagedPostOps> acc, ops, next;
  acc.clear();
  for (const rocksdb::Slice& operand : operands) {
    if (!DecodePostPageOps(std::string_view(operand.data(), operand.size()), &ops)) return false;
    ComposePageOps(acc, ops, &next);
    acc.swap(next);
  }
  EncodePostPageOps(acc.data(), acc.size(), out);
  return true;
}
}  // namespace

bool CounterMergeOperator::FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const {
  if (in.key.size() == 0) return false;
  if (in.key[0] == static_cast<char>(RecordKind::kViewChunk)) {
    if (in.existing_value && in.existing_value->size() == kViewChunkBytes) {
      out->new_value.assign(in.existing_value->data(), in.existing_value->size());
    } else {
      out->new_value.assign(kViewChunkBytes, '\0');
    }
    for (const rocksdb::Slice& operand : in.operand_list) {
      if (!SetBits(operand, &out->new_value)) return false;
    }
    return true;
  }
  if (in.key[0] == static_cast<char>(RecordKind::kPostPage)) {
    return FullMergePage(in, &out->new_value);
  }
  int n = CounterFieldCount(in.key[0]);
  if (n == 0) return false;  // not a counter record: corruption, surfaced by RocksDB
  int64_t values[kMaxFields] = {};
  if (in.existing_value != nullptr &&
      !DecodeCounters(std::string_view(in.existing_value->data(), in.existing_value->size()), values, n)) {
    return false;
  }
  CounterOp ops[kMaxFields];
  for (const rocksdb::Slice& operand : in.operand_list) {
    if (!DecodeCounterOps(std::string_view(operand.data(), operand.size()), ops, n)) return false;
    for (int i = 0; i < n; i++) values[i] = ops[i].Apply(values[i]);
  }
  EncodeCounters(values, n, &out->new_value);
  return true;
}

bool CounterMergeOperator::PartialMergeMulti(const rocksdb::Slice& key,
                                             const std::deque<rocksdb::Slice>& operands,
                                             std::string* new_value, rocksdb::Logger*) const {
  if (key.size() == 0) return false;
  if (key[0] == static_cast<char>(RecordKind::kViewChunk)) {
    new_value->assign(1, 2);
    for (const rocksdb::Slice& operand : operands) {
      if (operand.size() == 0 || operand[0] != 2 || operand.size() % 2 != 1) return false;
      new_value->append(operand.data() + 1, operand.size() - 1);
    }
    return true;
  }
  if (key[0] == static_cast<char>(RecordKind::kPostPage))
    return PartialMergePage(operands, new_value);
  int n = CounterFieldCount(key[0]);
  if (n == 0) return false;
  CounterOp acc[kMaxFields];
  CounterOp ops[kMaxFields];
  for (const rocksdb::Slice& operand : operands) {
    if (!DecodeCounterOps(std::string_view(operand.data(), operand.size()), ops, n)) return false;
    for (int i = 0; i < n; i++) acc[i].Then(ops[i]);
  }
  EncodeCounterOps(acc, n, new_value);
  return true;
}

}  // namespace tally::store
