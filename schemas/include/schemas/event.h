// Events: the input of tally (SPEC section 1), as parsed and validated.
//
// One JSON object per Kafka message value. EventParser turns the bytes into
// an Event, or says exactly why they are not one; the JSON Schema files in
// schemas/ are the source of truth and a conformance test holds the parser
// to them. EventParser is on the hot path (simdjson on-demand): Parse()
// allocates nothing once its buffers have grown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tally::schemas {

enum class EventType : uint8_t {
  kPost = 0,
  kPostDelete,
  kLike,
  kUnlike,
  kRepost,
  kComment,
  kView,
  kMention,
  kDm,
  kFollow,
  kUnfollow,
  kNotice,
  kRedDot,
  kRead,
};
inline constexpr int kEventTypeCount = 14;

// The unread kinds of SPEC section 3, in the order of the HTTP answer.
enum class UnreadKind : uint8_t {
  kMention = 0,
  kComment,
  kLike,
  kRepost,
  kDm,
  kFollower,
  kNotice,
  kRedDot,
  kFeed,
};
inline constexpr int kUnreadKindCount = 9;
// The first six kinds are plain per-user counters.
inline constexpr int kUnreadCounterKinds = 6;

// "post", "post_delete", ... as in SPEC; never null.
const char* EventTypeName(EventType type);
// Parses a type name; false if unknown.
bool ParseEventType(std::string_view name, EventType* out);
// "mention", ..., "red_dot", "feed"; never null.
const char* UnreadKindName(UnreadKind kind);
bool ParseUnreadKind(std::string_view name, UnreadKind* out);

// Largest valid id: 2^63-1. Ids are 1..kMaxId.
inline constexpr uint64_t kMaxId = 9223372036854775807ULL;
// Largest valid ts (ms): 9999-12-31T23:59:59.999Z.
inline constexpr int64_t kMaxTs = 253402300799999LL;

// A validated event. Fields not used by `type` are zero/empty. An id of 0
// means "absent" (only for optional ids: author_id, view's user_id).
// Value type; reuse one instance per thread to avoid allocation.
struct Event {
  EventType type = EventType::kPost;
  int64_t ts = 0;
  // Optional event id (SPEC section 1: applied once per id): 1..kMaxEventIdLength
  // printable ASCII characters; empty when absent.
  std::string id;

  uint64_t post_id = 0;
  uint64_t user_id = 0;              // like/unlike/repost/comment/view/mention/follow/unfollow/read
  uint64_t author_id = 0;            // post, post_delete, and optional on like/repost/comment
  uint64_t target_id = 0;            // follow/unfollow
  uint64_t from_user_id = 0;         // dm
  uint64_t to_user_id = 0;           // dm
  uint64_t notice_id = 0;            // notice, read(kind=notice)
  std::vector<uint64_t> target_ids;  // mention: 1..100 ids, as given
  std::string title;                 // notice, optional
  std::string channel;               // red_dot, read(kind=red_dot)
  UnreadKind read_kind = UnreadKind::kMention;  // read
  // read(kind=feed): followee id -> that followee's post count, in input order.
  std::vector<std::pair<uint64_t, uint64_t>> snapshot;

  // Resets every field so the instance can be reused.
  void Clear();

  // Field-by-field equality (snapshot and target_ids in order).
  friend bool operator==(const Event&, const Event&) = default;
};

// Limits of SPEC section 1, as in schemas/json/.
inline constexpr size_t kMaxEventIdLength = 64;       // id: 1..64 of ' '..'~'
inline constexpr size_t kMaxMentionTargets = 100;     // mention.target_ids: 1..100 ids
inline constexpr size_t kMaxTitleCodePoints = 1024;   // notice.title: code points
inline constexpr size_t kMaxSnapshotEntries = 10000;  // read.snapshot: entries
// Containers (objects and arrays) may nest at most this deep, the event
// object itself counting as 1. Deeper documents are rejected whatever the
// field, so that parsing uses bounded stack.
inline constexpr int kMaxJsonDepth = 64;

// Parses and validates one event.
// Thread model: externally synchronized (one parser per thread).
class EventParser {
 public:
  EventParser();
  ~EventParser();
  EventParser(const EventParser&) = delete;
  EventParser& operator=(const EventParser&) = delete;

  // Parses `json` into `*out`. OK, or InvalidArgument with a one-line reason
  // ("missing field user_id", "field post_id: id out of range",
  // "unknown type \"poke\"", "not valid JSON: ..."). `json` is copied into an
  // internal padded buffer; it need not outlive the call.
  // Beyond the schema files, the bytes must be one JSON object (whitespace
  // around it only) that is valid UTF-8, has no duplicate key in any object,
  // no "\ud800"-style lone surrogate escape in any string and nests at most
  // kMaxJsonDepth deep; fields the event's type does not use are ignored but
  // must be valid JSON. On error `*out` is cleared. Allocates nothing once
  // the parser's buffers and `*out`'s capacity have grown.
  base::Status Parse(std::string_view json, Event* out);

 private:
  struct Impl;
  Impl* impl_;
};

// Renders `event` as compact JSON that Parse() accepts and that yields an
// equal Event. Ids are rendered as numbers. Used by the workload generator,
// the HTTP reset endpoints and tests.
std::string EventToJson(const Event& event);

// As EventToJson, but appends to `*out` (reusing its capacity: no allocation
// once it has grown). Precondition for both: `event` is valid, as Parse()
// produces (required ids non-zero, strings valid UTF-8); otherwise the output
// may not parse. Thread model: pure function.
void AppendEventJson(const Event& event, std::string* out);

}  // namespace tally::schemas
