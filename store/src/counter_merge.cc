#include "counter_merge.h"

#include "keys.h"

namespace tally::store {
namespace {
constexpr int kMaxFields = 8;
}

bool CounterMergeOperator::FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const {
  if (in.key.size() == 0) return false;
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
