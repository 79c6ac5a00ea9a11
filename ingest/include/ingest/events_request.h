// The body of POST /v1/events: one event, or a JSON array of 1..1000.
//
// Parsing is all-or-nothing: either every event is valid and the records to
// publish are returned, or the first invalid one is named by its index and
// reason and nothing is returned. Each record's value is the event's original
// JSON text, byte for byte (surrounding whitespace trimmed), so what the
// router later reads is exactly what the client sent.
// Thread model: externally synchronized (holds parsers); use one per thread.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "ingest/event_publisher.h"

namespace tally::ingest {

inline constexpr size_t kMaxEventsPerRequest = 1000;

class EventsRequestParser {
 public:
  EventsRequestParser();
  ~EventsRequestParser();
  EventsRequestParser(const EventsRequestParser&) = delete;
  EventsRequestParser& operator=(const EventsRequestParser&) = delete;

  // Parses `body`. OK and `*out` replaced by one record per event (key from
  // DefaultKey, value the event's JSON text) when all are valid; indexes are
  // 0-based and a single object is event 0. InvalidArgument otherwise, `*out`
  // left empty, with a message such as "event 3: missing field user_id",
  // "event 2: not a JSON object", "body is not a JSON object or array",
  // "body is not valid JSON: ...", "empty array", "more than 1000 events".
  // `body` need not outlive the call.
  base::Status Parse(std::string_view body, std::vector<PublishRecord>* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally::ingest
