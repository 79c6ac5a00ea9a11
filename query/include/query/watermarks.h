// WatermarkSource: how far the pipeline has got, for GET /v1/watermarks.
//
// One row per input partition and one per tally.deltas partition. A row's
// applied_offset is the next offset whose effect is not yet visible in the
// store, end_offset the partition's high watermark, lag their difference.
// The contract (SPEC section 4): once producers stop, the total lag reaches
// exactly 0, and a total lag of 0 means every record published before the
// request is visible in every read.
//
// An input row starts from the router's committed offset and is lowered,
// per deltas partition, to what that partition may still hide of the
// partition's records: nothing once it has applied the position the
// commit's metadata names (schemas/deltas_position.h), else the first record
// of the one message left, else the stream's mark there.
//
// That guarantee rests on the order in which Compute() reads its four
// sources (see query/README.md for the argument):
//   1. the router's committed offsets on every input partition (and their
//      metadata),
//   2. the store's progress (after CatchUp() for a read-only store),
//   3. the high/low watermarks of the input topics,
//   4. the high/low watermarks of tally.deltas.
// Reading an "applied" position before the matching "end" position can only
// overstate lag, never understate it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"
#include "schemas/delta.h"
#include "schemas/deltas_position.h"

namespace tally::store {
class StateStore;
struct Progress;
}  // namespace tally::store

namespace tally::query {

struct WatermarkRow {
  std::string topic;
  int32_t partition = 0;
  int64_t applied_offset = 0;
  int64_t end_offset = 0;
  int64_t lag = 0;
  int64_t event_time_ms = 0;
};

struct WatermarkReport {
  std::vector<WatermarkRow> rows;  // input topics in the order given, then deltas
  int64_t lag = 0;                 // sum of the rows' lag
};

struct WatermarkOptions {
  base::KafkaOptions kafka;
  std::vector<std::string> input_topics = {std::string(base::kEventsTopic)};
  std::string group_id = std::string(base::kDefaultGroup);  // the router's consumer group
  std::string deltas_topic = std::string(base::kDeltasTopic);
  int timeout_ms = 5000;  // per broker request
};

// The router's committed offset of one input stream and what its commit
// metadata says about where the deltas of the records below it lie.
struct CommittedOffset {
  int64_t offset = -1;                          // < 0: nothing committed
  std::vector<schemas::DeltasPosition> deltas;  // none: unknown (marks only)
};

// The pure part of Compute(), for tests: builds the report from what was read.
//   committed:   per input stream, the router's committed offset and its
//                deltas positions (absent: nothing committed)
//   progress:    per deltas partition (index = partition)
//   input:       per input topic (same order as `input_topics`), watermarks
//   deltas:      watermarks of the deltas topic, one per store partition
// InvalidArgument if `deltas` and `progress` disagree on the partition count.
base::Result<WatermarkReport> BuildWatermarkReport(
    const std::vector<std::string>& input_topics,
    const std::map<schemas::SourceStream, CommittedOffset>& committed,
    const std::vector<store::Progress>& progress,
    const std::vector<std::vector<base::PartitionOffsets>>& input, const std::string& deltas_topic,
    const std::vector<base::PartitionOffsets>& deltas);

// The same over the deltas partitions a store holds (`held`, by partition;
// `deltas` still has one entry per partition of the topic): a row per held
// deltas partition, and input rows lowered only for what those may hide.
// A cluster member reports this; the members' reports merged (every input
// row at its lowest applied offset, each deltas row from one member) give
// the cluster's. InvalidArgument if `held` names a partition `deltas` does
// not have.
base::Result<WatermarkReport> BuildHeldWatermarkReport(
    const std::vector<std::string>& input_topics,
    const std::map<schemas::SourceStream, CommittedOffset>& committed,
    const std::map<uint32_t, store::Progress>& held,
    const std::vector<std::vector<base::PartitionOffsets>>& input, const std::string& deltas_topic,
    const std::vector<base::PartitionOffsets>& deltas);

// What earlier reports of one store claimed, so that an input row's
// applied_offset never goes back while the state does not. The rules above
// can lower a row without anything becoming invisible: a deltas partition
// that stalls (a store fault, a full disk) while the router commits on
// first lowers the row to the one unapplied message's first record, then,
// once a second message waits, to the stream's older mark. Both claims are
// true; the higher one stays true as long as no held partition goes back.
// Thread model: externally synchronized (WatermarkSource's lock).
class AppliedFloors {
 public:
  // Raises each input row of `report` (rows not of `deltas_topic`) to the
  // highest applied offset this has seen for it, at most to its end
  // offset, then records the rows. Forgets every row first when the held
  // partitions changed or one of them went back (another state, another
  // log), and a row whose end fell below it (a recreated topic).
  void Hold(const std::map<uint32_t, store::Progress>& held, const std::string& deltas_topic,
            WatermarkReport* report);

 private:
  std::map<uint32_t, int64_t> next_deltas_;  // per held partition, when last seen
  std::map<std::pair<std::string, int32_t>, int64_t> floors_;
};

class WatermarkSource {
 public:
  // Creates the Kafka consumer handle used for committed offsets and
  // watermarks: group.id = options.group_id; it never subscribes, never
  // joins the group and never commits. `store` is borrowed and must outlive
  // the source. InvalidArgument for bad Kafka settings; does not contact the
  // cluster.
  static base::Result<std::unique_ptr<WatermarkSource>> Create(const WatermarkOptions& options,
                                                               store::StateStore* store);
  ~WatermarkSource();

  // Reads the four sources in the order above and builds the report, over
  // the deltas partitions the store holds (every one in a single process:
  // BuildHeldWatermarkReport), input rows held at what earlier calls
  // claimed (AppliedFloors). No caching: every call asks the broker.
  // Unavailable (naming what failed) when the broker or the store cannot
  // answer. Safe for concurrent use: calls are serialized.
  base::Result<WatermarkReport> Compute();

  // The same, but every broker request waits at most until `deadline_ms`
  // (base::SteadyMs()) rather than `timeout_ms` each: a caller with a
  // deadline of its own (a stop waiting for lag 0) is not held past it by
  // a broker that does not answer. Unavailable once the deadline passed.
  base::Result<WatermarkReport> Compute(int64_t deadline_ms);

  const std::string& deltas_topic() const { return options_.deltas_topic; }

 private:
  WatermarkSource(WatermarkOptions options, store::StateStore* store, base::KafkaHandle rk);
  static base::Result<base::KafkaHandle> MakeHandle(const WatermarkOptions& options);
  base::Result<WatermarkReport> ComputeLocked(int64_t deadline_ms);

  WatermarkOptions options_;
  store::StateStore* store_;
  std::mutex mu_;
  base::KafkaHandle rk_;
  AppliedFloors floors_;
};

}  // namespace tally::query
