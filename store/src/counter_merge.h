// The RocksDB merge operator of tally's records (internal to store/).
//
// Pure, deterministic and associative. Counter records (posts, users,
// unread, notice reads, red dots): a full merge applies the CounterOp
// operands in order to the stored counters (or zeros); a partial merge
// composes them with CounterOp::Then. Post counter pages: the same per
// post of the page, by slot (keys.h). "Viewed" chunks: operands are bit
// indexes, merged by OR. Its Name() never changes: it is recorded in every
// SST file that holds its operands.
#pragma once

#include <rocksdb/merge_operator.h>

namespace tally::store {

class CounterMergeOperator : public rocksdb::MergeOperator {
 public:
  const char* Name() const override { return "tally.Merge"; }
  bool FullMergeV2(const MergeOperationInput& in, MergeOperationOutput* out) const override;
  bool PartialMergeMulti(const rocksdb::Slice& key, const std::deque<rocksdb::Slice>& operands,
                         std::string* new_value, rocksdb::Logger* logger) const override;
  bool AllowSingleOperand() const override { return true; }
};

}  // namespace tally::store
