#include "cluster_watermarks.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

namespace tally::query::internal {

base::Result<WatermarkReport> ParseWatermarkReport(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("partitions") ||
      !j["partitions"].is_array()) {
    return base::Status::InvalidArgument("watermarks: not a watermarks answer");
  }
  WatermarkReport report;
  for (const nlohmann::json& p : j["partitions"]) {
    if (!p.is_object() || !p.contains("topic") || !p["topic"].is_string()) {
      return base::Status::InvalidArgument("watermarks: a row without a topic");
    }
    WatermarkRow row;
    row.topic = p["topic"].get<std::string>();
    const char* fields[] = {"partition", "applied_offset", "end_offset", "lag", "event_time_ms"};
    int64_t v[5];
    for (int i = 0; i < 5; i++) {
      if (!p.contains(fields[i]) || !p[fields[i]].is_number_integer()) {
        return base::Status::InvalidArgument(
            fmt::format("watermarks: a row of {} without {}", row.topic, fields[i]));
      }
      v[i] = p[fields[i]].get<int64_t>();
    }
    row.partition = static_cast<int32_t>(v[0]);
    row.applied_offset = v[1];
    row.end_offset = v[2];
    row.lag = v[3];
    row.event_time_ms = v[4];
    report.lag += row.lag;
    report.rows.push_back(std::move(row));
  }
  return report;
}

base::Result<WatermarkReport> MergeWatermarkReports(
    const std::vector<MemberWatermarks>& reports, std::string_view deltas_topic,
    uint32_t partitions, const std::function<std::string(uint32_t)>& home) {
  // Input rows by (topic, partition), in first-seen order.
  std::vector<WatermarkRow> input;
  std::map<std::pair<std::string, int32_t>, size_t> input_index;
  // Per deltas partition: the chosen row and whether it came from its home.
  std::vector<const WatermarkRow*> deltas(partitions, nullptr);
  std::vector<bool> from_home(partitions, false);
  for (const MemberWatermarks& m : reports) {
    for (const WatermarkRow& row : m.report.rows) {
      if (row.topic == deltas_topic) {
        if (row.partition < 0 || static_cast<uint32_t>(row.partition) >= partitions) continue;
        const uint32_t d = static_cast<uint32_t>(row.partition);
        if (from_home[d]) continue;
        if (home(d) == m.member) {
          deltas[d] = &row;
          from_home[d] = true;
        } else if (deltas[d] == nullptr || row.applied_offset > deltas[d]->applied_offset) {
          deltas[d] = &row;
        }
        continue;
      }
      auto [it, added] = input_index.try_emplace({row.topic, row.partition}, input.size());
      if (added) {
        input.push_back(row);
        continue;
      }
      WatermarkRow& merged = input[it->second];
      merged.applied_offset = std::min(merged.applied_offset, row.applied_offset);
      merged.end_offset = std::max(merged.end_offset, row.end_offset);
      merged.event_time_ms = std::max(merged.event_time_ms, row.event_time_ms);
    }
  }
  std::vector<uint32_t> missing;
  for (uint32_t d = 0; d < partitions; d++) {
    if (deltas[d] == nullptr) missing.push_back(d);
  }
  if (!missing.empty()) {
    return base::Status::Unavailable(fmt::format("watermarks: no member reports {} partition{} {}",
                                                 deltas_topic, missing.size() == 1 ? "" : "s",
                                                 fmt::join(missing, ", ")));
  }
  WatermarkReport out;
  for (WatermarkRow& row : input) {
    row.lag = std::max<int64_t>(0, row.end_offset - row.applied_offset);
    out.lag += row.lag;
    out.rows.push_back(std::move(row));
  }
  for (uint32_t d = 0; d < partitions; d++) {
    WatermarkRow row = *deltas[d];
    row.lag = std::max<int64_t>(0, row.end_offset - row.applied_offset);
    out.lag += row.lag;
    out.rows.push_back(std::move(row));
  }
  return out;
}

}  // namespace tally::query::internal
