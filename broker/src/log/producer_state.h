// ProducerStateTable: what one partition knows about idempotent producers,
// so that a retried batch is never appended twice (KIP-98). Per producer id
// it keeps the epoch and the last 5 appended batches' sequence and offset
// ranges (a producer has at most 5 requests in flight). It is saved as a
// `<offset>.snapshot` file (at segment roll and clean close) and rebuilt at
// open from the newest snapshot plus the batches after its offset.
//
// Thread model: externally synchronized (owned by a PartitionLog, used on the
// partition's owning thread).
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <string>
#include <unordered_map>

#include "base/status.h"

namespace tally::broker {

// What to do with a batch from an idempotent producer.
enum class ProducerVerdict {
  kAppend,              // new and in order (or producer id -1): append it
  kDuplicate,           // already appended: acknowledge with the original offsets
  kOutOfOrderSequence,  // OUT_OF_ORDER_SEQUENCE_NUMBER
  kInvalidEpoch,        // an older epoch: INVALID_PRODUCER_EPOCH (fenced)
};

// One appended batch of a producer: its sequence and offset ranges.
struct ProducerBatch {
  int32_t first_seq = 0;
  int32_t last_seq = 0;
  int64_t base_offset = 0;
  int64_t last_offset = 0;
};

// The answer of ProducerStateTable::Check.
struct ProducerCheck {
  ProducerVerdict verdict = ProducerVerdict::kAppend;
  // For kDuplicate: the offsets the batch got when first appended.
  int64_t base_offset = -1;
  int64_t last_offset = -1;
};

class ProducerStateTable {
 public:
  static constexpr size_t kMaxBatchesPerProducer = 5;

  // Decides what to do with a batch of `record_count` records whose first
  // sequence is `base_sequence`, as Kafka's ProducerStateManager does:
  //  - producer_id < 0: kAppend (not idempotent, nothing kept);
  //  - epoch older than the known one: kInvalidEpoch;
  //  - a newer epoch: kAppend if base_sequence is 0, else kOutOfOrderSequence;
  //  - same epoch: kDuplicate if one of the last 5 batches has the same
  //    sequence range; kAppend if base_sequence follows the last batch's last
  //    sequence (INT32_MAX wraps to 0); else kOutOfOrderSequence;
  //  - unknown producer id: kAppend whatever the sequence.
  // Changes nothing: call Record() once the batch is written.
  ProducerCheck Check(int64_t producer_id, int16_t epoch, int32_t base_sequence,
                      int32_t record_count) const;

  // Records an appended batch (offsets assigned). A newer epoch forgets the
  // older epoch's batches; only the last 5 batches are kept. No-op for
  // producer_id < 0.
  void Record(int64_t producer_id, int16_t epoch, int32_t base_sequence, int32_t record_count,
              int64_t base_offset);

  // Check(), then Record() at `base_offset` if the verdict is kAppend.
  ProducerCheck CheckAndRecord(int64_t producer_id, int16_t epoch, int32_t base_sequence,
                               int32_t record_count, int64_t base_offset);

  // Forgets everything (before a rebuild).
  void Clear() { producers_.clear(); }
  size_t size() const { return producers_.size(); }

  // Writes the table to `path` atomically (temporary file, fdatasync, rename;
  // the caller syncs the directory if it must). kIOError on failure.
  base::Status WriteSnapshot(const std::filesystem::path& path) const;

  // Replaces the table with the snapshot at `path`. kCorruption if the file
  // is damaged (bad magic, size or CRC), kIOError if it cannot be read.
  base::Status LoadSnapshot(const std::filesystem::path& path);

 private:
  struct Entry {
    int16_t epoch = -1;
    std::deque<ProducerBatch> batches;  // oldest first, at most 5
  };
  std::unordered_map<int64_t, Entry> producers_;
};

// Sequence arithmetic as Kafka's producers do it: `seq + increment`, wrapping
// past INT32_MAX to 0.
int32_t IncrementSequence(int32_t seq, int32_t increment);

}  // namespace tally::broker
