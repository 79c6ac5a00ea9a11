// Router: the first stage of the aggregator. Consumes the input topics,
// validates each record, and publishes its effects to tally.deltas, keyed by
// the entity they touch; invalid records go to tally.dlq with the original
// bytes, their source coordinates and a one-line reason (as headers). A
// record too large for a message the producer may send (message.max.bytes,
// less 16 KiB for headers) keeps only that prefix in its dead letter, with
// its full size in the header tally.value.truncated.
//
// At least once, by construction: input offsets are committed only after the
// broker acknowledged every delta and DLQ record derived from them. Exactly
// once is the applier's half (window_applier.h).
// Thread model: Run() occupies the calling thread; Stop-able from any thread
// through the flag given to Run().
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "aggregator/defaults.h"
#include "base/kafka.h"
#include "base/status.h"
#include "cluster/members_directory.h"

namespace tally::aggregator {

struct RouterOptions {
  base::KafkaOptions kafka;
  std::vector<std::string> input_topics = {std::string(base::kEventsTopic)};
  std::string group = std::string(base::kDefaultGroup);  // consumer group of the router
  std::string deltas_topic = std::string(base::kDeltasTopic);
  std::string dlq_topic = std::string(base::kDlqTopic);
  uint32_t deltas_partitions = 0;     // required: partition count of deltas_topic
  int linger_ms = 20;                 // longest a routed record waits to be published
  // A router given 1/k of the input partitions by its group (a cluster of k
  // members) waits k times linger_ms, at most this long, so tally.deltas
  // gets about as many messages a second as from one router: fewer, larger
  // messages for the broker and for every applier to fetch and decode.
  int max_linger_ms = kDefaultMaxStretchedMs;
  size_t max_batch_bytes = 1 << 20;   // input bytes routed before a flush is forced
  // Route every partition of the input topics without joining the group
  // (tally up: one machine routes everything). Routing then starts at once,
  // not after the group's initial rebalance delay (3 s on Kafka and on the
  // embedded broker). Offsets are still read from and committed to `group`,
  // as a standalone consumer; partitions added to a topic are picked up
  // within 30 s. false: join `group` and route the partitions it assigns.
  bool whole_topics = false;
  // A member of a cluster (not whole_topics): the members directory (must
  // outlive the router) and this member's id in it. A member that finds no
  // other live member there when it starts routes every partition
  // standalone, as under whole_topics, instead of waiting for the group's
  // initial rebalance delay; it joins `group` as soon as another member
  // shows up in the directory or the group refuses its commits (a router
  // with no directory record, e.g. `tally aggregate --role router`, has
  // joined). Until then both route the same records, which the appliers
  // apply once (by mark). Null: join `group` at once.
  const cluster::MembersDirectory* directory = nullptr;
  std::string member;
};

class Router {
 public:
  explicit Router(RouterOptions options);
  ~Router();

  // Runs until *stop becomes true, then publishes what it routed, commits and
  // leaves the group. Returns OK on a requested stop; an error Status when
  // Kafka fails in a way a restart must fix (nothing uncommitted is lost:
  // a restarted router re-routes from the committed offsets).
  base::Status Run(const std::atomic<bool>* stop);

 private:
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace tally::aggregator
