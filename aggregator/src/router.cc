#include "aggregator/router.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <thread>

#include "aggregator/cadence.h"
#include "aggregator/event_router.h"
#include "base/clock.h"
#include "base/kafka_consumer.h"
#include "base/kafka_producer.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/shutdown.h"
#include "commit_pipeline.h"
#include "fetcher_wakeup.h"
#include "retention_gaps.h"
#include "schemas/delta.h"
#include "schemas/event.h"
#include "whole_topic_assignment.h"

namespace tally::aggregator {

using base::Status;

namespace {
constexpr const char* kLog = "router";
constexpr size_t kMaxGenerationsInFlight = 8;
// Input messages taken from the consumer queue at once.
constexpr size_t kConsumeBatch = 256;
// Room left in a dead letter for its headers and Kafka's record overhead.
constexpr size_t kDlqHeadroom = 16 << 10;
}  // namespace

struct Router::Rep {
  RouterOptions o;
  base::KafkaHandle consumer;
  rd_kafka_queue_t* consumer_queue = nullptr;  // released by Run()
  std::unique_ptr<base::KafkaProducer> producer;
  rd_kafka_topic_t* deltas_rkt = nullptr;  // owned by `producer`
  rd_kafka_topic_t* dlq_rkt = nullptr;     // owned by `producer`
  // Made with the consumer; confined to this thread like it.
  std::unique_ptr<CommitPipeline> commits;
  std::unique_ptr<FetcherWakeup> fetcher;
  std::unique_ptr<WholeTopicAssignment> whole;  // whole_topics, or standalone
  // A cluster member routing every partition without the group while no
  // other member is live (RouterOptions::directory); when it was last
  // asked whether it still is alone.
  bool standalone = false;
  int64_t alone_checked_ms = 0;
  EventRouter router;
  std::vector<schemas::DeltaBatchBuilder> builders;
  schemas::EventParser parser;
  schemas::Event event;

  const std::atomic<bool>* stop = nullptr;  // Run()'s; a flush at stop waits a bounded time
  bool gave_up = false;  // a flush at stop stopped waiting for the broker or its coordinator
  int64_t first_pending_ms = -1;
  // o.linger_ms stretched by the share of the input this router was given
  // (RouterOptions::max_linger_ms); input_partitions is counted at start.
  int linger_ms = 0;
  int input_partitions = 0;
  size_t pending_bytes = 0;
  size_t largest_batch = 0;  // encoded bytes of the largest deltas batch being built
  // A flush is forced when a deltas batch reaches this: half the producer's
  // message.max.bytes (set in Run()), so lz4 never has to save it.
  size_t max_deltas_message = 0;
  // Largest value a dead letter carries whole: the producer's
  // message.max.bytes less kDlqHeadroom (set in Run()).
  size_t dlq_max_value = 0;

  Status fatal;  // set by callbacks, returned by Run

  base::Counter* events_total;
  base::Counter* invalid_total;
  // One line per invalid (or truncated) record, but no more than 10 every
  // 10 s in a flood (every one is still counted and dead-lettered).
  base::LogLimiter invalid_log{10, 10000};
  base::LogLimiter truncated_log{10, 10000};
  base::Counter* deltas_total;
  base::Counter* messages_total;

  // Partitions librdkafka stopped at an offset outside their log
  // (auto.offset.reset=error), resumed after the batch that reported them.
  std::vector<OffsetReset> resets;
  int64_t resets_retry_ms = 0;  // the broker did not answer: try again then
  RetentionGaps gaps;

  explicit Rep(RouterOptions opts)
      : o(std::move(opts)),
        router(o.deltas_partitions),
        gaps(kLog, "tally read them",
             base::MetricsRegistry::Global().GetCounter(
                 "tally_input_lost_records_total",
                 "Input records removed by retention before tally read them"),
             /*resume_past_end=*/true) {
    builders.resize(o.deltas_partitions);
    auto& m = base::MetricsRegistry::Global();
    events_total = m.GetCounter("tally_router_events_total", "Input records routed (valid and invalid)");
    invalid_total = m.GetCounter("tally_router_invalid_total", "Input records sent to the dead letter topic");
    deltas_total = m.GetCounter("tally_router_deltas_total", "Deltas published to tally.deltas");
    messages_total = m.GetCounter("tally_router_delta_messages_total", "Delta batch messages published");
  }

  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* parts,
                          void* opaque) {
    auto* self = static_cast<Rep*>(opaque);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
      for (int i = 0; i < parts->cnt; i++) {
        TALLY_LOG_INFO(kLog, "assigned {}/{}", parts->elems[i].topic, parts->elems[i].partition);
      }
      self->SetLinger(parts->cnt);
      self->commits->ForgetPositions();
      if (Status st = base::Assign(rk, parts, "assigning the partitions the group gave");
          !st.ok()) {
        TALLY_LOG_ERROR(kLog, "{}", st.message());
      }
      return;
    }
    // Revoked: publish and commit what we routed so the next owner starts
    // where we stopped (a failure here only means it re-routes: deduplicated).
    Status st = self->Flush(/*sync_commit=*/true);
    if (!st.ok() && self->fatal.ok()) self->fatal = st;
    self->commits->ForgetPositions();
    TALLY_LOG_INFO(kLog, "revoked {} partitions", parts->cnt);
    if (Status un = base::Assign(rk, nullptr, "unassigning the revoked partitions"); !un.ok()) {
      TALLY_LOG_ERROR(kLog, "{}", un.message());
    }
  }

  // Stretches the linger by the share of the input this router routes:
  // `assigned` of input_partitions.
  void SetLinger(int assigned) {
    const int before = linger_ms;
    linger_ms = StretchedByShare(o.linger_ms, o.max_linger_ms, input_partitions, assigned);
    if (linger_ms != before) {
      TALLY_LOG_INFO(kLog,
                     "routing {} of {} input partitions: deltas wait up to {} ms to be published",
                     assigned, input_partitions, linger_ms);
    }
  }

  // True when nothing is routed but unsealed, unacknowledged or
  // uncommitted, and nothing waits to be resumed.
  bool Idle() const {
    return first_pending_ms < 0 && commits->InFlight() == 0 && commits->commits_in_flight() == 0 &&
           resets.empty();
  }

  // Produces one message of the open generation; `slot` is what
  // CommitPipeline::Track() gave it, or 0 (a dead letter).
  Status Produce(rd_kafka_topic_t* rkt, int32_t partition, const std::string& value,
                 rd_kafka_headers_t* headers, uintptr_t slot = 0) {
    base::ProducerRecord r;
    r.rkt = rkt;
    r.partition = partition;
    r.value = value;
    r.headers = headers;
    r.opaque = commits->Tag(slot);
    TALLY_RETURN_IF_ERROR(producer->Produce(r, base::QueueFullWait{}, [&] {
      return fmt::format("producing to {}/{}", rd_kafka_topic_name(rkt), partition);
    }));
    commits->Produced();
    return Status::Ok();
  }

  void SendToDlq(const rd_kafka_message_t* m, const std::string& reason) {
    rd_kafka_headers_t* h = rd_kafka_headers_new(5);
    std::string part = std::to_string(m->partition);
    std::string off = std::to_string(m->offset);
    rd_kafka_header_add(h, "tally.source.topic", -1, rd_kafka_topic_name(m->rkt), -1);
    rd_kafka_header_add(h, "tally.source.partition", -1, part.data(), part.size());
    rd_kafka_header_add(h, "tally.source.offset", -1, off.data(), off.size());
    rd_kafka_header_add(h, "tally.reason", -1, reason.data(), reason.size());
    size_t len = m->len;
    if (len > dlq_max_value) {
      // The whole record does not fit in a message this producer may send
      // (Kafka's own default limit is about 1 MB too). Refusing it would
      // stop the router on every restart; the dead letter keeps a prefix and
      // the full size, and the source coordinates find the rest.
      std::string full = std::to_string(m->len);
      rd_kafka_header_add(h, "tally.value.truncated", -1, full.data(), full.size());
      TALLY_LOG_WARN_LIMITED(
          truncated_log, kLog,
          "dead letter for topic={} partition={} offset={} keeps {} of its {} bytes",
          rd_kafka_topic_name(m->rkt), m->partition, m->offset, dlq_max_value, m->len);
      len = dlq_max_value;
    }
    std::string value(static_cast<const char*>(m->payload ? m->payload : ""), m->payload ? len : 0);
    Status st = Produce(dlq_rkt, RD_KAFKA_PARTITION_UA, value, h);
    if (!st.ok() && fatal.ok()) fatal = st;
  }

  void Handle(const rd_kafka_message_t* m) {
    const char* topic = rd_kafka_topic_name(m->rkt);
    events_total->Inc();
    Status st = m->payload ? parser.Parse(std::string_view(static_cast<const char*>(m->payload), m->len), &event)
                           : Status::InvalidArgument("empty record (no value)");
    if (!st.ok()) {
      invalid_total->Inc();
      TALLY_LOG_WARN_LIMITED(invalid_log, kLog,
                             "invalid record topic={} partition={} offset={}: {}", topic,
                             m->partition, m->offset, st.message());
      SendToDlq(m, st.message());
    } else {
      deltas_total->Inc(router.Route(event, topic, m->partition, m->offset, &builders));
      // One mention can fan out to 100 deltas: keep every deltas message
      // well under the broker's message.max.bytes (1 MB by default).
      for (const auto& b : builders) largest_batch = std::max(largest_batch, b.ByteSize());
    }
    commits->Routed(topic, m->partition, m->offset + 1);
    if (first_pending_ms < 0) first_pending_ms = base::SteadyMs();
    pending_bytes += m->len;
  }

  // Publishes every built batch as the open generation's messages and seals
  // it; does not wait for the broker.
  Status Seal() {
    if (!commits->HasOpen()) return Status::Ok();
    for (uint32_t d = 0; d < builders.size(); d++) {
      schemas::DeltaBatchBuilder& b = builders[d];
      if (b.empty()) continue;
      const uintptr_t slot = commits->Track(d, b);
      std::string value = b.Finish();
      TALLY_RETURN_IF_ERROR(Produce(deltas_rkt, static_cast<int32_t>(d), value, nullptr, slot));
      messages_total->Inc();
    }
    commits->Seal();
    first_pending_ms = -1;
    pending_bytes = 0;
    largest_batch = 0;
    return Status::Ok();
  }

  // Seals the open generation, then bounds the pipeline: with too many
  // flushes in flight, waits for the oldest.
  Status SealBounded() {
    TALLY_RETURN_IF_ERROR(Seal());
    while (commits->InFlight() > kMaxGenerationsInFlight && commits->failure().empty() &&
           commits->OldestOutstanding() && !stop->load(std::memory_order_relaxed)) {
      producer->Poll(10);
    }
    return Status::Ok();
  }

  // Commits what the broker acknowledged (CommitPipeline::Reap); having
  // waited in vain for the coordinator at a stop, gives up on it.
  Status Reap(bool sync_commit) {
    Status st = commits->Reap(sync_commit, stop);
    if (st.code() == base::StatusCode::kAborted) gave_up = true;
    return st;
  }

  // Resumes the partitions in `resets` where RetentionGaps says (which logs
  // and counts what retention removed). What was routed is published and
  // committed first and the resume offsets are committed next, so the
  // committed offsets are where routing goes on (a restart does not meet
  // the same gap again); then every partition is assigned again, at its
  // position, the reset ones at their resume offsets.
  Status ResumeAfterResets() {
    if (base::SteadyMs() < resets_retry_ms) return Status::Ok();
    base::KafkaPartitionList wanted(
        rd_kafka_topic_partition_list_new(static_cast<int>(resets.size())));
    for (const auto& rs : resets) {
      rd_kafka_topic_partition_list_add(wanted.get(), rs.topic.c_str(), rs.partition);
    }
    rd_kafka_position(consumer.get(), wanted.get());
    ResumeOffsets resume;
    for (const auto& rs : resets) {
      auto* pos = rd_kafka_topic_partition_list_find(wanted.get(), rs.topic.c_str(), rs.partition);
      auto at = gaps.Resume(consumer.get(), rs, pos ? pos->offset : RD_KAFKA_OFFSET_INVALID, 5000);
      if (!at.ok()) {
        TALLY_LOG_WARN_LIMITED(commits->commit_log(), kLog, "{}/{}: cannot resume yet: {}",
                               rs.topic, rs.partition, at.status().message());
        resets_retry_ms = base::SteadyMs() + 1000;
        return Status::Ok();
      }
      resume[{rs.topic, rs.partition}] = *at;
    }
    resets.clear();
    TALLY_RETURN_IF_ERROR(Flush(/*sync_commit=*/false));
    base::KafkaPartitionList moved;
    auto parts = AssignmentAt(consumer.get(), resume, &moved);
    if (!parts.ok()) return parts.status();
    if (moved->cnt > 0) commits->Commit(moved.get());
    return base::Assign(consumer.get(), parts->get(), "assigning the input partitions again");
  }

  // Publishes what is routed, waits until the broker has acknowledged every
  // message in flight, then commits all of it (on revocation and at stop).
  //
  // Told to stop, it waits base::kFlushAtStopSeconds for the broker and
  // then gives up: the input offsets stay uncommitted, so a restart routes
  // those records again (the applier skips what it already has), and an
  // outage does not hold the process up.
  Status Flush(bool sync_commit) {
    TALLY_RETURN_IF_ERROR(Seal());
    if (gave_up) return Status::Aborted("stopping without the broker");  // once is enough
    Status st = producer->Flush(stop, [this](int waited_s) {
      TALLY_LOG_WARN(kLog,
                     "waiting {} s for the broker to acknowledge {} deltas messages; input offsets "
                     "stay uncommitted",
                     waited_s, producer->OutQueueLength());
    });
    if (!st.ok()) {
      gave_up = true;
      return Status::Aborted(
          fmt::format("{} (deltas messages); their input records stay uncommitted and are routed "
                      "again on restart",
                      st.message()));
    }
    return Reap(sync_commit);
  }

  // Makes the producer and the consumer, and takes the input partitions.
  Status Start() {
    base::ProducerSettings ps;
    ps.client_id = "tally-router";
    ps.linger_ms = 5;
    ps.on_delivery = [this](const rd_kafka_message_t& m) { commits->OnDelivery(m); };
    auto p = base::KafkaProducer::Create(o.kafka, std::move(ps));
    if (!p.ok()) return p.status();
    producer = std::move(p).value();
    const size_t max_bytes =
        std::strtoull(producer->Setting("message.max.bytes", "1000000").c_str(), nullptr, 10);
    dlq_max_value = max_bytes > 2 * kDlqHeadroom ? max_bytes - kDlqHeadroom : max_bytes / 2;
    max_deltas_message = max_bytes / 2;
    // Metadata now, or the first flush waits for the next refresh.
    auto deltas = producer->Topic(o.deltas_topic, 10000);
    if (!deltas.ok()) return deltas.status();
    deltas_rkt = *deltas;
    auto dlq = producer->Topic(o.dlq_topic, 10000);
    if (!dlq.ok()) return dlq.status();
    dlq_rkt = *dlq;

    base::ConsumerSettings cs;
    cs.group = o.group;
    cs.client_id = "tally-router";
    cs.short_fetch_wait = true;
    cs.rebalance_cb = &Rep::OnRebalance;
    cs.opaque = this;
    auto c = base::MakeConsumer(o.kafka, cs);
    if (!c.ok()) return c.status();
    consumer = std::move(c).value();
    consumer_queue = rd_kafka_queue_get_consumer(consumer.get());
    commits = std::make_unique<CommitPipeline>(consumer.get(), o.deltas_partitions, kLog);
    fetcher = std::make_unique<FetcherWakeup>(consumer.get(), consumer_queue);

    std::string joined;
    for (const auto& t : o.input_topics) joined += (joined.empty() ? "" : ",") + t;
    TALLY_LOG_INFO(kLog, "routing {} -> {} ({} partitions), {} group {}", joined, o.deltas_topic,
                   o.deltas_partitions,
                   o.whole_topics ? "every partition, offsets in" : "partitions assigned by",
                   o.group);
    linger_ms = o.linger_ms;
    if (!o.whole_topics) {
      for (const auto& t : o.input_topics) {
        // Only to size the linger: a topic not there yet counts as one.
        auto n = base::PartitionCount(consumer.get(), t, 10000);
        input_partitions += n.ok() ? *n : 1;
      }
      if (!StartsAlone()) return Subscribe();
      standalone = true;
      alone_checked_ms = base::SteadyMs();
      TALLY_LOG_INFO(kLog,
                     "no other member of the cluster is live: routing every input partition "
                     "without waiting for the group {} (joined once another member shows up)",
                     o.group);
    }
    whole = std::make_unique<WholeTopicAssignment>(consumer.get(), o.input_topics, o.group, kLog);
    if (Status st = whole->Assign(30000); !st.ok()) {
      TALLY_LOG_ERROR(kLog, "stopped: {}", st.ToString());
      return st;
    }
    return Status::Ok();
  }

  Status Subscribe() {
    base::KafkaPartitionList topics(
        rd_kafka_topic_partition_list_new(static_cast<int>(o.input_topics.size())));
    for (const auto& t : o.input_topics) {
      rd_kafka_topic_partition_list_add(topics.get(), t.c_str(), RD_KAFKA_PARTITION_UA);
    }
    if (auto err = rd_kafka_subscribe(consumer.get(), topics.get())) {
      return base::KafkaStatus(err, "subscribing to the input topics");
    }
    return Status::Ok();
  }

  // True when the members directory shows no live member but this one.
  bool NoOtherMember() const {
    for (const auto& m : o.directory->Snapshot()) {
      if (m.member != o.member) return false;
    }
    return true;
  }

  // At start, in a cluster: whether to route standalone (RouterOptions::
  // directory). Waits up to 3 s for the directory to have read what its
  // topic held; a directory that has not is no evidence of being alone.
  bool StartsAlone() const {
    if (o.directory == nullptr) return false;
    const int64_t deadline = base::SteadyMs() + 3000;
    while (!o.directory->CaughtUp()) {
      if (base::SteadyMs() >= deadline || stop->load()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return NoOtherMember();
  }

  // Routing standalone: joins the group once another member shows up or
  // the group refused a commit (someone routes in it). What was routed is
  // published and committed first, so the group's next owner of each
  // partition goes on from there (a commit the group refuses only means
  // some records are routed twice, and applied once).
  Status JoinGroupIfNotAlone(int64_t now) {
    if (now - alone_checked_ms < 200) return Status::Ok();
    alone_checked_ms = now;
    const bool refused = commits->refused_by_group();
    if (!refused && NoOtherMember()) return Status::Ok();
    TALLY_LOG_INFO(kLog, "{}: joining the group {} to share the input partitions",
                   refused ? "the group has members (it refused a commit from outside it)"
                           : "another member of the cluster is live",
                   o.group);
    TALLY_RETURN_IF_ERROR(Flush(/*sync_commit=*/true));
    whole.reset();
    standalone = false;
    commits->ForgetPositions();
    TALLY_RETURN_IF_ERROR(
        base::Assign(consumer.get(), nullptr, "unassigning the input partitions"));
    return Subscribe();
  }

  // Takes one consumer message: routes a record (true), or notes a
  // partition to resume or logs another error (false).
  bool Take(const rd_kafka_message_t* m) {
    if (m->err) {
      if (IsOffsetReset(m->err) && m->rkt) {
        resets.push_back({rd_kafka_topic_name(m->rkt), m->partition, m->offset});
      } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        TALLY_LOG_WARN(kLog, "consumer: {}", rd_kafka_message_errstr(m));
      }
      return false;
    }
    Handle(m);
    fetcher->AfterMessage(m);
    return true;
  }

  // True when the open generation must be sealed now: size limits are
  // checked per event, since one mention can fan out to 100 deltas and a
  // deltas message must stay under message.max.bytes.
  bool Full() const {
    return pending_bytes >= o.max_batch_bytes || largest_batch >= max_deltas_message;
  }

  // Ends Run(): publishes and commits what is left, then leaves the group
  // (or, having given up on the broker, just goes).
  Status Finish(Status result) {
    if (result.ok() && !fatal.ok()) result = fatal;
    if (result.ok()) result = Flush(/*sync_commit=*/true);
    if (gave_up) {
      // The broker is away. Leaving the group would wait for its
      // coordinator (up to session.timeout.ms), and so would the commits in
      // flight: close without leaving, and the group lets this member go
      // when its session expires. What the broker did not take is routed
      // again on restart.
      rd_kafka_queue_destroy(consumer_queue);
      consumer_queue = nullptr;
      commits->ReleaseQueue();
      // The destroy itself still waits for the commits in flight: it runs
      // on a thread of its own (and the process may exit before it ends).
      base::DestroyInBackground(std::move(consumer), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    } else {
      // Leaving the group revokes the partitions, whose callback flushes
      // again (and commits).
      rd_kafka_consumer_close(consumer.get());
      rd_kafka_flush(producer->get(), 5000);
    }
    if (result.ok()) {
      TALLY_LOG_INFO(kLog, "stopped cleanly");
    } else {
      TALLY_LOG_ERROR(kLog, "stopped: {}", result.ToString());
    }
    return result;
  }
};

Router::Router(RouterOptions options) : rep_(std::make_unique<Rep>(std::move(options))) {}
Router::~Router() = default;

Status Router::Run(const std::atomic<bool>* stop) {
  Rep& r = *rep_;
  r.stop = stop;
  if (r.o.deltas_partitions == 0) {
    return Status::InvalidArgument("router: deltas partition count unknown");
  }
  // The consumer queue and the commit queue go before the consumer.
  struct ReleaseQueues {
    Rep& r;
    ~ReleaseQueues() {
      if (r.consumer_queue != nullptr) rd_kafka_queue_destroy(r.consumer_queue);
      r.consumer_queue = nullptr;
      if (r.commits) r.commits->ReleaseQueue();
    }
  } release_queues{r};
  if (Status st = r.Start(); !st.ok()) return st;

  // Consume, route, seal: messages are taken from librdkafka a batch at a
  // time (one queue lock and one clock read per batch, not per event); a
  // generation is sealed when it is full or has waited linger_ms, and
  // committed once the broker acknowledged it and all before it.
  Status result = Status::Ok();
  std::array<rd_kafka_message_t*, kConsumeBatch> batch;
  while (!stop->load(std::memory_order_relaxed) && r.fatal.ok()) {
    ssize_t n = 0;
    int wait_ms = 5;
    if (r.Idle()) {
      // Nothing to seal, acknowledge or commit: wait for the next record
      // (which ends the wait at once) up to 50 ms, instead of waking 200
      // times a second for nothing; then take what else is queued.
      if (rd_kafka_message_t* first = rd_kafka_consume_queue(r.consumer_queue, 50)) {
        batch[n++] = first;
      }
      wait_ms = 0;
    }
    ssize_t more =
        rd_kafka_consume_batch_queue(r.consumer_queue, wait_ms, batch.data() + n, batch.size() - n);
    if (more > 0) n += more;
    for (ssize_t i = 0; i < n; i++) {
      base::KafkaMessage m(batch[i]);
      if (!result.ok()) continue;  // the rest of the batch is only released
      if (r.Take(m.get()) && r.Full()) result = r.SealBounded();
    }
    if (!result.ok()) break;
    if (!r.resets.empty() && !stop->load(std::memory_order_relaxed)) {
      result = r.ResumeAfterResets();
      if (!result.ok()) break;
    }
    r.producer->Poll(0);
    const int64_t now = base::SteadyMs();
    if (r.first_pending_ms >= 0 && now - r.first_pending_ms >= r.linger_ms) {
      result = r.SealBounded();
      if (!result.ok()) break;
    }
    result = r.Reap(/*sync_commit=*/false);
    if (!result.ok()) break;
    if (r.whole) r.whole->Refresh(now);
    if (r.standalone) {
      result = r.JoinGroupIfNotAlone(now);
      if (!result.ok()) break;
    }
  }
  return r.Finish(result);
}

}  // namespace tally::aggregator
