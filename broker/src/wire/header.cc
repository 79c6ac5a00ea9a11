#include "wire/header.h"

#include <fmt/core.h>

namespace tally::broker {

void ReadRequestHeader(ByteReader& reader, int16_t header_version, RequestHeader* out) {
  out->api_key = reader.ReadInt16();
  out->api_version = reader.ReadInt16();
  out->correlation_id = reader.ReadInt32();
  out->client_id.reset();
  if (header_version >= 1) {
    // The client id keeps its int16 length even in header v2, so that any
    // broker can read the header of an ApiVersions request of any version.
    out->client_id = reader.ReadNullableString();
  }
  if (header_version >= 2) reader.SkipTaggedFields();
}

void WriteRequestHeader(ByteWriter& writer, int16_t header_version, const RequestHeader& header) {
  writer.WriteInt16(header.api_key);
  writer.WriteInt16(header.api_version);
  writer.WriteInt32(header.correlation_id);
  if (header_version >= 1) writer.WriteNullableString(header.client_id);
  if (header_version >= 2) writer.WriteEmptyTaggedFields();
}

void WriteResponseHeader(ByteWriter& writer, int16_t header_version, int32_t correlation_id) {
  writer.WriteInt32(correlation_id);
  if (header_version >= 1) writer.WriteEmptyTaggedFields();
}

int32_t ReadResponseHeader(ByteReader& reader, int16_t header_version) {
  int32_t id = reader.ReadInt32();
  if (header_version >= 1) reader.SkipTaggedFields();
  return id;
}

base::Result<std::optional<int32_t>> PeekFrameSize(std::span<const uint8_t> buffer,
                                                   int32_t max_frame_bytes) {
  if (buffer.size() < 4) return std::optional<int32_t>();
  ByteReader reader(buffer.first(4));
  int32_t size = reader.ReadInt32();
  if (size < 0) {
    return base::Status::Corruption(fmt::format("negative frame size {}", size));
  }
  if (size > max_frame_bytes) {
    return base::Status::ResourceExhausted(
        fmt::format("frame of {} bytes is over the limit of {}", size, max_frame_bytes));
  }
  return std::optional<int32_t>(size);
}

size_t BeginFrame(std::string* out) {
  size_t start = out->size();
  out->append(4, '\0');
  return start;
}

void FinishFrame(std::string* out, size_t frame_start) {
  ByteWriter writer(out);
  writer.PatchInt32(frame_start, static_cast<int32_t>(out->size() - frame_start - 4));
}

}  // namespace tally::broker
