// Event names, Event::Clear and EventToJson. The parser is in
// event_parser.cc.
#include "schemas/event.h"

#include <fmt/format.h>

#include <array>
#include <string>
#include <string_view>

#include "json_text.h"

namespace tally::schemas {
namespace {

constexpr std::array<const char*, kEventTypeCount> kEventTypeNames = {
    "post",    "post_delete", "like",   "unlike",   "repost", "comment", "view",
    "mention", "dm",          "follow", "unfollow", "notice", "red_dot", "read",
};

constexpr std::array<const char*, kUnreadKindCount> kUnreadKindNames = {
    "mention", "comment", "like", "repost", "dm", "follower", "notice", "red_dot", "feed",
};

void AppendUint(std::string* out, uint64_t v) {
  const fmt::format_int f(v);
  out->append(f.data(), f.size());
}

void AppendInt(std::string* out, int64_t v) {
  const fmt::format_int f(v);
  out->append(f.data(), f.size());
}

// Appends `,"<name>":<value>`.
void AppendIdField(std::string* out, std::string_view name, uint64_t value) {
  out->append(",\"");
  out->append(name);
  out->append("\":");
  AppendUint(out, value);
}

void AppendStringField(std::string* out, std::string_view name, std::string_view value) {
  out->append(",\"");
  out->append(name);
  out->append("\":");
  internal::AppendJsonString(out, value);
}

}  // namespace

const char* EventTypeName(EventType type) {
  const auto i = static_cast<size_t>(type);
  return i < kEventTypeNames.size() ? kEventTypeNames[i] : "unknown";
}

bool ParseEventType(std::string_view name, EventType* out) {
  for (size_t i = 0; i < kEventTypeNames.size(); ++i) {
    if (name == kEventTypeNames[i]) {
      *out = static_cast<EventType>(i);
      return true;
    }
  }
  return false;
}

const char* UnreadKindName(UnreadKind kind) {
  const auto i = static_cast<size_t>(kind);
  return i < kUnreadKindNames.size() ? kUnreadKindNames[i] : "unknown";
}

bool ParseUnreadKind(std::string_view name, UnreadKind* out) {
  for (size_t i = 0; i < kUnreadKindNames.size(); ++i) {
    if (name == kUnreadKindNames[i]) {
      *out = static_cast<UnreadKind>(i);
      return true;
    }
  }
  return false;
}

void Event::Clear() {
  // clear() keeps the capacity of strings and vectors: reuse allocates nothing.
  type = EventType::kPost;
  ts = 0;
  id.clear();
  post_id = 0;
  user_id = 0;
  author_id = 0;
  target_id = 0;
  from_user_id = 0;
  to_user_id = 0;
  notice_id = 0;
  target_ids.clear();
  title.clear();
  channel.clear();
  read_kind = UnreadKind::kMention;
  snapshot.clear();
}

void AppendEventJson(const Event& e, std::string* out) {
  out->append("{\"type\":\"");
  out->append(EventTypeName(e.type));
  out->append("\",\"ts\":");
  AppendInt(out, e.ts);
  if (!e.id.empty()) AppendStringField(out, "id", e.id);
  switch (e.type) {
    case EventType::kPost:
    case EventType::kPostDelete:
      AppendIdField(out, "author_id", e.author_id);
      AppendIdField(out, "post_id", e.post_id);
      break;
    case EventType::kLike:
    case EventType::kRepost:
    case EventType::kComment:
      AppendIdField(out, "post_id", e.post_id);
      AppendIdField(out, "user_id", e.user_id);
      if (e.author_id != 0) AppendIdField(out, "author_id", e.author_id);
      break;
    case EventType::kUnlike:
      AppendIdField(out, "post_id", e.post_id);
      AppendIdField(out, "user_id", e.user_id);
      break;
    case EventType::kView:
      AppendIdField(out, "post_id", e.post_id);
      if (e.user_id != 0) AppendIdField(out, "user_id", e.user_id);
      break;
    case EventType::kMention:
      AppendIdField(out, "user_id", e.user_id);
      out->append(",\"target_ids\":[");
      for (size_t i = 0; i < e.target_ids.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendUint(out, e.target_ids[i]);
      }
      out->push_back(']');
      break;
    case EventType::kDm:
      AppendIdField(out, "from_user_id", e.from_user_id);
      AppendIdField(out, "to_user_id", e.to_user_id);
      break;
    case EventType::kFollow:
    case EventType::kUnfollow:
      AppendIdField(out, "user_id", e.user_id);
      AppendIdField(out, "target_id", e.target_id);
      break;
    case EventType::kNotice:
      AppendIdField(out, "notice_id", e.notice_id);
      if (!e.title.empty()) AppendStringField(out, "title", e.title);
      break;
    case EventType::kRedDot:
      AppendStringField(out, "channel", e.channel);
      break;
    case EventType::kRead:
      AppendIdField(out, "user_id", e.user_id);
      AppendStringField(out, "kind", UnreadKindName(e.read_kind));
      if (e.read_kind == UnreadKind::kNotice) AppendIdField(out, "notice_id", e.notice_id);
      if (e.read_kind == UnreadKind::kRedDot) AppendStringField(out, "channel", e.channel);
      if (e.read_kind == UnreadKind::kFeed) {
        out->append(",\"snapshot\":{");
        for (size_t i = 0; i < e.snapshot.size(); ++i) {
          if (i > 0) out->push_back(',');
          // Keys are decimal strings (JSON object keys are strings).
          out->push_back('"');
          AppendUint(out, e.snapshot[i].first);
          out->append("\":");
          AppendUint(out, e.snapshot[i].second);
        }
        out->push_back('}');
      }
      break;
  }
  out->push_back('}');
}

std::string EventToJson(const Event& event) {
  std::string out;
  out.reserve(128);
  AppendEventJson(event, &out);
  return out;
}

}  // namespace tally::schemas
