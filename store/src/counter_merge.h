// The RocksDB merge operator of counter records (internal to store/).
//
// Pure, deterministic and associative: a full merge applies the operands in
// order to the stored counters (or zeros); a partial merge composes operands
// with CounterOp::Then. Its Name() never changes: it is recorded in every
// SST file that holds its operands.
#pragma once

#include <rocksdb/merge_operator.h>

namespace tally::store {

class CounterMergeOperator : public rocksdb::MergeOperator {
 public:
  const char* Name() const override { return "tally.CounterMerge"; }
  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override;
  bool PartialMergeMulti(const rocksdb::Slice& key, const std::deque<rocksdb::Slice>& operands,
                         std::string* new_value, rocksdb::Logger* logger) const override;
  bool AllowSingleOperand() const override { return true; }
};

}  // namespace tally::store
