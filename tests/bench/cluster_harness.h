// The harness of the cluster workloads (cluster_workloads.cc): one
// `tally broker` and `tally up --brokers` members as child processes, each
// with its own state directory and HTTP port, and what the workloads read
// of them: the members directory (tally.members, read as a member that
// never publishes), their GET /metrics, their threads' CPU and their logs.
//
// Thread model: a Cluster is used from one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"
#include "bench_util.h"
#include "cluster/member_info.h"
#include "cluster/members_directory.h"
#include "cluster_workloads.h"

namespace tally::bench {

// One `tally up --brokers` child.
struct Member {
  std::string id;  // "127.0.0.1:PORT", its member id
  int port = 0;
  std::string dir;
  std::string log;
  std::unique_ptr<Process> proc;
  std::unique_ptr<HttpClient> http;
  bool gone = false;  // killed or stopped: no longer expected in the cluster
};

// A broker, its members and a reader of the members directory.
class Cluster {
 public:
  Cluster(const ClusterBenchOptions& o, std::string dir, int partitions, int standbys)
      : o_(o), dir_(std::move(dir)), partitions_(partitions), standbys_(standbys) {}

  ~Cluster();

  base::Status Start();

  // Starts a member with an empty state directory on a new port.
  base::Result<Member*> Add();

  void Kill(Member* m);

  // SIGTERM: a clean leave. Waits for the exit.
  void Leave(Member* m);

  // SIGTERM to every member at once, then waits for each.
  void StopAll();

  std::vector<Member*> Alive() const;

  // The directory's live records of the members not killed or stopped: a
  // killed member's record stays live in the directory until it expires.
  std::vector<cluster::MemberInfo> View() const;

  // Whether `view` is a settled cluster of every alive member: each
  // partition owned by exactly one, nothing restoring, owned partitions
  // spread evenly, and each partition with its standbys. Says why not in
  // *why.
  bool Settled(const std::vector<cluster::MemberInfo>& view, std::string* why) const;

  // Waits until the cluster is settled and has stayed so for 2 s (a
  // rebalance passes through states that look settled for a moment).
  // `on_poll` runs at every look (every 50 ms).
  base::Status WaitSettled(double timeout_s, const std::string& what,
                           const std::function<void()>& on_poll = {});

  base::Result<std::vector<base::PartitionOffsets>> TopicWatermarks(std::string_view topic);

  // A member's GET /metrics.
  base::Result<std::string> Metrics(Member* m);

  std::vector<std::string> TallyArgs(std::initializer_list<std::string> args) const;

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& brokers() const { return brokers_; }
  int partitions() const { return partitions_; }
  int32_t global_partition() const;

 private:
  const ClusterBenchOptions& o_;
  const std::string dir_;
  const int partitions_;
  const int standbys_;
  std::string brokers_;
  Process broker_;
  std::vector<std::unique_ptr<Member>> members_;
  std::unique_ptr<cluster::MembersDirectory> directory_;
  base::KafkaHandle watermark_client_;
};

// The work counters the ingest table shows beside the CPU: what the routers
// sent and the appliers took, summed over members.
inline constexpr std::string_view kCountersShown[] = {
    "tally_router_deltas_total", "tally_router_delta_messages_total", "tally_applier_deltas_total",
    "tally_applier_windows_total"};

// The members' counters summed, and CPU, at one look.
struct Look {
  double routed = 0;            // tally_router_events_total
  double lost = 0;              // tally_input_lost_records_total + tally_deltas_lost_records_total
  double cpu_s = 0;             // utime + stime of every member
  std::vector<double> applied;  // tally_applier_deltas_total per member
  std::map<std::string, double> counters;  // kCountersShown, summed
};

base::Result<Look> LookAt(Cluster* c);

// Waits until the members have routed `routed` events (counting those the
// broker dropped before they were read) and no member has applied a delta
// for `quiet_s`: lag 0 without per-partition offsets to compare. *last is
// the look at the last change.
base::Status WaitQuiet(Cluster* c, double routed, double quiet_s, double timeout_s,
                       const std::string& what, Look* last, Clock::time_point* last_change);

// The value of an unlabelled metric in a Prometheus text answer; NaN if
// absent.
double MetricValue(std::string_view body, std::string_view name);

// CPU seconds of each thread of `pid` so far, by thread id, with its name.
std::map<std::string, std::pair<std::string, double>> ThreadCpu(pid_t pid);

// The partitions a member restored from offset 0 as their owner, from its
// log: when it started ("applying from offset 0 as owner") and when it had
// caught up ("caught up at offset N; served here as owner").
struct RestoreSpan {
  int64_t start_ms = -1, end_ms = -1;
  int64_t records = 0;
};

std::map<int32_t, RestoreSpan> RestoresInLog(const std::string& path);

// Bytes of a stopped member's state directory once every partition in it
// is compacted: what it holds, apart from when RocksDB last flushed.
base::Result<uint64_t> CompactedBytes(const std::string& dir);

}  // namespace tally::bench
