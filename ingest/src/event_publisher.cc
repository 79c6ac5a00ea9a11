#include "ingest/event_publisher.h"

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "base/kafka_health.h"
#include "base/kafka_producer.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/shutdown.h"

namespace tally::ingest {
namespace {

constexpr std::string_view kComponent = "publisher";

// The state of one Publish() call. It lives on the caller's stack; the caller
// waits until `remaining` is 0, so every delivery report pointing here
// arrives while it is alive (librdkafka reports every queued record exactly
// once, at the latest after message.timeout.ms).
struct SyncBatch {
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = 0;
  rd_kafka_resp_err_t first_err = RD_KAFKA_RESP_ERR_NO_ERROR;
  size_t first_err_index = 0;
};

// The msg_opaque of a record queued by Publish(): which call, which record.
struct SyncTag {
  SyncBatch* batch;
  size_t index;
  RecordPosition position;  // set by the delivery report
};

// Kafka's "try again later" answers to a delivery: a message that timed out
// never reached a broker in time (KafkaStatus() says Unavailable too), and
// one purged by Abort() (a stop that could not wait) may or may not have
// (KafkaStatus() says Internal): for an HTTP client both are 503
// outcome_unknown, to be retried.
base::Status DeliveryStatus(rd_kafka_resp_err_t err, std::string_view context) {
  base::Status st = base::KafkaStatus(err, context);
  if (err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT || err == RD_KAFKA_RESP_ERR__PURGE_QUEUE ||
      err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) {
    return base::Status::Unavailable(st.message());
  }
  return st;
}

}  // namespace

struct EventPublisher::Rep {
  PublisherOptions options;
  std::unique_ptr<base::KafkaProducer> producer;
  rd_kafka_topic_t* rkt = nullptr;  // owned by `producer`
  std::thread poll_thread;
  std::atomic<bool> stop{false};

  // PublishAsync() bookkeeping. `mu` guards async_error and pairs with
  // `flushed` for the wake-up when async_inflight reaches 0.
  std::atomic<uint64_t> async_inflight{0};
  std::mutex mu;
  std::condition_variable flushed;
  base::Status async_error;

  std::atomic<uint64_t> delivered{0};
  std::atomic<uint64_t> failed{0};
  base::Counter* delivered_metric = nullptr;
  base::Counter* failed_metric = nullptr;

  ~Rep() {
    if (poll_thread.joinable()) {
      // Serve the remaining reports here; Flush() callers are gone by now.
      // Within a process's stop, what is left of its budget: the HTTP tier
      // has stopped, so nobody waits for an answer about these records.
      rd_kafka_flush(producer->get(), base::StopBudgetLeftMs(5000));
      stop.store(true);
      poll_thread.join();
      if (int left = producer->OutQueueLength(); left > 0) {
        TALLY_LOG_WARN(kComponent, "closing producer for {} with {} records undelivered",
                       options.topic, left);
      }
    }
    producer.reset();
  }

  // Runs on librdkafka's poll (our poll thread, or rd_kafka_flush in ~Rep).
  static void OnDelivery(Rep* rep, const rd_kafka_message_t* m) {
    if (m->err) {
      rep->failed.fetch_add(1, std::memory_order_relaxed);
      rep->failed_metric->Inc();
    } else {
      rep->delivered.fetch_add(1, std::memory_order_relaxed);
      rep->delivered_metric->Inc();
    }
    if (auto* tag = static_cast<SyncTag*>(m->_private)) {
      SyncBatch* b = tag->batch;
      std::lock_guard<std::mutex> lock(b->mu);
      tag->position = RecordPosition{m->partition, m->offset};
      if (m->err && !b->first_err) {
        b->first_err = m->err;
        b->first_err_index = tag->index;
      }
      if (--b->remaining == 0) b->cv.notify_all();
      return;
    }
    if (m->err) {
      std::lock_guard<std::mutex> lock(rep->mu);
      if (rep->async_error.ok()) {
        rep->async_error = DeliveryStatus(
            m->err,
            fmt::format("delivering to {} partition {} key '{}'", rep->options.topic, m->partition,
                        std::string_view(static_cast<const char*>(m->key), m->key_len)));
      }
    }
    if (rep->async_inflight.fetch_sub(1) == 1) {
      // Taking the lock orders this wake-up after a waiter's predicate check.
      std::lock_guard<std::mutex> lock(rep->mu);
      rep->flushed.notify_all();
    }
  }

  static void OnError(Rep* rep, rd_kafka_t* rk, int err, const char* reason) {
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
      char buf[512];
      rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, buf, sizeof(buf));
      TALLY_LOG_ERROR(kComponent, "fatal producer error for {}: {} ({}); records will fail",
                      rep->options.topic, buf, rd_kafka_err2name(orig));
      return;
    }
    // Transport errors are retried by librdkafka; they matter only if they
    // last, which KafkaHealth finds out and says once.
    base::KafkaHealth::OnClientError(rk, err, reason, nullptr);
  }

  void PollLoop() {
    while (!stop.load(std::memory_order_relaxed)) producer->Poll(100);
  }

  // Queues one record, waiting while the local queue is full (up to the
  // delivery timeout; the poll thread serves the reports that make room).
  // `opaque` is a SyncTag* or null for async records.
  base::Status Produce(const PublishRecord& r, void* opaque) {
    base::ProducerRecord record;
    record.rkt = rkt;
    record.key = r.key;
    record.value = r.value;
    record.opaque = opaque;
    return producer->Produce(
        record, base::QueueFullWait{options.delivery_timeout_ms, /*poll=*/false},
        [&] { return fmt::format("producing to {} key '{}'", options.topic, r.key); });
  }
};

base::Result<std::unique_ptr<EventPublisher>> EventPublisher::Create(
    const PublisherOptions& options) {
  if (options.topic.empty()) return base::Status::InvalidArgument("publisher: empty topic name");
  if (options.delivery_timeout_ms <= 0) {
    return base::Status::InvalidArgument(fmt::format(
        "publisher: delivery timeout must be positive, got {}", options.delivery_timeout_ms));
  }
  auto rep = std::make_unique<Rep>();
  rep->options = options;
  base::ProducerSettings settings;
  settings.linger_ms = 5;
  settings.extra = {
      // Same key -> same partition as the Java client.
      {"partitioner", "murmur2_random"},
      {"message.timeout.ms", std::to_string(options.delivery_timeout_ms)},
  };
  settings.on_delivery = [r = rep.get()](const rd_kafka_message_t& m) { Rep::OnDelivery(r, &m); };
  settings.on_error = [r = rep.get()](rd_kafka_t* rk, int err, const char* reason) {
    Rep::OnError(r, rk, err, reason);
  };
  auto producer = base::KafkaProducer::Create(options.kafka, std::move(settings));
  if (!producer.ok()) return producer.status().WithContext("publisher");
  rep->producer = std::move(producer).value();
  auto rkt = rep->producer->Topic(options.topic, /*metadata_timeout_ms=*/0);
  if (!rkt.ok()) return rkt.status().WithContext("publisher");
  rep->rkt = *rkt;
  std::string labels = fmt::format("topic=\"{}\"", options.topic);
  auto& metrics = base::MetricsRegistry::Global();
  rep->delivered_metric = metrics.GetCounter("tally_ingest_records_delivered_total",
                                             "Event records acknowledged by Kafka", labels);
  rep->failed_metric = metrics.GetCounter("tally_ingest_records_failed_total",
                                          "Event records whose delivery failed", labels);
  rep->poll_thread = std::thread([r = rep.get()] { r->PollLoop(); });
  return std::unique_ptr<EventPublisher>(new EventPublisher(std::move(rep)));
}

EventPublisher::EventPublisher(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
EventPublisher::~EventPublisher() = default;

base::Status EventPublisher::Publish(std::span<const PublishRecord> records,
                                     std::vector<RecordPosition>* positions) {
  if (records.empty()) return base::Status::Ok();
  SyncBatch batch;
  std::vector<SyncTag> tags(records.size());
  base::Status produce_status;
  size_t queued = 0;
  {
    // Count every record up front so an early report cannot reach 0 early.
    std::lock_guard<std::mutex> lock(batch.mu);
    batch.remaining = records.size();
  }
  for (; queued < records.size(); queued++) {
    tags[queued] = {&batch, queued, {}};
    produce_status = rep_->Produce(records[queued], &tags[queued]);
    if (!produce_status.ok()) break;
  }
  std::unique_lock<std::mutex> lock(batch.mu);
  batch.remaining -= records.size() - queued;  // never queued: no report will come
  // Not bounded by a timer on purpose: librdkafka reports every queued record
  // within message.timeout.ms, and `tags` must outlive those reports.
  batch.cv.wait(lock, [&] { return batch.remaining == 0; });
  if (batch.first_err) {
    const PublishRecord& r = records[batch.first_err_index];
    return DeliveryStatus(
        batch.first_err,
        fmt::format("publishing record {} of {} (key '{}') to {}", batch.first_err_index,
                    records.size(), r.key, rep_->options.topic));
  }
  if (!produce_status.ok()) {
    return produce_status.WithContext(fmt::format(
        "record {} of {}; {} records before it were queued", queued, records.size(), queued));
  }
  if (positions != nullptr) {
    positions->clear();
    for (const SyncTag& t : tags) positions->push_back(t.position);
  }
  return base::Status::Ok();
}

base::Status EventPublisher::PublishAsync(const PublishRecord& record) {
  rep_->async_inflight.fetch_add(1);
  base::Status st = rep_->Produce(record, nullptr);
  if (!st.ok() && rep_->async_inflight.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(rep_->mu);
    rep_->flushed.notify_all();
  }
  return st;
}

void EventPublisher::Abort() {
  rd_kafka_purge(rep_->producer->get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
}

base::Status EventPublisher::Flush(int timeout_ms) {
  std::unique_lock<std::mutex> lock(rep_->mu);
  bool drained = rep_->flushed.wait_for(lock, std::chrono::milliseconds(std::max(timeout_ms, 0)),
                                        [&] { return rep_->async_inflight.load() == 0; });
  base::Status first_failure = std::move(rep_->async_error);
  rep_->async_error = base::Status::Ok();
  if (!first_failure.ok()) return first_failure;
  if (!drained) {
    return base::Status::Unavailable(fmt::format(
        "{} records to {} still undelivered after {} ms (is the broker at {} up?)",
        rep_->async_inflight.load(), rep_->options.topic, timeout_ms, rep_->options.kafka.brokers));
  }
  return base::Status::Ok();
}

uint64_t EventPublisher::pending() const { return rep_->async_inflight.load(); }

PublisherStats EventPublisher::stats() const {
  return {rep_->delivered.load(std::memory_order_relaxed),
          rep_->failed.load(std::memory_order_relaxed)};
}

const std::string& EventPublisher::topic() const { return rep_->options.topic; }

std::string DefaultKey(const schemas::Event& e) {
  using schemas::EventType;
  switch (e.type) {
    case EventType::kLike:
    case EventType::kUnlike:
    case EventType::kRepost:
    case EventType::kComment:
    case EventType::kView:
      return std::to_string(e.post_id);
    case EventType::kFollow:
    case EventType::kUnfollow:
    case EventType::kRead:
    case EventType::kMention:
      return std::to_string(e.user_id);
    case EventType::kDm:
      return std::to_string(e.from_user_id);
    case EventType::kPost:
    case EventType::kPostDelete:
      return std::to_string(e.author_id);
    case EventType::kNotice:
      return "notice";
    case EventType::kRedDot:
      return e.channel;
  }
  return std::string();
}

}  // namespace tally::ingest
