#include "log/record_batch.h"

#include <fmt/core.h>

#include <cstring>
#include <limits>

#include "base/crc32c.h"

namespace tally::broker {

using base::Result;
using base::Status;

int32_t BatchHeader::last_sequence() const {
  if (base_sequence < 0) return base_sequence;
  int64_t last = static_cast<int64_t>(base_sequence) + last_offset_delta;
  if (last > std::numeric_limits<int32_t>::max()) {
    last -= static_cast<int64_t>(std::numeric_limits<int32_t>::max()) + 1;
  }
  return static_cast<int32_t>(last);
}

Result<BatchHeader> ParseBatchHeader(std::span<const uint8_t> data) {
  if (data.size() < kBatchHeaderSize) {
    // Magic sits at byte 16 in every message format, so an old-format
    // message set shorter than a v2 header is still named as such.
    if (data.size() > 16 && data[16] < 2) {
      return Status::Corruption(fmt::format("message format v{} is not supported", data[16]));
    }
    return Status::Corruption(fmt::format("record batch header truncated: {} of {} bytes",
                                          data.size(), kBatchHeaderSize));
  }
  const uint8_t* p = data.data();
  BatchHeader h;
  h.base_offset = static_cast<int64_t>(LoadBe64(p));
  h.batch_length = static_cast<int32_t>(LoadBe32(p + 8));
  h.partition_leader_epoch = static_cast<int32_t>(LoadBe32(p + 12));
  h.magic = static_cast<int8_t>(p[16]);
  h.crc = LoadBe32(p + 17);
  h.attributes = static_cast<int16_t>(LoadBe16(p + 21));
  h.last_offset_delta = static_cast<int32_t>(LoadBe32(p + 23));
  h.base_timestamp = static_cast<int64_t>(LoadBe64(p + 27));
  h.max_timestamp = static_cast<int64_t>(LoadBe64(p + 35));
  h.producer_id = static_cast<int64_t>(LoadBe64(p + 43));
  h.producer_epoch = static_cast<int16_t>(LoadBe16(p + 51));
  h.base_sequence = static_cast<int32_t>(LoadBe32(p + 53));
  h.record_count = static_cast<int32_t>(LoadBe32(p + 57));
  if (h.magic != 2) {
    return Status::Corruption(fmt::format("message format v{} is not supported", h.magic));
  }
  if (h.batch_length < static_cast<int32_t>(kBatchHeaderSize - kBatchLogOverhead)) {
    return Status::Corruption(fmt::format("record batch length {} is too small", h.batch_length));
  }
  if (h.last_offset_delta < 0) {
    return Status::Corruption(fmt::format("negative lastOffsetDelta {}", h.last_offset_delta));
  }
  return h;
}

uint32_t ComputeBatchCrc(std::span<const uint8_t> batch) {
  return base::Crc32c(batch.data() + kBatchAttributesOffset, batch.size() - kBatchAttributesOffset);
}

namespace {

// Checks the records of an uncompressed batch: framing fills the batch and
// offset deltas are 0, 1, 2, ...
Status CheckRecords(std::span<const uint8_t> batch, const BatchHeader& h) {
  RecordIterator it(batch, h);
  Record r;
  int32_t expected = 0;
  while (true) {
    Result<bool> more = it.Next(&r);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (r.offset_delta != expected) {
      return Status::Corruption(
          fmt::format("record {} has offsetDelta {}", expected, r.offset_delta));
    }
    ++expected;
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<BatchView>> SplitBatches(std::span<const uint8_t> records) {
  std::vector<BatchView> out;
  if (records.empty()) return Status::Corruption("empty record set");
  size_t pos = 0;
  while (pos < records.size()) {
    std::span<const uint8_t> rest = records.subspan(pos);
    Result<BatchHeader> h = ParseBatchHeader(rest);
    if (!h.ok()) return h.status().WithContext(fmt::format("batch at byte {}", pos));
    if (static_cast<uint64_t>(h->size()) > rest.size()) {
      return Status::Corruption(fmt::format(
          "batch at byte {}: length {} runs past the {} bytes sent", pos, h->size(), rest.size()));
    }
    std::span<const uint8_t> bytes = rest.first(static_cast<size_t>(h->size()));
    if (ComputeBatchCrc(bytes) != h->crc) {
      return Status::Corruption(fmt::format("batch at byte {}: CRC mismatch", pos));
    }
    if (h->record_count < 1 || h->record_count != h->last_offset_delta + 1) {
      return Status::Corruption(fmt::format("batch at byte {}: recordCount {} lastOffsetDelta {}",
                                            pos, h->record_count, h->last_offset_delta));
    }
    if (h->compression() == Compression::kNone) {
      Status st = CheckRecords(bytes, *h);
      if (!st.ok()) return st.WithContext(fmt::format("batch at byte {}", pos));
    } else if (static_cast<uint8_t>(h->compression()) > 4) {
      return Status::Corruption(fmt::format("batch at byte {}: unknown compression {}", pos,
                                            static_cast<int>(h->compression())));
    }
    out.push_back(BatchView{*h, bytes});
    pos += bytes.size();
  }
  return out;
}

void SetBaseOffset(std::span<uint8_t> batch, int64_t base_offset) {
  StoreBe64(batch.data(), static_cast<uint64_t>(base_offset));
}

bool ReadVarlong(std::span<const uint8_t>* in, int64_t* out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (in->empty()) return false;
    uint8_t b = in->front();
    *in = in->subspan(1);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) {
      *out = static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
      return true;
    }
    if (shift == 63) return false;
  }
  return false;
}

bool ReadVarint(std::span<const uint8_t>* in, int32_t* out) {
  int64_t v;
  std::span<const uint8_t> save = *in;
  if (!ReadVarlong(in, &v) || v < std::numeric_limits<int32_t>::min() ||
      v > std::numeric_limits<int32_t>::max()) {
    *in = save;
    return false;
  }
  *out = static_cast<int32_t>(v);
  return true;
}

void AppendVarint(std::string* out, int64_t value) {
  uint64_t v = (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

RecordIterator::RecordIterator(std::span<const uint8_t> batch, const BatchHeader& header)
    : rest_(batch.size() >= kBatchHeaderSize ? batch.subspan(kBatchHeaderSize)
                                             : std::span<const uint8_t>()),
      remaining_(header.record_count) {}

Result<bool> RecordIterator::Next(Record* out) {
  if (remaining_ <= 0) {
    if (!rest_.empty()) {
      return Status::Corruption(fmt::format("{} bytes after the last record", rest_.size()));
    }
    return false;
  }
  std::span<const uint8_t> start = rest_;
  int32_t length;
  if (!ReadVarint(&rest_, &length) || length < 0 || static_cast<size_t>(length) > rest_.size()) {
    remaining_ = 0;
    return Status::Corruption("record length runs past the batch");
  }
  size_t prefix = start.size() - rest_.size();
  std::span<const uint8_t> body = rest_.first(static_cast<size_t>(length));
  out->raw = start.first(prefix + static_cast<size_t>(length));
  rest_ = rest_.subspan(static_cast<size_t>(length));
  --remaining_;
  auto fail = [this](const char* what) -> Result<bool> {
    remaining_ = 0;
    return Status::Corruption(fmt::format("malformed record: {}", what));
  };
  if (body.empty()) return fail("no attributes");
  out->attributes = static_cast<int8_t>(body[0]);
  body = body.subspan(1);
  if (!ReadVarlong(&body, &out->timestamp_delta)) return fail("timestampDelta");
  if (!ReadVarint(&body, &out->offset_delta)) return fail("offsetDelta");
  auto read_bytes = [&body](std::optional<std::span<const uint8_t>>* field) {
    int32_t n;
    if (!ReadVarint(&body, &n) || n < -1 || (n > 0 && static_cast<size_t>(n) > body.size())) {
      return false;
    }
    if (n < 0) {
      field->reset();
    } else {
      *field = body.first(static_cast<size_t>(n));
      body = body.subspan(static_cast<size_t>(n));
    }
    return true;
  };
  if (!read_bytes(&out->key)) return fail("key");
  if (!read_bytes(&out->value)) return fail("value");
  out->headers = body;
  int32_t header_count;
  if (!ReadVarint(&body, &header_count) || header_count < 0) return fail("header count");
  for (int32_t i = 0; i < header_count; ++i) {
    std::optional<std::span<const uint8_t>> k, v;
    if (!read_bytes(&k) || !k.has_value() || !read_bytes(&v)) return fail("header");
  }
  if (!body.empty()) return fail("bytes after the headers");
  return true;
}

namespace batch_encoding {

void AppendRecord(std::string* out, int64_t timestamp_delta, int32_t offset_delta,
                  std::optional<std::string_view> key, std::optional<std::string_view> value,
                  std::string_view raw_headers) {
  std::string body;
  body.push_back(0);  // attributes
  AppendVarint(&body, timestamp_delta);
  AppendVarint(&body, offset_delta);
  for (const auto& field : {key, value}) {
    if (!field.has_value()) {
      AppendVarint(&body, -1);
    } else {
      AppendVarint(&body, static_cast<int64_t>(field->size()));
      body.append(*field);
    }
  }
  body.append(raw_headers);
  AppendVarint(out, static_cast<int64_t>(body.size()));
  out->append(body);
}

std::string BuildBatch(const BatchHeader& h, std::string_view records) {
  std::string out(kBatchHeaderSize, '\0');
  out.append(records);
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  StoreBe64(p, static_cast<uint64_t>(h.base_offset));
  StoreBe32(p + 8, static_cast<uint32_t>(out.size() - kBatchLogOverhead));
  StoreBe32(p + 12, static_cast<uint32_t>(h.partition_leader_epoch));
  p[16] = 2;
  StoreBe16(p + 21, static_cast<uint16_t>(h.attributes));
  StoreBe32(p + 23, static_cast<uint32_t>(h.last_offset_delta));
  StoreBe64(p + 27, static_cast<uint64_t>(h.base_timestamp));
  StoreBe64(p + 35, static_cast<uint64_t>(h.max_timestamp));
  StoreBe64(p + 43, static_cast<uint64_t>(h.producer_id));
  StoreBe16(p + 51, static_cast<uint16_t>(h.producer_epoch));
  StoreBe32(p + 53, static_cast<uint32_t>(h.base_sequence));
  StoreBe32(p + 57, static_cast<uint32_t>(h.record_count));
  std::span<const uint8_t> bytes(p, out.size());
  StoreBe32(p + kBatchCrcOffset, ComputeBatchCrc(bytes));
  return out;
}

}  // namespace batch_encoding
}  // namespace tally::broker
