// The unread resets, POST /v1/users/{user_id}/unread/{kind}/reset: from the
// request to the `read` event tally publishes for it (SPEC sections 2 and
// 4), validated as anyone's event would be, before anything is published.
// QueryService publishes what BuildReset gives; nothing here publishes.
// Internal to query/.
//
// Thread model: pure functions, apart from the store reads of BuildReset
// (the store is safe for concurrent reads).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ingest/event_publisher.h"
#include "schemas/event.h"

namespace tally::store {
class StateStore;
}

namespace tally::query::internal {

// The {kind} of a reset: one of the unread kind names of schemas/event.h.
// InvalidArgument naming them otherwise (answered 400 bad_kind).
base::Result<schemas::UnreadKind> ParseResetKind(std::string_view text);

// What a valid reset publishes.
struct ResetEvent {
  // A notice reset when no notice exists: nothing to mark read (a user
  // with no last-read id already reads 0), so nothing is published.
  bool nothing_to_mark = false;
  // Otherwise the `read` event, keyed by the user so that it stays in
  // order with the user's other keyed events.
  ingest::PublishRecord record;
};

// Builds the reset of `kind` for `user_id` at `now_ms`, reading what it
// marks from `store`: a notice reset marks up to the newest notice id, a
// red_dot reset needs `query` to hold ?channel=, a feed reset carries the
// current post counts of the user's followees. InvalidArgument for a
// missing or refused channel, more followees than a snapshot holds, or an
// event the schema refuses, with *error_code set to "bad_request"; the
// store's own errors otherwise, with *error_code left empty (the answer
// takes the status's default code).
// `followee_posts` (may be null): for a feed reset, the followees' current
// post counts already read (a cluster reads them from several members);
// null reads them from `store`, which must then hold every partition they
// need.
base::Result<ResetEvent> BuildReset(
    const store::StateStore& store, uint64_t user_id, schemas::UnreadKind kind,
    std::string_view query, int64_t now_ms, std::string_view* error_code,
    const std::vector<std::pair<uint64_t, uint64_t>>* followee_posts = nullptr);

}  // namespace tally::query::internal
