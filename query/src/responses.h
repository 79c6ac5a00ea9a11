// The answers the service builds: JSON responses, the router's own errors
// and the answers for a failed operation, whose HTTP status always comes
// from HttpStatusFor() (query_service.h), the one Status-to-HTTP mapping.
// Internal to query/.
//
// Thread model: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "query/query_service.h"

namespace tally::query::internal {

// A 2xx/4xx/5xx answer with a JSON body.
Response JsonResponse(int status, std::string body);

// An answer the router gives by itself (401, 404, 405, 413, 500, 501, 503),
// not the outcome of an operation. `code` defaults to the status's own
// ("not_found", "unavailable", ...).
Response ProtocolError(int http_status, std::string_view message, std::string_view code = {});

// The answer for a failed operation: the HTTP status from HttpStatusFor();
// `code` refines the body's code (400: bad_id, bad_kind, invalid_event).
Response ErrorResponse(const base::Status& status, std::string_view code = {});

// 400 bad_id for `text`, which is not a canonical id; `what` names it as a
// route parameter does ("post_id" reads "post id").
Response BadId(std::string_view what, std::string_view text);

// Appends the member names in `members` (one or several, comma-separated,
// as X-Tally-Member holds them) that `seen` does not have yet, keeping the
// order first seen. (src/cluster_reads.cc)
void AddMembers(std::string_view members, std::vector<std::string>* seen);

}  // namespace tally::query::internal
