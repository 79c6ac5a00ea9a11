#include "ingest/events_request.h"

#include <fmt/core.h>
#include <simdjson.h>

#include <cstring>
#include <string>

#include "schemas/event.h"

namespace tally::ingest {
namespace {

namespace od = simdjson::ondemand;

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view TrimJsonSpace(std::string_view s) {
  while (!s.empty() && IsJsonSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsJsonSpace(s.back())) s.remove_suffix(1);
  return s;
}

// True when nothing but whitespace follows the document's root value
// (simdjson 3.0 has no document::at_end()).
bool AtEnd(od::document& doc) { return doc.current_location().error() == simdjson::OUT_OF_BOUNDS; }

base::Status NotJson(simdjson::error_code err) {
  return base::Status::InvalidArgument(
      fmt::format("body is not valid JSON: {}", simdjson::error_message(err)));
}

}  // namespace

// simdjson splits the body into its elements without building a tree; each
// element's own text then goes through the schema-checked EventParser.
struct EventsRequestParser::Impl {
  od::parser splitter;
  std::string padded;  // the body plus simdjson's padding, reused across calls
  schemas::EventParser parser;
  schemas::Event event;

  // Validates one element's text and appends its record to `out`.
  base::Status AddEvent(size_t index, std::string_view text, std::vector<PublishRecord>* out) {
    text = TrimJsonSpace(text);
    base::Status st = parser.Parse(text, &event);
    if (!st.ok()) {
      return base::Status::InvalidArgument(fmt::format("event {}: {}", index, st.message()));
    }
    const bool derives =
        event.type == schemas::EventType::kFollow || event.type == schemas::EventType::kUnfollow;
    out->push_back(
        PublishRecord{DefaultKey(event), std::string(text), derives ? event.target_id : 0});
    return base::Status::Ok();
  }

  base::Status Parse(std::string_view body, std::vector<PublishRecord>* out) {
    if (TrimJsonSpace(body).empty()) return base::Status::InvalidArgument("empty body");
    padded.assign(body);
    padded.resize(body.size() + simdjson::SIMDJSON_PADDING, '\0');
    od::document doc;
    if (auto err = splitter.iterate(padded.data(), body.size(), padded.size()).get(doc)) {
      return NotJson(err);
    }
    od::json_type type;
    if (auto err = doc.type().get(type)) return NotJson(err);

    if (type == od::json_type::object) {
      od::object obj;
      std::string_view raw;
      if (auto err = doc.get_object().get(obj)) return NotJson(err);
      if (auto err = obj.raw_json().get(raw)) return NotJson(err);
      if (!AtEnd(doc)) return NotJson(simdjson::TRAILING_CONTENT);
      return AddEvent(0, raw, out);
    }
    if (type != od::json_type::array) {
      return base::Status::InvalidArgument("body is not a JSON object or array");
    }

    od::array array;
    if (auto err = doc.get_array().get(array)) return NotJson(err);
    size_t index = 0;
    for (auto element : array) {
      od::value value;
      if (auto err = element.get(value)) return NotJson(err);
      if (index >= kMaxEventsPerRequest) {
        return base::Status::InvalidArgument(
            fmt::format("more than {} events", kMaxEventsPerRequest));
      }
      od::json_type element_type;
      if (auto err = value.type().get(element_type)) return NotJson(err);
      if (element_type != od::json_type::object) {
        return base::Status::InvalidArgument(fmt::format("event {}: not a JSON object", index));
      }
      od::object obj;
      std::string_view raw;
      if (auto err = value.get_object().get(obj)) return NotJson(err);
      if (auto err = obj.raw_json().get(raw)) return NotJson(err);
      TALLY_RETURN_IF_ERROR(AddEvent(index, raw, out));
      index++;
    }
    if (!AtEnd(doc)) return NotJson(simdjson::TRAILING_CONTENT);
    if (index == 0) return base::Status::InvalidArgument("empty array");
    return base::Status::Ok();
  }
};

EventsRequestParser::EventsRequestParser() : impl_(std::make_unique<Impl>()) {}
EventsRequestParser::~EventsRequestParser() = default;

base::Status EventsRequestParser::Parse(std::string_view body, std::vector<PublishRecord>* out) {
  out->clear();
  base::Status st = impl_->Parse(body, out);
  if (!st.ok()) out->clear();
  return st;
}

}  // namespace tally::ingest
