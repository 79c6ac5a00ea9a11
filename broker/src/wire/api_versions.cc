#include "wire/api_versions.h"

#include <array>
#include <cstdint>

namespace tally::broker {
namespace {

// What is advertised. Each range stops before the API's first flexible
// version (only ApiVersions v3 is flexible) and covers what librdkafka 2.0.2
// and kafka-python 2.0.2 send; see /work/shared/KAFKA-CLIENTS.md for why each
// bound is where it is (OffsetFetch stops at 5: advertising 6 or 7 makes
// librdkafka send the flexible encoding). SaslHandshake is left out: without
// SASL it must not be advertised.
constexpr std::array<ApiVersionRange, 20> kTable = {{
    {ApiKey::kProduce, 3, 7},         {ApiKey::kFetch, 4, 11},
    {ApiKey::kListOffsets, 0, 5},     {ApiKey::kMetadata, 0, 8},
    {ApiKey::kOffsetCommit, 0, 7},    {ApiKey::kOffsetFetch, 0, 5},
    {ApiKey::kFindCoordinator, 0, 2}, {ApiKey::kJoinGroup, 0, 5},
    {ApiKey::kHeartbeat, 0, 3},       {ApiKey::kLeaveGroup, 0, 2},
    {ApiKey::kSyncGroup, 0, 3},       {ApiKey::kDescribeGroups, 0, 4},
    {ApiKey::kListGroups, 0, 2},      {ApiKey::kApiVersions, 0, 3},
    {ApiKey::kCreateTopics, 0, 4},    {ApiKey::kDeleteTopics, 0, 3},
    {ApiKey::kDeleteRecords, 0, 1},   {ApiKey::kInitProducerId, 0, 1},
    {ApiKey::kDescribeConfigs, 0, 2}, {ApiKey::kAlterConfigs, 0, 1},
}};

}  // namespace

const char* ApiKeyName(int16_t api_key) {
  switch (static_cast<ApiKey>(api_key)) {
    case ApiKey::kProduce:
      return "Produce";
    case ApiKey::kFetch:
      return "Fetch";
    case ApiKey::kListOffsets:
      return "ListOffsets";
    case ApiKey::kMetadata:
      return "Metadata";
    case ApiKey::kOffsetCommit:
      return "OffsetCommit";
    case ApiKey::kOffsetFetch:
      return "OffsetFetch";
    case ApiKey::kFindCoordinator:
      return "FindCoordinator";
    case ApiKey::kJoinGroup:
      return "JoinGroup";
    case ApiKey::kHeartbeat:
      return "Heartbeat";
    case ApiKey::kLeaveGroup:
      return "LeaveGroup";
    case ApiKey::kSyncGroup:
      return "SyncGroup";
    case ApiKey::kDescribeGroups:
      return "DescribeGroups";
    case ApiKey::kListGroups:
      return "ListGroups";
    case ApiKey::kSaslHandshake:
      return "SaslHandshake";
    case ApiKey::kApiVersions:
      return "ApiVersions";
    case ApiKey::kCreateTopics:
      return "CreateTopics";
    case ApiKey::kDeleteTopics:
      return "DeleteTopics";
    case ApiKey::kDeleteRecords:
      return "DeleteRecords";
    case ApiKey::kInitProducerId:
      return "InitProducerId";
    case ApiKey::kDescribeConfigs:
      return "DescribeConfigs";
    case ApiKey::kAlterConfigs:
      return "AlterConfigs";
  }
  return "Unknown";
}

std::span<const ApiVersionRange> ApiVersionsTable() { return kTable; }

bool IsSupported(int16_t api_key, int16_t version) {
  for (const ApiVersionRange& r : kTable) {
    if (static_cast<int16_t>(r.api_key) == api_key) {
      return version >= r.min_version && version <= r.max_version;
    }
  }
  return false;
}

int16_t FirstFlexibleVersion(ApiKey api_key) {
  switch (api_key) {
    case ApiKey::kProduce:
      return 9;
    case ApiKey::kFetch:
      return 12;
    case ApiKey::kListOffsets:
      return 6;
    case ApiKey::kMetadata:
      return 9;
    case ApiKey::kOffsetCommit:
      return 8;
    case ApiKey::kOffsetFetch:
      return 6;
    case ApiKey::kFindCoordinator:
      return 3;
    case ApiKey::kJoinGroup:
      return 6;
    case ApiKey::kHeartbeat:
      return 4;
    case ApiKey::kLeaveGroup:
      return 4;
    case ApiKey::kSyncGroup:
      return 4;
    case ApiKey::kDescribeGroups:
      return 5;
    case ApiKey::kListGroups:
      return 3;
    case ApiKey::kSaslHandshake:
      return INT16_MAX;
    case ApiKey::kApiVersions:
      return 3;
    case ApiKey::kCreateTopics:
      return 5;
    case ApiKey::kDeleteTopics:
      return 4;
    case ApiKey::kDeleteRecords:
      return 2;
    case ApiKey::kInitProducerId:
      return 2;
    case ApiKey::kDescribeConfigs:
      return 4;
    case ApiKey::kAlterConfigs:
      return 2;
  }
  return INT16_MAX;
}

int16_t RequestHeaderVersion(ApiKey api_key, int16_t version) {
  return IsFlexible(api_key, version) ? 2 : 1;
}

int16_t ResponseHeaderVersion(ApiKey api_key, int16_t version) {
  if (api_key == ApiKey::kApiVersions) return 0;
  return IsFlexible(api_key, version) ? 1 : 0;
}

}  // namespace tally::broker
