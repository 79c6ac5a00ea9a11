// The one consumer set-up of tally: its defaults, the handle, and assign()
// with its result checked.
//
// Every tally consumer commits by itself or not at all
// (enable.auto.commit=false): the router commits input offsets once the
// broker acknowledged their deltas, the applier keeps its offsets in
// RocksDB, replay and the cluster probe commit nothing. A consumer reads
// with rd_kafka_consumer_poll() (or the consumer queue): MakeConsumer()
// redirects the handle's main queue there, so rebalance and error callbacks
// are served by that poll.
//
// Thread model: a consumer lives on one thread (librdkafka's consumer
// contract); the functions here run on that thread.
#pragma once

#include <librdkafka/rdkafka.h>

#include <map>
#include <string>
#include <string_view>

#include "base/kafka.h"
#include "base/status.h"

namespace tally::base {

// librdkafka's rebalance callback (rd_kafka_conf_set_rebalance_cb).
using RebalanceCallback = void (*)(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                   rd_kafka_topic_partition_list_t* partitions, void* opaque);

struct ConsumerSettings {
  // group.id. librdkafka's consumer needs one even for assign(); the group
  // is joined only by rd_kafka_subscribe() (the router under tally
  // aggregate), and committed to only by rd_kafka_commit*().
  std::string group;
  std::string client_id;  // client.id; empty: librdkafka's
  // false: enable.auto.offset.store=false (the applier and replay keep no
  // offsets in the client).
  bool store_offsets = true;
  // enable.partition.eof: a partition read to its end says so (replay, the probe).
  bool partition_eof = false;
  // auto.offset.reset=error: an offset outside the log is handed to the
  // consumer (__AUTO_OFFSET_RESET) to be reported, never a silent jump
  // (aggregator/README.md, "Offsets outside the log"). false: librdkafka's
  // default.
  bool offset_reset_is_error = true;
  // For freshness, a short fetch.wait.max.ms. On the embedded broker 10
  // ms: it holds an empty fetch for the whole wait (500 ms by default) and
  // lets the record that arrives meanwhile wait with it. On Kafka 100 ms:
  // Kafka answers a long poll as soon as a record arrives, so a longer
  // wait costs no freshness, and it is ten fetches a second per broker
  // where 10 ms made a hundred with nothing to read (librdkafka sends a
  // broker's next fetch once the last came back, so a partition assigned
  // or resumed meanwhile waits up to that long: 100, not 500). For the
  // router, the applier, the group's ownership and the directory.
  bool short_fetch_wait = false;
  // Further settings; --kafka overrides still win.
  std::map<std::string, std::string> extra;
  // Set as the rebalance callback, with `opaque` (the router's, which
  // assigns what the group hands it). May be null.
  RebalanceCallback rebalance_cb = nullptr;
  void* opaque = nullptr;
};

// Creates a consumer of `kafka` with `settings` (then the user's overrides)
// and redirects its main queue to the consumer queue
// (rd_kafka_poll_set_consumer). InvalidArgument naming a setting librdkafka
// refused. Does not wait for the cluster. The caller owns the result.
Result<KafkaHandle> MakeConsumer(const KafkaOptions& kafka, const ConsumerSettings& settings);

// rd_kafka_assign(rk, parts): OK, or KafkaStatus(err, what) ("assigning the
// deltas partitions"). `parts` null: unassign.
Status Assign(rd_kafka_t* rk, const rd_kafka_topic_partition_list_t* parts, std::string_view what);

// Unassigns every partition at a stop. A failure is logged at WARN under
// `component` (the consumer is about to be destroyed either way).
void UnassignAtStop(rd_kafka_t* rk, std::string_view component);

}  // namespace tally::base
