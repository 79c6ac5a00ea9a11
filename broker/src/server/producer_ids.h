// ProducerIdAllocator: InitProducerId's producer ids, unique and never
// reused across restarts. Ids are handed out from blocks of kBlockSize;
// before the first id of a block is handed out, the end of the block is
// written to `<log-dir>/producer-ids` (temporary file, fdatasync, rename,
// directory fsync), so a restart, even after a crash, starts past every id
// ever answered. The file holds one decimal number and a newline.
//
// Thread model: externally synchronized (the network thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "base/status.h"

namespace tally::broker {

class ProducerIdAllocator {
 public:
  static constexpr int64_t kBlockSize = 1000;

  // Reads the file (absent: ids start at 0). kCorruption if it does not
  // hold a number.
  static base::Result<std::unique_ptr<ProducerIdAllocator>> Open(
      const std::filesystem::path& log_dir);

  // The next id; kIOError if a new block could not be made durable (no id
  // is handed out then).
  base::Result<int64_t> Next();

 private:
  explicit ProducerIdAllocator(std::filesystem::path path) : path_(std::move(path)) {}
  const std::filesystem::path path_;
  int64_t next_ = 0;
  int64_t block_end_ = 0;  // ids below it are covered by the file
};

}  // namespace tally::broker
