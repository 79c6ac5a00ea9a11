// EmbeddedCluster: librdkafka's mock cluster (an in-process Kafka broker on
// loopback ports) for tests that need a broker without one already running.
// Tests give bootstrap() to the clients under test and may inject faults
// (brokers down, request errors, latency) through mock().
//
// Part of tally_testing. `tally broker` (app/) is the same cluster behind the
// binary's own command line; this is the in-process one for tests.
//
// Thread model: safe for concurrent use (librdkafka's mock cluster is); the
// object itself must outlive every client connected to it.
#pragma once

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <string>

#include "base/status.h"

namespace tally::testing {

class EmbeddedCluster {
 public:
  // Starts a cluster of `brokers` brokers (ids 1..brokers) on free loopback
  // ports, its own logging silenced. If librdkafka cannot start it no test
  // can run: the process prints why on stderr and aborts.
  explicit EmbeddedCluster(int brokers = 1);
  // Stops the brokers; clients still connected see them go away.
  ~EmbeddedCluster();
  EmbeddedCluster(const EmbeddedCluster&) = delete;
  EmbeddedCluster& operator=(const EmbeddedCluster&) = delete;

  // "host:port,..." of every broker, for bootstrap.servers.
  const std::string& bootstrap() const { return bootstrap_; }

  // Creates `topic` with `partitions` partitions and `replication` replicas.
  // OK, or the cluster's error code through base::KafkaStatus (e.g. for a
  // topic that exists or a bad partition count).
  [[nodiscard]] base::Status CreateTopic(const std::string& topic, int partitions,
                                         int replication = 1);

  // The cluster, for fault injection with rd_kafka_mock_*; owned by this
  // object, valid while it lives.
  rd_kafka_mock_cluster_t* mock() const { return mock_; }

 private:
  rd_kafka_t* rk_ = nullptr;  // owns mock_'s threads
  rd_kafka_mock_cluster_t* mock_ = nullptr;
  std::string bootstrap_;
};

}  // namespace tally::testing
