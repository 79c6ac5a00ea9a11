// cluster_workloads: tally-bench's workloads of a tally cluster (SPEC
// section 6): `tally up --brokers` members on one `tally broker`, each a
// child process with its own state directory and HTTP port. They watch the
// members through the members directory (tally.members), as a reader that
// never publishes, and the members' GET /metrics, /proc and logs: the
// harness of cluster_harness.h.
//
//   cluster_failover  3 members, a steady load; SIGKILL the member owning the
//                     most partitions; seconds until each of its partitions
//                     is served for good (a live member lists it current, in
//                     `owns` or `standby`), how long some was unserved, and
//                     until each is owned again (in `owns`), with
//                     --standbys 0 and 1, each repeated.
//   cluster_restore   one member holding every partition of a filled
//                     tally.deltas; a fresh member joins and restores its
//                     share from offset 0: records/s and deltas/s.
//   cluster_ingest    CPU of every member per event, the same events with 1,
//                     2 and 3 settled members.
//   cluster_disk      the state directory of each member after those runs,
//                     with 1 and 3 members.
//
// Thread model: externally synchronized; one workload at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench_util.h"

namespace tally::bench {

struct ClusterBenchOptions {
  std::string tally;  // the tally binary
  std::string dir;    // scratch directory of this run; created if missing
  // Partitions of tally's topics for cluster_restore, cluster_ingest and
  // cluster_disk.
  int partitions = 16;
  int failover_partitions = 8;
  int64_t failover_rate = 2000;      // events/s published through cluster_failover
  int repeats = 3;                   // kills per --standbys value; restores
  int64_t restore_events = 2000000;  // events whose deltas fill tally.deltas
  // cluster_ingest and cluster_disk: events published, and at how many a
  // second (0: at once). A member's cost at rest is a fixed share of a core
  // whatever the rate, so the per-event ratio of 3 members to 1 depends on
  // the rate; the default is a load 3 members carry on the 2-core machine
  // of tests/bench/README.md.
  int64_t ingest_events = 6000000;
  int64_t ingest_rate = 250000;
  int64_t users = 100000;
  int64_t posts = 100000;
  int64_t seed = 1;
  int64_t block_cache_mb = 256;
  std::vector<std::string> up_args;  // extra flags for every tally up
};

class ClusterWorkloads {
 public:
  explicit ClusterWorkloads(ClusterBenchOptions options);
  ~ClusterWorkloads();
  ClusterWorkloads(const ClusterWorkloads&) = delete;
  ClusterWorkloads& operator=(const ClusterWorkloads&) = delete;

  // Each runs one workload to the end, printing progress to stderr, and
  // appends its rows (one per configuration) to *rows. An error when a
  // process did not start or the cluster did not settle within its
  // deadline; the logs are in options.dir.
  base::Status Failover(std::vector<WorkloadResult>* rows);
  base::Status Restore(std::vector<WorkloadResult>* rows);
  base::Status Ingest(std::vector<WorkloadResult>* rows);
  // Reuses the 1- and 3-member runs of Ingest() when it ran before.
  base::Status Disk(std::vector<WorkloadResult>* rows);

  // What one ingest run of `members` members measured.
  struct IngestRun {
    double cpu_s = 0;       // every member, from before publishing to the last delta applied
    double idle_cpu_s = 0;  // every member's CPU per second while settled and idle
    double seconds = 0;     // from the first event published to the last delta applied
    std::vector<uint64_t> disk_bytes;        // per member, lag 0 plus a few seconds
    std::vector<uint64_t> disk_bytes_stop;   // per member, stopped cleanly and compacted
    std::vector<std::vector<int32_t>> owns;  // per member
    double lost = 0;  // input and deltas records the broker dropped before they were read
    std::map<std::string, double>
        thread_cpu_s;  // every member's CPU by thread name, over cpu_s's span
    std::map<std::string, double> counters;  // kCountersShown, summed over members
  };

 private:
  base::Result<IngestRun> RunIngest(int members);

  const ClusterBenchOptions o_;
  std::map<int, IngestRun> ingest_runs_;  // by members
};

}  // namespace tally::bench
