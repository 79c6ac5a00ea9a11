// CommitPipeline: the router's input offset commits, which never run ahead
// of a delta or dead letter the broker has not acknowledged.
//
// What one flush of the router publishes is a generation: the input records
// it covers (next offset per input partition) and how many of its messages
// the broker has not yet acknowledged. Flushes are pipelined: routing goes
// on while they are in flight, and a generation's offsets are committed once
// it and every generation before it are acknowledged. After a delivery
// failure nothing more is committed: a restart re-routes from the last
// committed offsets (the applier drops what it already has).
//
// Each commit also carries, in its metadata, per deltas partition where the
// deltas of the committed records lie (schemas/deltas_position.h), learnt
// from the delivery reports as generations are reaped, so /v1/watermarks can
// tell a record's deltas applied. Costs one map lookup per (message, stream)
// at Track(), one entry update per (message, stream) at reap and one
// metadata string per committed partition; nothing per record. Forgotten at
// every rebalance (ForgetPositions): another router may have routed a
// stream meanwhile.
//
// Offset commits are answered on a queue of their own, so a wait for them
// is bounded. librdkafka keeps a commit that finds no group coordinator
// (an outage) until one answers or session.timeout.ms passes, and neither a
// synchronous rd_kafka_commit() nor rd_kafka_consumer_close() returns
// before: a stop during an outage waited for the broker to come back.
//
// Thread model: confined to the router's thread; OnDelivery() runs there
// too (inside the producer's poll).
#pragma once

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/status.h"
#include "schemas/delta.h"
#include "schemas/deltas_position.h"

namespace tally::aggregator {

class CommitPipeline {
 public:
  // `consumer` (the router's; it commits) must outlive the pipeline.
  // `deltas_partitions`: partition count of the deltas topic. `log`: the
  // component name of log lines.
  CommitPipeline(rd_kafka_t* consumer, uint32_t deltas_partitions, const char* log);
  ~CommitPipeline();  // releases the commit queue (ReleaseQueue)
  CommitPipeline(const CommitPipeline&) = delete;
  CommitPipeline& operator=(const CommitPipeline&) = delete;

  // --- The open generation (the newest, unsealed one; made when needed).

  // Records that input `topic`/`partition` is routed up to `next` (the
  // offset after the last record) in the open generation.
  void Routed(const std::string& topic, int32_t partition, int64_t next);

  // A deltas message of the open generation about to be produced to deltas
  // partition `partition`, carrying the streams of `batch` (before its
  // Finish()). Returns the message's slot, to give to Tag(): where the
  // broker puts it is learnt from its delivery report. 0 when the
  // generation has more messages than a slot can name: the message is
  // untracked, and nothing is vouched for until the next rebalance.
  uintptr_t Track(uint32_t partition, const schemas::DeltaBatchBuilder& batch);

  // The opaque of a message of the open generation with `slot` (0: a dead
  // letter, whose offset nobody needs), for its delivery report.
  void* Tag(uintptr_t slot);

  // The message tagged last was queued: its delivery report will come.
  void Produced();

  // No more messages will be added to the open generation. No-op without one.
  void Seal();

  // True when there is a generation that is not sealed.
  bool HasOpen() const { return !generations_.empty() && !generations_.back().sealed; }

  // Generations not yet committed (sealed or open).
  size_t InFlight() const { return generations_.size(); }

  // True when the oldest generation has messages not yet acknowledged.
  bool OldestOutstanding() const {
    return !generations_.empty() && generations_.front().outstanding > 0;
  }

  // --- Delivery reports and commits.

  // A delivery report of a message produced with Tag(); the first failed
  // delivery is kept (failure()) and stops every commit after it.
  void OnDelivery(const rd_kafka_message_t& m);

  // The first delivery failure, or empty.
  const std::string& failure() const { return failure_; }

  // Commits the offsets of the acknowledged generations, oldest first, and
  // forgets them. Unavailable (the failure) after a delivery failure. With
  // `sync_commit` it also waits, at most base::kFlushAtStopSeconds (or what
  // is left of the stop budget), for every commit in flight to be answered;
  // if `*stop` is set and they are still unanswered then, Aborted (the
  // caller gives up on the coordinator; the records are routed again on
  // restart). Otherwise OK (a commit that fails is logged: the deltas are
  // in the log, and an uncommitted offset only means re-routing later).
  base::Status Reap(bool sync_commit, const std::atomic<bool>* stop);

  // Commits `offsets` as they are (no metadata), answered like the others.
  void Commit(const rd_kafka_topic_partition_list_t* offsets);

  // Takes the answers to offset commits, waiting up to `timeout_ms` for the
  // last one. True when none is in flight any more.
  bool ServeCommits(int timeout_ms);

  int commits_in_flight() const { return commits_in_flight_; }

  // True once the group refused a commit because this consumer is not one
  // of its members (unknown member, illegal generation, a rebalance in
  // progress): a router routing standalone commits as no member, which
  // Kafka accepts only while the group has no members.
  bool refused_by_group() const { return refused_by_group_; }

  // Forgets where the streams' deltas lie (at a rebalance).
  void ForgetPositions();

  // Releases the commit queue at once (a router giving up on its
  // coordinator); no commit is served afterwards.
  void ReleaseQueue();

  // Limits the commit pipeline's warnings; shared with the router's other
  // warnings about its commits.
  base::LogLimiter& commit_log() { return commit_log_; }

 private:
  // A deltas message of a generation: its partition, the offset the broker
  // acknowledged it at, and per input stream it carries (a stream id, see
  // stream_ids_) the stream's smallest offset in it.
  struct SentMessage {
    uint32_t partition = 0;
    int64_t offset = -1;  // -1 until acknowledged
    std::vector<std::pair<uint32_t, int64_t>> firsts;
  };
  using Offsets = std::map<std::pair<std::string, int32_t>, int64_t>;
  struct Generation {
    uint64_t id = 0;
    int64_t outstanding = 0;  // messages produced and not yet acknowledged
    bool sealed = false;      // no more messages will be added
    Offsets offsets;
    std::vector<SentMessage> sent;  // its deltas messages, in production order
  };
  // Per (stream, deltas partition): what this router can vouch for.
  struct StreamInPartition {
    int64_t last = -1;        // this router's latest message carrying the stream; -1: none
    int64_t first_input = 0;  // the stream's smallest offset in it
    int64_t previous = -1;    // the one before; -1: none
  };

  Generation& Open();
  uint32_t StreamId(const schemas::SourceStream& s);
  // What this router can vouch for about stream `id`'s committed records.
  void DeltasPositionsOf(uint32_t id, std::string* out);

  rd_kafka_t* const consumer_;
  const uint32_t deltas_partitions_;
  const char* const log_;

  std::deque<Generation> generations_;  // oldest first; the back one may be open
  uint64_t next_generation_ = 0;
  std::string failure_;  // first delivery failure; nothing after it is committed
  bool refused_by_group_ = false;

  std::map<std::pair<std::string, int32_t>, uint32_t> stream_ids_;
  std::vector<std::vector<StreamInPartition>> positions_;  // [stream id][deltas partition]
  // Per deltas partition, the offset of the first message this router got
  // acknowledged there since it last forgot (-1: none yet): every delta of
  // an earlier router lies below it.
  std::vector<int64_t> first_acked_;
  std::vector<schemas::DeltasPosition> entries_;  // scratch for one commit entry
  std::string metadata_;                          // scratch for one commit entry
  bool untracked_ = false;  // a message's offset is unknown: vouch for nothing any more

  rd_kafka_queue_t* commit_queue_ = nullptr;  // owned
  int commits_in_flight_ = 0;
  base::LogLimiter commit_log_{10, 10000};
};

}  // namespace tally::aggregator
