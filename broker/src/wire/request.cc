#include "wire/request.h"

#include <fmt/core.h>

#include <utility>

namespace tally::broker {
namespace {

template <typename T>
concept Message = requires {
  T::kApiKey;
};

// Decodes the alternative of `Variant` whose kApiKey is `key` into *out.
// Returns false if no alternative is for `key`.
template <typename Variant, size_t... I>
bool DecodeAlternative(ApiKey key, int16_t version, ByteReader& reader, Variant* out,
                       base::Status* status, std::index_sequence<I...>) {
  auto try_one = [&]<size_t J>(std::integral_constant<size_t, J>) {
    using T = std::variant_alternative_t<J, Variant>;
    if constexpr (Message<T>) {
      if (T::kApiKey != key) return false;
      T message;
      *status = message.Decode(reader, version);
      if (status->ok()) *out = std::move(message);
      return true;
    } else {
      return false;
    }
  };
  return (try_one(std::integral_constant<size_t, I>{}) || ...);
}

template <typename Variant>
bool DecodeBody(ApiKey key, int16_t version, ByteReader& reader, Variant* out,
                base::Status* status) {
  return DecodeAlternative(key, version, reader, out, status,
                           std::make_index_sequence<std::variant_size_v<Variant>>{});
}

base::Status DecodeFailure(int16_t api_key, int16_t version, const base::Status& status) {
  return base::Status::Corruption(
      fmt::format("{} v{} request: {}", ApiKeyName(api_key), version, status.message()));
}

}  // namespace

base::Result<Request> DecodeRequest(std::span<const uint8_t> frame_body) {
  Request request;
  RequestHeader& header = request.header;
  ByteReader prefix(frame_body);
  header.api_key = prefix.ReadInt16();
  header.api_version = prefix.ReadInt16();
  header.correlation_id = prefix.ReadInt32();
  if (!prefix.ok()) {
    return base::Status::Corruption(
        fmt::format("request of {} bytes is shorter than a header", frame_body.size()));
  }
  if (!IsSupported(header.api_key, header.api_version)) {
    // Every header version from 1 on puts the client id next; read it when
    // it is there, for the log line, and never fail on it.
    std::optional<std::string> client_id = prefix.ReadNullableString();
    if (prefix.ok()) header.client_id = std::move(client_id);
    request.body = UnsupportedRequest{};
    return request;
  }

  ApiKey key = static_cast<ApiKey>(header.api_key);
  ByteReader reader(frame_body);
  ReadRequestHeader(reader, RequestHeaderVersion(key, header.api_version), &header);
  if (!reader.ok()) return DecodeFailure(header.api_key, header.api_version, reader.status());
  base::Status status;
  if (!DecodeBody(key, header.api_version, reader, &request.body, &status)) {
    // IsSupported() and RequestBody disagree: a bug in this codec.
    return base::Status::Internal(
        fmt::format("no request type for supported api key {}", header.api_key));
  }
  if (!status.ok()) return DecodeFailure(header.api_key, header.api_version, status);
  if (reader.remaining() != 0) {
    return base::Status::Corruption(fmt::format("{} v{} request: {} bytes left over at byte {}",
                                                ApiKeyName(header.api_key), header.api_version,
                                                reader.remaining(), reader.position()));
  }
  return request;
}

base::Result<Request> DecodeRequest(std::string_view frame_body) {
  return DecodeRequest(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(frame_body.data()),
                                                frame_body.size()));
}

void EncodeRequest(const Request& request, std::string* out) {
  size_t start = BeginFrame(out);
  ByteWriter writer(out);
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        RequestHeader header = request.header;
        if constexpr (Message<T>) {
          header.api_key = static_cast<int16_t>(T::kApiKey);
          WriteRequestHeader(writer, RequestHeaderVersion(T::kApiKey, header.api_version), header);
          body.Encode(writer, header.api_version);
        } else {
          WriteRequestHeader(writer, 1, header);
        }
      },
      request.body);
  FinishFrame(out, start);
}

std::string EncodeRequest(const Request& request) {
  std::string out;
  EncodeRequest(request, &out);
  return out;
}

ApiKey ResponseApiKey(const ResponseBody& response) {
  return std::visit([](const auto& body) { return std::decay_t<decltype(body)>::kApiKey; },
                    response);
}

void EncodeResponse(int32_t correlation_id, const ResponseBody& response, int16_t version,
                    std::string* out) {
  size_t start = BeginFrame(out);
  ByteWriter writer(out);
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        WriteResponseHeader(writer, ResponseHeaderVersion(T::kApiKey, version), correlation_id);
        body.Encode(writer, version);
      },
      response);
  FinishFrame(out, start);
}

std::string EncodeResponse(int32_t correlation_id, const ResponseBody& response, int16_t version) {
  std::string out;
  EncodeResponse(correlation_id, response, version, &out);
  return out;
}

base::Result<ResponseBody> DecodeResponse(ApiKey api_key, int16_t version,
                                          std::span<const uint8_t> frame_body,
                                          int32_t* correlation_id) {
  ByteReader reader(frame_body);
  *correlation_id = ReadResponseHeader(reader, ResponseHeaderVersion(api_key, version));
  ResponseBody body;
  base::Status status = reader.status();
  if (status.ok() && !DecodeBody(api_key, version, reader, &body, &status)) {
    return base::Status::InvalidArgument(
        fmt::format("no response type for api key {}", static_cast<int>(api_key)));
  }
  if (!status.ok()) {
    return base::Status::Corruption(fmt::format("{} v{} response: {}",
                                                ApiKeyName(static_cast<int16_t>(api_key)), version,
                                                status.message()));
  }
  if (reader.remaining() != 0) {
    return base::Status::Corruption(fmt::format("{} v{} response: {} bytes left over",
                                                ApiKeyName(static_cast<int16_t>(api_key)), version,
                                                reader.remaining()));
  }
  return body;
}

base::Result<ResponseBody> DecodeResponse(ApiKey api_key, int16_t version,
                                          std::string_view frame_body, int32_t* correlation_id) {
  return DecodeResponse(api_key, version,
                        std::span<const uint8_t>(
                            reinterpret_cast<const uint8_t*>(frame_body.data()), frame_body.size()),
                        correlation_id);
}

}  // namespace tally::broker
