#include "base/kafka_producer.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/clock.h"
#include "base/shutdown.h"

namespace tally::base {

KafkaProducer::KafkaProducer(ProducerSettings settings) : settings_(std::move(settings)) {}

KafkaProducer::~KafkaProducer() {
  topics_.clear();  // a topic handle must go before its producer
  rk_.reset();
}

Result<std::unique_ptr<KafkaProducer>> KafkaProducer::Create(const KafkaOptions& kafka,
                                                             ProducerSettings settings) {
  std::map<std::string, std::string> defaults = {
      {"enable.idempotence", "true"},
      {"acks", "all"},
      {"compression.type", "lz4"},
      {"linger.ms", std::to_string(settings.linger_ms)},
  };
  if (!settings.client_id.empty()) defaults["client.id"] = settings.client_id;
  for (const auto& [k, v] : settings.extra) defaults[k] = v;
  auto conf = MakeKafkaConf(RD_KAFKA_PRODUCER, kafka, defaults);
  if (!conf.ok()) return conf.status();
  std::unique_ptr<KafkaProducer> p(new KafkaProducer(std::move(settings)));
  p->brokers_ = kafka.brokers;
  rd_kafka_conf_set_opaque(conf->get(), p.get());
  if (p->settings_.on_delivery) rd_kafka_conf_set_dr_msg_cb(conf->get(), &DeliveryReport);
  if (p->settings_.on_error) rd_kafka_conf_set_error_cb(conf->get(), &ErrorReport);
  auto rk = MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
  if (!rk.ok()) return rk.status();
  p->rk_ = std::move(rk).value();
  return p;
}

void KafkaProducer::DeliveryReport(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  static_cast<KafkaProducer*>(opaque)->settings_.on_delivery(*m);
}

void KafkaProducer::ErrorReport(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
  static_cast<KafkaProducer*>(opaque)->settings_.on_error(rk, err, reason);
}

Result<rd_kafka_topic_t*> KafkaProducer::Topic(std::string_view topic, int metadata_timeout_ms) {
  const std::string name(topic);
  KafkaTopic rkt(rd_kafka_topic_new(rk_.get(), name.c_str(), nullptr));
  if (!rkt) return KafkaStatus(rd_kafka_last_error(), fmt::format("topic handle for {}", topic));
  if (metadata_timeout_ms > 0) {
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk_.get(), 0, rkt.get(), &md, metadata_timeout_ms);
    if (err) return KafkaStatus(err, fmt::format("metadata for {}", topic));
    rd_kafka_metadata_destroy(md);
  }
  topics_.push_back(std::move(rkt));
  return topics_.back().get();
}

Status KafkaProducer::Produce(const ProducerRecord& r, const QueueFullWait& wait,
                              const std::function<std::string()>& context) {
  void* value = const_cast<char*>(r.value.data());
  const void* key = r.key.empty() ? nullptr : r.key.data();
  int64_t deadline = -1;
  for (;;) {
    rd_kafka_resp_err_t err;
    if (r.rkt != nullptr) {
      err = rd_kafka_producev(rk_.get(), RD_KAFKA_V_RKT(r.rkt), RD_KAFKA_V_PARTITION(r.partition),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_VALUE(value, r.value.size()),
                              RD_KAFKA_V_KEY(key, r.key.size()), RD_KAFKA_V_HEADERS(r.headers),
                              RD_KAFKA_V_OPAQUE(r.opaque), RD_KAFKA_V_END);
    } else {
      err = rd_kafka_producev(
          rk_.get(), RD_KAFKA_V_TOPIC(r.topic), RD_KAFKA_V_PARTITION(r.partition),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(value, r.value.size()),
          RD_KAFKA_V_KEY(key, r.key.size()), RD_KAFKA_V_HEADERS(r.headers),
          RD_KAFKA_V_OPAQUE(r.opaque), RD_KAFKA_V_END);
    }
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return Status::Ok();
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      if (r.headers != nullptr) rd_kafka_headers_destroy(r.headers);  // not taken over on failure
      return KafkaStatus(err, context());
    }
    if (wait.deadline_ms != QueueFullWait::kNoDeadline) {
      const int64_t now = SteadyMs();
      if (deadline < 0) {
        deadline = now + wait.deadline_ms;
      } else if (now >= deadline) {
        if (r.headers != nullptr) rd_kafka_headers_destroy(r.headers);
        return Status::Unavailable(fmt::format(
            "producing to {}: local queue full for {} ms (is the broker at {} up?)",
            r.rkt != nullptr ? rd_kafka_topic_name(r.rkt) : r.topic, wait.deadline_ms, brokers_));
      }
    }
    if (wait.poll) {
      rd_kafka_poll(rk_.get(), 50);
    } else {
      // Another thread polls: room comes as the broker acknowledges.
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }
}

int KafkaProducer::Poll(int timeout_ms) { return rd_kafka_poll(rk_.get(), timeout_ms); }

int KafkaProducer::OutQueueLength() { return rd_kafka_outq_len(rk_.get()); }

Status KafkaProducer::Flush(const std::atomic<bool>* stop,
                            const std::function<void(int)>& on_wait) {
  int stopping_s = 0;
  for (int waited_s = 1;; waited_s++) {
    // Once a stop was requested, never wait past its budget: a second of
    // flushing begun near its end would overshoot it by that second (the
    // stage's `stop` may be set only later, after the HTTP tier stopped).
    const bool stopping = stop != nullptr && stop->load();
    const int wait_ms = std::max(StopBudgetLeftMs(1000), stopping ? 0 : 10);
    if (rd_kafka_flush(rk_.get(), wait_ms) == RD_KAFKA_RESP_ERR_NO_ERROR) break;
    if (stopping && (++stopping_s >= kFlushAtStopSeconds || StopBudgetLeftMs(1000) == 0)) {
      const int left = rd_kafka_outq_len(rk_.get());
      rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      rd_kafka_poll(rk_.get(), 0);  // the purged records' delivery reports
      return Status::Aborted(fmt::format(
          "stopping with {} records the broker has not acknowledged in {} s", left, waited_s));
    }
    if (on_wait && waited_s % 30 == 1) on_wait(waited_s);
  }
  return Status::Ok();
}

std::string KafkaProducer::Setting(const char* key, std::string fallback) const {
  char buf[512];
  size_t n = sizeof(buf);
  if (rd_kafka_conf_get(rd_kafka_conf(rk_.get()), key, buf, &n) != RD_KAFKA_CONF_OK) {
    return fallback;
  }
  return std::string(buf);
}

}  // namespace tally::base
