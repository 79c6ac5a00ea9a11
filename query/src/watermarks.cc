#include "query/watermarks.h"

#include <fmt/core.h>

#include <algorithm>
#include <utility>

#include "base/clock.h"
#include "base/shutdown.h"
#include "store/state_store.h"

namespace tally::query {

namespace {

// Every failure of Compute() is "try again later" for an HTTP client.
base::Status AsUnavailable(const base::Status& st, std::string_view context) {
  return base::Status::Unavailable(fmt::format("watermarks: {}: {}", context, st.message()));
}

}  // namespace

base::Result<WatermarkReport> BuildWatermarkReport(
    const std::vector<std::string>& input_topics,
    const std::map<schemas::SourceStream, CommittedOffset>& committed,
    const std::vector<store::Progress>& progress,
    const std::vector<std::vector<base::PartitionOffsets>>& input, const std::string& deltas_topic,
    const std::vector<base::PartitionOffsets>& deltas) {
  if (deltas.size() != progress.size()) {
    return base::Status::InvalidArgument(fmt::format("{} has {} partitions but the state has {}",
                                                     deltas_topic, deltas.size(), progress.size()));
  }
  std::map<uint32_t, store::Progress> held;
  for (size_t d = 0; d < progress.size(); d++) held.emplace(static_cast<uint32_t>(d), progress[d]);
  return BuildHeldWatermarkReport(input_topics, committed, held, input, deltas_topic, deltas);
}

base::Result<WatermarkReport> BuildHeldWatermarkReport(
    const std::vector<std::string>& input_topics,
    const std::map<schemas::SourceStream, CommittedOffset>& committed,
    const std::map<uint32_t, store::Progress>& held,
    const std::vector<std::vector<base::PartitionOffsets>>& input, const std::string& deltas_topic,
    const std::vector<base::PartitionOffsets>& deltas) {
  if (input.size() != input_topics.size()) {
    return base::Status::InvalidArgument(
        fmt::format("{} input topics but watermarks for {}", input_topics.size(), input.size()));
  }
  // Index = deltas partition; null where this store does not hold it: such
  // a partition lowers no input row here (the member holding it reports it,
  // and the cluster's answer takes the lowest of every member's rows).
  std::vector<const store::Progress*> progress(deltas.size(), nullptr);
  for (const auto& [d, p] : held) {
    if (d >= deltas.size()) {
      return base::Status::InvalidArgument(fmt::format(
          "{} has {} partitions but the state holds partition {}", deltas_topic, deltas.size(), d));
    }
    progress[d] = &p;
  }
  // The deltas partitions whose applier has not consumed everything yet:
  // deltas routed (and committed by the router) may still be unapplied there.
  std::vector<bool> deltas_lagging(progress.size());
  for (size_t d = 0; d < progress.size(); d++) {
    deltas_lagging[d] = progress[d] != nullptr && progress[d]->next_deltas_offset < deltas[d].high;
  }

  WatermarkReport report;
  schemas::SourceStream stream;
  // The commit's deltas position per deltas partition (null: none).
  std::vector<const schemas::DeltasPosition*> positions(progress.size());
  for (size_t t = 0; t < input_topics.size(); t++) {
    stream.topic = input_topics[t];
    for (const base::PartitionOffsets& po : input[t]) {
      stream.partition = po.partition;
      auto c = committed.find(stream);
      // Nothing committed yet: the router starts from the log start.
      const bool has_commit = c != committed.end() && c->second.offset >= 0;
      int64_t applied = has_commit ? c->second.offset : po.low;
      std::fill(positions.begin(), positions.end(), nullptr);
      if (has_commit) {
        for (const schemas::DeltasPosition& p : c->second.deltas) {
          // A position beyond the partition's end is not this log's (a
          // recreated topic): ignored, or the lag would never reach 0.
          if (p.partition < positions.size() && p.last < deltas[p.partition].high) {
            positions[p.partition] = &p;
          }
        }
      }
      int64_t event_time = 0;
      for (size_t d = 0; d < progress.size(); d++) {
        if (progress[d] == nullptr) continue;
        auto mark = progress[d]->marks.find(stream);
        const bool has_mark = mark != progress[d]->marks.end();
        if (has_mark) event_time = std::max(event_time, mark->second.ts);
        const int64_t next = progress[d]->next_deltas_offset;
        if (const schemas::DeltasPosition* p = positions[d]) {
          // Every delta of the committed records in d is at p->last or
          // before, so once that is applied, d hides nothing of them.
          if (next > p->last) continue;
          // Only the last message is left: the records below its first
          // offset of this stream are all applied in d.
          if (next > p->previous) {
            applied = std::min(applied, p->first_input);
            continue;
          }
        } else if (!deltas_lagging[d]) {
          continue;
        }
        // Record mark.offset may be only partly applied here, and later
        // records of this stream may wait in d's unconsumed deltas. With
        // no mark, nothing of this stream is known to be visible in d.
        applied = std::min(applied, has_mark ? mark->second.offset : po.low);
      }
      WatermarkRow row;
      row.topic = stream.topic;
      row.partition = po.partition;
      row.applied_offset = applied;
      row.end_offset = po.high;
      row.lag = std::max<int64_t>(0, po.high - applied);
      row.event_time_ms = event_time;
      report.lag += row.lag;
      report.rows.push_back(std::move(row));
    }
  }
  for (size_t d = 0; d < progress.size(); d++) {
    if (progress[d] == nullptr) continue;
    WatermarkRow row;
    row.topic = deltas_topic;
    row.partition = deltas[d].partition;
    row.applied_offset = progress[d]->next_deltas_offset;
    row.end_offset = deltas[d].high;
    row.lag = std::max<int64_t>(0, row.end_offset - row.applied_offset);
    row.event_time_ms = progress[d]->max_event_ts;
    report.lag += row.lag;
    report.rows.push_back(std::move(row));
  }
  return report;
}

void AppliedFloors::Hold(const std::map<uint32_t, store::Progress>& held,
                         const std::string& deltas_topic, WatermarkReport* report) {
  bool same_state = held.size() == next_deltas_.size();
  for (auto it = next_deltas_.begin(); same_state && it != next_deltas_.end(); ++it) {
    auto h = held.find(it->first);
    same_state = h != held.end() && h->second.next_deltas_offset >= it->second;
  }
  if (!same_state) floors_.clear();
  next_deltas_.clear();
  for (const auto& [d, p] : held) next_deltas_.emplace(d, p.next_deltas_offset);

  report->lag = 0;
  for (WatermarkRow& row : report->rows) {
    if (row.topic != deltas_topic) {
      int64_t& floor = floors_[{row.topic, row.partition}];
      if (floor > row.end_offset) floor = 0;  // a recreated topic
      if (row.applied_offset < floor) {
        row.applied_offset = floor;
        row.lag = std::max<int64_t>(0, row.end_offset - row.applied_offset);
      }
      floor = row.applied_offset;
    }
    report->lag += row.lag;
  }
}

base::Result<std::unique_ptr<WatermarkSource>> WatermarkSource::Create(
    const WatermarkOptions& options, store::StateStore* store) {
  if (store == nullptr) return base::Status::InvalidArgument("watermarks: no state store");
  if (options.input_topics.empty())
    return base::Status::InvalidArgument("watermarks: no input topics");
  auto rk = MakeHandle(options);
  if (!rk.ok()) return rk.status();
  return std::unique_ptr<WatermarkSource>(
      new WatermarkSource(options, store, std::move(rk).value()));
}

base::Result<base::KafkaHandle> WatermarkSource::MakeHandle(const WatermarkOptions& options) {
  auto conf = base::MakeKafkaConf(RD_KAFKA_CONSUMER, options.kafka, {{"group.id", options.group_id},
                                                  {"client.id", "tally-watermarks"},
                                                  {"enable.auto.commit", "false"},
                                                  {"enable.auto.offset.store", "false"},
                                                  {"enable.partition.eof", "false"}});
  if (!conf.ok()) return conf.status();
  return base::MakeKafkaHandle(RD_KAFKA_CONSUMER, std::move(conf).value());
}

WatermarkSource::WatermarkSource(WatermarkOptions options, store::StateStore* store,
                                 base::KafkaHandle rk)
    : options_(std::move(options)), store_(store), rk_(std::move(rk)) {}

WatermarkSource::~WatermarkSource() = default;

base::Result<WatermarkReport> WatermarkSource::Compute() {
  std::lock_guard<std::mutex> lock(mu_);
  return ComputeLocked(-1);
}

base::Result<WatermarkReport> WatermarkSource::Compute(int64_t deadline_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  return ComputeLocked(deadline_ms);
}

base::Result<WatermarkReport> WatermarkSource::ComputeLocked(int64_t deadline_ms) {
  rd_kafka_t* rk = rk_.get();
  // Each broker request waits its own timeout, or what is left until the
  // caller's deadline, or of the stop's budget once a stop was requested
  // (the status sampler and ?wait=visible poll from threads a stop joins);
  // at least 1 ms: librdkafka reads 0 as "no wait".
  const int timeout_limit = options_.timeout_ms;
  auto timeout_left = [deadline_ms, timeout_limit]() -> int {
    int64_t left = base::StopBudgetLeftMs(timeout_limit);
    if (deadline_ms >= 0) left = std::min<int64_t>(left, deadline_ms - base::SteadyMs());
    return static_cast<int>(std::clamp<int64_t>(left, 1, timeout_limit));
  };
  if (deadline_ms >= 0 && base::SteadyMs() >= deadline_ms) {
    return base::Status::Unavailable("watermarks: the caller's deadline passed");
  }

  // (1) The router's committed offsets on every input partition. Must come
  // before everything else: an offset is committed only once every delta
  // of the records below it was acknowledged by tally.deltas.
  std::map<schemas::SourceStream, CommittedOffset> committed;
  {
    base::KafkaPartitionList list(rd_kafka_topic_partition_list_new(64));
    for (const std::string& topic : options_.input_topics) {
      auto n = base::PartitionCount(rk, topic, timeout_left());
      if (!n.ok()) return AsUnavailable(n.status(), fmt::format("partitions of {}", topic));
      for (int p = 0; p < *n; p++) rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p);
    }
    base::Status st =
        base::KafkaStatus(rd_kafka_committed(rk, list.get(), timeout_left()),
                          fmt::format("committed offsets of group {}", options_.group_id));
    if (!st.ok()) {
      // librdkafka keeps asking the group coordinator it knew, and a broker
      // that was restarted elsewhere (a new embedded broker log) is never
      // found again by this handle: the next call starts with a new one.
      if (auto fresh = MakeHandle(options_); fresh.ok()) rk_ = std::move(fresh).value();
      return AsUnavailable(st, "router progress");
    }
    for (int i = 0; i < list->cnt; i++) {
      const rd_kafka_topic_partition_t& e = list->elems[i];
      if (e.err) {
        return AsUnavailable(base::KafkaStatus(e.err, fmt::format("{}/{}", e.topic, e.partition)),
                             "committed offset");
      }
      CommittedOffset& c = committed[schemas::SourceStream{e.topic, e.partition}];
      c.offset = e.offset;  // < 0: none
      if (e.metadata_size > 0) {
        // Metadata another writer left, or damaged: the marks alone decide.
        auto positions = schemas::DecodeDeltasPositions(
            std::string_view(static_cast<const char*>(e.metadata), e.metadata_size));
        if (positions.ok()) c.deltas = std::move(positions).value();
      }
    }
  }

  // (2) What the appliers made visible. A read-only store first catches up
  // with its writer, so that what it reports is what its readers see.
  base::Status st = store_->CatchUp();
  if (!st.ok()) return AsUnavailable(st, "catching up with the state's writer");
  // A cluster member reports the partitions it holds; the members' reports
  // together cover the cluster (QueryService merges them).
  auto progress = store_->LoadHeldProgress();
  if (!progress.ok()) return AsUnavailable(progress.status(), "loading applied progress");

  // (3) The ends of the input topics.
  std::vector<std::vector<base::PartitionOffsets>> input;
  input.reserve(options_.input_topics.size());
  for (const std::string& topic : options_.input_topics) {
    auto w = base::QueryWatermarks(rk, topic, timeout_left());
    if (!w.ok()) return AsUnavailable(w.status(), fmt::format("end offsets of {}", topic));
    input.push_back(std::move(w).value());
  }

  // (4) The ends of tally.deltas.
  auto deltas = base::QueryWatermarks(rk, options_.deltas_topic, timeout_left());
  if (!deltas.ok()) {
    return AsUnavailable(deltas.status(), fmt::format("end offsets of {}", options_.deltas_topic));
  }

  if (deltas->size() != store_->partitions()) {
    return AsUnavailable(base::Status::InvalidArgument(fmt::format(
                             "{} has {} partitions but the state has {}", options_.deltas_topic,
                             deltas->size(), store_->partitions())),
                         "inconsistent layout");
  }
  auto report = BuildHeldWatermarkReport(options_.input_topics, committed, *progress, input,
                                         options_.deltas_topic, *deltas);
  if (!report.ok()) return AsUnavailable(report.status(), "inconsistent layout");
  floors_.Hold(*progress, options_.deltas_topic, &*report);
  return report;
}

}  // namespace tally::query
