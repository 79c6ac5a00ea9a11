#include "schemas/delta.h"

#include <fmt/core.h>

#include "base/hash.h"

namespace tally::schemas {
namespace {

inline void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

inline uint64_t ZigZag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
inline int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

inline bool GetVarint(std::string_view in, size_t* pos, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift <= 63 && *pos < in.size(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(in[(*pos)++]);
    result |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = result;
      return true;
    }
  }
  return false;
}

inline void PutBytes(std::string* out, std::string_view s) {
  PutVarint(out, s.size());
  out->append(s);
}

inline bool GetBytes(std::string_view in, size_t* pos, std::string_view* s) {
  uint64_t n;
  if (!GetVarint(in, pos, &n) || n > in.size() - *pos) return false;
  *s = in.substr(*pos, n);
  *pos += n;
  return true;
}

}  // namespace

uint32_t PartitionOf(uint64_t entity, uint32_t partitions) {
  // splitmix64's finalizer: ids are often sequential, this spreads them.
  uint64_t z = entity + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<uint32_t>(z % partitions);
}

uint32_t DeltaBatchBuilder::StreamIndex(std::string_view topic, int32_t partition) {
  for (uint32_t i = 0; i < streams_.size(); i++) {
    if (streams_[i].partition == partition && streams_[i].topic == topic) return i;
  }
  streams_.push_back({std::string(topic), partition});
  first_offsets_.push_back(-1);
  return static_cast<uint32_t>(streams_.size() - 1);
}

uint64_t EventIdHash(std::string_view id) {
  // FNV-1a over the bytes, then splitmix64's finalizer so that ids that
  // differ in one character differ in every bit. Fixed forever: the hashes
  // are stored in the state and in tally.deltas.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : id) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h = base::SplitMix64(h);
  return h == 0 ? 1 : h;
}

void DeltaBatchBuilder::Add(const Delta& d) {
  if (first_offsets_[d.source.stream] < 0) first_offsets_[d.source.stream] = d.source.offset;
  std::string* b = &body_;
  PutVarint(b, d.source.stream);
  PutVarint(b, static_cast<uint64_t>(d.source.offset));
  PutVarint(b, d.source.effect);
  PutVarint(b, static_cast<uint64_t>(d.source.ts));
  // The op's high bit says an event id's hash follows (8 bytes, little
  // endian): deltas of events without an id carry nothing more.
  b->push_back(
      static_cast<char>(static_cast<uint8_t>(d.op) | (d.event_id != 0 ? kEventIdFlag : 0)));
  if (d.event_id != 0) {
    for (int i = 0; i < 8; i++) b->push_back(static_cast<char>((d.event_id >> (8 * i)) & 0xff));
  }
  PutVarint(b, d.entity);
  switch (d.op) {
    case DeltaOp::kPostCounter:
    case DeltaOp::kUserCounter:
    case DeltaOp::kUnreadAdd:
      b->push_back(static_cast<char>(d.field));
      PutVarint(b, ZigZag(d.amount));
      break;
    case DeltaOp::kUnreadReset:
      b->push_back(static_cast<char>(d.field));
      break;
    case DeltaOp::kLikeSet:
    case DeltaOp::kLikeUnset:
    case DeltaOp::kFollowSet:
    case DeltaOp::kFollowUnset:
    case DeltaOp::kNoticeRead:
    case DeltaOp::kViewMember:
      PutVarint(b, d.member);
      break;
    case DeltaOp::kNoticeAppend:
      PutVarint(b, d.member);
      PutBytes(b, d.text);
      break;
    case DeltaOp::kRedDotPublish:
    case DeltaOp::kRedDotRead:
      PutBytes(b, d.text);
      break;
    case DeltaOp::kFeedSnapshot:
      PutVarint(b, d.snapshot_size);
      for (uint32_t i = 0; i < d.snapshot_size; i++) {
        PutVarint(b, d.snapshot[i].first);
        PutVarint(b, d.snapshot[i].second);
      }
      break;
  }
  count_++;
}

std::string DeltaBatchBuilder::Finish() {
  std::string out;
  out.reserve(body_.size() + 16 + streams_.size() * 24);
  out.push_back(1);
  PutVarint(&out, streams_.size());
  for (const auto& s : streams_) {
    PutBytes(&out, s.topic);
    PutVarint(&out, static_cast<uint64_t>(static_cast<uint32_t>(s.partition)));
  }
  PutVarint(&out, count_);
  out.append(body_);
  streams_.clear();
  first_offsets_.clear();
  body_.clear();
  count_ = 0;
  return out;
}

base::Status DeltaBatchReader::Open(std::string_view bytes) {
  in_ = bytes;
  pos_ = 0;
  read_ = 0;
  total_ = 0;
  snapshots_used_ = 0;
  streams_.clear();
  status_ = base::Status::Ok();
  if (in_.empty() || in_[0] != 1) {
    status_ = base::Status::Corruption("delta batch: unknown version");
    return status_;
  }
  pos_ = 1;
  uint64_t n;
  if (!GetVarint(in_, &pos_, &n) || n > in_.size()) {
    status_ = base::Status::Corruption("delta batch: bad stream table");
    return status_;
  }
  for (uint64_t i = 0; i < n; i++) {
    std::string_view topic;
    uint64_t part;
    if (!GetBytes(in_, &pos_, &topic) || !GetVarint(in_, &pos_, &part) || part > INT32_MAX) {
      status_ = base::Status::Corruption("delta batch: bad stream table");
      return status_;
    }
    streams_.push_back({std::string(topic), static_cast<int32_t>(part)});
  }
  if (!GetVarint(in_, &pos_, &total_)) {
    status_ = base::Status::Corruption("delta batch: bad count");
    return status_;
  }
  return status_;
}

bool DeltaBatchReader::Next(Delta* d) {
  if (!status_.ok() || read_ >= total_) {
    if (status_.ok() && pos_ != in_.size()) status_ = base::Status::Corruption("delta batch: trailing bytes");
    return false;
  }
  auto fail = [&](const char* what) {
    status_ = base::Status::Corruption(fmt::format("delta batch: delta {}: {}", read_, what));
    return false;
  };
  uint64_t stream, offset, effect, ts, entity;
  if (!GetVarint(in_, &pos_, &stream) || stream >= streams_.size()) return fail("bad stream");
  if (!GetVarint(in_, &pos_, &offset) || !GetVarint(in_, &pos_, &effect) || !GetVarint(in_, &pos_, &ts)) {
    return fail("bad source");
  }
  if (pos_ >= in_.size()) return fail("truncated");
  uint8_t op = static_cast<uint8_t>(in_[pos_++]);
  d->event_id = 0;
  if (op & kEventIdFlag) {
    op &= static_cast<uint8_t>(~kEventIdFlag);
    if (in_.size() - pos_ < 8) return fail("truncated event id");
    for (int i = 0; i < 8; i++)
      d->event_id |= uint64_t{static_cast<uint8_t>(in_[pos_ + i])} << (8 * i);
    pos_ += 8;
    if (d->event_id == 0) return fail("zero event id");
  }
  if (op < 1 || op > kMaxDeltaOp) return fail("unknown op");
  if (!GetVarint(in_, &pos_, &entity)) return fail("bad entity");
  d->op = static_cast<DeltaOp>(op);
  d->source = {static_cast<uint32_t>(stream), static_cast<int64_t>(offset), static_cast<uint32_t>(effect),
               static_cast<int64_t>(ts)};
  d->entity = entity;
  d->field = 0;
  d->amount = 0;
  d->member = 0;
  d->text = {};
  d->snapshot = nullptr;
  d->snapshot_size = 0;
  uint64_t v;
  switch (d->op) {
    case DeltaOp::kPostCounter:
    case DeltaOp::kUserCounter:
    case DeltaOp::kUnreadAdd:
      if (pos_ >= in_.size()) return fail("truncated");
      d->field = static_cast<uint8_t>(in_[pos_++]);
      if (!GetVarint(in_, &pos_, &v)) return fail("bad amount");
      d->amount = UnZigZag(v);
      break;
    case DeltaOp::kUnreadReset:
      if (pos_ >= in_.size()) return fail("truncated");
      d->field = static_cast<uint8_t>(in_[pos_++]);
      break;
    case DeltaOp::kLikeSet:
    case DeltaOp::kLikeUnset:
    case DeltaOp::kFollowSet:
    case DeltaOp::kFollowUnset:
    case DeltaOp::kNoticeRead:
    case DeltaOp::kViewMember:
      if (!GetVarint(in_, &pos_, &d->member)) return fail("bad member");
      break;
    case DeltaOp::kNoticeAppend:
      if (!GetVarint(in_, &pos_, &d->member) || !GetBytes(in_, &pos_, &d->text)) return fail("bad notice");
      break;
    case DeltaOp::kRedDotPublish:
    case DeltaOp::kRedDotRead:
      if (!GetBytes(in_, &pos_, &d->text)) return fail("bad channel");
      break;
    case DeltaOp::kFeedSnapshot: {
      uint64_t n;
      if (!GetVarint(in_, &pos_, &n) || n > in_.size()) return fail("bad snapshot");
      if (snapshots_used_ == snapshots_.size()) snapshots_.emplace_back();
      auto& snapshot = snapshots_[snapshots_used_++];
      snapshot.clear();
      for (uint64_t i = 0; i < n; i++) {
        uint64_t a, b;
        if (!GetVarint(in_, &pos_, &a) || !GetVarint(in_, &pos_, &b)) return fail("bad snapshot");
        snapshot.emplace_back(a, b);
      }
      d->snapshot = snapshot.data();
      d->snapshot_size = static_cast<uint32_t>(n);
      break;
    }
  }
  read_++;
  return true;
}

}  // namespace tally::schemas
