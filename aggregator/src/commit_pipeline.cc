#include "commit_pipeline.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/clock.h"
#include "base/kafka.h"
#include "base/kafka_producer.h"
#include "base/shutdown.h"

namespace tally::aggregator {

using base::Status;

namespace {
// A produced message's opaque: its generation id above kSlotBits, and below
// them 1 + its index among the generation's deltas messages (0: a dead
// letter, whose offset nobody needs).
constexpr int kSlotBits = 12;
constexpr uintptr_t kSlotMask = (uintptr_t{1} << kSlotBits) - 1;
}  // namespace

CommitPipeline::CommitPipeline(rd_kafka_t* consumer, uint32_t deltas_partitions, const char* log)
    : consumer_(consumer),
      deltas_partitions_(deltas_partitions),
      log_(log),
      first_acked_(deltas_partitions, -1),
      commit_queue_(rd_kafka_queue_new(consumer)) {}

CommitPipeline::~CommitPipeline() { ReleaseQueue(); }

void CommitPipeline::ReleaseQueue() {
  if (commit_queue_ != nullptr) rd_kafka_queue_destroy(commit_queue_);
  commit_queue_ = nullptr;
}

CommitPipeline::Generation& CommitPipeline::Open() {
  if (generations_.empty() || generations_.back().sealed) {
    generations_.emplace_back();
    generations_.back().id = next_generation_++;
  }
  return generations_.back();
}

void CommitPipeline::Routed(const std::string& topic, int32_t partition, int64_t next) {
  Open().offsets[{topic, partition}] = next;
}

uint32_t CommitPipeline::StreamId(const schemas::SourceStream& s) {
  auto [it, added] = stream_ids_.try_emplace({s.topic, s.partition}, positions_.size());
  if (added) positions_.emplace_back(deltas_partitions_);
  return it->second;
}

uintptr_t CommitPipeline::Track(uint32_t partition, const schemas::DeltaBatchBuilder& batch) {
  Generation& g = Open();
  if (g.sent.size() >= kSlotMask) {
    // Where it lands is unknown, so nothing is vouched for until the next
    // rebalance.
    untracked_ = true;
    return 0;
  }
  SentMessage& sent = g.sent.emplace_back();
  sent.partition = partition;
  sent.firsts.reserve(batch.streams().size());
  for (size_t i = 0; i < batch.streams().size(); i++) {
    sent.firsts.emplace_back(StreamId(batch.streams()[i]), batch.first_offsets()[i]);
  }
  return g.sent.size();
}

void* CommitPipeline::Tag(uintptr_t slot) {
  return reinterpret_cast<void*>((static_cast<uintptr_t>(Open().id) << kSlotBits) | slot);
}

void CommitPipeline::Produced() { Open().outstanding++; }

void CommitPipeline::Seal() {
  if (HasOpen()) generations_.back().sealed = true;
}

void CommitPipeline::OnDelivery(const rd_kafka_message_t& m) {
  const uintptr_t tag = reinterpret_cast<uintptr_t>(m._private);
  const uint64_t id = tag >> kSlotBits;
  if (!generations_.empty() && id >= generations_.front().id) {
    Generation& g = generations_[id - generations_.front().id];
    g.outstanding--;
    const uintptr_t slot = tag & kSlotMask;
    if (slot != 0 && !m.err) g.sent[slot - 1].offset = m.offset;
  }
  if (m.err && failure_.empty()) {
    failure_ = fmt::format("delivery to {}/{} failed: {}", rd_kafka_topic_name(m.rkt), m.partition,
                           rd_kafka_err2str(m.err));
  }
}

void CommitPipeline::ForgetPositions() {
  for (auto& per_partition : positions_) {
    std::fill(per_partition.begin(), per_partition.end(), StreamInPartition{});
  }
  first_acked_.assign(deltas_partitions_, -1);
  untracked_ = false;
}

void CommitPipeline::DeltasPositionsOf(uint32_t id, std::string* out) {
  entries_.clear();
  for (uint32_t d = 0; d < deltas_partitions_; d++) {
    const int64_t first = first_acked_[d];
    if (first < 0) continue;  // an earlier router's deltas may be anywhere
    const StreamInPartition& p = positions_[id][d];
    if (p.last < 0) {
      entries_.push_back({d, first - 1, 0, first - 1});
    } else {
      entries_.push_back({d, p.last, p.first_input, p.previous >= 0 ? p.previous : first - 1});
    }
  }
  schemas::EncodeDeltasPositions(entries_, out);
}

void CommitPipeline::Commit(const rd_kafka_topic_partition_list_t* offsets) {
  // rd_kafka_commit_queue() takes a non-const list but does not change it.
  auto* list = const_cast<rd_kafka_topic_partition_list_t*>(offsets);
  if (rd_kafka_resp_err_t err =
          rd_kafka_commit_queue(consumer_, list, commit_queue_, nullptr, nullptr)) {
    TALLY_LOG_WARN_LIMITED(commit_log_, log_, "committing input offsets: {}",
                           rd_kafka_err2str(err));
  } else {
    commits_in_flight_++;
  }
}

Status CommitPipeline::Reap(bool sync_commit, const std::atomic<bool>* stop) {
  if (!failure_.empty()) return Status::Unavailable(failure_);
  Offsets done;
  while (!generations_.empty() && generations_.front().sealed &&
         generations_.front().outstanding == 0) {
    const Generation& g = generations_.front();
    for (const auto& [tp, next] : g.offsets) done[tp] = next;
    for (const SentMessage& sent : g.sent) {
      if (sent.offset < 0) untracked_ = true;  // acknowledged without an offset
      if (untracked_) continue;
      if (first_acked_[sent.partition] < 0) first_acked_[sent.partition] = sent.offset;
      for (const auto& [stream, first] : sent.firsts) {
        StreamInPartition& p = positions_[stream][sent.partition];
        p.previous = p.last;
        p.last = sent.offset;
        p.first_input = first;
      }
    }
    generations_.pop_front();
  }
  if (!done.empty()) {
    base::KafkaPartitionList list(rd_kafka_topic_partition_list_new(static_cast<int>(done.size())));
    for (const auto& [tp, next] : done) {
      rd_kafka_topic_partition_t* e =
          rd_kafka_topic_partition_list_add(list.get(), tp.first.c_str(), tp.second);
      e->offset = next;
      if (untracked_) continue;
      DeltasPositionsOf(StreamId({tp.first, tp.second}), &metadata_);
      e->metadata = malloc(metadata_.size());  // freed with the list
      if (e->metadata == nullptr) continue;
      memcpy(e->metadata, metadata_.data(), metadata_.size());
      e->metadata_size = metadata_.size();
    }
    Commit(list.get());
  }
  if (!sync_commit) {
    ServeCommits(0);
    return Status::Ok();
  }
  constexpr int kWaitS = base::kFlushAtStopSeconds;
  if (ServeCommits(base::StopBudgetLeftMs(kWaitS * 1000))) return Status::Ok();
  if (stop != nullptr && stop->load()) {
    return Status::Aborted(fmt::format(
        "stopping with {} input offset commits the group coordinator has not answered in {} s; "
        "the records they cover are routed again on restart",
        commits_in_flight_, kWaitS));
  }
  TALLY_LOG_WARN(log_,
                 "{} input offset commits not answered in {} s; going on (a router that stops "
                 "before they are answered leaves those records to be routed again)",
                 commits_in_flight_, kWaitS);
  return Status::Ok();
}

bool CommitPipeline::ServeCommits(int timeout_ms) {
  const int64_t deadline = base::SteadyMs() + timeout_ms;
  while (commits_in_flight_ > 0) {
    const int64_t left = deadline - base::SteadyMs();
    rd_kafka_event_t* ev =
        rd_kafka_queue_poll(commit_queue_, static_cast<int>(std::max<int64_t>(left, 0)));
    if (ev == nullptr) {
      if (left <= 0) break;
      continue;
    }
    if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_OFFSET_COMMIT) {
      commits_in_flight_--;
      rd_kafka_resp_err_t err = rd_kafka_event_error(ev);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        // The request went through; a partition may still have failed.
        if (const auto* list = rd_kafka_event_topic_partition_list(ev)) {
          for (int i = 0; i < list->cnt && !err; i++) err = list->elems[i].err;
        }
      }
      if (err == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID ||
          err == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION ||
          err == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS) {
        refused_by_group_ = true;
      }
      if (err) {
        // The deltas are safe in the log; an uncommitted offset only means re-routing later.
        TALLY_LOG_WARN_LIMITED(commit_log_, log_, "committing input offsets: {}",
                               rd_kafka_err2str(err));
      }
    }
    rd_kafka_event_destroy(ev);
  }
  return commits_in_flight_ == 0;
}

}  // namespace tally::aggregator
