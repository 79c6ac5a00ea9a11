// Fuzz target: the broker's request decoder on arbitrary frame bodies.
// Whatever it decodes must re-encode into a frame that decodes again to an
// equal request (a round trip), and nothing it is given may crash it, read
// out of bounds or make it allocate without bound.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <variant>

#include "wire/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tally::broker::DecodeRequest;
  using tally::broker::EncodeRequest;
  using tally::broker::UnsupportedRequest;
  auto request = DecodeRequest(std::span<const uint8_t>(data, size));
  if (!request.ok()) return 0;
  // An unsupported request keeps only its header: nothing to round-trip.
  if (std::holds_alternative<UnsupportedRequest>(request->body)) return 0;
  std::string frame = EncodeRequest(*request);
  if (frame.size() < 4) std::abort();
  auto again = DecodeRequest(std::string_view(frame).substr(4));
  if (!again.ok() || !(*again == *request)) std::abort();
  return 0;
}
