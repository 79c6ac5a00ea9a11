// Request and response headers, and the 4-byte size prefix of every frame.
//
// A Kafka connection carries frames: an int32 size, then that many bytes of
// body. A request body starts with a request header (v1: api key, api
// version, correlation id, nullable client id; v2 adds a tagged-field
// section), then the request's fields. A response body starts with a
// response header (v0: the correlation id; v1 adds a tagged-field section).
// Which header version applies is in wire/api_versions.h.
//
// Thread model: value types and pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/status.h"
#include "wire/byte_reader.h"
#include "wire/byte_writer.h"

namespace tally::broker {

// Kafka's default socket.request.max.bytes: a larger frame is refused.
inline constexpr int32_t kDefaultMaxFrameBytes = 100 * 1024 * 1024;

struct RequestHeader {
  int16_t api_key = 0;
  int16_t api_version = 0;
  int32_t correlation_id = 0;
  std::optional<std::string> client_id;

  bool operator==(const RequestHeader&) const = default;
};

// Reads a request header of `header_version` (0, 1 or 2) into `out`.
// Failures leave `reader` in its error state (see ByteReader).
void ReadRequestHeader(ByteReader& reader, int16_t header_version, RequestHeader* out);
// Writes `header` as `header_version` (an empty tagged-field section for v2).
void WriteRequestHeader(ByteWriter& writer, int16_t header_version, const RequestHeader& header);

// Response header v0 (correlation id) or v1 (plus empty tagged fields).
void WriteResponseHeader(ByteWriter& writer, int16_t header_version, int32_t correlation_id);
// Reads a response header; returns the correlation id.
int32_t ReadResponseHeader(ByteReader& reader, int16_t header_version);

// Looks at the start of a connection's input buffer. Returns nullopt while
// fewer than 4 bytes are there, else the size of the frame body that follows
// the prefix. kCorruption if the size is negative, kResourceExhausted if it is
// over `max_frame_bytes`: either way the connection must be closed.
base::Result<std::optional<int32_t>> PeekFrameSize(std::span<const uint8_t> buffer,
                                                   int32_t max_frame_bytes = kDefaultMaxFrameBytes);

// Appends a placeholder size prefix to `out` and returns its position, for
// FinishFrame once the body has been appended after it.
size_t BeginFrame(std::string* out);
// Fills in the size prefix written by BeginFrame at `frame_start`.
void FinishFrame(std::string* out, size_t frame_start);

}  // namespace tally::broker
