#include "aggregator/router.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>

#include "aggregator/event_router.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/shutdown.h"
#include "retention_gaps.h"
#include "schemas/delta.h"
#include "schemas/deltas_position.h"
#include "schemas/event.h"

namespace tally::aggregator {

using base::Status;

namespace {
constexpr const char* kLog = "router";
constexpr size_t kMaxGenerationsInFlight = 8;
// Input messages taken from the consumer queue at once.
constexpr size_t kConsumeBatch = 256;
// Room left in a dead letter for its headers and Kafka's record overhead.
constexpr size_t kDlqHeadroom = 16 << 10;
// A produced message's opaque: its generation id above kSlotBits, and below
// them 1 + its index among the generation's deltas messages (0: a dead
// letter, whose offset nobody needs).
constexpr int kSlotBits = 12;
constexpr uintptr_t kSlotMask = (uintptr_t{1} << kSlotBits) - 1;
}  // namespace

struct Router::Rep {
  RouterOptions o;
  base::KafkaHandle consumer;
  base::KafkaHandle producer;
  base::KafkaTopic deltas_rkt;  // destroyed before the producer
  base::KafkaTopic dlq_rkt;
  EventRouter router;
  std::vector<schemas::DeltaBatchBuilder> builders;
  schemas::EventParser parser;
  schemas::Event event;

  // What one flush published: the records it covers (next offset per input
  // partition) and how many of its messages the broker has not yet
  // acknowledged. Flushes are pipelined: routing goes on while they are in
  // flight, and a flush's offsets are committed once it and every flush
  // before it are acknowledged, so a committed offset never runs ahead of a
  // delta or dead letter that is not in the log.
  using Offsets = std::map<std::pair<std::string, int32_t>, int64_t>;
  // A deltas message of a generation: its partition, the offset the broker
  // acknowledged it at, and per input stream it carries (a stream id, see
  // stream_ids) the stream's smallest offset in it.
  struct SentMessage {
    uint32_t partition = 0;
    int64_t offset = -1;  // -1 until acknowledged
    std::vector<std::pair<uint32_t, int64_t>> firsts;
  };
  struct Generation {
    uint64_t id = 0;
    int64_t outstanding = 0;  // messages produced and not yet acknowledged
    bool sealed = false;      // no more messages will be added
    Offsets offsets;
    std::vector<SentMessage> sent;  // its deltas messages, in production order
  };
  std::deque<Generation> generations;  // oldest first; the back one is open
  const std::atomic<bool>* stop = nullptr;  // Run()'s; a flush at stop waits a bounded time
  bool gave_up = false;  // a flush at stop stopped waiting for the broker or its coordinator
  uint64_t next_generation = 0;
  int64_t first_pending_ms = -1;
  size_t pending_bytes = 0;
  size_t largest_batch = 0;  // encoded bytes of the largest deltas batch being built
  // A flush is forced when a deltas batch reaches this: half the producer's
  // message.max.bytes (set in Run()), so lz4 never has to save it.
  size_t max_deltas_message = 0;
  // Largest value a dead letter carries whole: the producer's
  // message.max.bytes less kDlqHeadroom (set in Run()).
  size_t dlq_max_value = 0;

  // Where the deltas of each input stream's committed records lie, per
  // deltas partition (schemas/deltas_position.h), learnt as generations are
  // reaped and written into the metadata of every offset commit, so that
  // /v1/watermarks can tell a record's deltas applied without lowering the
  // stream to its mark. Costs one map lookup per (message, stream) at seal,
  // one entry update per (message, stream) at reap and one metadata string
  // per committed partition; nothing per record. Forgotten at every
  // rebalance: another router may have routed a stream meanwhile.
  struct StreamInPartition {
    int64_t last = -1;        // this router's latest message carrying the stream; -1: none
    int64_t first_input = 0;  // the stream's smallest offset in it
    int64_t previous = -1;    // the one before; -1: none
  };
  std::map<std::pair<std::string, int32_t>, uint32_t> stream_ids;
  std::vector<std::vector<StreamInPartition>> positions;  // [stream id][deltas partition]
  // Per deltas partition, the offset of the first message this router got
  // acknowledged there since it last forgot (-1: none yet): every delta of
  // an earlier router lies below it.
  std::vector<int64_t> first_acked;
  std::vector<schemas::DeltasPosition> entries;  // scratch for one commit entry
  std::string metadata;                          // scratch for one commit entry
  bool untracked = false;  // a message's offset is unknown: vouch for nothing any more

  uint32_t StreamId(const schemas::SourceStream& s) {
    auto [it, added] = stream_ids.try_emplace({s.topic, s.partition}, positions.size());
    if (added) positions.emplace_back(o.deltas_partitions);
    return it->second;
  }

  void ForgetPositions() {
    for (auto& per_partition : positions) {
      std::fill(per_partition.begin(), per_partition.end(), StreamInPartition{});
    }
    first_acked.assign(o.deltas_partitions, -1);
    untracked = false;
  }

  // What this router can vouch for about stream `id`'s committed records.
  void DeltasPositionsOf(uint32_t id, std::string* out) {
    entries.clear();
    for (uint32_t d = 0; d < o.deltas_partitions; d++) {
      const int64_t first = first_acked[d];
      if (first < 0) continue;  // an earlier router's deltas may be anywhere
      const StreamInPartition& p = positions[id][d];
      if (p.last < 0) {
        entries.push_back({d, first - 1, 0, first - 1});
      } else {
        entries.push_back({d, p.last, p.first_input, p.previous >= 0 ? p.previous : first - 1});
      }
    }
    schemas::EncodeDeltasPositions(entries, out);
  }

  std::string first_failure;  // first delivery failure; nothing after it is committed
  Status fatal;               // set by callbacks, returned by Run

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
    first_acked.assign(o.deltas_partitions, -1);
    auto& m = base::MetricsRegistry::Global();
    events_total = m.GetCounter("tally_router_events_total", "Input records routed (valid and invalid)");
    invalid_total = m.GetCounter("tally_router_invalid_total", "Input records sent to the dead letter topic");
    deltas_total = m.GetCounter("tally_router_deltas_total", "Deltas published to tally.deltas");
    messages_total = m.GetCounter("tally_router_delta_messages_total", "Delta batch messages published");
  }

  Generation& Open() {
    if (generations.empty() || generations.back().sealed) {
      generations.emplace_back();
      generations.back().id = next_generation++;
    }
    return generations.back();
  }

  // Delivery reports are served by rd_kafka_poll()/rd_kafka_flush() on the
  // router's own thread.
  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<Rep*>(opaque);
    const uintptr_t tag = reinterpret_cast<uintptr_t>(m->_private);
    const uint64_t id = tag >> kSlotBits;
    if (!self->generations.empty() && id >= self->generations.front().id) {
      Generation& g = self->generations[id - self->generations.front().id];
      g.outstanding--;
      const uintptr_t slot = tag & kSlotMask;
      if (slot != 0 && !m->err) g.sent[slot - 1].offset = m->offset;
    }
    if (m->err && self->first_failure.empty()) {
      self->first_failure = fmt::format("delivery to {}/{} failed: {}", rd_kafka_topic_name(m->rkt),
                                        m->partition, rd_kafka_err2str(m->err));
    }
  }

  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* parts,
                          void* opaque) {
    auto* self = static_cast<Rep*>(opaque);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
      for (int i = 0; i < parts->cnt; i++) {
        TALLY_LOG_INFO(kLog, "assigned {}/{}", parts->elems[i].topic, parts->elems[i].partition);
      }
      self->ForgetPositions();
      rd_kafka_assign(rk, parts);
      return;
    }
    // Revoked: publish and commit what we routed so the next owner starts
    // where we stopped (a failure here only means it re-routes: deduplicated).
    Status st = self->Flush(/*sync_commit=*/true);
    if (!st.ok() && self->fatal.ok()) self->fatal = st;
    self->ForgetPositions();
    TALLY_LOG_INFO(kLog, "revoked {} partitions", parts->cnt);
    rd_kafka_assign(rk, nullptr);
  }

  // librdkafka 2.0.2's fetcher stops once queued.min.messages (100,000) are
  // queued for the consumer and looks again only when its broker thread next
  // wakes, up to a second later (rd_kafka_toppar_fetch_decide, then
  // rd_kafka_broker_consumer_serve). Through a backlog the router drains
  // that queue in a fifth of a second and then starved for the rest,
  // including at the very end of a backlog (the last 30,000 records waited
  // 0.8 s in one run of 1M). So once the queue has been near that bound,
  // the router wakes the fetcher as soon as the queue runs low, with a
  // watermark query (a request served by the partition leader's broker
  // thread). A router that never gets near the bound (caught up) never
  // asks. Later librdkafka releases fix this (fetch.queue.backoff.ms).
  rd_kafka_queue_t* consumer_queue = nullptr;  // owned by Run()
  uint32_t since_fetch_check = 0;
  bool fetcher_may_sleep = false;
  int64_t last_fetch_poke_ms = 0;

  void KeepFetcherAwake(const rd_kafka_message_t* m) {
    constexpr size_t kNearBound = 50000;  // half of queued.min.messages
    constexpr size_t kLowQueue = 20000;   // messages left to route
    if (++since_fetch_check < 1024) return;
    since_fetch_check = 0;
    const size_t queued = rd_kafka_queue_length(consumer_queue);
    if (queued >= kNearBound) fetcher_may_sleep = true;
    if (!fetcher_may_sleep || queued > kLowQueue) return;
    int64_t now = base::SteadyMs();
    if (now - last_fetch_poke_ms < 20) return;
    last_fetch_poke_ms = now;
    fetcher_may_sleep = false;
    int64_t low = 0, high = 0;
    rd_kafka_query_watermark_offsets(consumer.get(), rd_kafka_topic_name(m->rkt), m->partition,
                                     &low, &high, 100);
  }

  // Offset commits are answered on a queue of their own, so a wait for them
  // is bounded. librdkafka keeps a commit that finds no group coordinator
  // (an outage) until one answers or session.timeout.ms passes, and neither
  // a synchronous rd_kafka_commit() nor rd_kafka_consumer_close() returns
  // before: a stop during an outage waited for the broker to come back.
  rd_kafka_queue_t* commit_queue = nullptr;  // owned by Run()
  int commits_in_flight = 0;
  base::LogLimiter commit_log{10, 10000};

  // Takes the answers to offset commits, waiting up to `timeout_ms` for the
  // last one. True when none is in flight any more.
  bool ServeCommits(int timeout_ms) {
    const int64_t deadline = base::SteadyMs() + timeout_ms;
    while (commits_in_flight > 0) {
      const int64_t left = deadline - base::SteadyMs();
      rd_kafka_event_t* ev =
          rd_kafka_queue_poll(commit_queue, static_cast<int>(std::max<int64_t>(left, 0)));
      if (ev == nullptr) {
        if (left <= 0) break;
        continue;
      }
      if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_OFFSET_COMMIT) {
        commits_in_flight--;
        rd_kafka_resp_err_t err = rd_kafka_event_error(ev);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
          // The request went through; a partition may still have failed.
          if (const auto* list = rd_kafka_event_topic_partition_list(ev)) {
            for (int i = 0; i < list->cnt && !err; i++) err = list->elems[i].err;
          }
        }
        if (err) {
          // The deltas are safe in the log; an uncommitted offset only means re-routing later.
          TALLY_LOG_WARN_LIMITED(commit_log, kLog, "committing input offsets: {}",
                                 rd_kafka_err2str(err));
        }
      }
      rd_kafka_event_destroy(ev);
    }
    return commits_in_flight == 0;
  }

  // whole_topics: the partitions of each input topic being routed.
  std::map<std::string, int> routed_partitions;
  int64_t last_discovery_ms = 0;

  // whole_topics: assigns every partition of every input topic, adding any
  // that appeared since the last call. A partition already routed goes on
  // from its position; a new one starts at the group's committed offset (or
  // the earliest, auto.offset.reset).
  Status AssignWholeTopics(int timeout_ms) {
    last_discovery_ms = base::SteadyMs();
    std::map<std::string, int> counts;
    bool grew = false;
    for (const auto& t : o.input_topics) {
      auto n = base::PartitionCount(consumer.get(), t, timeout_ms);
      if (!n.ok()) return n.status().WithContext("router");
      counts[t] = *n;
      if (*n > routed_partitions[t]) grew = true;
    }
    if (!grew) return Status::Ok();
    base::KafkaPartitionList parts(rd_kafka_topic_partition_list_new(16));
    for (const auto& [t, n] : counts) {
      for (int p = 0; p < n; p++) rd_kafka_topic_partition_list_add(parts.get(), t.c_str(), p);
    }
    // Where the partitions already routed are (the next record poll returns).
    if (!routed_partitions.empty()) rd_kafka_position(consumer.get(), parts.get());
    for (int i = 0; i < parts->cnt; i++) {
      auto& e = parts->elems[i];
      if (e.partition >= routed_partitions[e.topic]) e.offset = RD_KAFKA_OFFSET_INVALID;  // the committed offset
    }
    for (const auto& [t, n] : counts) {
      int from = routed_partitions[t];
      if (n > from) {
        TALLY_LOG_INFO(kLog, "routing {} partitions {}..{} from the offsets committed to group {}", t, from, n - 1,
                       o.group);
      }
    }
    if (auto err = rd_kafka_assign(consumer.get(), parts.get())) {
      return base::KafkaStatus(err, "assigning the input partitions");
    }
    routed_partitions = counts;
    return Status::Ok();
  }

  // Produces one message of the open generation; `slot` is 1 + its index in
  // the generation's `sent`, or 0 (a dead letter).
  Status Produce(const std::string& topic, int32_t partition, const std::string& value,
                 rd_kafka_headers_t* headers, uintptr_t slot = 0) {
    Generation& g = Open();
    void* opaque = reinterpret_cast<void*>((static_cast<uintptr_t>(g.id) << kSlotBits) | slot);
    for (;;) {
      rd_kafka_resp_err_t err;
      if (headers) {
        err = rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                                RD_KAFKA_V_PARTITION(partition),
                                RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
                                RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
      } else {
        err = rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                                RD_KAFKA_V_PARTITION(partition),
                                RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(opaque),
                                RD_KAFKA_V_END);
      }
      if (!err) {
        g.outstanding++;
        return Status::Ok();
      }
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(producer.get(), 50);
        continue;
      }
      if (err && headers) rd_kafka_headers_destroy(headers);  // not taken over on failure
      return base::KafkaStatus(err, fmt::format("producing to {}/{}", topic, partition));
    }
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
    Status st = Produce(o.dlq_topic, RD_KAFKA_PARTITION_UA, value, h);
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
    Open().offsets[{topic, m->partition}] = m->offset + 1;
    if (first_pending_ms < 0) first_pending_ms = base::SteadyMs();
    pending_bytes += m->len;
  }

  // Publishes every built batch as the open generation's messages and seals
  // it; does not wait for the broker.
  Status Seal() {
    if (generations.empty() || generations.back().sealed) return Status::Ok();
    Generation& g = generations.back();
    for (uint32_t d = 0; d < builders.size(); d++) {
      schemas::DeltaBatchBuilder& b = builders[d];
      if (b.empty()) continue;
      uintptr_t slot = 0;
      if (g.sent.size() < kSlotMask) {
        SentMessage& sent = g.sent.emplace_back();
        sent.partition = d;
        sent.firsts.reserve(b.streams().size());
        for (size_t i = 0; i < b.streams().size(); i++) {
          sent.firsts.emplace_back(StreamId(b.streams()[i]), b.first_offsets()[i]);
        }
        slot = g.sent.size();
      } else {
        // Untracked (more partitions than a slot can name): where it lands
        // is unknown, so nothing is vouched for until the next rebalance.
        untracked = true;
      }
      std::string value = b.Finish();
      TALLY_RETURN_IF_ERROR(Produce(o.deltas_topic, static_cast<int32_t>(d), value, nullptr, slot));
      messages_total->Inc();
    }
    generations.back().sealed = true;
    first_pending_ms = -1;
    pending_bytes = 0;
    largest_batch = 0;
    return Status::Ok();
  }

  // Commits the offsets of the acknowledged generations, oldest first, and
  // forgets them. After a delivery failure nothing more is committed: a
  // restart re-routes from the last committed offsets (the applier drops
  // what it already has). With `sync_commit` it also waits, at most
  // base::kFlushAtStopSeconds, for every commit in flight to be answered;
  // told to stop and still waiting then, it gives up (Aborted), and the
  // consumer is closed without waiting for them either.
  Status Reap(bool sync_commit) {
    if (!first_failure.empty()) return Status::Unavailable(first_failure);
    Offsets done;
    while (!generations.empty() && generations.front().sealed && generations.front().outstanding == 0) {
      const Generation& g = generations.front();
      for (const auto& [tp, next] : g.offsets) done[tp] = next;
      for (const SentMessage& sent : g.sent) {
        if (sent.offset < 0) untracked = true;  // acknowledged without an offset
        if (untracked) continue;
        if (first_acked[sent.partition] < 0) first_acked[sent.partition] = sent.offset;
        for (const auto& [stream, first] : sent.firsts) {
          StreamInPartition& p = positions[stream][sent.partition];
          p.previous = p.last;
          p.last = sent.offset;
          p.first_input = first;
        }
      }
      generations.pop_front();
    }
    if (!done.empty()) {
      base::KafkaPartitionList list(
          rd_kafka_topic_partition_list_new(static_cast<int>(done.size())));
      for (const auto& [tp, next] : done) {
        rd_kafka_topic_partition_t* e =
            rd_kafka_topic_partition_list_add(list.get(), tp.first.c_str(), tp.second);
        e->offset = next;
        if (untracked) continue;
        DeltasPositionsOf(StreamId({tp.first, tp.second}), &metadata);
        e->metadata = malloc(metadata.size());  // freed with the list
        if (e->metadata == nullptr) continue;
        memcpy(e->metadata, metadata.data(), metadata.size());
        e->metadata_size = metadata.size();
      }
      rd_kafka_resp_err_t err =
          rd_kafka_commit_queue(consumer.get(), list.get(), commit_queue, nullptr, nullptr);
      if (err) {
        TALLY_LOG_WARN_LIMITED(commit_log, kLog, "committing input offsets: {}",
                               rd_kafka_err2str(err));
      } else {
        commits_in_flight++;
      }
    }
    if (!sync_commit) {
      ServeCommits(0);
      return Status::Ok();
    }
    constexpr int kWaitS = base::kFlushAtStopSeconds;
    if (ServeCommits(base::StopBudgetLeftMs(kWaitS * 1000))) return Status::Ok();
    if (stop != nullptr && stop->load()) {
      gave_up = true;
      return Status::Aborted(fmt::format(
          "stopping with {} input offset commits the group coordinator has not answered in {} s; "
          "the records they cover are routed again on restart",
          commits_in_flight, kWaitS));
    }
    TALLY_LOG_WARN(kLog,
                   "{} input offset commits not answered in {} s; going on (a router that stops "
                   "before they are answered leaves those records to be routed again)",
                   commits_in_flight, kWaitS);
    return Status::Ok();
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
    std::map<std::pair<std::string, int32_t>, int64_t> resume;
    for (const auto& rs : resets) {
      auto* pos = rd_kafka_topic_partition_list_find(wanted.get(), rs.topic.c_str(), rs.partition);
      auto at = gaps.Resume(consumer.get(), rs, pos ? pos->offset : RD_KAFKA_OFFSET_INVALID, 5000);
      if (!at.ok()) {
        TALLY_LOG_WARN_LIMITED(commit_log, kLog, "{}/{}: cannot resume yet: {}", rs.topic,
                               rs.partition, at.status().message());
        resets_retry_ms = base::SteadyMs() + 1000;
        return Status::Ok();
      }
      resume[{rs.topic, rs.partition}] = *at;
    }
    resets.clear();
    TALLY_RETURN_IF_ERROR(Flush(/*sync_commit=*/false));
    rd_kafka_topic_partition_list_t* current = nullptr;
    if (auto err = rd_kafka_assignment(consumer.get(), &current)) {
      return base::KafkaStatus(err, "reading the router's assignment");
    }
    base::KafkaPartitionList parts(current);
    rd_kafka_position(consumer.get(), parts.get());
    base::KafkaPartitionList commits(
        rd_kafka_topic_partition_list_new(static_cast<int>(resume.size())));
    for (int i = 0; i < parts->cnt; i++) {
      auto& e = parts->elems[i];
      auto it = resume.find({e.topic, e.partition});
      if (it == resume.end()) continue;  // goes on from its position (or its committed offset)
      e.offset = it->second;
      rd_kafka_topic_partition_list_add(commits.get(), e.topic, e.partition)->offset = it->second;
    }
    if (commits->cnt > 0) {
      if (auto err = rd_kafka_commit_queue(consumer.get(), commits.get(), commit_queue, nullptr,
                                           nullptr)) {
        TALLY_LOG_WARN_LIMITED(commit_log, kLog, "committing input offsets: {}",
                               rd_kafka_err2str(err));
      } else {
        commits_in_flight++;
      }
    }
    if (auto err = rd_kafka_assign(consumer.get(), parts.get())) {
      return base::KafkaStatus(err, "assigning the input partitions again");
    }
    return Status::Ok();
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
    Status st = base::FlushProducer(producer.get(), stop, [this](int waited_s) {
      TALLY_LOG_WARN(kLog,
                     "waiting {} s for the broker to acknowledge {} deltas messages; input offsets "
                     "stay uncommitted",
                     waited_s, rd_kafka_outq_len(producer.get()));
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
};

Router::Router(RouterOptions options) : rep_(std::make_unique<Rep>(std::move(options))) {}
Router::~Router() = default;

Status Router::Run(const std::atomic<bool>* stop) {
  Rep& r = *rep_;
  r.stop = stop;
  if (r.o.deltas_partitions == 0) return Status::InvalidArgument("router: deltas partition count unknown");

  auto pconf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, r.o.kafka, {{"enable.idempotence", "true"},
                                               {"compression.type", "lz4"},
                                               {"linger.ms", "5"},
                                               {"acks", "all"},
                                               {"client.id", "tally-router"}});
  if (!pconf.ok()) return pconf.status();
  {
    char buf[32];
    size_t n = sizeof(buf);
    size_t max_bytes = 1000000;  // librdkafka's default
    if (rd_kafka_conf_get(pconf->get(), "message.max.bytes", buf, &n) == RD_KAFKA_CONF_OK) {
      max_bytes = std::strtoull(buf, nullptr, 10);
    }
    r.dlq_max_value = max_bytes > 2 * kDlqHeadroom ? max_bytes - kDlqHeadroom : max_bytes / 2;
    r.max_deltas_message = max_bytes / 2;
  }
  rd_kafka_conf_set_dr_msg_cb(pconf->get(), &Rep::OnDelivery);
  rd_kafka_conf_set_opaque(pconf->get(), &r);
  auto producer = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(pconf).value());
  if (!producer.ok()) return producer.status();
  r.producer = std::move(producer).value();
  // Metadata now, or the first flush waits for the next refresh.
  auto deltas_rkt = base::PrepareTopic(r.producer.get(), r.o.deltas_topic, 10000);
  if (!deltas_rkt.ok()) return deltas_rkt.status();
  r.deltas_rkt = std::move(deltas_rkt).value();
  auto dlq_rkt = base::PrepareTopic(r.producer.get(), r.o.dlq_topic, 10000);
  if (!dlq_rkt.ok()) return dlq_rkt.status();
  r.dlq_rkt = std::move(dlq_rkt).value();

  // auto.offset.reset=error: an offset outside the log is resumed by
  // ResumeAfterResets(), which reports what retention removed; never a
  // silent jump.
  auto cconf = base::MakeKafkaConf(RD_KAFKA_CONSUMER, r.o.kafka, {{"group.id", r.o.group},
                                               {"enable.auto.commit", "false"},
                                               {"auto.offset.reset", "error"},
                                               // Freshness: a fetch that finds nothing new comes back
                                               // within 10 ms. Kafka answers a long poll as soon as data
                                               // arrives, but the embedded broker holds an empty fetch for
                                               // the whole wait (500 ms by default) and lets the record
                                               // that arrives meanwhile wait with it.
                                               {"fetch.wait.max.ms", "10"},
                                               {"client.id", "tally-router"}});
  if (!cconf.ok()) return cconf.status();
  rd_kafka_conf_set_rebalance_cb(cconf->get(), &Rep::OnRebalance);
  rd_kafka_conf_set_opaque(cconf->get(), &r);
  auto consumer = base::MakeKafkaHandle(RD_KAFKA_CONSUMER, std::move(cconf).value());
  if (!consumer.ok()) return consumer.status();
  r.consumer = std::move(consumer).value();
  rd_kafka_poll_set_consumer(r.consumer.get());
  r.consumer_queue = rd_kafka_queue_get_consumer(r.consumer.get());
  r.commit_queue = rd_kafka_queue_new(r.consumer.get());
  struct QueueRelease {
    rd_kafka_queue_t* q;
    ~QueueRelease() { if (q) rd_kafka_queue_destroy(q); }
  } release_queue{r.consumer_queue}, release_commits{r.commit_queue};

  std::string joined;
  for (const auto& t : r.o.input_topics) joined += (joined.empty() ? "" : ",") + t;
  TALLY_LOG_INFO(kLog, "routing {} -> {} ({} partitions), {} group {}", joined, r.o.deltas_topic,
                 r.o.deltas_partitions, r.o.whole_topics ? "every partition, offsets in" : "partitions assigned by",
                 r.o.group);
  if (r.o.whole_topics) {
    if (auto st = r.AssignWholeTopics(30000); !st.ok()) {
      TALLY_LOG_ERROR(kLog, "stopped: {}", st.ToString());
      return st;
    }
  } else {
    base::KafkaPartitionList topics(rd_kafka_topic_partition_list_new(static_cast<int>(r.o.input_topics.size())));
    for (const auto& t : r.o.input_topics) {
      rd_kafka_topic_partition_list_add(topics.get(), t.c_str(), RD_KAFKA_PARTITION_UA);
    }
    if (auto err = rd_kafka_subscribe(r.consumer.get(), topics.get())) {
      return base::KafkaStatus(err, "subscribing to the input topics");
    }
  }

  Status result = Status::Ok();
  // Seals the open generation, then bounds the pipeline: with too many
  // flushes in flight, waits for the oldest.
  auto seal = [&]() -> Status {
    TALLY_RETURN_IF_ERROR(r.Seal());
    while (r.generations.size() > kMaxGenerationsInFlight && r.first_failure.empty() &&
           r.generations.front().outstanding > 0 && !stop->load(std::memory_order_relaxed)) {
      rd_kafka_poll(r.producer.get(), 10);
    }
    return Status::Ok();
  };
  // Messages are taken from librdkafka a batch at a time: one queue lock and
  // one clock read per batch instead of per event (measured: 3 % of the
  // router's CPU was clock reads when it polled one message at a time).
  std::array<rd_kafka_message_t*, kConsumeBatch> batch;
  while (!stop->load(std::memory_order_relaxed) && r.fatal.ok()) {
    ssize_t n = rd_kafka_consume_batch_queue(r.consumer_queue, 5, batch.data(), batch.size());
    for (ssize_t i = 0; i < n; i++) {
      base::KafkaMessage m(batch[i]);
      if (!result.ok()) continue;  // the rest of the batch is only released
      if (m->err) {
        if (IsOffsetReset(m->err) && m->rkt) {
          r.resets.push_back({rd_kafka_topic_name(m->rkt), m->partition, m->offset});
        } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          TALLY_LOG_WARN(kLog, "consumer: {}", rd_kafka_message_errstr(m.get()));
        }
        continue;
      }
      r.Handle(m.get());
      r.KeepFetcherAwake(m.get());
      // Size limits are checked per event: one mention can fan out to 100
      // deltas, and a deltas message must stay under message.max.bytes.
      if (r.pending_bytes >= r.o.max_batch_bytes || r.largest_batch >= r.max_deltas_message)
        result = seal();
    }
    if (!result.ok()) break;
    if (!r.resets.empty() && !stop->load(std::memory_order_relaxed)) {
      result = r.ResumeAfterResets();
      if (!result.ok()) break;
    }
    rd_kafka_poll(r.producer.get(), 0);
    const int64_t now = base::SteadyMs();
    if (r.first_pending_ms >= 0 && now - r.first_pending_ms >= r.o.linger_ms) {
      result = seal();
      if (!result.ok()) break;
    }
    result = r.Reap(/*sync_commit=*/false);
    if (!result.ok()) break;
    if (r.o.whole_topics && now - r.last_discovery_ms >= 30000) {
      // Briefly: routing waits meanwhile. A topic that cannot be described
      // now (an outage, reported by KafkaHealth) is asked again later.
      if (auto st = r.AssignWholeTopics(1000); !st.ok()) TALLY_LOG_DEBUG(kLog, "{}", st.message());
    }
  }
  if (result.ok() && !r.fatal.ok()) result = r.fatal;
  if (result.ok()) result = r.Flush(/*sync_commit=*/true);
  if (r.gave_up) {
    // The broker is away. Leaving the group would wait for its coordinator
    // (up to session.timeout.ms), and so would the commits in flight: close
    // without leaving, and the group lets this member go when its session
    // expires. What the broker did not take is routed again on restart.
    for (QueueRelease* qr : {&release_queue, &release_commits}) {
      rd_kafka_queue_destroy(qr->q);
      qr->q = nullptr;
    }
    // The destroy itself still waits for the commits in flight: it runs on
    // a thread of its own (and the process may exit before it ends).
    base::DestroyInBackground(std::move(r.consumer), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  } else {
    // Leaving the group revokes the partitions, whose callback flushes
    // again (and commits).
    rd_kafka_consumer_close(r.consumer.get());
    rd_kafka_flush(r.producer.get(), 5000);
  }
  if (result.ok()) {
    TALLY_LOG_INFO(kLog, "stopped cleanly");
  } else {
    TALLY_LOG_ERROR(kLog, "stopped: {}", result.ToString());
  }
  return result;
}

}  // namespace tally::aggregator
