// The codec's entry points: a whole request frame body in, a typed request
// out; a typed response in, a whole response frame (with its size prefix)
// out. The server calls these; the message structs are in
// wire/produce_fetch_messages.h, wire/admin_messages.h and
// wire/group_messages.h.
//
// Thread model: pure functions and value types; safe for concurrent use.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "base/status.h"
#include "wire/admin_messages.h"
#include "wire/api_versions.h"
#include "wire/group_messages.h"
#include "wire/header.h"
#include "wire/produce_fetch_messages.h"

namespace tally::broker {

// The body of a request whose header could be read but whose API or version
// the codec does not speak (IsSupported() is false). Its bytes are not read.
struct UnsupportedRequest {
  bool operator==(const UnsupportedRequest&) const = default;
};

using RequestBody =
    std::variant<UnsupportedRequest, ProduceRequest, FetchRequest, ListOffsetsRequest,
                 MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, FindCoordinatorRequest,
                 JoinGroupRequest, HeartbeatRequest, LeaveGroupRequest, SyncGroupRequest,
                 DescribeGroupsRequest, ListGroupsRequest, ApiVersionsRequest, CreateTopicsRequest,
                 DeleteTopicsRequest, DeleteRecordsRequest, InitProducerIdRequest,
                 DescribeConfigsRequest, AlterConfigsRequest>;

using ResponseBody =
    std::variant<ProduceResponse, FetchResponse, ListOffsetsResponse, MetadataResponse,
                 OffsetCommitResponse, OffsetFetchResponse, FindCoordinatorResponse,
                 JoinGroupResponse, HeartbeatResponse, LeaveGroupResponse, SyncGroupResponse,
                 DescribeGroupsResponse, ListGroupsResponse, ApiVersionsResponse,
                 CreateTopicsResponse, DeleteTopicsResponse, DeleteRecordsResponse,
                 InitProducerIdResponse, DescribeConfigsResponse, AlterConfigsResponse>;

struct Request {
  RequestHeader header;
  RequestBody body;
  bool operator==(const Request&) const = default;
};

// Decodes one request frame body (the bytes after the 4-byte size prefix).
// Outcomes:
// - OK with a typed body: a supported (api key, version), fully decoded,
//   with no byte left over.
// - OK with UnsupportedRequest: the first 8 bytes (api key, version,
//   correlation id) were read, and the client id if it could be; the API or
//   the version is not supported. For ApiVersions the server answers
//   MakeUnsupportedApiVersionsResponse() encoded at version 0; for any other
//   API, as Kafka does, it closes the connection (logging key and version).
// - kCorruption: the bytes do not decode (truncated, bad lengths, bytes left
//   over); the message names the API, version and byte position. The server
//   closes the connection.
// Never reads outside `frame_body`; memory allocated is bounded by a small
// multiple of its size.
base::Result<Request> DecodeRequest(std::span<const uint8_t> frame_body);
base::Result<Request> DecodeRequest(std::string_view frame_body);

// Appends a whole request frame (size prefix, header, body) to `out`, with
// the header version the API and version call for. The header's api key
// is taken from the body's type (an UnsupportedRequest keeps the header's,
// and writes a v1 header and no body). For tests and test clients.
void EncodeRequest(const Request& request, std::string* out);
std::string EncodeRequest(const Request& request);

// The API key a response body is for.
ApiKey ResponseApiKey(const ResponseBody& response);

// Appends a whole response frame to `out`: size prefix, response header
// (ResponseHeaderVersion of the body's API at `version`; always v0 for
// ApiVersions), body at `version`. `version` is the request's version (0
// for the answer to an unsupported ApiVersions request) and must be one the
// codec supports for that API.
void EncodeResponse(int32_t correlation_id, const ResponseBody& response, int16_t version,
                    std::string* out);
std::string EncodeResponse(int32_t correlation_id, const ResponseBody& response, int16_t version);

// Decodes a response frame body (after the size prefix) of `api_key` at
// `version`, setting *correlation_id. kCorruption if it does not decode or
// has bytes left over, kInvalidArgument for an API this codec has no
// response for. For tests and test clients.
base::Result<ResponseBody> DecodeResponse(ApiKey api_key, int16_t version,
                                          std::span<const uint8_t> frame_body,
                                          int32_t* correlation_id);
base::Result<ResponseBody> DecodeResponse(ApiKey api_key, int16_t version,
                                          std::string_view frame_body, int32_t* correlation_id);

}  // namespace tally::broker
