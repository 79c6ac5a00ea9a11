#include "server/producer_ids.h"

#include <fmt/format.h>

#include <charconv>
#include <string>

#include "log/file_util.h"

namespace tally::broker {

base::Result<std::unique_ptr<ProducerIdAllocator>> ProducerIdAllocator::Open(
    const std::filesystem::path& log_dir) {
  std::unique_ptr<ProducerIdAllocator> a(new ProducerIdAllocator(log_dir / "producer-ids"));
  std::string text;
  base::Status st = ReadWholeFile(a->path_, &text);
  if (st.code() == base::StatusCode::kNotFound) return a;
  if (!st.ok()) return st;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  int64_t value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    return base::Status::Corruption(
        fmt::format("{}: not a producer id: '{}'", a->path_.string(), text));
  }
  a->next_ = value;
  a->block_end_ = value;
  return a;
}

base::Result<int64_t> ProducerIdAllocator::Next() {
  if (next_ >= block_end_) {
    const int64_t end = next_ + kBlockSize;
    TALLY_RETURN_IF_ERROR(WriteFileAtomically(path_, fmt::format("{}\n", end), true));
    block_end_ = end;
  }
  return next_++;
}

}  // namespace tally::broker
