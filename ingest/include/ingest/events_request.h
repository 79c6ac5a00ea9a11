// The body of POST /v1/events: one event, or a JSON array of up to 1000.
//
// Parsing is all-or-nothing: either every event is valid and the records to
// publish are returned, or the first invalid one is named by its index and
// reason and nothing is returned. Thread model: externally synchronized
// (holds a parser); use one per thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "ingest/event_publisher.h"
#include "schemas/event.h"

namespace tally::ingest {

inline constexpr size_t kMaxEventsPerRequest = 1000;

class EventsRequestParser {
 public:
  // Parses `body`. OK and `*out` filled with one record per event (key from
  // DefaultKey, value the event's original JSON text) when all are valid.
  // InvalidArgument otherwise, with a message such as
  // "event 3: missing field user_id", "body is not a JSON object or array",
  // "empty array", "more than 1000 events".
  base::Status Parse(std::string_view body, std::vector<PublishRecord>* out);

 private:
  schemas::EventParser parser_;
  schemas::Event event_;
};

}  // namespace tally::ingest
