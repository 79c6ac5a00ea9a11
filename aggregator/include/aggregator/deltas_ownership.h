// DeltasOwnership: which `tally.deltas` partitions this cluster member owns.
//
// Contract. A member owns the deltas partitions that the consumer group
// "<group>-applier" assigns it. The group uses the cooperative protocol
// (partition.assignment.strategy=cooperative-sticky): when a member joins
// or leaves, only the partitions that must move are revoked from their
// owners, and every other member keeps what it has without interruption.
// Ownership changes reach the user through an OwnershipListener, called on
// the polling thread inside Poll() or Close():
//
//   Assigned(p)  p is now owned; the consumer fetches it from the offset the
//                listener gives (the applier's offset in the partition's
//                RocksDB: the group's committed offsets are not used, this
//                consumer commits nothing).
//   Revoked(p)   p is being given up in an orderly rebalance (another member
//                joined, or this one closes). The partition stays assigned
//                until Revoked() returns: the user finishes and commits the
//                partition's current window inside the callback (what it
//                commits is where the next owner resumes), and stops
//                treating p as owned. Only then does librdkafka unassign p
//                (messages of p fetched but not yet returned by Poll() are
//                dropped) and tell the group, which hands p to its next owner.
//                The next owner waits for the revocation (this member
//                rejoins the group only after it), so the callback should
//                take one window commit, not a restore.
//   Lost(p)      p was taken away without a revocation: this member's
//                session expired (it stopped heartbeating for
//                session.timeout.ms, or it did not poll for
//                max.poll.interval.ms) or it was fenced. Another member may
//                already own p and apply it. The local state of p stays a
//                valid prefix of the log (every window commits its offset),
//                so the user stops serving p as owner and may keep it as a
//                standby; nothing needs committing. The consumer then
//                rejoins by itself and may be assigned partitions again.
//
// A listener callback may do anything on the polling thread except call
// Poll(), Close() or Abandon() of the same object (they run the callback)
// or throw. A partition is never in two of this member's Assigned() calls
// without a Revoked()/Lost() in between.
//
// Who reads the deltas: the same consumer that holds the membership fetches
// the owned partitions (as Kafka Streams does), so the applier polls
// messages from Poll() and sees the rebalances between two messages, on its
// own thread. A message of a partition that was revoked is not returned
// after its Revoked() call (librdkafka drops what it fetched of it at the
// unassign).
//
// Settings. Consumer made with base::MakeConsumer (no commits, no offset
// store, short fetch wait) plus:
//   - session.timeout.ms=6000, heartbeat.interval.ms=500 (every tally
//     consumer, base::MakeKafkaConf): a killed member's partitions move
//     after ~6 s (Kafka's group.min.session.timeout.ms), and the others
//     hear of a rebalance within half a second. A cooperative rebalance
//     that moves partitions takes two rounds (the revocation, then the
//     assignment).
//   - max.poll.interval.ms: librdkafka's 300000. A member whose thread is
//     stuck longer (e.g. a window that the store refuses to write) loses
//     its partitions (Lost) rather than holding them unapplied for ever.
//   - group.instance.id (static membership, KIP-345) when `instance_id` is
//     set. On Kafka, a static member that restarts within
//     session.timeout.ms with the same id gets its partitions back without
//     a rebalance: it restarts with its old state and no other member
//     moves. Its close sends no LeaveGroup, so its partitions move only
//     after session.timeout.ms. Off by default; each member's id must be
//     unique and stable (e.g. derived from its --state-dir).
//
// Thread model: Poll(), Close() and Abandon() and the listener's callbacks
// run on one thread, the polling thread (librdkafka's consumer contract).
// Owned() and Identity() may be called from any thread (e.g. the HTTP tier's
// /v1/cluster); they report the state as of the last completed callback.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"

namespace tally::aggregator {

struct OwnershipOptions {
  base::KafkaOptions kafka;
  // The member joins the group "<group>-applier".
  std::string group = std::string(base::kDefaultGroup);
  std::string deltas_topic = std::string(base::kDeltasTopic);
  std::string client_id;    // client.id; empty: librdkafka's
  std::string instance_id;  // group.instance.id; empty: dynamic membership
  // False: the group only decides who owns what, and the user reads the
  // deltas with a consumer of its own (the applier, which also applies
  // partitions it does not own: standbys, the global partition, a
  // partition it gave up until its next owner has caught up). The owned
  // partitions are then assigned paused at the log's end, so this consumer
  // fetches nothing, and Poll() returns no messages (only serves the group).
  bool fetch = true;
  // Close() gives up on leaving the group when librdkafka has had nothing
  // to hand it (no rebalance callback, no answer) for this long.
  int close_stall_ms = 10000;
};

// Where Assigned() wants a partition read from.
struct PartitionStart {
  int32_t partition = 0;
  // The next offset to read. RD_KAFKA_OFFSET_BEGINNING for a partition
  // with no state yet.
  int64_t offset = RD_KAFKA_OFFSET_BEGINNING;
};

class OwnershipListener {
 public:
  virtual ~OwnershipListener() = default;
  // `starts` holds each newly owned partition (in partition order) at
  // RD_KAFKA_OFFSET_BEGINNING; the listener sets the offsets to read from.
  virtual void Assigned(std::vector<PartitionStart>* starts) = 0;
  virtual void Revoked(const std::vector<int32_t>& partitions) = 0;
  virtual void Lost(const std::vector<int32_t>& partitions) = 0;
};

// The member's place in the group, as /v1/cluster shows it.
struct GroupIdentity {
  std::string group;        // "<group>-applier"
  int32_t generation = -1;  // the group's generation id; -1 outside the group
  std::string member_id;    // empty outside the group (before the first join, after Close())
  std::string protocol;     // "COOPERATIVE", "EAGER" or "NONE"
};

class DeltasOwnership {
 public:
  // Makes the consumer and subscribes it to the deltas topic; the join
  // happens in the following Poll() calls. `listener` must outlive the
  // object. InvalidArgument for a setting librdkafka refuses.
  static base::Result<std::unique_ptr<DeltasOwnership>> Start(OwnershipOptions options,
                                                              OwnershipListener* listener);
  // Close() if neither Close() nor Abandon() ran.
  ~DeltasOwnership();
  DeltasOwnership(const DeltasOwnership&) = delete;
  DeltasOwnership& operator=(const DeltasOwnership&) = delete;

  // Serves the group (rebalance callbacks, hence the listener) and returns
  // the next message of an owned partition, an error event (err set, e.g.
  // __AUTO_OFFSET_RESET for an offset outside the log), or null when
  // `timeout_ms` passes with neither. Must be called at least every
  // max.poll.interval.ms. Precondition: not closed.
  base::KafkaMessage Poll(int timeout_ms);

  // Leaves the group: Revoked() for everything owned, then LeaveGroup, so
  // the partitions move to the other members at once (without waiting for
  // the session timeout; a static member sends no LeaveGroup and its
  // partitions wait for it). Destroys the consumer; one the group never
  // gave an assignment is kept, closed, until the process exits (librdkafka
  // 2.0.2 aborts destroying it). A close that stalls for close_stall_ms
  // (librdkafka 2.0.2 never ends one that an assignment met, issue 4527)
  // is given up: DeadlineExceeded, the consumer is kept until the process
  // exits, and the group sees the member leave at its session timeout. A
  // second call is a no-op.
  base::Status Close();

  // Destroys the consumer without leaving the group, as a crash would: the
  // partitions move after session.timeout.ms. No listener call. For a stop
  // that gave up on the coordinator, and for tests. Before the group's first
  // assignment it is Close() instead (see Close()).
  void Abandon();

  // The partitions owned now, in order.
  std::vector<int32_t> Owned() const;
  GroupIdentity Identity() const;

 private:
  struct Rep;
  explicit DeltasOwnership(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace tally::aggregator
