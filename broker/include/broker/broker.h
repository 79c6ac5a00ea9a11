// Broker: tally's own durable single-node Kafka broker (SPEC section 7). To
// any Kafka client it looks like an Apache Kafka cluster of one broker; its
// log lives on disk under BrokerOptions::log_dir. This is the only header of
// the broker module that the rest of tally includes.
//
// Thread model: Start() opens the log directory and starts the broker's own
// threads: the network thread (one epoll loop that runs every request
// handler and owns the log, the group coordinator and the connections) and
// two flushers (group commits of the log and of the committed offsets).
// Every public method may be called from any thread; those that touch
// broker state (CreateTopic, SetAvailable, PushRequestErrors, Stats) run
// their work on the network thread and wait for it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace tally::broker {

class BrokerServer;

// How a Broker is set up. Defaults are Kafka's where Kafka has one.
struct BrokerOptions {
  // The log directory (created if missing); required. Locked while the
  // broker runs: a second broker on it fails to start.
  std::filesystem::path log_dir;
  // Address to listen on; 127.0.0.1 by default.
  std::string host = "127.0.0.1";
  // TCP port; 0 picks any free one (see Broker::port()).
  int port = 0;
  // Host named to clients in Metadata and FindCoordinator; empty: `host`.
  std::string advertised_host;
  // Kafka's broker.id / node.id; stored in meta.properties at creation.
  int32_t node_id = 0;
  // Group commit interval of the log and of committed offsets. 0: no
  // fdatasync; produce requests are answered once written to the OS.
  int64_t log_flush_ms = 2;
  // Partitions of auto-created topics and of CreateTopics with -1.
  int32_t default_partitions = 16;
  // Kafka's auto.create.topics.enable.
  bool auto_create_topics = true;
  // Connections served at once; beyond it new ones are closed at accept.
  int max_connections = 4096;
  // Largest request frame accepted; a larger size prefix closes the
  // connection. Our clients send at most ~1 MiB per request; decoding may
  // allocate a small multiple of a frame, so this stays far below Kafka's
  // 100 MiB socket.request.max.bytes.
  int32_t max_frame_bytes = 8 << 20;
  // A connection stops being read while its unwritten responses exceed
  // this many bytes (a client that does not read its answers)...
  int64_t max_output_bytes_per_connection = 16 << 20;
  // ...or while this many of its requests are unanswered (held JoinGroup,
  // fetch long-polls, produce requests waiting for the flush).
  int max_pending_requests_per_connection = 128;
  // Topic defaults (Kafka's log.segment.bytes, log.index.interval.bytes,
  // log.retention.ms, log.retention.bytes, message.max.bytes).
  int64_t segment_bytes = 1LL << 30;
  int64_t index_interval_bytes = 4096;
  int64_t retention_ms = 7LL * 24 * 3600 * 1000;
  int64_t retention_bytes = -1;
  // Kafka's message.max.bytes: the largest record batch a topic without its
  // own max.message.bytes takes.
  int32_t max_message_bytes = 1048588;
  // Kafka's group.initial.rebalance.delay.ms: how long the first join of an
  // empty group waits for more members. Kafka's default is 3000; 0 here (on
  // one node it only delays every consumer's start).
  int32_t group_initial_rebalance_delay_ms = 0;
  // How often retention and compaction run (on the network thread).
  int64_t maintenance_interval_ms = 30000;
};

// One partition in Broker::Stats().
struct BrokerPartitionStats {
  std::string topic;
  int32_t partition = 0;
  int64_t size_bytes = 0;
  int64_t log_start_offset = 0;
  int64_t high_watermark = 0;
  int64_t log_end_offset = 0;
};

// Figures for metrics, as of the call.
struct BrokerStats {
  std::vector<BrokerPartitionStats> partitions;  // by topic, then partition
  int64_t produce_requests = 0;
  int64_t produce_records = 0;  // records appended (duplicates not counted)
  int64_t produce_bytes = 0;    // record-set bytes appended
  int64_t fetch_requests = 0;
  int64_t fetch_records = 0;  // records returned
  int64_t fetch_bytes = 0;    // record-set bytes returned
  int64_t requests = 0;       // every request decoded
  // Log group commits (rounds that moved a high watermark).
  int64_t flush_rounds = 0;
  int64_t flush_p99_micros = 0;  // from a histogram with power-of-two buckets
  int64_t flush_max_micros = 0;
  // Histogram of flush round durations: bucket i counts rounds that took
  // < 2^i microseconds (the last bucket: the rest).
  std::vector<int64_t> flush_micros_buckets;
  int64_t disk_free_bytes = -1;
  int64_t disk_total_bytes = -1;
  int64_t connections = 0;           // open now
  int64_t connections_accepted = 0;  // since start
};

class Broker {
 public:
  // Opens the log directory (log, committed offsets, producer-id block),
  // binds host:port and starts the network and flusher threads. Errors:
  // kFailedPrecondition (directory locked by another broker), kCorruption
  // (damage the log cannot recover from), kIOError, kUnavailable (bind).
  static base::Result<std::unique_ptr<Broker>> Start(const BrokerOptions& options);

  // Stop()s.
  ~Broker();
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  // "advertised_host:port", for bootstrap.servers.
  std::string bootstrap() const;
  int port() const;
  // Kafka's cluster id of the log directory (kept across restarts).
  std::string cluster_id() const;

  // Creates a topic (tally's own topics; tests). `configs` are Kafka topic
  // configs ("retention.ms"...). kInvalidArgument for a bad name, count or
  // config, kFailedPrecondition if it exists, kAborted once stopped.
  base::Status CreateTopic(const std::string& name, int32_t partitions,
                           const std::map<std::string, std::string>& configs = {});

  // Stops accepting, answers held group requests (COORDINATOR_NOT_AVAILABLE)
  // and parked fetches (what is there), flushes, answers the produce
  // requests the flush covers, closes every connection, writes producer
  // snapshots and closes the log. Idempotent; returns the first error of
  // the log's close.
  base::Status Stop();

  // Fault injection for tests, as librdkafka's mock cluster offers.
  // Down: every connection is closed and new ones are closed at accept;
  // up: serve again.
  void SetAvailable(bool available);
  // Every response is held this long after its request arrived (0: off).
  void SetRoundTripDelayMs(int delay_ms);
  // The next requests of `api_key` are answered with these errors, one
  // each, in order, instead of being handled.
  void PushRequestErrors(int16_t api_key, const std::vector<int16_t>& error_codes);

  BrokerStats Stats();

 private:
  explicit Broker(std::unique_ptr<BrokerServer> server);
  std::unique_ptr<BrokerServer> server_;
};

}  // namespace tally::broker
