#include "aggregator/deltas_ownership.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/kafka_consumer.h"
#include "base/log.h"

namespace tally::aggregator {
namespace {

constexpr std::string_view kComponent = "ownership";

// The generation id is not exposed by librdkafka 2.0.2's API; its
// serialized group metadata carries it: "CGMDv2:", int32 generation id in
// host order, then the group id. Any other layout reads as -1.
int32_t GenerationOf(rd_kafka_t* rk) {
  rd_kafka_consumer_group_metadata_t* cgmd = rd_kafka_consumer_group_metadata(rk);
  if (cgmd == nullptr) return -1;
  void* buf = nullptr;
  size_t size = 0;
  rd_kafka_error_t* error = rd_kafka_consumer_group_metadata_write(cgmd, &buf, &size);
  rd_kafka_consumer_group_metadata_destroy(cgmd);
  if (error != nullptr) {
    rd_kafka_error_destroy(error);
    return -1;
  }
  constexpr std::string_view kMagic = "CGMDv2:";
  int32_t generation = -1;
  if (size >= kMagic.size() + sizeof(generation) &&
      std::memcmp(buf, kMagic.data(), kMagic.size()) == 0) {
    std::memcpy(&generation, static_cast<const char*>(buf) + kMagic.size(), sizeof(generation));
  }
  rd_kafka_mem_free(rk, buf);
  return generation;
}

// rd_kafka_rebalance_protocol(), which is null once the consumer closed.
std::string_view ProtocolOf(rd_kafka_t* rk) {
  const char* protocol = rd_kafka_rebalance_protocol(rk);
  return protocol != nullptr ? protocol : "NONE";
}

std::vector<int32_t> PartitionsOf(const rd_kafka_topic_partition_list_t* list) {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(list->cnt));
  for (int i = 0; i < list->cnt; ++i) out.push_back(list->elems[i].partition);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

struct DeltasOwnership::Rep {
  OwnershipOptions options;
  OwnershipListener* listener = nullptr;
  base::KafkaHandle consumer;
  std::string group;
  // Polling thread only.
  std::string protocol = "NONE";  // the group's rebalance protocol, as last asked
  bool closing = false;           // inside Close()
  bool assigned_once = false;     // the group has delivered an assignment (possibly empty)

  // Written on the polling thread only (which reads them without the lock);
  // the lock is for readers on other threads.
  mutable std::mutex mu;
  std::set<int32_t> owned;
  GroupIdentity identity;

  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* partitions, void* opaque) {
    static_cast<Rep*>(opaque)->Rebalance(rk, err, partitions);
  }

  void Rebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* parts);
  void Assign(rd_kafka_t* rk, rd_kafka_topic_partition_list_t* parts, bool cooperative);
  void Revoke(rd_kafka_t* rk, rd_kafka_topic_partition_list_t* parts, bool cooperative, bool lost);
  void UpdateIdentity(rd_kafka_t* rk);
};

void DeltasOwnership::Rep::Rebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                     rd_kafka_topic_partition_list_t* parts) {
  // rd_kafka_rebalance_protocol() asks librdkafka's main thread and waits
  // for the answer, which a closing consumer may never give (seen with
  // group.instance.id in 2.0.2): during Close() the last answer stands.
  if (!closing) protocol = std::string(ProtocolOf(rk));
  const bool cooperative = protocol == "COOPERATIVE";
  switch (err) {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
      Assign(rk, parts, cooperative);
      break;
    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
      Revoke(rk, parts, cooperative, rd_kafka_assignment_lost(rk) != 0);
      break;
    default:
      // Any other rebalance error: librdkafka's contract is to drop the
      // whole assignment, which was not revoked in order.
      TALLY_LOG_WARN(kComponent, "rebalance error: {}", rd_kafka_err2str(err));
      Revoke(rk, parts, /*cooperative=*/false, /*lost=*/true);
      break;
  }
  if (!closing) UpdateIdentity(rk);
}

void DeltasOwnership::Rep::Assign(rd_kafka_t* rk, rd_kafka_topic_partition_list_t* parts,
                                  bool cooperative) {
  assigned_once = true;
  // Every partition in `parts` is new to this member: the cooperative
  // protocol hands over only additions, the eager one revoked everything
  // before.
  std::vector<PartitionStart> starts;
  for (int32_t p : PartitionsOf(parts)) starts.push_back(PartitionStart{p});
  if (!starts.empty()) listener->Assigned(&starts);
  for (int i = 0; i < parts->cnt; ++i) {
    auto& tp = parts->elems[i];
    auto it = std::find_if(starts.begin(), starts.end(),
                           [&](const PartitionStart& s) { return s.partition == tp.partition; });
    if (it != starts.end()) tp.offset = it->offset;
    if (!options.fetch) tp.offset = RD_KAFKA_OFFSET_END;
  }
  if (cooperative) {
    if (rd_kafka_error_t* error = rd_kafka_incremental_assign(rk, parts); error != nullptr) {
      TALLY_LOG_ERROR(kComponent, "incremental assign of {} partitions failed: {}", parts->cnt,
                      rd_kafka_error_string(error));
      rd_kafka_error_destroy(error);
    }
  } else if (base::Status st = base::Assign(rk, parts, "assigning the owned deltas partitions");
             !st.ok()) {
    TALLY_LOG_ERROR(kComponent, "{}", st.message());
  }
  if (!options.fetch) {
    if (rd_kafka_resp_err_t err = rd_kafka_pause_partitions(rk, parts);
        err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      TALLY_LOG_WARN(kComponent, "pausing the owned partitions: {}", rd_kafka_err2str(err));
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < parts->cnt; ++i) owned.insert(parts->elems[i].partition);
}

void DeltasOwnership::Rep::Revoke(rd_kafka_t* rk, rd_kafka_topic_partition_list_t* parts,
                                  bool cooperative, bool lost) {
  // Eager: everything goes, whatever `parts` says.
  std::vector<int32_t> gone =
      cooperative ? PartitionsOf(parts) : std::vector<int32_t>(owned.begin(), owned.end());
  // The listener runs while the partitions are still assigned: what it
  // commits is where their next owner starts.
  if (!gone.empty()) {
    if (lost) {
      listener->Lost(gone);
    } else {
      listener->Revoked(gone);
    }
  }
  if (cooperative) {
    if (rd_kafka_error_t* error = rd_kafka_incremental_unassign(rk, parts); error != nullptr) {
      TALLY_LOG_ERROR(kComponent, "incremental unassign of {} partitions failed: {}", parts->cnt,
                      rd_kafka_error_string(error));
      rd_kafka_error_destroy(error);
    }
  } else if (base::Status st = base::Assign(rk, nullptr, "unassigning the deltas partitions");
             !st.ok()) {
    TALLY_LOG_ERROR(kComponent, "{}", st.message());
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cooperative) {
    for (int32_t p : gone) owned.erase(p);
  } else {
    owned.clear();
  }
}

void DeltasOwnership::Rep::UpdateIdentity(rd_kafka_t* rk) {
  GroupIdentity id;
  id.group = group;
  id.generation = GenerationOf(rk);
  if (char* member = rd_kafka_memberid(rk); member != nullptr) {
    id.member_id = member;
    rd_kafka_mem_free(rk, member);
  }
  id.protocol = protocol;
  std::lock_guard<std::mutex> lock(mu);
  identity = std::move(id);
}

base::Result<std::unique_ptr<DeltasOwnership>> DeltasOwnership::Start(OwnershipOptions options,
                                                                      OwnershipListener* listener) {
  auto rep = std::make_unique<Rep>();
  rep->options = std::move(options);
  rep->listener = listener;
  rep->group = rep->options.group + "-applier";
  rep->identity.group = rep->group;
  rep->identity.protocol = "NONE";

  base::ConsumerSettings cs;
  cs.group = rep->group;
  cs.client_id = rep->options.client_id;
  cs.store_offsets = false;
  cs.short_fetch_wait = true;
  cs.extra = {{"partition.assignment.strategy", "cooperative-sticky"}};
  if (!rep->options.instance_id.empty()) cs.extra["group.instance.id"] = rep->options.instance_id;
  cs.rebalance_cb = &Rep::OnRebalance;
  cs.opaque = rep.get();
  auto consumer = base::MakeConsumer(rep->options.kafka, cs);
  if (!consumer.ok()) return consumer.status();
  rep->consumer = std::move(consumer).value();

  base::KafkaPartitionList topics(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(topics.get(), rep->options.deltas_topic.c_str(),
                                    RD_KAFKA_PARTITION_UA);
  TALLY_RETURN_IF_ERROR(base::KafkaStatus(rd_kafka_subscribe(rep->consumer.get(), topics.get()),
                                          "subscribing to the deltas topic"));
  return std::unique_ptr<DeltasOwnership>(new DeltasOwnership(std::move(rep)));
}

DeltasOwnership::DeltasOwnership(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

DeltasOwnership::~DeltasOwnership() {
  if (rep_->consumer) (void)Close();
}

base::KafkaMessage DeltasOwnership::Poll(int timeout_ms) {
  base::KafkaMessage m(rd_kafka_consumer_poll(rep_->consumer.get(), timeout_ms));
  // Not fetching: a message fetched before its partition was paused is
  // dropped; the user's own consumer reads it.
  if (m && !rep_->options.fetch && !m->err) return base::KafkaMessage(nullptr);
  return m;
}

namespace {

// Handles kept until the process exits rather than destroyed, each with the
// queue its close was served on (or null): the threads idle, and they stay
// reachable so that leak checkers do not report them.
//
// - librdkafka 2.0.2 asserts (and aborts the process) when it destroys a
//   cooperative-sticky consumer that has not been given an assignment yet:
//   the assignor's state is made at the first assignment and its destroy
//   does not check for none (librdkafka issue 4312, fixed in 2.3.0). A
//   member stopped within the first seconds of its join would crash.
// - librdkafka 2.0.2 never ends the close of a cooperative consumer that an
//   assignment reached while it was closing: the group handler waits for
//   an assign call that the close turned into an unassign (issue 4527,
//   fixed in 2.4.0). Destroying it would wait forever too.
void KeepUntilExit(base::KafkaHandle consumer, rd_kafka_queue_t* queue) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::pair<rd_kafka_t*, rd_kafka_queue_t*>>();
  std::lock_guard<std::mutex> lock(mu);
  kept->emplace_back(consumer.release(), queue);
}

}  // namespace

base::Status DeltasOwnership::Close() {
  if (!rep_->consumer) return base::Status::Ok();
  rd_kafka_t* rk = rep_->consumer.get();
  // Serves the revocation (the listener's Revoked) and sends LeaveGroup,
  // as rd_kafka_consumer_close() does, but gives up on a close that stalls.
  rep_->closing = true;
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  base::Status st = base::Status::Ok();
  if (rd_kafka_error_t* error = rd_kafka_consumer_close_queue(rk, queue); error != nullptr) {
    st = base::Status::Unavailable(
        fmt::format("leaving the group {}: {}", rep_->group, rd_kafka_error_string(error)));
    rd_kafka_error_destroy(error);
  } else {
    // Served as events, as rd_kafka_consumer_close() serves them: the
    // rebalance goes to Rebalance(); whatever else the consumer's queue
    // holds (messages fetched before the revocation, errors) is dropped.
    // (Served as callbacks, a message aborts librdkafka: no callback takes
    // it.)
    auto last_event = std::chrono::steady_clock::now();
    while (!rd_kafka_consumer_closed(rk)) {
      auto now = std::chrono::steady_clock::now();
      if (rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, 100); ev != nullptr) {
        last_event = now;
        if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE) {
          rep_->Rebalance(rk, rd_kafka_event_error(ev), rd_kafka_event_topic_partition_list(ev));
        }
        rd_kafka_event_destroy(ev);
      } else if (now - last_event >= std::chrono::milliseconds(rep_->options.close_stall_ms)) {
        st = base::Status::DeadlineExceeded(fmt::format(
            "leaving the group {}: librdkafka has not moved for {} ms; the group sees this "
            "member leave at its session timeout instead",
            rep_->group, rep_->options.close_stall_ms));
        break;
      }
    }
  }
  if (st.code() == base::StatusCode::kDeadlineExceeded) {
    KeepUntilExit(std::move(rep_->consumer), queue);
  } else {
    rd_kafka_queue_destroy(queue);
    if (rep_->assigned_once) {
      rep_->consumer.reset();
    } else {
      KeepUntilExit(std::move(rep_->consumer), nullptr);
    }
  }
  std::lock_guard<std::mutex> lock(rep_->mu);
  rep_->owned.clear();
  rep_->identity.generation = -1;
  rep_->identity.member_id.clear();
  return st;
}

void DeltasOwnership::Abandon() {
  if (!rep_->consumer) return;
  if (!rep_->assigned_once) {
    // Not destroyable yet (KeepUntilExit): it leaves the group cleanly instead.
    (void)Close();
    return;
  }
  rd_kafka_destroy_flags(rep_->consumer.release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  std::lock_guard<std::mutex> lock(rep_->mu);
  rep_->owned.clear();
  rep_->identity.generation = -1;
  rep_->identity.member_id.clear();
}

std::vector<int32_t> DeltasOwnership::Owned() const {
  std::lock_guard<std::mutex> lock(rep_->mu);
  return {rep_->owned.begin(), rep_->owned.end()};
}

GroupIdentity DeltasOwnership::Identity() const {
  std::lock_guard<std::mutex> lock(rep_->mu);
  return rep_->identity;
}

}  // namespace tally::aggregator
