// Kafka client setup shared by every tally process: configuration, error
// conversion, topic names, cluster identity and topic creation. Producers
// are made by kafka_producer.h, consumers by kafka_consumer.h.
//
// tally talks to Kafka through librdkafka's C API. Every handle is owned by a
// unique_ptr with the matching destroy function. Kafka error codes become a
// Status in exactly one place: KafkaStatus().
#pragma once

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tally::base {

// Topic names of the contract (SPEC section 1 and DESIGN "Data flow").
inline constexpr std::string_view kEventsTopic = "tally.events";
inline constexpr std::string_view kDeltasTopic = "tally.deltas";
inline constexpr std::string_view kDlqTopic = "tally.dlq";
// One partition; the embedded broker writes its incarnation id at offset 0 so
// clients can tell a restarted (empty) embedded log from the one they knew.
inline constexpr std::string_view kMetaTopic = "tally.meta";
// One partition, compacted: the members directory of a cluster
// (cluster/members_directory.h), a record per member keyed by its id.
inline constexpr std::string_view kMembersTopic = "tally.members";

// Consumer group holding the router's input offsets (--group). The applier's
// consumer uses "<group>-applier" and never joins it; the watermark view's
// consumer names it to read the group's committed offsets.
inline constexpr std::string_view kDefaultGroup = "tally";

struct KafkaHandleDeleter { void operator()(rd_kafka_t* rk) const { if (rk) rd_kafka_destroy(rk); } };
struct KafkaConfDeleter { void operator()(rd_kafka_conf_t* c) const { if (c) rd_kafka_conf_destroy(c); } };
struct KafkaPartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const { if (l) rd_kafka_topic_partition_list_destroy(l); }
};
struct KafkaMessageDeleter { void operator()(rd_kafka_message_t* m) const { if (m) rd_kafka_message_destroy(m); } };
using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;
using KafkaConf = std::unique_ptr<rd_kafka_conf_t, KafkaConfDeleter>;
using KafkaPartitionList = std::unique_ptr<rd_kafka_topic_partition_list_t, KafkaPartitionListDeleter>;
using KafkaMessage = std::unique_ptr<rd_kafka_message_t, KafkaMessageDeleter>;
struct KafkaTopicDeleter { void operator()(rd_kafka_topic_t* t) const { if (t) rd_kafka_topic_destroy(t); } };
using KafkaTopic = std::unique_ptr<rd_kafka_topic_t, KafkaTopicDeleter>;

// The one conversion from a Kafka error code to a Status. OK for NO_ERROR.
Status KafkaStatus(rd_kafka_resp_err_t err, std::string_view context);

// How to reach the cluster, as given on the command line.
struct KafkaOptions {
  std::string brokers;  // "host:port,..."; required by every client
  // --kafka KEY=VALUE, applied after tally's defaults so they win.
  std::vector<std::pair<std::string, std::string>> overrides;
  // True when the cluster is tally's embedded broker (the librdkafka mock
  // cluster). Set by whoever starts it or by DetectEmbedded().
  bool embedded = false;
};

// Parses "KEY=VALUE" into `out`. InvalidArgument when there is no '=' or the
// key is empty.
Status ParseKafkaOverride(std::string_view text, std::pair<std::string, std::string>* out);

// Builds a librdkafka configuration for a client of `type`:
// bootstrap.servers, for a consumer session.timeout.ms=6000 and
// heartbeat.interval.ms=500, then `defaults`, then the user's overrides. librdkafka's log lines go
// to tally's log and its error callback to KafkaHealth (a client may replace it, and should forward
// connectivity errors there); reconnect.backoff.max.ms is 1000. InvalidArgument
// naming the key when librdkafka rejects one. Caller owns the result.
Result<KafkaConf> MakeKafkaConf(rd_kafka_type_t type, const KafkaOptions& options,
                                const std::map<std::string, std::string>& defaults);

// Creates a handle of `type` from `conf` (consumed). InvalidArgument with
// librdkafka's reason on failure.
Result<KafkaHandle> MakeKafkaHandle(rd_kafka_type_t type, KafkaConf conf);

// The identity of a cluster as recorded in a state directory: Kafka's
// cluster id, plus for the embedded broker the incarnation id it wrote to
// tally.meta (its cluster id alone does not change between restarts reliably).
struct ClusterIdentity {
  std::string cluster_id;
  bool embedded = false;
  std::string ToString() const;  // "<cluster_id>" or "<cluster_id>/<incarnation>"
  std::string incarnation;
};

// A broker that answers with another cluster id than a client knew (the
// CLUSTERID warning librdkafka logs: the log behind an address was replaced,
// e.g. a restarted embedded broker). Every client made by MakeKafkaConf()
// reports it here. ClusterIdReports() counts such reports (one atomic load,
// for hot loops); LastReportedClusterId() is the id the latest one named.
// Thread model: safe for concurrent use.
uint64_t ClusterIdReports();
std::string LastReportedClusterId();

// Asks the cluster for its id (and, for a mock cluster, reads tally.meta
// offset 0). Unavailable when the cluster cannot be reached within
// `timeout_ms`. Thread model: any thread; uses `rk` only for metadata and a
// short-lived consumer.
Result<ClusterIdentity> FetchClusterIdentity(const KafkaOptions& options, int timeout_ms);

// Low and high watermark of one partition, from the broker.
struct PartitionOffsets {
  int32_t partition = 0;
  int64_t low = 0;
  int64_t high = 0;
};

// Returns the number of partitions of `topic`, NotFound if it does not exist.
Result<int> PartitionCount(rd_kafka_t* rk, std::string_view topic, int timeout_ms);

// Queries low/high watermarks of every partition of `topic`.
Result<std::vector<PartitionOffsets>> QueryWatermarks(rd_kafka_t* rk, std::string_view topic,
                                                     int timeout_ms);

// Destroys `rk` (rd_kafka_destroy_flags with `flags`) on a thread of its own
// and returns at once. For a consumer that gave up on its group coordinator:
// librdkafka's destroy waits for every offset commit in flight to be
// answered, or to time out (socket.timeout.ms, 60 s by default, or
// session.timeout.ms for one still looking for a coordinator), even with
// RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE, and a stop during an outage must
// not. Nothing may poll `rk` any more; callbacks are not served.
void DestroyInBackground(KafkaHandle rk, int flags);

// Waits up to `timeout_ms` for the destroys DestroyInBackground() started;
// returns how many are still waiting (0: all done). A process that exits
// with some left must leave with std::_Exit: their threads are still in
// librdkafka.
int AwaitBackgroundDestroys(int timeout_ms);

// Creates each of `topics` that does not exist yet with `partitions`
// partitions (tally.meta and tally.members: 1; tally.members compacted;
// tally.deltas with unlimited retention, retention.ms=-1) and
// the given replication factor (-1: broker default), through the admin API.
// Existing topics are left as they are. For real clusters;
// the embedded broker creates its topics itself.
Status EnsureTopics(rd_kafka_t* rk, const std::vector<std::string>& topics, int partitions,
                    int replication_factor, int timeout_ms);

}  // namespace tally::base
