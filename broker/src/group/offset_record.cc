#include "group/offset_record.h"

#include <fmt/core.h>

#include <cassert>
#include <cstring>
#include <type_traits>
#include <utility>

#include "base/crc32c.h"

namespace tally::broker::internal {
namespace {

template <typename T>
void PutFixed(std::string* out, T value) {
  using U = std::make_unsigned_t<T>;
  U u = static_cast<U>(value);
  for (size_t i = 0; i < sizeof(T); i++) {
    out->push_back(static_cast<char>(static_cast<uint8_t>(u >> (8 * i))));
  }
}

template <typename T>
T GetFixed(const char* p) {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); i++) {
    u |= static_cast<U>(static_cast<U>(static_cast<uint8_t>(p[i])) << (8 * i));
  }
  return static_cast<T>(u);
}

// Reads the body's fields in order; every read checks the bounds.
class BodyReader {
 public:
  BodyReader(const char* p, size_t n) : p_(p), n_(n) {}

  template <typename T>
  bool Fixed(T* v) {
    if (n_ - pos_ < sizeof(T)) return false;
    *v = GetFixed<T>(p_ + pos_);
    pos_ += sizeof(T);
    return true;
  }

  template <typename LenT>
  bool String(std::string* s) {
    LenT len;
    if (!Fixed(&len) || n_ - pos_ < len) return false;
    s->assign(p_ + pos_, len);
    pos_ += len;
    return true;
  }

  bool AtEnd() const { return pos_ == n_; }

 private:
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
};

}  // namespace

void EncodeOffsetRecord(const OffsetRecord& record, std::string* out) {
  assert(record.group.size() <= UINT16_MAX && record.topic.size() <= UINT16_MAX);
  std::string body;
  body.reserve(40 + record.group.size() + record.topic.size() + record.metadata.size());
  PutFixed<uint8_t>(&body, record.deleted ? 1 : 0);
  PutFixed<uint16_t>(&body, static_cast<uint16_t>(record.group.size()));
  body += record.group;
  PutFixed<uint16_t>(&body, static_cast<uint16_t>(record.topic.size()));
  body += record.topic;
  PutFixed<int32_t>(&body, record.partition);
  PutFixed<int64_t>(&body, record.offset);
  PutFixed<int32_t>(&body, record.leader_epoch);
  PutFixed<uint32_t>(&body, static_cast<uint32_t>(record.metadata.size()));
  body += record.metadata;
  PutFixed<int64_t>(&body, record.commit_timestamp_ms);
  PutFixed<uint32_t>(out, static_cast<uint32_t>(body.size() + 4));
  PutFixed<uint32_t>(out, base::Crc32c(body.data(), body.size()));
  *out += body;
}

OffsetRecordDecode DecodeOffsetRecord(const char* data, size_t n, OffsetRecord* record,
                                      size_t* size, std::string* why) {
  if (n < 4) return OffsetRecordDecode::kTruncated;
  const uint32_t length = GetFixed<uint32_t>(data);
  if (length < 4 || length > kMaxOffsetRecordLength) {
    *why = fmt::format("record length {} out of range", length);
    return OffsetRecordDecode::kBad;
  }
  if (n - 4 < length) return OffsetRecordDecode::kTruncated;
  const char* body = data + 8;
  const size_t body_size = length - 4;
  const uint32_t stored_crc = GetFixed<uint32_t>(data + 4);
  const uint32_t crc = base::Crc32c(body, body_size);
  if (crc != stored_crc) {
    *why = fmt::format("CRC32C mismatch (stored {:08x}, computed {:08x})", stored_crc, crc);
    return OffsetRecordDecode::kBad;
  }
  BodyReader r(body, body_size);
  uint8_t type = 0;
  OffsetRecord rec;
  if (!r.Fixed(&type) || !r.String<uint16_t>(&rec.group) || !r.String<uint16_t>(&rec.topic) ||
      !r.Fixed(&rec.partition) || !r.Fixed(&rec.offset) || !r.Fixed(&rec.leader_epoch) ||
      !r.String<uint32_t>(&rec.metadata) || !r.Fixed(&rec.commit_timestamp_ms) || !r.AtEnd() ||
      type > 1) {
    *why = "record body does not decode";
    return OffsetRecordDecode::kBad;
  }
  rec.deleted = type == 1;
  *record = std::move(rec);
  *size = 4 + static_cast<size_t>(length);
  return OffsetRecordDecode::kOk;
}

}  // namespace tally::broker::internal
