#include "aggregator/applier.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "aggregator/cadence.h"
#include "aggregator/window_applier.h"
#include "applier_rep.h"
#include "base/clock.h"
#include "base/kafka_consumer.h"
#include "base/kafka_producer.h"
#include "base/log.h"
#include "base/metrics.h"

namespace tally::aggregator {

namespace {
constexpr const char* kLog = "applier";
}  // namespace

Applier::Rep::Rep(ApplierOptions opts, store::StateStore* s)
    : o(std::move(opts)),
      store(s),
      gaps(kLog, "the applier applied them: their effects are missing from the state",
           base::MetricsRegistry::Global().GetCounter(
               "tally_deltas_lost_records_total",
               "tally.deltas records removed by retention before the applier applied them"),
           /*resume_past_end=*/false) {
  derived.resize(store->partitions());
  auto& m = base::MetricsRegistry::Global();
  applied_total = m.GetCounter("tally_applier_deltas_total", "Deltas applied to the state");
  duplicates_total =
      m.GetCounter("tally_applier_duplicates_total", "Deltas skipped as already applied");
  repeated_notices_total = m.GetCounter("tally_applier_repeated_notices_total",
                                        "Notices ignored because their id was in the list already");
  duplicate_event_ids_total = m.GetCounter(
      "tally_applier_duplicate_event_ids_total",
      "Deltas dropped because another record of an event with the same id was applied");
  windows_total = m.GetCounter("tally_applier_windows_total", "Partition windows committed");
  global_partition =
      static_cast<int32_t>(schemas::PartitionOf(schemas::kGlobalEntity, store->partitions()));
  corrupt_total = m.GetCounter("tally_applier_corrupt_batches_total",
                               "Undecodable tally.deltas messages skipped");
  commit_seconds =
      m.GetHistogram("tally_applier_commit_seconds", "Time to commit one partition window");
}

base::Result<std::unique_ptr<WindowApplier>> Applier::Rep::NewApplier(int32_t p) {
  auto wa = std::make_unique<WindowApplier>(
      store->partition(static_cast<uint32_t>(p)), o.deltas_topic, store->partitions(),
      store->options().viewed, store->options().dedup_hours * 3600000LL);
  TALLY_RETURN_IF_ERROR(wa->Load());
  return wa;
}

void Applier::Rep::OnDelivery(const rd_kafka_message_t& m) {
  if (!m.err) return;
  std::lock_guard<std::mutex> l(failure_mu);
  if (first_failure.empty()) {
    first_failure = fmt::format("derived delta delivery to {}/{} failed: {}",
                                rd_kafka_topic_name(m.rkt), m.partition, rd_kafka_err2str(m.err));
  }
}

Status Applier::Rep::CheckPartitionCount() {
  auto count = base::PartitionCount(consumer.get(), o.deltas_topic, 30000);
  if (!count.ok()) return count.status().WithContext("applier");
  if (static_cast<uint32_t>(*count) != store->partitions()) {
    return Status::FailedPrecondition(fmt::format("{} has {} partitions but the state has {}",
                                                  o.deltas_topic, *count, store->partitions()));
  }
  return Status::Ok();
}

Status Applier::Rep::AssignAll() {
  TALLY_RETURN_IF_ERROR(CheckPartitionCount());
  base::KafkaPartitionList parts(
      rd_kafka_topic_partition_list_new(static_cast<int>(store->partitions())));
  for (uint32_t p = 0; p < store->partitions(); p++) {
    int64_t relisting_until = 0;
    if (static_cast<int32_t>(p) == global_partition) {
      auto restored = RestoreInFullIfGlobalOnly("one process applies every partition in full");
      if (!restored.ok()) return restored.status();
      relisting_until = *restored;
    }
    auto made = NewApplier(static_cast<int32_t>(p));
    if (!made.ok()) return made.status();
    std::unique_ptr<WindowApplier> wa = std::move(made).value();
    wa->set_relisting_until(relisting_until);
    wa->set_hot_posts(o.hot_posts);
    int64_t offset = wa->progress().next_deltas_offset;
    rd_kafka_topic_partition_list_add(parts.get(), o.deltas_topic.c_str(), static_cast<int32_t>(p))
        ->offset = offset;
    TALLY_LOG_INFO(kLog, "applying {}/{} from offset {} (from the state)", o.deltas_topic, p,
                   offset);
    owned[static_cast<int32_t>(p)] = std::move(wa);
  }
  return base::Assign(consumer.get(), parts.get(), "assigning the deltas partitions");
}

Status Applier::Rep::ResumeAfterReset(const rd_kafka_message_t* m) {
  auto it = owned.find(m->partition);
  if (it == owned.end()) return Status::Ok();
  const int64_t next = it->second->progress().next_deltas_offset;
  base::Result<int64_t> at = Status::Unavailable("stopping");
  for (int attempt = 0; !stop->load(); attempt++) {
    at = gaps.Resume(consumer.get(), {o.deltas_topic, m->partition, m->offset}, next, 5000);
    if (at.ok() || at.status().code() != base::StatusCode::kUnavailable) break;
    if (attempt == 0) TALLY_LOG_WARN(kLog, "{}", at.status().message());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  if (!at.ok()) return stop->load() ? Status::Ok() : at.status();  // stopping: a restart resumes
  it->second->SkipTo(*at);
  base::KafkaPartitionList parts(rd_kafka_topic_partition_list_new(static_cast<int>(owned.size())));
  for (const auto& [p, wa] : owned) {
    rd_kafka_topic_partition_list_add(parts.get(), o.deltas_topic.c_str(), p)->offset =
        wa->progress().next_deltas_offset;
  }
  return base::Assign(consumer.get(), parts.get(), "assigning the deltas partitions again");
}

bool Applier::Rep::Idle() {
  for (const auto& [p, wa] : owned) {
    if (wa->window_dirty()) return false;
  }
  return !CommitBusy();
}

size_t Applier::Rep::PendingKeys() const {
  size_t n = 0;
  for (const auto& [p, wa] : owned) n += wa->pending_keys();
  return n;
}

int Applier::Rep::WindowMs() {
  // A global-only copy is not counted: it applies next to nothing.
  const size_t applied = o.cluster.enabled ? held.size() : 0;
  const uint32_t partitions = store->partitions();
  const int ms =
      StretchedByShare(o.flush_ms, o.max_flush_ms, partitions, static_cast<int64_t>(applied));
  if (ms != window_ms) {
    if (window_ms != 0 || ms != o.flush_ms) {
      TALLY_LOG_INFO(kLog, "applying {} of {} partitions: windows end {} ms apart", applied,
                     partitions, ms);
    }
    window_ms = ms;
  }
  return ms;
}

Status Applier::Rep::FlushAll() {
  TALLY_RETURN_IF_ERROR(FinishCommits());
  last_flush_ms = base::SteadyMs();
  bool any_derived = false;
  for (uint32_t d = 0; d < derived.size(); d++) {
    if (derived[d].empty()) continue;
    std::string value = derived[d].Finish();
    any_derived = true;
    base::ProducerRecord r;
    r.rkt = deltas_rkt;
    r.partition = static_cast<int32_t>(d);
    r.value = value;
    TALLY_RETURN_IF_ERROR(producer->Produce(r, base::QueueFullWait{}, [d] {
      return fmt::format("producing derived deltas to partition {}", d);
    }));
  }
  if (any_derived) {
    std::lock_guard<std::mutex> l(derived_wait_mu);
    derived_pending = true;
  }
  for (auto& [p, wa] : owned) {
    // A window still sealed is one whose write failed when the applier
    // was told to stop; it is redone on restart.
    if (!wa->window_dirty() || wa->sealed()) continue;
    writer.Seal(p, wa.get());
  }
  for (auto& [p, wa] : owned) {
    WindowStats ws = wa->TakeStats();
    applied_total->Inc(ws.applied);
    duplicates_total->Inc(ws.duplicates);
    repeated_notices_total->Inc(ws.repeated_notices);
    duplicate_event_ids_total->Inc(ws.duplicate_event_ids);
  }
  writer.Start();
  return Status::Ok();
}

Status Applier::Rep::WaitDerivedAcknowledged() {
  std::lock_guard<std::mutex> l(derived_wait_mu);
  if (!derived_pending) return derived_status;
  Status st = producer->Flush(stop, [](int waited_s) {
    TALLY_LOG_WARN(
        kLog,
        "waiting {} s for the broker to acknowledge derived deltas; no window commits meanwhile",
        waited_s);
  });
  if (!st.ok()) {
    // Told to stop: the windows stay unwritten; a restart applies their
    // deltas again and derives again.
    derived_pending = false;
    derived_status = Status::Aborted(fmt::format(
        "{} (derived deltas); the windows waiting for them are applied again on restart",
        st.message()));
    return derived_status;
  }
  derived_pending = false;
  std::lock_guard<std::mutex> f(failure_mu);
  if (!first_failure.empty()) derived_status = Status::Unavailable(first_failure);
  return derived_status;
}

Status Applier::Rep::CommitWindow(int32_t p, WindowApplier* wa) {
  TALLY_RETURN_IF_ERROR(WaitDerivedAcknowledged());
  const int64_t t0 = base::SteadyMs();
  int64_t last_log_ms = t0;
  int attempts = 0;
  int backoff_ms = 100;
  bool reporting = false;  // this call reports the failure (see failing_windows)
  for (;;) {
    int64_t t = base::SteadyMs();
    Status st = wa->CommitSealed();
    if (st.ok()) {
      commit_seconds->Observe((base::SteadyMs() - t) / 1000.0);
      windows_total->Inc();
      if (attempts > 0 && failing_windows.fetch_sub(1) == 1) {
        last_failure_end_ms.store(base::SteadyMs());
        TALLY_LOG_WARN(kLog,
                       "{}/{}: window up to offset {} committed after {:.1f} s of failed writes "
                       "({} attempts); "
                       "applying resumes",
                       o.deltas_topic, p, wa->sealed_next_offset() - 1,
                       (base::SteadyMs() - t0) / 1000.0, attempts + 1);
      }
      return Status::Ok();
    }
    attempts++;
    int64_t now = base::SteadyMs();
    if (attempts == 1) reporting = failing_windows.fetch_add(1) == 0;
    if (attempts == 1 || now - last_log_ms >= 60000) last_log_ms = now;
    // A disk that refuses writes again within a minute of letting one
    // through (RocksDB gives back a preallocated WAL file when it reopens
    // a partition, and the next window takes it) is the same fault: one
    // ERROR for it, the rest at WARN.
    const int64_t ended = last_failure_end_ms.load();
    const bool again = attempts == 1 && ended != 0 && now - ended < 60000;
    if (reporting && last_log_ms == now) {
      TALLY_LOG_AT(
          again ? base::LogLevel::kWarn : base::LogLevel::kError, kLog,
          "{}/{}: cannot commit the window up to offset {} ({}); the state stays at offset {}, "
          "retrying with backoff, reads are still served{}",
          o.deltas_topic, p, wa->sealed_next_offset() - 1, st.message(), wa->committed_offset(),
          attempts == 1 ? "" : fmt::format(" ({:.0f} s so far)", (now - t0) / 1000.0));
    }
    // Told to stop: give the store a few seconds, then leave the window
    // uncommitted (the restart redoes it).
    while (backoff_ms > 0) {
      if (stop->load() && base::SteadyMs() - t0 > 5000) {
        failing_windows.fetch_sub(1);
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (base::SteadyMs() - now >= backoff_ms) break;
    }
    backoff_ms = std::min(backoff_ms * 2, 2000);
    // If the write had landed after all, the next CommitSealed() writes
    // nothing and succeeds.
    (void)wa->RecoverFromFailedCommit();
  }
}

Status Applier::Rep::HandleMessage(const rd_kafka_message_t* m) {
  auto it = owned.find(m->partition);
  if (it == owned.end()) return Status::Ok();  // stale message of a revoked partition
  // Fetched before the consumer was assigned again from the window's offset.
  if (m->offset < it->second->progress().next_deltas_offset) return Status::Ok();
  if (m->partition == global_partition && resync_global) {
    if (m->offset != it->second->progress().next_deltas_offset) return Status::Ok();
    resync_global = false;
  }
  // Every member applying a partition publishes its derived deltas, the
  // standbys too: a derived delta is the same whoever derives it (same
  // source offset, same effect index, from the same state), so the
  // target applies the first copy and drops the others by mark. What
  // makes that exact is that each publisher's stream has no holes: it
  // starts where its own state starts, and everything before was
  // published (and acknowledged) before that state was committed. A
  // standby that derived nothing would break that when it takes over
  // from an owner that crashed before publishing its last window's
  // derived deltas: those would never be published.
  Status st = it->second->ApplyBatch(
      std::string_view(static_cast<const char*>(m->payload ? m->payload : ""), m->len), m->offset,
      &derived);
  if (st.code() == base::StatusCode::kCorruption) {
    corrupt_total->Inc();
    TALLY_LOG_ERROR(kLog, "skipping undecodable message: {}", st.message());
    return Status::Ok();
  }
  return st;
}

Applier::Applier(ApplierOptions options, store::StateStore* store)
    : rep_(std::make_unique<Rep>(std::move(options), store)) {}
Applier::~Applier() = default;

Status Applier::Run(const std::atomic<bool>* stop) {
  Rep& r = *rep_;
  r.stop = stop;
  store::DisablePerfCounters();
  base::ProducerSettings ps;
  ps.client_id = "tally-applier";
  ps.linger_ms = 1;
  ps.on_delivery = [&r](const rd_kafka_message_t& m) { r.OnDelivery(m); };
  auto producer = base::KafkaProducer::Create(r.o.kafka, std::move(ps));
  if (!producer.ok()) return producer.status();
  r.producer = std::move(producer).value();
  // Metadata now, or the first window's derived deltas wait for the next refresh.
  auto rkt = r.producer->Topic(r.o.deltas_topic, 10000);
  if (!rkt.ok()) return rkt.status();
  r.deltas_rkt = *rkt;

  // This consumer never joins its group nor commits to it.
  base::ConsumerSettings cs;
  cs.group = r.o.group + "-applier";
  cs.client_id = "tally-applier";
  cs.store_offsets = false;
  cs.short_fetch_wait = true;
  auto consumer = base::MakeConsumer(r.o.kafka, cs);
  if (!consumer.ok()) return consumer.status();
  r.consumer = std::move(consumer).value();
  if (auto st = r.o.cluster.enabled ? r.StartCluster() : r.AssignAll(); !st.ok()) {
    TALLY_LOG_ERROR(kLog, "stopped: {}", st.ToString());
    return st;
  }
  TALLY_LOG_INFO(kLog, "applying {} into {} (window {} ms, key budget {})", r.o.deltas_topic, r.store->dir(),
                 r.o.flush_ms, r.o.key_budget);
  r.last_flush_ms = base::SteadyMs();

  Status result = Status::Ok();
  // A window ends --flush-ms after the last one (in a cluster, stretched by
  // the share applied here: WindowMs) once the consumer has caught up (a
  // poll found nothing), so fresh deltas become visible quickly; while
  // a backlog keeps every poll busy it grows to 10x that, so hot keys
  // coalesce more and RocksDB sees fewer, larger batches. While the helper
  // is still writing the previous window, this one goes on growing instead
  // of waiting for it; only the key budget makes the applier wait.
  const int64_t max_window_ms = static_cast<int64_t>(r.o.flush_ms) * 10;
  bool caught_up = false;
  bool last_poll_empty = false;
  // The state's deltas offsets and marks belong to one log. A broker that
  // now answers as another cluster (a restarted embedded broker) may hand
  // out its new log at offsets the state has not reached, and applying
  // those would skip or double records: stop before applying anything of
  // it, so the command attaches the state to the new log as at start.
  // librdkafka reports the new cluster id before it fetches from it.
  const std::string recorded = r.store->recorded_cluster();
  const std::string own_cluster = recorded.substr(0, recorded.find('/'));
  uint64_t cluster_reports = base::ClusterIdReports();
  while (!stop->load(std::memory_order_relaxed)) {
    if (r.ownership) {
      result = r.ClusterStep();
      if (!result.ok()) break;
    }
    // 5 ms while a window is open or being written (its end and the
    // cluster's bookkeeping run between polls); idle, 50 ms: 200 wake-ups
    // a second were 0.7 % of a core at rest (aggregator/README.md).
    // Idle() is asked only after an empty poll: under load it is not.
    base::KafkaMessage m(
        rd_kafka_consumer_poll(r.consumer.get(), last_poll_empty && r.Idle() ? 50 : 5));
    last_poll_empty = !m;
    if (base::ClusterIdReports() != cluster_reports) {
      cluster_reports = base::ClusterIdReports();
      std::string now = base::LastReportedClusterId();
      if (!own_cluster.empty() && now != own_cluster) {
        result =
            Status::OutOfRange(fmt::format("the broker now answers as cluster {}, the state was "
                                           "built from {}: its log was replaced",
                                           now, own_cluster));
        break;
      }
    }
    if (!m) caught_up = true;
    if (m) {
      if (IsOffsetReset(m->err)) {
        if (Status st = r.ResumeAfterReset(m.get()); !st.ok()) {
          result = Status::OutOfRange(fmt::format(
              "{}/{}: the log no longer holds the offset the state needs ({}): {}",
              r.o.deltas_topic, m->partition, rd_kafka_message_errstr(m.get()), st.message()));
          break;
        }
      } else if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          TALLY_LOG_WARN(kLog, "consumer: {}", rd_kafka_message_errstr(m.get()));
        }
      } else {
        result = r.HandleMessage(m.get());
        if (!result.ok()) break;
        // The last message the broker has for this partition (as of the
        // latest fetch) also means caught up, for a steady stream that never
        // leaves a poll empty.
        int64_t low = 0, high = 0;
        if (rd_kafka_get_watermark_offsets(r.consumer.get(), rd_kafka_topic_name(m->rkt), m->partition, &low,
                                           &high) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            m->offset + 1 >= high) {
          caught_up = true;
        }
      }
    }
    r.producer->Poll(0);
    int64_t elapsed = base::SteadyMs() - r.last_flush_ms;
    const bool window_over = (elapsed >= r.WindowMs() && caught_up) || elapsed >= max_window_ms;
    if ((window_over && !r.CommitBusy()) || r.PendingKeys() >= r.o.key_budget) {
      result = r.FlushAll();
      if (!result.ok()) break;
      caught_up = false;
    }
  }
  if (result.ok()) result = r.FlushAll();
  // Always: the helper must be done with the windows before they go.
  Status last = r.FinishCommits();
  if (result.ok()) result = last;
  if (r.ownership) {
    // Leaves the group: Revoked() commits nothing new (the windows are
    // written), and the partitions move to the other members at once.
    if (auto st = r.ownership->Close(); !st.ok()) TALLY_LOG_WARN(kLog, "{}", st.ToString());
    r.ownership.reset();
  }
  rd_kafka_consumer_close(r.consumer.get());
  r.owned.clear();
  if (result.ok()) {
    TALLY_LOG_INFO(kLog, "stopped cleanly");
  } else {
    TALLY_LOG_ERROR(kLog, "stopped: {}", result.ToString());
  }
  return result;
}

}  // namespace tally::aggregator
