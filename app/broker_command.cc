// `tally broker`: tally's own durable single-node Kafka broker (SPEC
// section 7; the broker/ module), as a command.
//
// Prints exactly one line to stdout, "bootstrap: HOST:PORT", once the broker
// accepts clients (scripts wait for it), then serves until SIGINT/SIGTERM.

#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <map>
#include <string>

#include "base/clock.h"
#include "base/flags.h"
#include "base/kafka.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "broker/broker.h"
#include "broker_control.h"
#include "broker_process.h"
#include "cli.h"
#include "commands.h"

namespace tally::app {

namespace {

constexpr std::string_view kComponent = "broker";

// tally's topics, as tally's own clients would create them (SPEC section
// 7): the input, the deltas kept for ever, the dead letters, and the
// members directory (one partition, compacted). Those already in the log
// are left as they are.
base::Status CreateTallyTopics(broker::Broker* b, int32_t partitions) {
  struct Topic {
    std::string_view name;
    int32_t partitions;
    std::map<std::string, std::string> configs;
  };
  const Topic topics[] = {
      {base::kEventsTopic, partitions, {}},
      {base::kDeltasTopic, partitions, {{"retention.ms", "-1"}}},
      {base::kDlqTopic, partitions, {}},
      {base::kMembersTopic, 1, {{"cleanup.policy", "compact"}}},
  };
  for (const Topic& t : topics) {
    base::Status st = b->CreateTopic(std::string(t.name), t.partitions, t.configs);
    // kFailedPrecondition: the log has it already; it is left as it is.
    if (!st.ok() && st.code() != base::StatusCode::kFailedPrecondition) {
      return st.WithContext(fmt::format("creating {}", t.name));
    }
  }
  return base::Status::Ok();
}

// The broker's figures in Prometheus' text format (BrokerStats).
std::string RenderBrokerMetrics(const broker::BrokerStats& s) {
  std::string out;
  auto family = [&out](std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto per_partition = [&](std::string_view name, std::string_view help, auto value) {
    family(name, "gauge", help);
    for (const broker::BrokerPartitionStats& p : s.partitions) {
      fmt::format_to(std::back_inserter(out), "{}{{topic=\"{}\",partition=\"{}\"}} {}\n", name,
                     p.topic, p.partition, value(p));
    }
  };
  per_partition("tally_broker_log_size_bytes", "Bytes of the partition's log on disk.",
                [](const auto& p) { return p.size_bytes; });
  per_partition("tally_broker_log_start_offset", "The partition's first offset kept.",
                [](const auto& p) { return p.log_start_offset; });
  per_partition("tally_broker_log_end_offset",
                "The partition's high watermark: the next offset, records flushed below it.",
                [](const auto& p) { return p.high_watermark; });
  auto counter = [&](std::string_view name, std::string_view help, int64_t v) {
    family(name, "counter", help);
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, v);
  };
  auto gauge = [&](std::string_view name, std::string_view help, double v) {
    family(name, "gauge", help);
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, v);
  };
  counter("tally_broker_produce_requests_total", "Produce requests handled.", s.produce_requests);
  counter("tally_broker_produce_records_total",
          "Records appended (retried duplicates not counted).", s.produce_records);
  counter("tally_broker_produce_bytes_total", "Record-set bytes appended.", s.produce_bytes);
  counter("tally_broker_fetch_requests_total", "Fetch requests answered.", s.fetch_requests);
  counter("tally_broker_fetch_records_total", "Records returned by fetches.", s.fetch_records);
  counter("tally_broker_fetch_bytes_total", "Record-set bytes returned by fetches.", s.fetch_bytes);
  counter("tally_broker_flush_rounds_total", "Group commits of the log (fdatasync rounds).",
          s.flush_rounds);
  gauge("tally_broker_flush_latency_p99_seconds", "99th percentile of a group commit's duration.",
        std::min(s.flush_p99_micros, s.flush_max_micros) / 1e6);  // buckets round up
  gauge("tally_broker_flush_latency_max_seconds", "Longest group commit.",
        s.flush_max_micros / 1e6);
  gauge("tally_broker_disk_free_bytes", "Free bytes on the log's disk (-1: unknown).",
        static_cast<double>(s.disk_free_bytes));
  gauge("tally_broker_connections", "Client connections open.", static_cast<double>(s.connections));
  return out;
}

}  // namespace

int RunBroker(int argc, char** argv) {
  const std::string command = "tally broker";
  const broker::BrokerOptions defaults;
  int64_t port = 9092;
  int64_t partitions = 16;
  int64_t flush_ms = defaults.log_flush_ms;
  std::string host = defaults.host;
  std::string log_dir;
  std::string log_level = "info";
  std::string state_dir;
  int64_t retention_ms = defaults.retention_ms;
  int64_t retention_bytes = defaults.retention_bytes;
  int64_t segment_bytes = defaults.segment_bytes;
  int64_t retention_check_ms = defaults.maintenance_interval_ms;
  int64_t message_max_bytes = defaults.max_message_bytes;
  int64_t initial_rebalance_delay_ms = defaults.group_initial_rebalance_delay_ms;
  base::FlagSet flags(
      command,
      "Runs only tally's Kafka broker: a single-node Kafka that keeps its log on disk in\n"
      "--log-dir, listening on --host:--port. Any Kafka client (librdkafka, kcat,\n"
      "kafka-python, Java) produces, fetches and joins consumer groups on it. A record is\n"
      "acknowledged once it is flushed (fdatasync, group commits every --log-flush-ms).\n"
      "tally's topics are created with --partitions each if the log does not have them.\n"
      "\n"
      "Outage drills: SIGUSR1 takes the broker down (open connections are closed, new\n"
      "ones refused, the log is kept), SIGUSR2 brings it back, e.g.\n"
      "  kill -USR1 $(pidof tally); sleep 10; kill -USR2 $(pidof tally)");
  flags.Int("port", &port, "TCP port clients bootstrap from (0: a random port)");
  flags.String("host", &host, "address to listen on (and to name to clients)");
  flags.Int("partitions", &partitions,
            "partitions of tally.events, tally.deltas and tally.dlq, and of topics other clients "
            "have created by naming them");
  flags.String("log-dir", &log_dir,
               "the log's directory (default ./data/log; with --state-dir, DIR/log)");
  flags.Int("log-flush-ms", &flush_ms,
            "group commit interval: records are acknowledged once flushed with fdatasync, at "
            "most this many ms apart; 0: acknowledged once written to the OS (a killed process "
            "loses nothing, a power loss may)");
  flags.Int("retention-ms", &retention_ms,
            "Kafka's log.retention.ms: how long a topic without its own retention.ms keeps a "
            "segment after its newest record (-1: for ever)");
  flags.Int("retention-bytes", &retention_bytes,
            "Kafka's log.retention.bytes: the most a partition of a topic without its own "
            "retention.bytes keeps, in whole segments (-1: no limit)");
  flags.Int("segment-bytes", &segment_bytes,
            "Kafka's log.segment.bytes: the size at which a partition starts a new segment file "
            "(retention deletes whole segments)");
  flags.Int("retention-check-ms", &retention_check_ms,
            "Kafka's log.retention.check.interval.ms: how often retention and compaction run");
  flags.Int("message-max-bytes", &message_max_bytes,
            "Kafka's message.max.bytes: the largest record batch a topic without its own "
            "max.message.bytes takes");
  flags.Int("group-initial-rebalance-delay-ms", &initial_rebalance_delay_ms,
            "Kafka's group.initial.rebalance.delay.ms: how long the first member of an empty "
            "consumer group waits for others (Kafka's default is 3000)");
  flags.String("log-level", &log_level, "debug, info, warn, error or off");
  flags.String("state-dir", &state_dir,
               "serve the state directory DIR: keep the log in DIR/log (unless --log-dir), "
               "record this broker in DIR/BROKER, where `tally up --state-dir DIR` finds it "
               "again after a crash, and stop when DIR is removed (tally up runs its broker "
               "this way)");
  if (int rc = ParseFlagsOrExit(flags, command, argc, argv); rc >= 0) return rc;
  InstallBrokerControlSignals();
  if (auto st = ApplyLogLevel(log_level); !st.ok()) return Fail(command, st, kExitUsage);
  if (port < 0 || port > 65535) {
    return Fail(command, base::Status::InvalidArgument("--port must be in 0..65535"), kExitUsage);
  }
  if (partitions < 1 || partitions > 10000) {
    return Fail(command, base::Status::InvalidArgument("--partitions must be in 1..10000"),
                kExitUsage);
  }
  if (flush_ms < 0 || flush_ms > 60000) {
    return Fail(command, base::Status::InvalidArgument("--log-flush-ms must be in 0..60000"),
                kExitUsage);
  }
  if (retention_ms < -1 || retention_ms == 0 || retention_bytes < -1 || retention_bytes == 0 ||
      segment_bytes < 1024 || retention_check_ms < 1 || message_max_bytes < 1024 ||
      message_max_bytes > (64 << 20) || initial_rebalance_delay_ms < 0 ||
      initial_rebalance_delay_ms > 300000) {
    return Fail(
        command,
        base::Status::InvalidArgument(
            "--retention-ms and --retention-bytes must be positive or -1, --segment-bytes "
            "at least 1024, --retention-check-ms positive, --message-max-bytes 1024..64 MiB, "
            "--group-initial-rebalance-delay-ms 0..300000"),
        kExitUsage);
  }
  if (!state_dir.empty()) {
    state_dir = std::filesystem::absolute(state_dir).lexically_normal().string();
  }
  if (log_dir.empty()) {
    log_dir = state_dir.empty() ? "data/log" : (std::filesystem::path(state_dir) / "log").string();
  }

  broker::BrokerOptions options;
  options.log_dir = log_dir;
  options.host = host;
  options.port = static_cast<int>(port);
  options.log_flush_ms = flush_ms;
  options.default_partitions = static_cast<int32_t>(partitions);
  options.retention_ms = retention_ms;
  options.retention_bytes = retention_bytes;
  options.segment_bytes = segment_bytes;
  options.maintenance_interval_ms = retention_check_ms;
  options.max_message_bytes = static_cast<int32_t>(message_max_bytes);
  options.group_initial_rebalance_delay_ms = static_cast<int32_t>(initial_rebalance_delay_ms);
  // A request must hold the largest batch (Kafka's socket.request.max.bytes
  // is 100 MiB against 1 MiB batches).
  options.max_frame_bytes =
      std::max(options.max_frame_bytes, static_cast<int32_t>(message_max_bytes) + (1 << 20));
  auto broker = broker::Broker::Start(options);
  if (!broker.ok()) return Fail(command, broker.status());
  broker::Broker* b = broker->get();
  if (auto st = CreateTallyTopics(b, static_cast<int32_t>(partitions)); !st.ok()) {
    (void)b->Stop();  // the start failed: that error is the one to report
    return Fail(command, st);
  }

  struct stat dir_stat {};
  if (!state_dir.empty()) {
    BrokerRecord record{getpid(), b->bootstrap(), b->cluster_id()};
    if (auto st = WriteBrokerRecord(state_dir, record); !st.ok()) {
      (void)b->Stop();  // the record failed: that error is the one to report
      return Fail(command, st);
    }
    stat(state_dir.c_str(), &dir_stat);
  }
  TALLY_LOG_INFO(kComponent, "serving {} (cluster {}), log in {}, flushed every {} ms",
                 b->bootstrap(), b->cluster_id(), std::filesystem::absolute(log_dir).string(),
                 flush_ms);
  std::printf("bootstrap: %s\n", b->bootstrap().c_str());
  std::fflush(stdout);
  // With a state directory, the broker serves only while that directory is
  // there: a test's or a demo's removed directory leaves no broker behind.
  // Meanwhile it writes its figures there every second, for tally up's
  // GET /metrics.
  int64_t metrics_written_ms = 0;
  auto dir_removed = [&] {
    if (state_dir.empty()) return false;
    if (const int64_t now = base::SteadyMs(); now - metrics_written_ms >= 1000) {
      metrics_written_ms = now;
      if (auto st = WriteBrokerMetrics(state_dir, RenderBrokerMetrics(b->Stats())); !st.ok()) {
        TALLY_LOG_DEBUG(kComponent, "{}", st.ToString());  // the directory may be going
      }
    }
    struct stat now {};
    if (stat(state_dir.c_str(), &now) == 0 && now.st_ino == dir_stat.st_ino &&
        now.st_dev == dir_stat.st_dev) {
      return false;
    }
    TALLY_LOG_WARN(kComponent, "{} was removed: stopping", state_dir);
    return true;
  };
  ServeUntilShutdown(BrokerControl{[b](bool up) {
                                     b->SetAvailable(up);
                                     return base::Status::Ok();
                                   },
                                   b->bootstrap()},
                     dir_removed, /*interval_ms=*/200);
  TALLY_LOG_INFO(kComponent, "stop requested");
  if (!state_dir.empty()) {
    RemoveBrokerRecord(state_dir, getpid());
    std::filesystem::remove(std::filesystem::path(state_dir) / BrokerSideFiles()[3]);
  }
  if (auto st = b->Stop(); !st.ok()) {
    TALLY_LOG_ERROR(kComponent, "closing the log: {}", st.ToString());
    return kExitFailure;
  }
  TALLY_LOG_INFO(kComponent, "stopped; the log in {} is closed", log_dir);
  return kExitOk;
}

}  // namespace tally::app
