// The APIs this broker speaks: API keys, the supported version ranges (what
// an ApiVersions response advertises), and which header version each
// (api key, version) uses.
//
// Every supported version is non-flexible except ApiVersions v3 (librdkafka
// sends it first). A range here is exactly what the codec in wire/messages*.h
// can decode and encode; a client that stays inside it gets answers in the
// encodings Kafka itself would use.
//
// Thread model: constants and pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <span>

namespace tally::broker {

enum class ApiKey : int16_t {
  kProduce = 0,
  kFetch = 1,
  kListOffsets = 2,
  kMetadata = 3,
  kOffsetCommit = 8,
  kOffsetFetch = 9,
  kFindCoordinator = 10,
  kJoinGroup = 11,
  kHeartbeat = 12,
  kLeaveGroup = 13,
  kSyncGroup = 14,
  kDescribeGroups = 15,
  kListGroups = 16,
  kSaslHandshake = 17,
  kApiVersions = 18,
  kCreateTopics = 19,
  kDeleteTopics = 20,
  kDeleteRecords = 21,
  kInitProducerId = 22,
  kDescribeConfigs = 32,
  kAlterConfigs = 33,
};

// Kafka's name of an API ("Produce"), or "Unknown" for a key not above.
const char* ApiKeyName(int16_t api_key);

// One row of the ApiVersions response.
struct ApiVersionRange {
  ApiKey api_key;
  int16_t min_version;
  int16_t max_version;
};

// The supported ranges in ascending api key order; the table is static and
// lives for the whole program.
std::span<const ApiVersionRange> ApiVersionsTable();

// Whether the codec supports `version` of `api_key` (a key not in the table
// is not supported).
bool IsSupported(int16_t api_key, int16_t version);

// The first flexible version of `api_key` in Kafka's message schemas
// ("flexibleVersions"), whether or not it is supported here; INT16_MAX for a
// key this codec does not know.
int16_t FirstFlexibleVersion(ApiKey api_key);

// Whether the body of (api_key, version) uses the flexible encoding
// (compact strings and arrays, tagged fields).
inline bool IsFlexible(ApiKey api_key, int16_t version) {
  return version >= FirstFlexibleVersion(api_key);
}

// The request header version of (api_key, version): 2 for flexible
// versions, 1 otherwise (header v0 is only for ControlledShutdown v0,
// which this broker does not speak).
int16_t RequestHeaderVersion(ApiKey api_key, int16_t version);

// The response header version: 1 for flexible versions, 0 otherwise, and
// always 0 for ApiVersions (a client must be able to read it before it knows
// which versions the broker speaks).
int16_t ResponseHeaderVersion(ApiKey api_key, int16_t version);

}  // namespace tally::broker
