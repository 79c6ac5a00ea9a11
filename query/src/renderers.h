// The JSON bodies of the successful answers of SPEC section 4, exactly as
// written there: compact, fields in SPEC's order. The unread answer is
// keyed by the unread kind names of schemas/event.h (UnreadKindName), the
// one list of them. Error bodies are RenderErrorBody (query_service.h).
// Internal to query/.
//
// Thread model: pure functions. Each renders into one string reserved up
// front: one allocation per answer on the read paths.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "query/watermarks.h"
#include "store/state_store.h"

namespace tally::query::internal {

// {"post_id":N,"like":N,"repost":N,"comment":N,"view":N}
std::string RenderPostCounts(const store::PostCounts& counts);
// {"posts":[<as above>,...]} in the order given.
std::string RenderPostCountsBatch(std::span<const store::PostCounts> counts);
// {"user_id":N,"posts":N,"followers":N,"following":N}; `user_id` as asked.
std::string RenderUserCounts(uint64_t user_id, const store::UserCounts& counts);
// {"user_id":N,"mention":N,...,"feed":N,"red_dots":{"<channel>":true,...}}:
// every unread kind but red_dot in the order of schemas::UnreadKind, then
// the red dots.
std::string RenderUnread(uint64_t user_id, const store::UnreadView& unread);
// {"user_id":N,"taken_ts":N,"followees":{"<id>":N,...}}
std::string RenderFeedSnapshot(uint64_t user_id, const store::FeedSnapshot& snapshot);
// {"partitions":[{"topic":S,"partition":N,...}],"lag":N}
std::string RenderWatermarks(const WatermarkReport& report);

// "mention, comment, ..., feed": every unread kind, for error messages.
std::string_view UnreadKindList();

}  // namespace tally::query::internal
