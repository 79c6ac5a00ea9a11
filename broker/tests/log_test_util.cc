#include "log_test_util.h"

#include <cerrno>

#include "log/compression.h"
#include "log/record_batch.h"

namespace tally::broker::testutil {

using base::Result;
using base::Status;

std::string MakeBatch(const std::vector<TestRecord>& records, ProducerFields producer) {
  BatchHeader h;
  h.base_offset = 0;
  h.base_timestamp = records.empty() ? 0 : records[0].timestamp;
  h.max_timestamp = h.base_timestamp;
  std::string body;
  for (size_t i = 0; i < records.size(); ++i) {
    const TestRecord& r = records[i];
    h.max_timestamp = std::max(h.max_timestamp, r.timestamp);
    h.base_timestamp = std::min(h.base_timestamp, r.timestamp);
  }
  for (size_t i = 0; i < records.size(); ++i) {
    const TestRecord& r = records[i];
    std::optional<std::string_view> key, value;
    if (r.key) key = *r.key;
    if (r.value) value = *r.value;
    batch_encoding::AppendRecord(&body, r.timestamp - h.base_timestamp, static_cast<int32_t>(i),
                                 key, value);
  }
  h.last_offset_delta = static_cast<int32_t>(records.size()) - 1;
  h.record_count = static_cast<int32_t>(records.size());
  h.producer_id = producer.producer_id;
  h.producer_epoch = producer.epoch;
  h.base_sequence = producer.base_sequence;
  return batch_encoding::BuildBatch(h, body);
}

std::string MakeSimpleBatch(int count, int64_t timestamp, std::string_view prefix,
                            ProducerFields producer) {
  std::vector<TestRecord> records;
  for (int i = 0; i < count; ++i) {
    records.push_back(
        TestRecord{std::string(prefix) + std::to_string(i), "v" + std::to_string(i), timestamp});
  }
  return MakeBatch(records, producer);
}

Result<std::vector<DecodedRecord>> DecodeAll(std::string_view bytes) {
  std::span<const uint8_t> all(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  std::vector<DecodedRecord> out;
  size_t pos = 0;
  while (pos < all.size()) {
    Result<BatchHeader> h = ParseBatchHeader(all.subspan(pos));
    if (!h.ok()) return h.status();
    if (pos + static_cast<size_t>(h->size()) > all.size()) {
      return Status::Corruption("partial batch in a read");
    }
    std::span<const uint8_t> batch = all.subspan(pos, static_cast<size_t>(h->size()));
    if (ComputeBatchCrc(batch) != h->crc) return Status::Corruption("CRC mismatch in a read");
    Result<std::string> body = BatchRecordsUncompressed(*h, batch);
    if (!body.ok()) return body.status();
    RecordIterator it(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body->data()), body->size()),
        h->record_count);
    Record r;
    while (true) {
      Result<bool> more = it.Next(&r);
      if (!more.ok()) return more.status();
      if (!*more) break;
      DecodedRecord d;
      d.offset = h->base_offset + r.offset_delta;
      if (r.key) d.key = std::string(reinterpret_cast<const char*>(r.key->data()), r.key->size());
      if (r.value) {
        d.value = std::string(reinterpret_cast<const char*>(r.value->data()), r.value->size());
      }
      d.timestamp = h->base_timestamp + r.timestamp_delta;
      out.push_back(d);
    }
    pos += batch.size();
  }
  return out;
}

Result<AppendResult> AppendCopy(PartitionLog& log, std::string_view batch, int64_t now_ms) {
  std::vector<uint8_t> buf(batch.begin(), batch.end());
  return log.Append(std::span<uint8_t>(buf), now_ms);
}

Result<std::vector<DecodedRecord>> ReadAll(const PartitionLog& log, int64_t from,
                                           int64_t max_offset, int64_t max_bytes) {
  std::vector<DecodedRecord> out;
  int64_t next = from;
  while (next < max_offset) {
    Result<std::string> bytes = log.Read(next, max_bytes, max_offset);
    if (!bytes.ok()) return bytes.status();
    if (bytes->empty()) break;
    Result<std::vector<DecodedRecord>> records = DecodeAll(*bytes);
    if (!records.ok()) return records.status();
    for (const DecodedRecord& r : *records) {
      if (r.offset >= next) out.push_back(r);
    }
    if (records->empty()) break;
    int64_t last = records->back().offset;
    // A batch whose tail records were compacted away ends before its
    // lastOffsetDelta: continue after the batch, not after its last record.
    int64_t pos = 0;
    int64_t batch_end = next;
    while (pos < static_cast<int64_t>(bytes->size())) {
      Result<BatchHeader> h = ParseBatchHeader(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes->data()) + pos,
                                   bytes->size() - static_cast<size_t>(pos)));
      if (!h.ok()) return h.status();
      batch_end = h->last_offset() + 1;
      pos += h->size();
    }
    next = std::max(last + 1, batch_end);
  }
  return out;
}

ssize_t FaultyFileOps::Pwrite(int fd, const void* buf, size_t n, off_t offset) {
  int64_t budget = write_budget.load();
  if (budget <= 0) {
    errno = ENOSPC;
    return -1;
  }
  size_t allowed = static_cast<size_t>(std::min<int64_t>(budget, static_cast<int64_t>(n)));
  ssize_t w = FileOps::Pwrite(fd, buf, allowed, offset);
  if (w > 0) write_budget.fetch_sub(w);
  return w;
}

int FaultyFileOps::Fdatasync(int fd) {
  syncs.fetch_add(1);
  if (fail_sync.load()) {
    errno = EIO;
    return -1;
  }
  return FileOps::Fdatasync(fd);
}

}  // namespace tally::broker::testutil
