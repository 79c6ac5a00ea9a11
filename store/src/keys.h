// Key layout and record encodings of the state (internal to store/).
//
//   'P' page(8)              -> post counter page: the posts of one partition whose
//                               ids share all but their low PostPageBits() bits
//                               (EncodePostPage); merged with post page operands
//   'p' post(8)              -> post counters of format 1: 4 varints (like, repost,
//                               comment, view); converted to pages when a writer
//                               opens the partition (ConvertFormat1Posts)
//   'u' user(8)              -> user counters: 3 varints (posts, followers, following)
//   'n' user(8)              -> unread counters: 6 varints (UnreadKind order)
//   'l' post(8) user(8)      -> like edge, empty value
//   'f' user(8) target(8)    -> followee edge, empty value
//   'N' notice(8)            -> notice: varint 0 (a 1-based ordinal in states written
//                               before; read by nothing), title bytes
//   'r' user(8)              -> notice read: 2 varints (last-read notice id, touched ts)
//   'd' channel              -> red dot: 1 varint (global dot time)
//   'D' user(8) channel      -> user red dot: 2 varints (click time, touched ts)
//   'S' user(8)              -> feed snapshot (EncodeSnapshot)
//   'v' table(4) chunk(4)    -> "viewed" table chunk: kViewChunkBytes bitmap, merged by OR
//   0x00 "progress"          -> Progress (see EncodeProgress)
//   0x00 "viewed"            -> ViewedTables metadata
//   0x00 "notices"           -> varint: how many 'N' records the partition holds,
//                               written with every batch that adds one
//   0x00 "global-only"       -> empty: the partition holds only kGlobalEntity's
//                               records ('N', 'd') and event ids ('i')
// Ids are big-endian so that a prefix scan returns members in id order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "schemas/delta.h"
#include "store/counter_op.h"
#include "store/state_store.h"

namespace tally::store {

// Every kind but kMeta is one ASCII letter: PartitionBatch::DropAllButGlobal
// deletes the ranges between the kinds it keeps.
enum class RecordKind : char {
  kPostPage = 'P',
  kPostCounters = 'p',  // format 1; also the read cache's kind for a post
  kUserCounters = 'u',
  kUnreadCounters = 'n',
  kLikeEdge = 'l',
  kFollowEdge = 'f',
  kNotice = 'N',
  kNoticeRead = 'r',
  kRedDot = 'd',
  kUserRedDot = 'D',
  kFeedSnapshot = 'S',
  kViewChunk = 'v',
  kEventId = 'i',  // <event id hash BE> -> varint ts, 8-byte copy fingerprint
  kMeta = '\0',
};

inline constexpr std::string_view kProgressKey{"\0progress", 9};
inline constexpr std::string_view kViewedKey{"\0viewed", 7};
inline constexpr std::string_view kNoticeCountKey{"\0notices", 8};
inline constexpr std::string_view kGlobalOnlyKey{"\0global-only", 12};

// Number of counter fields of a counter record kind; 0 if `kind` is not one.
int CounterFieldCount(char kind);

// Appends "<kind><id BE>" (and "<member BE>") to *out, which is cleared first.
void EncodeKey(RecordKind kind, uint64_t id, std::string* out);
void EncodeKey(RecordKind kind, uint64_t id, uint64_t member, std::string* out);
uint64_t DecodeBigEndian64(const char* p);

void PutVarint64(std::string* out, uint64_t v);
bool GetVarint64(std::string_view in, size_t* pos, uint64_t* v);
inline uint64_t ZigZagEncode(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
inline int64_t ZigZagDecode(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

// Counter values: `n` varints. Decoding tolerates a shorter record (missing
// fields read 0) so fields can be appended in later formats.
void EncodeCounters(const int64_t* values, int n, std::string* out);
bool DecodeCounters(std::string_view in, int64_t* values, int n);

// Merge operands: version byte, then per field: flags (bit 0 reset),
// zigzag add, varint floor.
void EncodeCounterOps(const CounterOp* ops, int n, std::string* out);
bool DecodeCounterOps(std::string_view in, CounterOp* ops, int n);

// Post counter pages. A page holds the posts of one partition whose ids
// share all but their low PostPageBits(partitions) bits: with ids given out
// in sequence (and spread over the partitions by PartitionOf), about 64
// posts. Sparse ids put one post in a page (store/README.md, "Post
// pages").
int PostPageBits(uint32_t partitions);
// 'P' (post_id >> bits)(8 BE).
void EncodePostPageKey(uint64_t post_id, int bits, std::string* out);
inline uint64_t PostSlot(uint64_t post_id, int bits) {
  return post_id & ((uint64_t{1} << bits) - 1);
}

struct PagedPost {
  uint64_t slot = 0;
  int64_t v[schemas::kPostFieldCount] = {};
};
struct PagedPostOps {
  uint64_t slot = 0;
  CounterOp ops[schemas::kPostFieldCount];
};
// A page: varint count, then per post by ascending slot: varint slot gap
// (the first from 0), 4 counter varints. Decoding checks the order.
void EncodePostPage(const std::vector<PagedPost>& posts, std::string* out);
bool DecodePostPage(std::string_view in, std::vector<PagedPost>* out);
// One post's counters from a page: zeros if the page does not hold it.
// False if the page does not decode as far as the post.
bool FindInPostPage(std::string_view in, uint64_t slot, int64_t* v);
// A page operand: version 3, varint count, then per post by ascending slot:
// varint slot gap, the 4 fields' ops as in EncodeCounterOps.
void EncodePostPageOps(const PagedPostOps* posts, size_t n, std::string* out);
bool DecodePostPageOps(std::string_view in, std::vector<PagedPostOps>* out);

// 'v' table(4 BE) chunk(4 BE).
void EncodeViewChunkKey(uint32_t table, uint32_t chunk, std::string* out);
// Bitset operands: version 2, then little-endian u16 bit indexes.
void EncodeBitOperand(const std::vector<uint16_t>& bits, std::string* out);

void EncodeSnapshot(int64_t taken_ts, std::vector<std::pair<uint64_t, uint64_t>> followees, std::string* out);
bool DecodeSnapshot(std::string_view in, FeedSnapshot* out);

void EncodeProgress(const Progress& p, std::string* out);
bool DecodeProgress(std::string_view in, Progress* p);

}  // namespace tally::store
