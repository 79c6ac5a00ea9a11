#include "aggregator/replay.h"

#include <fmt/core.h>
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "aggregator/event_router.h"
#include "aggregator/window_applier.h"
#include "base/clock.h"
#include "base/kafka_consumer.h"
#include "base/log.h"
#include "schemas/event.h"
#include "sealed_window_writer.h"

namespace tally::aggregator {

using base::Status;

namespace {

constexpr const char* kLog = "replay";

struct Target {
  std::string topic;
  int32_t partition;
  int64_t start;  // first offset to read
  int64_t end;    // high watermark when replay started
};

// Finds the range of every partition of `topics`; refuses truncated logs.
base::Result<std::vector<Target>> PlanTargets(rd_kafka_t* rk, const std::vector<std::string>& topics,
                                              bool allow_partial) {
  std::vector<Target> out;
  for (const auto& t : topics) {
    auto wm = base::QueryWatermarks(rk, t, 10000);
    if (!wm.ok()) return wm.status();
    for (const auto& p : *wm) {
      if (p.low > 0 && !allow_partial) {
        return Status::FailedPrecondition(fmt::format(
            "{}/{} no longer starts at offset 0 (it starts at {}: retention removed records); a rebuild "
            "would be incomplete. Give --allow-partial to rebuild from what is left",
            t, p.partition, p.low));
      }
      if (p.low > 0) {
        TALLY_LOG_WARN(kLog, "{}/{} starts at offset {}: rebuilding from what is left (--allow-partial)", t,
                       p.partition, p.low);
      }
      out.push_back({t, p.partition, p.low, p.high});
    }
  }
  return out;
}

class ProgressMeter {
 public:
  ProgressMeter(uint64_t total, const std::function<void(const ReplayProgress&)>* cb)
      : total_(total), cb_(cb), start_(base::SteadyMs()), last_(start_) {}
  void Add(uint64_t n, bool force = false) {
    done_ += n;
    int64_t now = base::SteadyMs();
    if (!force && now - last_ < 1000) return;
    last_ = now;
    ReplayProgress p;
    p.records_done = done_;
    p.records_total = total_;
    double secs = std::max(1e-3, (now - start_) / 1000.0);
    p.rate = done_ / secs;
    p.eta_seconds = p.rate > 0 && total_ > done_ ? (total_ - done_) / p.rate : 0;
    p.finished = force;
    if (*cb_) (*cb_)(p);
  }

 private:
  uint64_t total_;
  uint64_t done_ = 0;
  const std::function<void(const ReplayProgress&)>* cb_;
  int64_t start_, last_;
};

// Seals every dirty window and starts writing them (after the last ones).
Status SealAll(std::vector<std::unique_ptr<WindowApplier>>* appliers, SealedWindowWriter* writer) {
  TALLY_RETURN_IF_ERROR(writer->Finish());
  for (size_t i = 0; i < appliers->size(); i++) {
    if ((*appliers)[i]->window_dirty()) writer->Seal(static_cast<int32_t>(i), (*appliers)[i].get());
  }
  writer->Start();
  return Status::Ok();
}

// Everything applied so far, written.
Status WriteAll(std::vector<std::unique_ptr<WindowApplier>>* appliers, SealedWindowWriter* writer) {
  TALLY_RETURN_IF_ERROR(SealAll(appliers, writer));
  return writer->Finish();
}

// A rebuild from tally.deltas derives nothing, so its partitions are
// independent: kWorkers threads apply them (partition p on worker p %
// kWorkers), each writing its own partitions' windows, while the calling
// thread only reads the log and hands each message on.
class ParallelApply {
 public:
  static constexpr size_t kWorkers = 2;
  static constexpr size_t kMaxQueued = 64;  // messages a worker may have waiting

  ParallelApply(std::vector<std::unique_ptr<WindowApplier>>* appliers, int commit_every_ms)
      : appliers_(appliers), commit_every_ms_(commit_every_ms) {
    for (size_t w = 0; w < kWorkers; w++) {
      workers_.push_back(std::make_unique<Worker>());
      workers_.back()->thread = std::thread([this, w] { Run(w); });
    }
  }
  ~ParallelApply() { (void)Finish(); }

  // Hands `m` (a record of partition m->partition) to its worker, waiting
  // while that worker has kMaxQueued waiting. False once a worker failed.
  bool Add(base::KafkaMessage m) {
    Worker& w = *workers_[static_cast<size_t>(m->partition) % kWorkers];
    std::unique_lock<std::mutex> l(w.mu);
    w.cv.wait(l, [&] { return w.queue.size() < kMaxQueued || !w.status.ok(); });
    if (!w.status.ok()) return false;
    w.queue.push_back(std::move(m));
    w.cv.notify_all();
    return true;
  }

  // Applies and writes everything handed on, stops the workers, and
  // returns the first error.
  Status Finish() {
    for (auto& w : workers_) {
      {
        std::lock_guard<std::mutex> l(w->mu);
        w->done = true;
      }
      w->cv.notify_all();
    }
    Status first = Status::Ok();
    for (auto& w : workers_) {
      if (w->thread.joinable()) w->thread.join();
      if (first.ok() && !w->status.ok()) first = w->status;
    }
    return first;
  }

 private:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<base::KafkaMessage> queue;
    bool done = false;
    Status status = Status::Ok();
    std::thread thread;
  };

  Status CommitMine(size_t w) {
    for (size_t p = w; p < appliers_->size(); p += kWorkers) TALLY_RETURN_IF_ERROR((*appliers_)[p]->Commit());
    return Status::Ok();
  }

  void Run(size_t index) {
    pthread_setname_np(pthread_self(), "tally-replay");
    store::DisablePerfCounters();
    Worker& w = *workers_[index];
    std::deque<base::KafkaMessage> batch;
    int64_t last_commit = base::SteadyMs();
    Status st = Status::Ok();
    for (;;) {
      bool done = false;
      {
        std::unique_lock<std::mutex> l(w.mu);
        w.cv.wait_for(l, std::chrono::milliseconds(commit_every_ms_),
                      [&] { return !w.queue.empty() || w.done; });
        batch.swap(w.queue);
        done = w.done && batch.empty();
      }
      w.cv.notify_all();  // room for the reader
      if (done) break;
      for (auto& m : batch) {
        std::string_view value(static_cast<const char*>(m->payload ? m->payload : ""), m->len);
        Status s = (*appliers_)[static_cast<size_t>(m->partition)]->ApplyBatch(value, m->offset, nullptr);
        if (s.code() == base::StatusCode::kCorruption) {
          TALLY_LOG_ERROR(kLog, "skipping undecodable message: {}", s.message());
        } else if (!s.ok()) {
          st = s;
          break;
        }
      }
      batch.clear();
      if (st.ok() && base::SteadyMs() - last_commit >= commit_every_ms_) {
        st = CommitMine(index);
        last_commit = base::SteadyMs();
      }
      if (!st.ok()) break;
    }
    if (st.ok()) st = CommitMine(index);
    std::lock_guard<std::mutex> l(w.mu);
    w.status = st;
    w.cv.notify_all();
  }

  std::vector<std::unique_ptr<WindowApplier>>* appliers_;
  const int commit_every_ms_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace

Status Replay(const ReplayOptions& o, store::StateStore* store, const std::atomic<bool>* stop) {
  store::DisablePerfCounters();
  // The state must be empty: replay never merges into existing counts.
  auto all = store->LoadAllProgress();
  if (!all.ok()) return all.status();
  for (size_t i = 0; i < all->size(); i++) {
    if ((*all)[i].next_deltas_offset != 0 || !(*all)[i].marks.empty()) {
      return Status::FailedPrecondition(
          fmt::format("{} already holds state (partition {}); replay rebuilds into an empty --state-dir",
                      store->dir(), i));
    }
  }
  // A plain consumer: no group, no commits, nothing written anywhere.
  base::ConsumerSettings cs;
  cs.group = "tally-replay";
  cs.client_id = "tally-replay";
  cs.store_offsets = false;
  cs.partition_eof = true;
  auto consumer_r = base::MakeConsumer(o.kafka, cs);
  if (!consumer_r.ok()) return consumer_r.status();
  base::KafkaHandle consumer = std::move(consumer_r).value();

  const std::vector<std::string> topics =
      o.from_input ? o.input_topics : std::vector<std::string>{o.deltas_topic};
  auto targets_r = PlanTargets(consumer.get(), topics, o.allow_partial);
  if (!targets_r.ok()) return targets_r.status();
  std::vector<Target> targets = std::move(targets_r).value();

  const uint32_t nparts = store->partitions();
  if (!o.from_input && targets.size() != nparts) {
    return Status::FailedPrecondition(fmt::format("{} has {} partitions but the state has {}", o.deltas_topic,
                                                  targets.size(), nparts));
  }
  std::vector<std::unique_ptr<WindowApplier>> appliers;
  for (uint32_t p = 0; p < nparts; p++) {
    appliers.push_back(std::make_unique<WindowApplier>(store->partition(p), o.deltas_topic, nparts,
                                                       store->options().viewed,
                                                       store->options().dedup_hours * 3600000LL));
    TALLY_RETURN_IF_ERROR(appliers.back()->Load());
  }

  uint64_t total = 0;
  std::map<std::pair<std::string, int32_t>, int64_t> remaining_end;
  base::KafkaPartitionList list(rd_kafka_topic_partition_list_new(static_cast<int>(targets.size())));
  for (const auto& t : targets) {
    total += t.end - t.start;
    if (t.end > t.start) {
      rd_kafka_topic_partition_list_add(list.get(), t.topic.c_str(), t.partition)->offset = t.start;
      remaining_end[{t.topic, t.partition}] = t.end;
    }
  }
  TALLY_LOG_INFO(kLog, "rebuilding {} from {} ({} records in {} partitions)", store->dir(),
                 o.from_input ? "the input topics" : o.deltas_topic, total, targets.size());
  TALLY_RETURN_IF_ERROR(base::Assign(consumer.get(), list.get(), "assigning"));

  ProgressMeter meter(total, &o.on_progress);
  EventRouter router(nparts);
  schemas::EventParser parser;
  schemas::Event event;
  std::vector<schemas::DeltaBatchBuilder> routed(nparts);
  std::vector<schemas::DeltaBatchBuilder> derived(nparts);
  std::vector<int64_t> synthetic_offset(nparts, 0);  // from_input: the in-process "deltas log"
  uint64_t invalid = 0;

  // from_input: feed what was routed (and what that derives, transitively)
  // straight to the appliers, as if it had gone through tally.deltas.
  auto drain = [&]() -> Status {
    bool more = true;
    while (more) {
      more = false;
      for (uint32_t d = 0; d < nparts; d++) {
        if (routed[d].empty()) continue;
        std::string batch = routed[d].Finish();
        TALLY_RETURN_IF_ERROR(appliers[d]->ApplyBatch(batch, synthetic_offset[d]++, &derived));
      }
      for (uint32_t d = 0; d < nparts; d++) {
        if (derived[d].empty()) continue;
        std::swap(routed[d], derived[d]);
        more = true;
      }
    }
    return Status::Ok();
  };

  // --from-input: windows are written on two helpers while this thread
  // routes and applies the next ones.
  SealedWindowWriter writer([](int32_t, WindowApplier* wa) { return wa->CommitSealed(); });
  std::optional<ParallelApply> parallel;
  if (!o.from_input) parallel.emplace(&appliers, o.commit_every_ms);
  int64_t last_commit = base::SteadyMs();
  while (!remaining_end.empty()) {
    if (stop->load()) {
      if (parallel) TALLY_RETURN_IF_ERROR(parallel->Finish());
      TALLY_RETURN_IF_ERROR(WriteAll(&appliers, &writer));
      return Status::Aborted("replay interrupted; the state directory holds a partial rebuild");
    }
    base::KafkaMessage m(rd_kafka_consumer_poll(consumer.get(), 100));
    if (m) {
      std::pair<std::string, int32_t> key{m->rkt ? rd_kafka_topic_name(m->rkt) : "", m->partition};
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        // Fewer records than the watermark promised (e.g. compaction): done with it.
        remaining_end.erase(key);
      } else if (m->err) {
        if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET || m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
          return Status::FailedPrecondition(
              fmt::format("{}/{}: records vanished while replaying ({})", key.first, key.second,
                          rd_kafka_message_errstr(m.get())));
        }
        TALLY_LOG_WARN(kLog, "consumer: {}", rd_kafka_message_errstr(m.get()));
      } else {
        auto it = remaining_end.find(key);
        if (it != remaining_end.end() && m->offset < it->second) {
          std::string_view value(static_cast<const char*>(m->payload ? m->payload : ""), m->len);
          if (o.from_input) {
            if (m->payload && parser.Parse(value, &event).ok()) {
              router.Route(event, key.first, key.second, m->offset, &routed);
            } else {
              invalid++;
            }
            TALLY_RETURN_IF_ERROR(drain());
          } else {
            const bool last = m->offset + 1 >= it->second;
            if (!parallel->Add(std::move(m))) return parallel->Finish();
            if (last) remaining_end.erase(it);
            meter.Add(1);
            continue;
          }
          meter.Add(1);
          if (m->offset + 1 >= it->second) remaining_end.erase(it);
        }
      }
    }
    // A window ends every commit_every_ms, or later while the last one is
    // still being written (it grows meanwhile).
    if (!parallel && base::SteadyMs() - last_commit >= o.commit_every_ms && !writer.Busy()) {
      TALLY_RETURN_IF_ERROR(SealAll(&appliers, &writer));
      last_commit = base::SteadyMs();
    }
  }
  if (parallel) TALLY_RETURN_IF_ERROR(parallel->Finish());
  TALLY_RETURN_IF_ERROR(WriteAll(&appliers, &writer));
  meter.Add(0, /*force=*/true);
  base::UnassignAtStop(consumer.get(), kLog);
  rd_kafka_destroy_flags(consumer.release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  if (invalid > 0) TALLY_LOG_INFO(kLog, "{} invalid input records skipped (they are in tally.dlq)", invalid);
  TALLY_LOG_INFO(kLog, "rebuilt {} from {} records", store->dir(), total);
  return Status::Ok();
}

}  // namespace tally::aggregator
