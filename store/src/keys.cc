#include "keys.h"

#include <algorithm>

namespace tally::store {

int CounterFieldCount(char kind) {
  switch (static_cast<RecordKind>(kind)) {
    case RecordKind::kPostCounters: return schemas::kPostFieldCount;
    case RecordKind::kUserCounters: return schemas::kUserFieldCount;
    case RecordKind::kUnreadCounters: return schemas::kUnreadCounterKinds;
    case RecordKind::kNoticeRead: return 2;
    case RecordKind::kRedDot: return 1;
    case RecordKind::kUserRedDot: return 2;
    default: return 0;
  }
}

namespace {
inline void PutBigEndian64(std::string* out, uint64_t v) {
  for (int i = 7; i >= 0; i--) out->push_back(static_cast<char>((v >> (i * 8)) & 0xff));
}
}  // namespace

void EncodeKey(RecordKind kind, uint64_t id, std::string* out) {
  out->clear();
  out->push_back(static_cast<char>(kind));
  PutBigEndian64(out, id);
}

void EncodeKey(RecordKind kind, uint64_t id, uint64_t member, std::string* out) {
  EncodeKey(kind, id, out);
  PutBigEndian64(out, member);
}

uint64_t DecodeBigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void PutVarint64(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool GetVarint64(std::string_view in, size_t* pos, uint64_t* v) {
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

void EncodeCounters(const int64_t* values, int n, std::string* out) {
  out->clear();
  for (int i = 0; i < n; i++) PutVarint64(out, static_cast<uint64_t>(values[i] < 0 ? 0 : values[i]));
}

bool DecodeCounters(std::string_view in, int64_t* values, int n) {
  size_t pos = 0;
  for (int i = 0; i < n; i++) {
    values[i] = 0;
    if (pos >= in.size()) continue;
    uint64_t v;
    if (!GetVarint64(in, &pos, &v)) return false;
    values[i] = static_cast<int64_t>(v);
  }
  return true;
}

namespace {
constexpr int kPostFields = schemas::kPostFieldCount;
constexpr char kPostPageOpsVersion = 3;

bool GetCounterOp(std::string_view in, size_t* pos, CounterOp* op) {
  if (*pos >= in.size()) return false;
  op->reset = in[(*pos)++] & 1;
  uint64_t a, f;
  if (!GetVarint64(in, pos, &a) || !GetVarint64(in, pos, &f)) return false;
  op->add = ZigZagDecode(a);
  op->floor = static_cast<int64_t>(f);
  return true;
}
void PutCounterOp(std::string* out, const CounterOp& op) {
  out->push_back(op.reset ? 1 : 0);
  PutVarint64(out, ZigZagEncode(op.add));
  PutVarint64(out, static_cast<uint64_t>(op.floor));
}
// The next slot of a page or operand into *slot, which holds the one
// before: a gap from it (the first's from 0), never 0 after the first.
bool GetSlot(std::string_view in, size_t* pos, bool first, uint64_t* slot) {
  uint64_t gap;
  if (!GetVarint64(in, pos, &gap) || (!first && gap == 0)) return false;
  *slot = first ? gap : *slot + gap;
  return true;
}
}  // namespace

void EncodeCounterOps(const CounterOp* ops, int n, std::string* out) {
  out->clear();
  out->push_back(1);  // operand format version
  for (int i = 0; i < n; i++) PutCounterOp(out, ops[i]);
}

bool DecodeCounterOps(std::string_view in, CounterOp* ops, int n) {
  if (in.empty() || in[0] != 1) return false;
  size_t pos = 1;
  for (int i = 0; i < n; i++) {
    if (!GetCounterOp(in, &pos, &ops[i])) return false;
  }
  return pos == in.size();
}

int PostPageBits(uint32_t partitions) {
  // 64 ids of a sequence per partition: a page is ~64 posts when ids are
  // dense, and a read decodes at most a few hundred bytes.
  int bits = 6;
  while ((uint64_t{1} << (bits - 6)) < partitions) bits++;
  return bits;
}

void EncodePostPageKey(uint64_t post_id, int bits, std::string* out) {
  EncodeKey(RecordKind::kPostPage, post_id >> bits, out);
}

void EncodePostPage(const std::vector<PagedPost>& posts, std::string* out) {
  out->clear();
  PutVarint64(out, posts.size());
  uint64_t prev = 0;
  for (const PagedPost& p : posts) {
    PutVarint64(out, p.slot - prev);
    prev = p.slot;
    for (int64_t v : p.v) PutVarint64(out, static_cast<uint64_t>(v < 0 ? 0 : v));
  }
}

bool DecodePostPage(std::string_view in, std::vector<PagedPost>* out) {
  out->clear();
  size_t pos = 0;
  uint64_t n;
  if (!GetVarint64(in, &pos, &n) || n > in.size()) return false;
  out->resize(n);
  for (uint64_t i = 0; i < n; i++) {
    PagedPost& p = (*out)[i];
    if (i > 0) p.slot = (*out)[i - 1].slot;
    if (!GetSlot(in, &pos, i == 0, &p.slot)) return false;
    for (int64_t& v : p.v) {
      uint64_t x;
      if (!GetVarint64(in, &pos, &x)) return false;
      v = static_cast<int64_t>(x);
    }
  }
  return pos == in.size();
}

bool FindInPostPage(std::string_view in, uint64_t slot, int64_t* v) {
  std::fill(v, v + kPostFields, 0);
  size_t pos = 0;
  uint64_t n, at = 0, x;
  if (!GetVarint64(in, &pos, &n) || n > in.size()) return false;
  for (uint64_t i = 0; i < n; i++) {
    if (!GetSlot(in, &pos, i == 0, &at)) return false;
    if (at > slot) return true;
    for (int f = 0; f < kPostFields; f++) {
      if (!GetVarint64(in, &pos, &x)) return false;
      if (at == slot) v[f] = static_cast<int64_t>(x);
    }
    if (at == slot) return true;
  }
  return true;
}

void EncodePostPageOps(const PagedPostOps* posts, size_t n, std::string* out) {
  out->clear();
  out->push_back(kPostPageOpsVersion);
  PutVarint64(out, n);
  uint64_t prev = 0;
  for (size_t i = 0; i < n; i++) {
    PutVarint64(out, posts[i].slot - prev);
    prev = posts[i].slot;
    for (const CounterOp& op : posts[i].ops) PutCounterOp(out, op);
  }
}

bool DecodePostPageOps(std::string_view in, std::vector<PagedPostOps>* out) {
  out->clear();
  if (in.empty() || in[0] != kPostPageOpsVersion) return false;
  size_t pos = 1;
  uint64_t n;
  if (!GetVarint64(in, &pos, &n) || n > in.size()) return false;
  out->resize(n);
  for (uint64_t i = 0; i < n; i++) {
    PagedPostOps& p = (*out)[i];
    if (i > 0) p.slot = (*out)[i - 1].slot;
    if (!GetSlot(in, &pos, i == 0, &p.slot)) return false;
    for (CounterOp& op : p.ops) {
      if (!GetCounterOp(in, &pos, &op)) return false;
    }
  }
  return pos == in.size();
}

void EncodeViewChunkKey(uint32_t table, uint32_t chunk, std::string* out) {
  out->clear();
  out->push_back(static_cast<char>(RecordKind::kViewChunk));
  for (int i = 3; i >= 0; i--) out->push_back(static_cast<char>((table >> (i * 8)) & 0xff));
  for (int i = 3; i >= 0; i--) out->push_back(static_cast<char>((chunk >> (i * 8)) & 0xff));
}

void EncodeBitOperand(const std::vector<uint16_t>& bits, std::string* out) {
  out->clear();
  out->push_back(2);
  for (uint16_t b : bits) {
    out->push_back(static_cast<char>(b & 0xff));
    out->push_back(static_cast<char>(b >> 8));
  }
}

void EncodeSnapshot(int64_t taken_ts, std::vector<std::pair<uint64_t, uint64_t>> followees, std::string* out) {
  std::sort(followees.begin(), followees.end());
  out->clear();
  out->push_back(1);
  PutVarint64(out, static_cast<uint64_t>(taken_ts));
  PutVarint64(out, followees.size());
  uint64_t prev = 0;
  for (const auto& [id, count] : followees) {
    PutVarint64(out, id - prev);  // ascending ids: small gaps
    PutVarint64(out, count);
    prev = id;
  }
}

bool DecodeSnapshot(std::string_view in, FeedSnapshot* out) {
  *out = FeedSnapshot();
  if (in.empty() || in[0] != 1) return false;
  size_t pos = 1;
  uint64_t ts, n;
  if (!GetVarint64(in, &pos, &ts) || !GetVarint64(in, &pos, &n) || n > in.size()) return false;
  out->exists = true;
  out->taken_ts = static_cast<int64_t>(ts);
  uint64_t prev = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t gap, count;
    if (!GetVarint64(in, &pos, &gap) || !GetVarint64(in, &pos, &count)) return false;
    prev += gap;
    out->followees.emplace_back(prev, count);
  }
  return pos == in.size();
}

void EncodeProgress(const Progress& p, std::string* out) {
  out->clear();
  out->push_back(1);
  PutVarint64(out, static_cast<uint64_t>(p.next_deltas_offset));
  PutVarint64(out, static_cast<uint64_t>(p.max_event_ts));
  PutVarint64(out, p.marks.size());
  for (const auto& [stream, mark] : p.marks) {
    PutVarint64(out, stream.topic.size());
    out->append(stream.topic);
    PutVarint64(out, static_cast<uint32_t>(stream.partition));
    PutVarint64(out, ZigZagEncode(mark.offset));
    PutVarint64(out, mark.effect);
    PutVarint64(out, static_cast<uint64_t>(mark.ts));
  }
}

bool DecodeProgress(std::string_view in, Progress* p) {
  *p = Progress();
  if (in.empty() || in[0] != 1) return false;
  size_t pos = 1;
  uint64_t off, ts, n;
  if (!GetVarint64(in, &pos, &off) || !GetVarint64(in, &pos, &ts) || !GetVarint64(in, &pos, &n)) return false;
  p->next_deltas_offset = static_cast<int64_t>(off);
  p->max_event_ts = static_cast<int64_t>(ts);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t len, part, moff, eff, mts;
    if (!GetVarint64(in, &pos, &len) || len > in.size() - pos) return false;
    schemas::SourceStream s;
    s.topic.assign(in.substr(pos, len));
    pos += len;
    if (!GetVarint64(in, &pos, &part) || !GetVarint64(in, &pos, &moff) || !GetVarint64(in, &pos, &eff) ||
        !GetVarint64(in, &pos, &mts)) {
      return false;
    }
    s.partition = static_cast<int32_t>(part);
    p->marks[s] = SourceMark{ZigZagDecode(moff), static_cast<uint32_t>(eff), static_cast<int64_t>(mts)};
  }
  return pos == in.size();
}

}  // namespace tally::store
