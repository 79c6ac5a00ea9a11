#include "reset_request.h"

#include <fmt/format.h>

#include <string>
#include <utility>

#include "renderers.h"
#include "request_target.h"
#include "store/state_store.h"

namespace tally::query::internal {

namespace {
constexpr std::string_view kBadRequest = "bad_request";
}  // namespace

base::Result<schemas::UnreadKind> ParseResetKind(std::string_view text) {
  schemas::UnreadKind kind;
  if (!schemas::ParseUnreadKind(text, &kind)) {
    return base::Status::InvalidArgument(
        fmt::format("bad kind \"{}\": one of {}", Clip(text), UnreadKindList()));
  }
  return kind;
}

base::Result<ResetEvent> BuildReset(
    const store::StateStore& store, uint64_t user_id, schemas::UnreadKind kind,
    std::string_view query, int64_t now_ms, std::string_view* error_code,
    const std::vector<std::pair<uint64_t, uint64_t>>* followee_posts) {
  *error_code = {};
  schemas::Event event;
  event.type = schemas::EventType::kRead;
  event.ts = now_ms;
  event.user_id = user_id;
  event.read_kind = kind;
  switch (kind) {
    case schemas::UnreadKind::kNotice: {
      // The reset marks everything up to the newest notice as read.
      auto newest = store.NewestNoticeId();
      if (!newest.ok()) return newest.status();
      if (*newest == 0) {
        ResetEvent none;
        none.nothing_to_mark = true;
        return none;
      }
      event.notice_id = *newest;
      break;
    }
    case schemas::UnreadKind::kRedDot: {
      *error_code = kBadRequest;
      bool found = false;
      TALLY_RETURN_IF_ERROR(FindQueryParam(query, "channel", &found, &event.channel));
      if (!found || event.channel.empty()) {
        return base::Status::InvalidArgument("a red_dot reset needs ?channel=");
      }
      *error_code = {};
      break;
    }
    case schemas::UnreadKind::kFeed: {
      // The snapshot: the current post counts of everyone the user follows.
      base::Result<std::vector<std::pair<uint64_t, uint64_t>>> now =
          followee_posts != nullptr ? *followee_posts : store.CurrentFolloweePosts(user_id);
      if (!now.ok()) return now.status().WithContext(fmt::format("user {}", user_id));
      if (now->size() > schemas::kMaxSnapshotEntries) {
        *error_code = kBadRequest;
        return base::Status::InvalidArgument(
            fmt::format("user {} follows {} accounts; a feed snapshot holds at most {}", user_id,
                        now->size(), schemas::kMaxSnapshotEntries));
      }
      event.snapshot = std::move(now).value();
      break;
    }
    default:
      break;
  }
  // What tally publishes must pass the same validation as anyone's events.
  std::string json = schemas::EventToJson(event);
  {
    schemas::EventParser parser;
    schemas::Event check;
    base::Status st = parser.Parse(json, &check);
    if (!st.ok()) {
      *error_code = kBadRequest;
      return st;
    }
  }
  ResetEvent out;
  out.record.key = fmt::format_int(user_id).str();
  out.record.value = std::move(json);
  return out;
}

}  // namespace tally::query::internal
