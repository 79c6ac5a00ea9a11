// Fuzz target: the event parser and validator on arbitrary bytes. Whatever it
// accepts must render back to JSON that it accepts again as the same event.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "schemas/event.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tally::schemas::EventParser parser;
  static tally::schemas::Event event, again;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (!parser.Parse(in, &event).ok()) return 0;
  std::string json = tally::schemas::EventToJson(event);
  if (!parser.Parse(json, &again).ok() || !(again == event)) std::abort();
  return 0;
}
