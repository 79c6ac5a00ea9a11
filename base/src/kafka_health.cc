#include "base/kafka_health.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/shutdown.h"

namespace tally::base {
namespace {

constexpr std::string_view kComponent = "kafka";

bool IsConnectivityError(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || err == RD_KAFKA_RESP_ERR__TRANSPORT ||
         err == RD_KAFKA_RESP_ERR__RESOLVE || err == RD_KAFKA_RESP_ERR__TIMED_OUT;
}

}  // namespace

struct KafkaHealth::Rep {
  mutable std::mutex mu;
  std::condition_variable wake;
  bool stop = false;
  bool probe_now = false;
  std::thread probe;
  std::string brokers;
  // Reachability as the probe last decided it; lost_since_ms < 0 while reachable.
  std::atomic<bool> reachable{true};
  int64_t lost_since_ms = -1;
  std::string reason;          // the error that led to the loss
  std::string last_error;      // the newest connectivity error reported by a client
  std::set<std::string> said;  // non-connectivity errors already logged
  Gauge* up_gauge = nullptr;
};

KafkaHealth::KafkaHealth() : rep_(std::make_unique<Rep>()) {
  rep_->up_gauge = MetricsRegistry::Global().GetGauge(
      "tally_kafka_reachable", "1 while the Kafka cluster answers this process, 0 while it is lost");
  rep_->up_gauge->Set(1);
}

KafkaHealth::~KafkaHealth() { StopProbe(); }

KafkaHealth& KafkaHealth::Global() {
  static KafkaHealth* health = new KafkaHealth();  // never destroyed: callbacks may outlive main
  return *health;
}

void KafkaHealth::OnClientError(rd_kafka_t* rk, int err, const char* reason, void* /*opaque*/) {
  Global().ReportError(rk ? rd_kafka_name(rk) : "-", static_cast<rd_kafka_resp_err_t>(err),
                       reason ? reason : "");
}

void KafkaHealth::ReportError(std::string_view client, rd_kafka_resp_err_t err,
                              std::string_view reason) {
  Rep& r = *rep_;
  if (IsConnectivityError(err)) {
    // One client's view; the probe decides. Details only at debug level: an
    // outage makes every client say the same thing many times.
    TALLY_LOG_DEBUG(kComponent, "{} ({}): {}", client, rd_kafka_err2name(err), reason);
    std::lock_guard<std::mutex> l(r.mu);
    // "All brokers down" says it best; a single connection's error (through
    // the bootstrap forwarder often a misleading guess at TLS) only if that
    // is all there is.
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
      r.last_error = fmt::format("all brokers down: {}", reason);
    } else if (r.last_error.empty()) {
      r.last_error = std::string(reason);
    }
    r.probe_now = true;
    r.wake.notify_all();
    return;
  }
  std::string text = fmt::format("{}: {}", rd_kafka_err2name(err), reason);
  {
    std::lock_guard<std::mutex> l(r.mu);
    if (!r.said.insert(text).second || r.said.size() > 1000) return;
  }
  if (err == RD_KAFKA_RESP_ERR__FATAL) {
    TALLY_LOG_ERROR(kComponent, "{}: fatal client error: {}", client, reason);
  } else {
    TALLY_LOG_WARN(kComponent, "{}: {}", client, text);
  }
}

Status KafkaHealth::StartProbe(const KafkaOptions& options, int interval_ms) {
  Rep& r = *rep_;
  {
    std::lock_guard<std::mutex> l(r.mu);
    if (r.probe.joinable()) return Status::FailedPrecondition("the Kafka probe already runs");
  }
  auto conf = MakeKafkaConf(RD_KAFKA_PRODUCER, options,
                            {{"client.id", "tally-probe"},
                             {"reconnect.backoff.ms", "100"},
                             {"reconnect.backoff.max.ms", "500"},
                             {"log_level", "3"}});
  if (!conf.ok()) return conf.status().WithContext("Kafka probe");
  auto rk = MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
  if (!rk.ok()) return rk.status().WithContext("Kafka probe");
  std::lock_guard<std::mutex> l(r.mu);
  r.stop = false;
  r.brokers = options.brokers;
  r.probe = std::thread([this, interval_ms, handle = std::make_shared<KafkaHandle>(std::move(rk).value())] {
    Rep& r = *rep_;
    int failures = 0;
    std::unique_lock<std::mutex> lock(r.mu);
    for (;;) {
      bool lost = !r.reachable.load();
      // Lost: probe often, so "back" is seen within about a second.
      int wait_ms = lost ? 200 : interval_ms;
      r.wake.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return r.stop || r.probe_now; });
      if (r.stop) break;
      bool triggered = r.probe_now;
      r.probe_now = false;
      lock.unlock();
      const rd_kafka_metadata_t* md = nullptr;
      rd_kafka_poll(handle->get(), 0);  // serves the probe's own error callbacks
      // Within the stop's budget once a stop was requested, so that the
      // stop's join of this thread does not wait out a probe.
      rd_kafka_resp_err_t err =
          rd_kafka_metadata(handle->get(), 0, nullptr, &md, std::max(StopBudgetLeftMs(1000), 1));
      if (md) rd_kafka_metadata_destroy(md);
      lock.lock();
      if (!err) {
        failures = 0;
        if (!r.reachable.load()) {
          double secs = (SteadyMs() - r.lost_since_ms) / 1000.0;
          r.reachable.store(true);
          r.lost_since_ms = -1;
          r.last_error.clear();
          r.up_gauge->Set(1);
          TALLY_LOG_WARN(kComponent, "Kafka at {} is reachable again after {:.1f} s; consumers and producers resume",
                         r.brokers, secs);
        }
        continue;
      }
      failures++;
      if (r.reachable.load() && !triggered && failures == 1) r.last_error.clear();
      if (r.reachable.load() && (triggered || failures >= 2)) {
        r.reachable.store(false);
        r.lost_since_ms = SteadyMs();
        r.reason = r.last_error.empty() ? std::string(rd_kafka_err2str(err)) : r.last_error;
        r.up_gauge->Set(0);
        TALLY_LOG_WARN(kComponent,
                       "lost Kafka at {} ({}): consumers wait, producers hold their records, "
                       "POST /v1/events answers 503, reads are served from the state",
                       r.brokers, r.reason);
      }
    }
  });
  return Status::Ok();
}

void KafkaHealth::StopProbe() {
  Rep& r = *rep_;
  std::thread t;
  {
    std::lock_guard<std::mutex> l(r.mu);
    r.stop = true;
    r.wake.notify_all();
    t = std::move(r.probe);
  }
  if (t.joinable()) t.join();
}

bool KafkaHealth::reachable() const { return rep_->reachable.load(); }

std::string KafkaHealth::Problem() const {
  if (rep_->reachable.load()) return std::string();
  std::lock_guard<std::mutex> l(rep_->mu);
  if (rep_->lost_since_ms < 0) return std::string();
  return fmt::format("Kafka at {} unreachable for {:.1f} s ({}); counts are not advancing",
                     rep_->brokers, (SteadyMs() - rep_->lost_since_ms) / 1000.0, rep_->reason);
}

}  // namespace tally::base
