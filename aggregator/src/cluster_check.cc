#include "aggregator/cluster_check.h"

#include <fmt/core.h>

#include <filesystem>
#include <system_error>

#include "base/log.h"

namespace tally::aggregator {

using base::Status;

namespace {

// A state recorded from librdkafka's mock cluster, which `tally up` ran as
// its broker before tally had its own: that log lived in memory and is
// gone, so nothing of it can be read twice.
bool FromTheOldEmbeddedBroker(const std::string& recorded) {
  return recorded.rfind("mockCluster", 0) == 0;
}

}  // namespace

Status AttachToCluster(store::StateStore* store, const base::ClusterIdentity& cluster,
                       OnNewCluster on_new) {
  // librdkafka's mock (tests) keeps its log in memory: new after every start.
  if (cluster.embedded) on_new = OnNewCluster::kOwnBroker;
  const std::string now = cluster.ToString();
  const std::string before = store->recorded_cluster();
  if (before == now) return Status::Ok();
  if (before.empty()) {
    // A cluster member holds only some partitions (at start, none): the
    // state was never attached, so none it does not hold has been written.
    auto held = store->LoadHeldProgress();
    if (!held.ok()) return held.status();
    bool fresh = true;
    for (const auto& [i, p] : *held) fresh = fresh && p.next_deltas_offset == 0 && p.marks.empty();
    if (!fresh && on_new == OnNewCluster::kRefuse) {
      return Status::FailedPrecondition(fmt::format(
          "{} holds state of an unknown cluster; refusing to attach it to {} (give --reset-offsets to "
          "keep the counts and read that cluster's logs from their start)",
          store->dir(), now));
    }
    if (!fresh) TALLY_RETURN_IF_ERROR(store->ResetProgress());
    return store->RecordCluster(now);
  }
  if (FromTheOldEmbeddedBroker(before)) {
    TALLY_LOG_WARN("cluster",
                   "state in {} was built on the in-memory broker of an older tally ({}), "
                   "whose log is gone; now on {}: keeping the counts and reading its logs from "
                   "their start",
                   store->dir(), before, now);
  } else if (on_new == OnNewCluster::kOwnBroker) {
    TALLY_LOG_WARN("cluster",
                   "state in {} was built from cluster {}; its broker's log is new ({}), removed "
                   "or not copied with the state: keeping the counts and reading the new log "
                   "from its start",
                   store->dir(), before, now);
  } else if (on_new == OnNewCluster::kResetOffsets) {
    TALLY_LOG_WARN("cluster",
                   "state in {} was built from cluster {}, now attached to {} (--reset-offsets): "
                   "keeping the counts and reading its logs from their start",
                   store->dir(), before, now);
  } else {
    return Status::FailedPrecondition(fmt::format(
        "state in {} was built from Kafka cluster {}, but {} is cluster {}; refusing to start (give "
        "--reset-offsets to keep the counts and read this cluster's logs from their start)",
        store->dir(), before, "the given --brokers", now));
  }
  TALLY_RETURN_IF_ERROR(store->ResetProgress());
  return store->RecordCluster(now);
}

bool AttachCannotRefuse(const std::string& dir, const base::ClusterIdentity& cluster,
                        OnNewCluster on_new) {
  if (cluster.embedded || on_new != OnNewCluster::kRefuse) return true;
  auto recorded = store::StateStore::PeekRecordedCluster(dir);
  if (recorded.ok()) return *recorded == cluster.ToString() || FromTheOldEmbeddedBroker(*recorded);
  if (recorded.status().code() != base::StatusCode::kNotFound) return false;
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return !ec;
  return std::filesystem::is_directory(dir, ec) && std::filesystem::is_empty(dir, ec) && !ec;
}

}  // namespace tally::aggregator
