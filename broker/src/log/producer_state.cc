#include "log/producer_state.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "base/crc32c.h"
#include "log/file_util.h"
#include "log/record_batch.h"

namespace tally::broker {

using base::Status;

int32_t IncrementSequence(int32_t seq, int32_t increment) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  if (seq > kMax - increment) return increment - (kMax - seq) - 1;
  return seq + increment;
}

ProducerCheck ProducerStateTable::Check(int64_t producer_id, int16_t epoch, int32_t base_sequence,
                                        int32_t record_count) const {
  ProducerCheck out;
  if (producer_id < 0) return out;
  auto it = producers_.find(producer_id);
  if (it == producers_.end()) return out;
  const Entry& e = it->second;
  if (epoch < e.epoch) {
    out.verdict = ProducerVerdict::kInvalidEpoch;
    return out;
  }
  if (epoch > e.epoch) {
    if (base_sequence != 0) out.verdict = ProducerVerdict::kOutOfOrderSequence;
    return out;
  }
  int32_t last_seq = IncrementSequence(base_sequence, record_count - 1);
  for (const ProducerBatch& b : e.batches) {
    if (b.first_seq == base_sequence && b.last_seq == last_seq) {
      out.verdict = ProducerVerdict::kDuplicate;
      out.base_offset = b.base_offset;
      out.last_offset = b.last_offset;
      return out;
    }
  }
  if (e.batches.empty()) return out;
  int32_t prev = e.batches.back().last_seq;
  bool in_sequence = static_cast<int64_t>(base_sequence) == static_cast<int64_t>(prev) + 1 ||
                     (base_sequence == 0 && prev == std::numeric_limits<int32_t>::max());
  if (!in_sequence) out.verdict = ProducerVerdict::kOutOfOrderSequence;
  return out;
}

void ProducerStateTable::Record(int64_t producer_id, int16_t epoch, int32_t base_sequence,
                                int32_t record_count, int64_t base_offset) {
  if (producer_id < 0) return;
  Entry& e = producers_[producer_id];
  if (epoch != e.epoch) {
    e.epoch = epoch;
    e.batches.clear();
  }
  e.batches.push_back(ProducerBatch{base_sequence,
                                    IncrementSequence(base_sequence, record_count - 1), base_offset,
                                    base_offset + record_count - 1});
  while (e.batches.size() > kMaxBatchesPerProducer) e.batches.pop_front();
}

ProducerCheck ProducerStateTable::CheckAndRecord(int64_t producer_id, int16_t epoch,
                                                 int32_t base_sequence, int32_t record_count,
                                                 int64_t base_offset) {
  ProducerCheck c = Check(producer_id, epoch, base_sequence, record_count);
  if (c.verdict == ProducerVerdict::kAppend) {
    Record(producer_id, epoch, base_sequence, record_count, base_offset);
  }
  return c;
}

// Snapshot file: "TPS1", uint32 producer count, then per producer int64 id,
// int16 epoch, uint8 batch count and per batch int32 first seq, int32 last
// seq, int64 base offset, int64 last offset; then the CRC32C of everything
// before it. Big-endian.
namespace {
constexpr char kSnapshotMagic[4] = {'T', 'P', 'S', '1'};
}

Status ProducerStateTable::WriteSnapshot(const std::filesystem::path& path) const {
  std::string buf(kSnapshotMagic, 4);
  auto put = [&buf](uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) buf.push_back(static_cast<char>(v >> (8 * i)));
  };
  put(producers_.size(), 4);
  for (const auto& [id, e] : producers_) {
    put(static_cast<uint64_t>(id), 8);
    put(static_cast<uint16_t>(e.epoch), 2);
    put(e.batches.size(), 1);
    for (const ProducerBatch& b : e.batches) {
      put(static_cast<uint32_t>(b.first_seq), 4);
      put(static_cast<uint32_t>(b.last_seq), 4);
      put(static_cast<uint64_t>(b.base_offset), 8);
      put(static_cast<uint64_t>(b.last_offset), 8);
    }
  }
  put(base::Crc32c(buf.data(), buf.size()), 4);
  return WriteFileAtomically(path, buf, /*sync_dir=*/false);
}

Status ProducerStateTable::LoadSnapshot(const std::filesystem::path& path) {
  std::string buf;
  TALLY_RETURN_IF_ERROR(ReadWholeFile(path, &buf));
  auto corrupt = [&path](const char* why) {
    return Status::Corruption(fmt::format("producer snapshot {}: {}", path.string(), why));
  };
  if (buf.size() < 12 || std::memcmp(buf.data(), kSnapshotMagic, 4) != 0) {
    return corrupt("bad magic");
  }
  const auto* p = reinterpret_cast<const uint8_t*>(buf.data());
  size_t body = buf.size() - 4;
  if (LoadBe32(p + body) != base::Crc32c(p, body)) return corrupt("CRC mismatch");
  size_t pos = 4;
  auto need = [&](size_t n) { return pos + n <= body; };
  uint32_t count = LoadBe32(p + pos);
  pos += 4;
  std::unordered_map<int64_t, Entry> loaded;
  for (uint32_t i = 0; i < count; ++i) {
    if (!need(11)) return corrupt("truncated");
    auto id = static_cast<int64_t>(LoadBe64(p + pos));
    Entry e;
    e.epoch = static_cast<int16_t>(LoadBe16(p + pos + 8));
    uint8_t n = p[pos + 10];
    pos += 11;
    if (n > kMaxBatchesPerProducer || !need(24u * n)) return corrupt("truncated");
    for (uint8_t j = 0; j < n; ++j) {
      ProducerBatch b;
      b.first_seq = static_cast<int32_t>(LoadBe32(p + pos));
      b.last_seq = static_cast<int32_t>(LoadBe32(p + pos + 4));
      b.base_offset = static_cast<int64_t>(LoadBe64(p + pos + 8));
      b.last_offset = static_cast<int64_t>(LoadBe64(p + pos + 16));
      pos += 24;
      e.batches.push_back(b);
    }
    loaded[id] = std::move(e);
  }
  if (pos != body) return corrupt("trailing bytes");
  producers_ = std::move(loaded);
  return Status::Ok();
}

}  // namespace tally::broker
