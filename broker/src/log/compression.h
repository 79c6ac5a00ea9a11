// Decompression of a record batch's records, for the few places the log
// must see records inside compressed batches: compaction (the keys) and
// ListOffsets by timestamp (the exact record). The broker never compresses:
// batches are stored as producers framed them, and a compressed batch that
// compaction shrinks is written back uncompressed (valid for every client).
//
// Codecs as Kafka frames them: gzip (zlib's gzip format), snappy (raw, as
// librdkafka writes it, or the xerial framing the Java client writes), lz4
// (the LZ4 frame format) and zstd (frames). A codec whose library was not
// found at build time answers kNotFound, and callers keep the batch whole.
//
// Thread model: pure functions, safe anywhere.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"
#include "log/record_batch.h"

namespace tally::broker {

// The most bytes one batch may decompress to; more is kResourceExhausted
// (a decompression bomb, or a batch no client could consume either).
inline constexpr size_t kMaxDecompressedBatchBytes = size_t{256} << 20;

// True if this build can decompress `codec` (kNone is always true).
bool CodecAvailable(Compression codec);

// Returns the records section of `batch` (the bytes after its 61-byte
// header), decompressed if the header says so. kNotFound if the codec is not
// available, kCorruption if the data does not decompress,
// kResourceExhausted past kMaxDecompressedBatchBytes.
base::Result<std::string> BatchRecordsUncompressed(const BatchHeader& header,
                                                   std::span<const uint8_t> batch);

}  // namespace tally::broker
