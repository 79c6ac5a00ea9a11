// Deltas: the effects the router derives from events, as carried in
// tally.deltas, and the partitioning of entities over that topic.
//
// One Kafka message in tally.deltas is a DeltaBatch: many deltas bound for
// the same deltas partition, each carrying its source coordinates (source
// stream = topic and partition, offset, index of the effect within its
// event, event time). Within a batch and across the batches of one deltas
// partition, the deltas of one source stream appear in increasing
// (offset, effect) order: that is what lets the applier drop duplicates
// with one mark per source stream (aggregator/README.md).
//
// Wire format (all integers LEB128 varints unless said otherwise):
//   u8 version (=1)
//   n_streams, then per stream: topic length, topic bytes, partition
//   n_deltas, then per delta:
//     stream index, offset, effect, ts, u8 op (| 0x80 when an event id
//     follows), [event id hash: 8 bytes little endian], entity, then by op:
//       kPostCounter, kUserCounter, kUnreadAdd: u8 field, zigzag amount
//       kUnreadReset:                            u8 field
//       kLikeSet/Unset, kFollowSet/Unset,
//       kNoticeRead, kViewMember:                member
//       kNoticeAppend:                           member, title length, bytes
//       kRedDotPublish, kRedDotRead:             channel length, bytes
//       kFeedSnapshot:                           n, then n x (followee, count)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tally::schemas {

enum class DeltaOp : uint8_t {
  kPostCounter = 1,  // entity=post, field=PostField, amount (counter floored at 0)
  kUserCounter = 2,  // entity=user, field=UserField, amount
  kLikeSet = 3,      // entity=post, member=user: set the edge; post like +1 if it was unset
  kLikeUnset = 4,    // entity=post, member=user: clear the edge; post like -1 if it was set
  kFollowSet = 5,    // entity=user, member=target: if newly set, following +1 here and
                     // (derived, at the target's partition) followers +1, unread follower +1
  kFollowUnset = 6,  // the reverse; derived followers -1
  kUnreadAdd = 7,    // entity=user, field=UnreadKind (< kUnreadCounterKinds), amount
  kUnreadReset = 8,  // entity=user, field=UnreadKind (< kUnreadCounterKinds)
  kNoticeAppend = 9, // entity=kGlobalEntity, member=notice_id, text=title
  kNoticeRead = 10,  // entity=user, member=notice_id
  kRedDotPublish = 11,  // entity=kGlobalEntity, text=channel, ts
  kRedDotRead = 12,     // entity=user, text=channel, ts
  kFeedSnapshot = 13,   // entity=user, snapshot, ts
  kViewMember = 14,     // entity=post, member=user: add (post, user) to the "viewed" filter
};
inline constexpr uint8_t kMaxDeltaOp = 14;
// Set in a delta's op byte on the wire when the delta carries an event id.
inline constexpr uint8_t kEventIdFlag = 0x80;

// The 64-bit hash by which tally knows an event's `id` (SPEC section 1):
// never 0, the same on every machine and in every version.
uint64_t EventIdHash(std::string_view id);

enum class PostField : uint8_t { kLike = 0, kRepost = 1, kComment = 2, kView = 3 };
inline constexpr int kPostFieldCount = 4;
enum class UserField : uint8_t { kPosts = 0, kFollowers = 1, kFollowing = 2 };
inline constexpr int kUserFieldCount = 3;

// The entity id of the records every user shares (notice list, red-dot
// channels). Real ids start at 1.
inline constexpr uint64_t kGlobalEntity = 0;

// The deltas partition that owns `entity` (post id, user id or
// kGlobalEntity) among `partitions`. Deterministic forever: changing it
// changes where state lives. Precondition: partitions > 0.
uint32_t PartitionOf(uint64_t entity, uint32_t partitions);

// Where a delta comes from: a source stream of the batch (index into its
// stream table), the record's offset there, the index of this effect among
// the record's effects, and the event time.
struct DeltaSource {
  uint32_t stream = 0;
  int64_t offset = 0;
  uint32_t effect = 0;
  int64_t ts = 0;
};

// One effect. `text` and `snapshot` borrow from the buffer the delta was
// read from (or the caller's storage when writing).
struct Delta {
  DeltaOp op = DeltaOp::kPostCounter;
  uint8_t field = 0;
  int64_t amount = 0;
  uint64_t entity = 0;
  uint64_t member = 0;
  std::string_view text;
  const std::pair<uint64_t, uint64_t>* snapshot = nullptr;
  uint32_t snapshot_size = 0;
  // EventIdHash of the event's `id`; 0 when the event has none. Every
  // effect of an event carries it: the partition applying an effect drops
  // it when another copy of the event (another record) was applied there.
  uint64_t event_id = 0;
  DeltaSource source;
};

// A source stream: an input (or deltas) topic and partition.
struct SourceStream {
  std::string topic;
  int32_t partition = 0;
  bool operator==(const SourceStream&) const = default;
  auto operator<=>(const SourceStream&) const = default;
};

// Builds one DeltaBatch. Thread model: externally synchronized.
class DeltaBatchBuilder {
 public:
  // Returns the index of (topic, partition) in this batch's stream table,
  // adding it if new.
  uint32_t StreamIndex(std::string_view topic, int32_t partition);

  // Appends `delta`; delta.source.stream must come from StreamIndex().
  // Precondition: per stream, (offset, effect) increases across calls.
  void Add(const Delta& delta);

  size_t delta_count() const { return count_; }
  // Approximate encoded size so far.
  size_t ByteSize() const { return body_.size() + 64; }
  bool empty() const { return count_ == 0; }

  // The batch's stream table so far and, at the same index, the smallest
  // source offset added from that stream (its first: offsets increase per
  // stream). Valid until Finish().
  const std::vector<SourceStream>& streams() const { return streams_; }
  const std::vector<int64_t>& first_offsets() const { return first_offsets_; }

  // Returns the encoded batch and resets the builder for reuse.
  std::string Finish();

 private:
  std::vector<SourceStream> streams_;
  std::vector<int64_t> first_offsets_;  // -1 until the stream's first Add()
  std::string body_;
  size_t count_ = 0;
};

// Reads one DeltaBatch. Thread model: externally synchronized. Every Delta
// returned since the last Open() stays valid until the next Open() (its text
// borrows from the batch bytes, which must outlive it; its snapshot from the
// reader), so a caller can decode a whole batch before applying any of it.
class DeltaBatchReader {
 public:
  // Parses the header. Corruption if the bytes are not a DeltaBatch.
  base::Status Open(std::string_view bytes);

  const std::vector<SourceStream>& streams() const { return streams_; }
  uint64_t delta_count() const { return total_; }

  // Decodes the next delta into *out. Returns false at the end or on
  // corruption; check status() after the loop.
  bool Next(Delta* out);
  const base::Status& status() const { return status_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  uint64_t total_ = 0;
  uint64_t read_ = 0;
  std::vector<SourceStream> streams_;
  // One buffer per snapshot of the batch, reused across batches; moving the
  // outer vector keeps each inner buffer, so returned pointers stay valid.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> snapshots_;
  size_t snapshots_used_ = 0;
  base::Status status_;
};

}  // namespace tally::schemas
