#include "renderers.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <iterator>

#include "schemas/event.h"
#include "schemas/json_escape.h"

namespace tally::query::internal {

using schemas::AppendJsonString;

namespace {

void AppendPostCounts(std::string* out, const store::PostCounts& c) {
  fmt::format_to(
      std::back_inserter(*out),
      FMT_COMPILE("{{\"post_id\":{},\"like\":{},\"repost\":{},\"comment\":{},\"view\":{}}}"),
      c.post_id, c.like, c.repost, c.comment, c.view);
}

}  // namespace

std::string RenderPostCounts(const store::PostCounts& counts) {
  std::string body;
  body.reserve(96);
  AppendPostCounts(&body, counts);
  return body;
}

std::string RenderPostCountsBatch(std::span<const store::PostCounts> counts) {
  std::string body;
  body.reserve(12 + counts.size() * 80);
  body.append("{\"posts\":[");
  for (size_t i = 0; i < counts.size(); i++) {
    if (i > 0) body.push_back(',');
    AppendPostCounts(&body, counts[i]);
  }
  body.append("]}");
  return body;
}

std::string RenderUserCounts(uint64_t user_id, const store::UserCounts& c) {
  std::string body;
  body.reserve(80);
  fmt::format_to(std::back_inserter(body),
                 FMT_COMPILE("{{\"user_id\":{},\"posts\":{},\"followers\":{},\"following\":{}}}"),
                 user_id, c.posts, c.followers, c.following);
  return body;
}

std::string RenderUnread(uint64_t user_id, const store::UnreadView& u) {
  std::string body;
  body.reserve(200 + u.red_dots.size() * 24);
  fmt::format_to(std::back_inserter(body), FMT_COMPILE("{{\"user_id\":{}"), user_id);
  for (int k = 0; k < schemas::kUnreadKindCount; k++) {
    const auto kind = static_cast<schemas::UnreadKind>(k);
    int64_t value = 0;
    if (k < schemas::kUnreadCounterKinds) {
      value = u.counters.counts[k];
    } else if (kind == schemas::UnreadKind::kNotice) {
      value = u.notice;
    } else if (kind == schemas::UnreadKind::kFeed) {
      value = u.feed;
    } else {
      continue;  // red_dot: the "red_dots" object below
    }
    fmt::format_to(std::back_inserter(body), FMT_COMPILE(",\"{}\":{}"),
                   schemas::UnreadKindName(kind), value);
  }
  body.append(",\"red_dots\":{");
  bool first = true;
  for (const auto& [channel, shows] : u.red_dots) {
    if (!first) body.push_back(',');
    first = false;
    AppendJsonString(&body, channel);
    body.append(shows ? ":true" : ":false");
  }
  body.append("}}");
  return body;
}

std::string RenderFeedSnapshot(uint64_t user_id, const store::FeedSnapshot& snap) {
  std::string body;
  body.reserve(64 + snap.followees.size() * 24);
  fmt::format_to(std::back_inserter(body),
                 FMT_COMPILE("{{\"user_id\":{},\"taken_ts\":{},\"followees\":{{"), user_id,
                 snap.taken_ts);
  bool first = true;
  for (const auto& [followee, posts] : snap.followees) {
    fmt::format_to(std::back_inserter(body), FMT_COMPILE("{}\"{}\":{}"), first ? "" : ",", followee,
                   posts);
    first = false;
  }
  body.append("}}");
  return body;
}

std::string RenderWatermarks(const WatermarkReport& report) {
  std::string body;
  body.reserve(32 + report.rows.size() * 120);
  body.append("{\"partitions\":[");
  bool first = true;
  for (const WatermarkRow& row : report.rows) {
    if (!first) body.push_back(',');
    first = false;
    body.append("{\"topic\":");
    AppendJsonString(&body, row.topic);
    fmt::format_to(std::back_inserter(body),
                   FMT_COMPILE(",\"partition\":{},\"applied_offset\":{},\"end_offset\":{},"
                               "\"lag\":{},\"event_time_ms\":{}}}"),
                   row.partition, row.applied_offset, row.end_offset, row.lag, row.event_time_ms);
  }
  fmt::format_to(std::back_inserter(body), FMT_COMPILE("],\"lag\":{}}}"), report.lag);
  return body;
}

std::string_view UnreadKindList() {
  static const std::string list = [] {
    std::string out;
    for (int k = 0; k < schemas::kUnreadKindCount; k++) {
      if (k > 0) out.append(", ");
      out.append(schemas::UnreadKindName(static_cast<schemas::UnreadKind>(k)));
    }
    return out;
  }();
  return list;
}

}  // namespace tally::query::internal
