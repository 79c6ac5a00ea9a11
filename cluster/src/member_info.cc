#include "cluster/member_info.h"

#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

namespace tally::cluster {
namespace {

using nlohmann::json;

constexpr size_t kMaxMemberIdBytes = 256;
constexpr size_t kMaxHttpBytes = 1024;
constexpr size_t kMaxPeerKeyBytes = 256;
// A member owns at most every partition of tally.deltas; a list longer than
// this is no record of ours.
constexpr size_t kMaxPartitions = 1 << 16;

// nlohmann's json keeps keys sorted; ordered_json keeps the documented order.
using ordered_json = nlohmann::ordered_json;

// The checks below read values with is_number_integer() first, so
// nlohmann's get<>() never throws on a type; the only exception left is
// parse's, caught once in MemberInfoFromJson.
base::Status NonNegative(const json& obj, const char* field, int64_t max, int64_t* out) {
  auto it = obj.find(field);
  if (it == obj.end()) return base::Status::InvalidArgument(fmt::format("missing field {}", field));
  if (!it->is_number_integer()) {
    return base::Status::InvalidArgument(fmt::format("field {} is not an integer", field));
  }
  // An unsigned above INT64_MAX reads as negative and is refused with them.
  int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX}
                  ? -1
                  : it->get<int64_t>();
  if (v < 0 || v > max) {
    return base::Status::InvalidArgument(
        fmt::format("field {} out of range: {}", field, it->dump()));
  }
  *out = v;
  return base::Status::Ok();
}

base::Status String(const json& obj, const char* field, size_t max_bytes, std::string* out) {
  auto it = obj.find(field);
  if (it == obj.end()) return base::Status::InvalidArgument(fmt::format("missing field {}", field));
  if (!it->is_string())
    return base::Status::InvalidArgument(fmt::format("field {} is not a string", field));
  const auto& s = it->get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    return base::Status::InvalidArgument(
        fmt::format("field {} longer than {} bytes", field, max_bytes));
  }
  *out = s;
  return base::Status::Ok();
}

base::Status Partitions(const json& obj, const char* field, std::vector<int32_t>* out) {
  auto it = obj.find(field);
  if (it == obj.end()) return base::Status::InvalidArgument(fmt::format("missing field {}", field));
  if (!it->is_array())
    return base::Status::InvalidArgument(fmt::format("field {} is not an array", field));
  if (it->size() > kMaxPartitions) {
    return base::Status::InvalidArgument(fmt::format("field {} has {} entries", field, it->size()));
  }
  out->clear();
  for (const auto& e : *it) {
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > INT32_MAX) ||
        (!e.is_number_unsigned() && (e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX))) {
      return base::Status::InvalidArgument(
          fmt::format("field {}: {} is not a partition", field, e.dump()));
    }
    out->push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return base::Status::Ok();
}

base::Status Parse(const json& doc, MemberInfo* info) {
  if (!doc.is_object()) return base::Status::InvalidArgument("not a JSON object");
  TALLY_RETURN_IF_ERROR(String(doc, "member", kMaxMemberIdBytes, &info->member));
  if (info->member.empty()) return base::Status::InvalidArgument("field member is empty");
  TALLY_RETURN_IF_ERROR(String(doc, "http", kMaxHttpBytes, &info->http));
  TALLY_RETURN_IF_ERROR(Partitions(doc, "owns", &info->owns));
  TALLY_RETURN_IF_ERROR(Partitions(doc, "standby", &info->standby));
  auto it = doc.find("restoring");
  if (it == doc.end()) return base::Status::InvalidArgument("missing field restoring");
  if (!it->is_array() || it->size() > kMaxPartitions) {
    return base::Status::InvalidArgument("field restoring is not an array of partitions");
  }
  constexpr int64_t kMaxOffset = std::numeric_limits<int64_t>::max();
  for (const auto& e : *it) {
    if (!e.is_object())
      return base::Status::InvalidArgument("field restoring: an entry is not an object");
    RestoringPartition r;
    int64_t p = 0;
    TALLY_RETURN_IF_ERROR(NonNegative(e, "partition", INT32_MAX, &p).WithContext("restoring"));
    r.partition = static_cast<int32_t>(p);
    TALLY_RETURN_IF_ERROR(NonNegative(e, "offset", kMaxOffset, &r.offset).WithContext("restoring"));
    TALLY_RETURN_IF_ERROR(
        NonNegative(e, "end_offset", kMaxOffset, &r.end_offset).WithContext("restoring"));
    info->restoring.push_back(r);
  }
  TALLY_RETURN_IF_ERROR(NonNegative(doc, "generation", kMaxOffset, &info->generation));
  TALLY_RETURN_IF_ERROR(NonNegative(doc, "ts_ms", kMaxOffset, &info->ts_ms));
  // Optional: a member from before peer keys writes none.
  if (doc.contains("peer_key")) {
    TALLY_RETURN_IF_ERROR(String(doc, "peer_key", kMaxPeerKeyBytes, &info->peer_key));
  }
  if (doc.contains("process")) {
    TALLY_RETURN_IF_ERROR(String(doc, "process", kMaxPeerKeyBytes, &info->process));
  }
  return base::Status::Ok();
}

}  // namespace

std::string ToJson(const MemberInfo& info) {
  ordered_json restoring = ordered_json::array();
  for (const auto& r : info.restoring) {
    ordered_json e;
    e["partition"] = r.partition;
    e["offset"] = r.offset;
    e["end_offset"] = r.end_offset;
    restoring.push_back(std::move(e));
  }
  ordered_json doc;
  doc["member"] = info.member;
  doc["http"] = info.http;
  doc["owns"] = info.owns;
  doc["standby"] = info.standby;
  doc["restoring"] = restoring;
  doc["generation"] = info.generation;
  doc["ts_ms"] = info.ts_ms;
  if (!info.peer_key.empty()) doc["peer_key"] = info.peer_key;
  if (!info.process.empty()) doc["process"] = info.process;
  // A member id is the caller's bytes: replace invalid UTF-8 rather than throw.
  return doc.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

base::Result<MemberInfo> MemberInfoFromJson(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return base::Status::InvalidArgument("not JSON");
  MemberInfo info;
  TALLY_RETURN_IF_ERROR(Parse(doc, &info));
  return info;
}

bool HasPartition(const std::vector<int32_t>& partitions, int32_t p) {
  return std::binary_search(partitions.begin(), partitions.end(), p);
}

}  // namespace tally::cluster
