// KafkaHealth: whether this process can reach its Kafka cluster, for the
// log, GET /healthz and /metrics.
//
// Every client made by MakeKafkaConf() reports librdkafka's error callbacks
// here. A lost cluster is decided by a probe, not by one client's word: an
// error that may mean "cluster gone" (RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
// __TRANSPORT) wakes the probe thread, which asks the cluster for metadata;
// when that fails (or two scheduled probes in a row fail), the cluster is
// lost and ONE warning line says so; when a probe succeeds again, ONE line
// says it is back and how long it was gone. Clients keep retrying by
// themselves meanwhile (consumers wait, producers hold their records for
// message.timeout.ms); this class only observes.
//
// Thread model: safe for concurrent use; error callbacks may run on any
// client's poll thread. One instance per process (Global()).
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/kafka.h"
#include "base/status.h"

namespace tally::base {

class KafkaHealth {
 public:
  static KafkaHealth& Global();

  // The error callback MakeKafkaConf() installs (rd_kafka_conf_set_error_cb).
  static void OnClientError(rd_kafka_t* rk, int err, const char* reason, void* opaque);

  // Records an error of client `client`. Connectivity errors wake the probe
  // (if it runs); other errors (authentication, TLS, fatal ones) are logged
  // once per distinct text, since they need an operator.
  void ReportError(std::string_view client, rd_kafka_resp_err_t err, std::string_view reason);

  // Starts the probe thread for `options` (its own producer handle; one
  // metadata request every `interval_ms`, more often while the cluster is
  // lost). InvalidArgument for bad Kafka settings; FailedPrecondition if a
  // probe already runs. Without a probe the process reports no outage.
  Status StartProbe(const KafkaOptions& options, int interval_ms = 1000);
  // Stops and joins the probe thread. Idempotent; also at process exit.
  void StopProbe();

  // True unless the probe has found the cluster lost.
  bool reachable() const;
  // "" while reachable; else one line for /healthz, e.g. "Kafka at
  // 127.0.0.1:9092 unreachable for 4.2 s (all brokers down): ...".
  std::string Problem() const;

  KafkaHealth(const KafkaHealth&) = delete;
  KafkaHealth& operator=(const KafkaHealth&) = delete;
  ~KafkaHealth();

 private:
  KafkaHealth();
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace tally::base
