// EmbeddedBroker: tally's built-in Kafka-protocol broker for one machine.
//
// `tally broker` and `tally up` (without --brokers) run it, the way ksqlDB
// and Kafka Streams users start from one local broker. It is librdkafka's
// mock cluster (rdkafka_mock.h) with one broker: produce, idempotence,
// consumer groups with offset commits and ListOffsets work; the log lives in
// memory and keeps only the newest ~5 MiB (or 100,000 batches) per partition.
//
// On Start it creates tally's topics (tally.events, tally.deltas, tally.dlq
// with `partitions` each, tally.meta with one) and writes a random 128-bit
// incarnation id as the first record of tally.meta partition 0, which
// base::FetchClusterIdentity() reads: a state directory can tell a restarted
// (empty) embedded log from the one it was built from.
//
// The mock broker listens on 127.0.0.1 on a random port. For a fixed port
// (`--port 9092`) a bootstrap forwarder listens there and relays bytes to the
// mock's listener; clients then learn the real broker address from metadata
// and connect to it directly, so the forwarder carries only bootstrap
// traffic.
//
// Thread model: Start/Stop/destruction from one thread; the accessors are
// safe for concurrent use while running. The mock runs its own thread; the
// forwarder runs one poll(2) thread.
#pragma once

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <memory>
#include <string>

#include "base/status.h"

namespace tally::app {

struct EmbeddedBrokerOptions {
  // Port of the bootstrap forwarder on `host`; 0: no forwarder, clients use
  // the mock's own random port.
  int port = 0;
  // Partitions of tally.events, tally.deltas and tally.dlq.
  int partitions = 16;
  // Address the forwarder binds (the mock itself always binds 127.0.0.1).
  std::string host = "127.0.0.1";
};

class EmbeddedBroker {
 public:
  // Starts the mock cluster, creates the topics, writes the incarnation
  // record and, for port != 0, starts the forwarder. IOError naming the
  // address when the port cannot be bound (in use, no permission);
  // InvalidArgument for a bad port, host or partition count; Internal or
  // Unavailable when the mock cannot be created or does not acknowledge the
  // incarnation record. The caller owns the result.
  static base::Result<std::unique_ptr<EmbeddedBroker>> Start(const EmbeddedBrokerOptions& options);

  // Stop()s.
  ~EmbeddedBroker();
  EmbeddedBroker(const EmbeddedBroker&) = delete;
  EmbeddedBroker& operator=(const EmbeddedBroker&) = delete;

  // "127.0.0.1:PORT": the forwarder's address if there is one, else the
  // mock's listener. What clients put in bootstrap.servers.
  const std::string& bootstrap() const;
  // The mock broker's own listener ("127.0.0.1:RANDOM"), as metadata
  // advertises it.
  const std::string& broker_address() const;
  // 32 lowercase hex digits, the value of tally.meta offset 0.
  const std::string& incarnation() const;
  // The mock cluster, for fault injection in tests (rd_kafka_mock_*). Owned
  // by this object; null after Stop().
  rd_kafka_mock_cluster_t* mock() const;

  // Takes every broker of the mock cluster down (available=false: open
  // connections are closed, new ones refused, the log is kept) or brings
  // them up again, as a real broker outage would. Clients of the forwarder
  // are refused too while down (it cannot reach the mock). FailedPrecondition
  // after Stop(); Internal if the mock refuses the command.
  base::Status SetAvailable(bool available);

  // Stops the forwarder (closing its connections) and destroys the mock
  // cluster: its log is gone. Clients still connected see the broker go
  // down. Idempotent.
  void Stop();

 private:
  struct Rep;
  explicit EmbeddedBroker(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

}  // namespace tally::app
