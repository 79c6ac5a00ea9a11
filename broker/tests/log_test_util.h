// Helpers shared by the log's tests: encoding valid v2 batches (correct
// CRC) from (key, value, timestamp) records, decoding what a read returns,
// and a FileOps that fails writes and syncs on demand.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "log/file_util.h"
#include "log/partition_log.h"

namespace tally::broker::testutil {

struct TestRecord {
  std::optional<std::string> key;
  std::optional<std::string> value;
  int64_t timestamp = 0;
};

struct ProducerFields {
  int64_t producer_id = -1;
  int16_t epoch = -1;
  int32_t base_sequence = -1;
};

// A whole uncompressed v2 batch at base offset 0 holding `records`.
std::string MakeBatch(const std::vector<TestRecord>& records, ProducerFields producer = {});

// `count` records "<prefix><i>" -> "v<i>" at `timestamp`.
std::string MakeSimpleBatch(int count, int64_t timestamp, std::string_view prefix = "k",
                            ProducerFields producer = {});

struct DecodedRecord {
  int64_t offset = 0;
  std::optional<std::string> key;
  std::optional<std::string> value;
  int64_t timestamp = 0;
  bool operator==(const DecodedRecord&) const = default;
};

// Every record of the whole batches in `bytes` (CRC checked, compressed
// batches decompressed; a failure is reported through the Status).
base::Result<std::vector<DecodedRecord>> DecodeAll(std::string_view bytes);

// Appends a copy of `batch` (Append rewrites base offsets in place).
base::Result<AppendResult> AppendCopy(PartitionLog& log, std::string_view batch, int64_t now_ms);

// Reads every record from `from` to `max_offset` with fetches of `max_bytes`.
base::Result<std::vector<DecodedRecord>> ReadAll(const PartitionLog& log, int64_t from,
                                                 int64_t max_offset, int64_t max_bytes = 1 << 20);

// FileOps that can fail: writes after `write_budget` bytes fail with
// ENOSPC (a write crossing the budget is partly done first, as a real full
// disk does), fdatasync fails with EIO while fail_sync is set.
class FaultyFileOps : public FileOps {
 public:
  ssize_t Pwrite(int fd, const void* buf, size_t n, off_t offset) override;
  int Fdatasync(int fd) override;

  std::atomic<int64_t> write_budget{INT64_MAX};
  std::atomic<bool> fail_sync{false};
  std::atomic<int64_t> syncs{0};
};

}  // namespace tally::broker::testutil
