// Kafka record batches (magic 2), the unit the broker stores: the log keeps
// each batch exactly as the producer framed it, with only its base offset
// rewritten (it lies outside the CRC). This file parses and checks the
// 61-byte batch header, splits a produce request's record set into batches,
// walks the records of an uncompressed batch (for compaction and for finding
// a timestamp inside a batch) and encodes batches (for compaction and tests).
//
// Batch layout (big-endian), with the offset of each field:
//   0 baseOffset int64        8 batchLength int32 (bytes after this field)
//  12 partitionLeaderEpoch    16 magic int8 (2)     17 crc uint32 (CRC32C of
//  21..end)                   21 attributes int16   23 lastOffsetDelta int32
//  27 baseTimestamp int64     35 maxTimestamp int64 43 producerId int64
//  51 producerEpoch int16     53 baseSequence int32 57 recordCount int32
//  61 records: each varint length, int8 attributes, varlong timestampDelta,
//     varint offsetDelta, varint key length (-1 null) + key, varint value
//     length (-1 null) + value, varint header count + headers.
//
// Thread model: pure functions and value types; safe anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tally::broker {

inline constexpr size_t kBatchHeaderSize = 61;
// Bytes before the part that batchLength counts (baseOffset, batchLength).
inline constexpr size_t kBatchLogOverhead = 12;
inline constexpr size_t kBatchCrcOffset = 17;
inline constexpr size_t kBatchAttributesOffset = 21;
inline constexpr int64_t kNoProducerId = -1;

// The codec in a batch's attributes (bits 0-2).
enum class Compression : uint8_t { kNone = 0, kGzip = 1, kSnappy = 2, kLz4 = 3, kZstd = 4 };

// The fixed fields of a v2 batch header.
struct BatchHeader {
  int64_t base_offset = 0;
  int32_t batch_length = 0;
  int32_t partition_leader_epoch = -1;
  int8_t magic = 2;
  uint32_t crc = 0;
  int16_t attributes = 0;
  int32_t last_offset_delta = 0;
  int64_t base_timestamp = 0;
  int64_t max_timestamp = 0;
  int64_t producer_id = kNoProducerId;
  int16_t producer_epoch = -1;
  int32_t base_sequence = -1;
  int32_t record_count = 0;

  // Whole size of the batch in bytes, header included.
  int64_t size() const { return static_cast<int64_t>(batch_length) + kBatchLogOverhead; }
  int64_t last_offset() const { return base_offset + last_offset_delta; }
  Compression compression() const { return static_cast<Compression>(attributes & 7); }
  bool is_transactional() const { return (attributes & 0x10) != 0; }
  bool is_control() const { return (attributes & 0x20) != 0; }
  // The sequence of the batch's last record, wrapping past INT32_MAX as
  // Kafka's producers do.
  int32_t last_sequence() const;
};

// Parses the header at the start of `data` (which must hold at least
// kBatchHeaderSize bytes, else kCorruption). Checks the magic (0 and 1 are
// refused: the broker stores magic 2 only) and that batchLength covers at
// least the header; the CRC and the records are not checked.
base::Result<BatchHeader> ParseBatchHeader(std::span<const uint8_t> data);

// The CRC32C of a whole batch's bytes from attributes to the end, as the
// header's crc field must hold. `batch` holds the whole batch.
uint32_t ComputeBatchCrc(std::span<const uint8_t> batch);

// A batch inside a larger buffer: its header and its bytes.
struct BatchView {
  BatchHeader header;
  std::span<const uint8_t> bytes;
};

// Splits a produce request's record set into its batches and validates each
// as Kafka does before appending: magic 2, a length inside the buffer, the
// CRC, recordCount >= 1 and == lastOffsetDelta + 1, and for uncompressed
// batches records whose framing fills the batch exactly with offsetDelta
// 0, 1, 2, ... Any failure is kCorruption (CORRUPT_MESSAGE) naming the
// batch's position; an empty record set is kCorruption too. The views
// borrow `records`.
base::Result<std::vector<BatchView>> SplitBatches(std::span<const uint8_t> records);

// Rewrites the baseOffset field of the batch at the start of `batch` (outside
// the CRC, so the CRC stays valid).
void SetBaseOffset(std::span<uint8_t> batch, int64_t base_offset);

// One record; the spans borrow the bytes the iterator walks.
struct Record {
  int8_t attributes = 0;
  int64_t timestamp_delta = 0;
  int32_t offset_delta = 0;
  std::optional<std::span<const uint8_t>> key;    // nullopt: null key
  std::optional<std::span<const uint8_t>> value;  // nullopt: null value (tombstone)
  std::span<const uint8_t> headers;               // raw: count varint + headers
  std::span<const uint8_t> raw;                   // the whole record, length prefix included
};

// Walks the records of one batch.
// Thread model: externally synchronized; borrows the batch's bytes, which
// must outlive it.
class RecordIterator {
 public:
  // `batch` holds one whole uncompressed batch; `header` is its header.
  RecordIterator(std::span<const uint8_t> batch, const BatchHeader& header);
  // Walks `count` records framed back to back in `records` (a batch's
  // records section, e.g. decompressed by BatchRecordsUncompressed).
  RecordIterator(std::span<const uint8_t> records, int32_t count)
      : rest_(records), remaining_(count) {}

  // Sets *out to the next record and returns true, or returns false at the
  // end. A malformed record is kCorruption; the iterator stops there.
  base::Result<bool> Next(Record* out);

 private:
  std::span<const uint8_t> rest_;
  int32_t remaining_;
};

// Encoding, for compaction (batches rewritten with fewer records) and tests.
namespace batch_encoding {

// Appends one record, length prefix included, to *out.
void AppendRecord(std::string* out, int64_t timestamp_delta, int32_t offset_delta,
                  std::optional<std::string_view> key, std::optional<std::string_view> value,
                  std::string_view raw_headers = std::string_view("\0", 1));

// Returns a whole batch holding `records` (already framed by AppendRecord or
// copied from Record::raw) with the header fields of `header` (its
// batch_length, magic and crc are computed here).
std::string BuildBatch(const BatchHeader& header, std::string_view records);

}  // namespace batch_encoding

// Zigzag varints as Kafka frames records. They return false on a truncated
// or overlong varint; on success they advance *in.
bool ReadVarint(std::span<const uint8_t>* in, int32_t* out);
bool ReadVarlong(std::span<const uint8_t>* in, int64_t* out);
void AppendVarint(std::string* out, int64_t value);

// Big-endian fixed-width helpers.
inline uint16_t LoadBe16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
inline uint32_t LoadBe32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | p[3];
}
inline uint64_t LoadBe64(const uint8_t* p) {
  return (static_cast<uint64_t>(LoadBe32(p)) << 32) | LoadBe32(p + 4);
}
inline void StoreBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void StoreBe32(uint8_t* p, uint32_t v) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
inline void StoreBe64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}

}  // namespace tally::broker
