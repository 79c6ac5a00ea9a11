// GET /v1/watermarks over a cluster (SPEC section 6): every member reports
// the tally.deltas partitions it holds (WatermarkSource over its store), and
// the member asked merges those reports into one that covers every
// partition. Internal to query/.
//
// The merge keeps SPEC's promise that lag 0 means every record published
// before the request is visible in every read:
//   - a deltas row comes from the member reads of that partition go to
//     (`home`), else from the member that reports it furthest applied;
//     a partition no report has makes the merge fail (partition_moving),
//     never a lag that leaves it out;
//   - an input row is the lowest applied offset any member reports (each
//     member lowers it only for the deltas partitions it holds, so the
//     lowest accounts for every partition) and the highest end offset, its
//     lag recomputed; the total is the sum of the rows' lag.
//
// Thread model: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "query/watermarks.h"

namespace tally::query::internal {

// One member's own report (GET /v1/watermarks with the forwarded header).
struct MemberWatermarks {
  std::string member;
  WatermarkReport report;
};

// Parses the body of GET /v1/watermarks (RenderWatermarks' format).
// InvalidArgument naming what is wrong.
base::Result<WatermarkReport> ParseWatermarkReport(std::string_view json);

// Merges `reports` (see above) for a deltas topic of `partitions`
// partitions. home(d): the member whose report speaks for deltas partition
// d ("" when reads of d go nowhere now or to a member that did not report;
// then the furthest report). Unavailable naming the partitions no report
// covers. Rows: the input rows in the order the reports first name them,
// then the deltas rows by partition.
base::Result<WatermarkReport> MergeWatermarkReports(
    const std::vector<MemberWatermarks>& reports, std::string_view deltas_topic,
    uint32_t partitions, const std::function<std::string(uint32_t)>& home);

}  // namespace tally::query::internal
