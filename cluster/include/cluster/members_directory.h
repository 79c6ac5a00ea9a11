// MembersDirectory: how the members of a tally cluster find each other
// (SPEC section 6): who is up, where its HTTP tier is, which tally.deltas
// partitions it owns, keeps as standby or is still restoring.
//
// librdkafka hands no assignor user data to the application, so the group
// protocol cannot carry this. Instead every member publishes a MemberInfo
// (member_info.h), keyed by its member id, to the compacted one-partition
// topic tally.members: on every change and every `heartbeat_ms` as a
// heartbeat; a clean leave publishes a tombstone. Every member reads the
// whole topic from offset 0 and keeps the latest record per member. The
// directory is a hint for routing and warm-up handoffs; a member still
// checks ownership where the data is.
//
// Liveness. A member is live while its latest record is younger than
// `expire_ms` (default 3 x heartbeat). Age counts from when this reader
// received the record, on its own steady clock, so members' clocks need not
// agree; only records read while catching up at start (written before this
// reader was there) are aged by their ts_ms against this reader's wall
// clock. Liveness is deliberately not tied to the applier group's
// generation: every rebalance raises the generation of every member, also
// of those whose partitions did not move and that have nothing new to say,
// and members outside the group (a standby-only or query-only member) have
// none. The generation only orders claims on one partition (OwnerOf): when
// a partition moves, the old owner's record may still claim it until that
// owner republishes or expires, and the new owner's claim is the higher
// generation. A member that dies without Leave() stays live for up to
// expire_ms; the group's session timeout is of the same order, and until it
// passes nobody else owns its partitions anyway.
//
// The topic: on a real cluster Start() creates it (base::EnsureTopics: one
// partition, cleanup.policy=compact), with a producer that does not let its
// metadata look-ups auto-create it uncompacted first. The embedded broker (librdkafka's
// mock cluster) creates unknown topics on first use with 4 partitions and
// compacts nothing; records are written to and read from partition 0 only,
// so the view is the same either way, and an uncompacted log only costs
// reading the older records at start.
//
// Thread model: every public method is safe for concurrent use. One thread
// of the directory ("tally-members") reads the topic, publishes and
// heartbeats; `on_change` runs on it. The directory owns its producer and
// consumer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/kafka.h"
#include "base/kafka_producer.h"
#include "base/log.h"
#include "base/status.h"
#include "cluster/member_info.h"

namespace tally::cluster {

struct MembersDirectoryOptions {
  base::KafkaOptions kafka;
  std::string member;  // this member's id; not empty, without '/'
  // The cluster (tally's --group) this member belongs to: clusters of
  // several groups may share the topic. A record's key is "<group>/<member>"
  // ("<member>" for the empty group); records of other groups are skipped.
  std::string group;
  int heartbeat_ms = 2000;
  // A record older than this is not live; 0: 3 x heartbeat_ms.
  int expire_ms = 0;
  // How long Start() waits for the topic (its metadata, its creation).
  int start_timeout_ms = 10000;
  // How long Leave() waits for the broker to acknowledge the tombstone
  // (capped by what is left of the stop budget, base/shutdown.h).
  int leave_timeout_ms = 3000;
  // Runs on the directory's thread after each record read or expiry seen
  // by it; quick, never throws, may call the directory's getters. May be
  // empty.
  std::function<void()> on_change;
};

class MembersDirectory {
 public:
  // Makes the producer and the consumer, makes sure tally.members exists
  // (created on a real cluster; its metadata fetched on the embedded one),
  // and starts the thread reading it from offset 0. Publishes nothing
  // until Publish(). InvalidArgument for bad options or a setting
  // librdkafka refused; Unavailable when the cluster did not answer within
  // start_timeout_ms. The caller owns the result.
  static base::Result<std::unique_ptr<MembersDirectory>> Start(MembersDirectoryOptions options);

  // Stops the thread and closes the clients within the stop budget, even
  // with the broker down. Publishes no tombstone: to the others this looks
  // like a crash and the record expires (call Leave() first to leave
  // cleanly). Records queued and not yet acknowledged are dropped.
  ~MembersDirectory();
  MembersDirectory(const MembersDirectory&) = delete;
  MembersDirectory& operator=(const MembersDirectory&) = delete;

  // Sets what this member says about itself; `info.member` is replaced by
  // the directory's member id and `info.ts_ms` by the time of each write.
  // The thread writes it soon (and then every heartbeat_ms); Publish()es in
  // quick succession coalesce, the latest wins. Does not block on Kafka.
  void Publish(const MemberInfo& info);

  // Leaves cleanly: stops the heartbeats and writes a tombstone, then waits
  // up to leave_timeout_ms (within the stop budget) for the broker to
  // acknowledge it. OK once acknowledged; Unavailable if it was not in
  // time (the record then expires on its own). A later Publish() joins
  // again.
  base::Status Leave();

  // The live members (this one included once its record was read back),
  // sorted by member id.
  std::vector<MemberInfo> Snapshot() const;

  // The live member owning `partition`: of several claims the highest
  // generation, then the latest ts_ms, then the lowest member id. nullopt
  // when no live member claims it.
  std::optional<MemberInfo> OwnerOf(int32_t partition) const;

  // The live members keeping `partition` as a caught-up standby, sorted by
  // member id.
  std::vector<MemberInfo> CurrentStandbysOf(int32_t partition) const;

  // 1 + the highest generation in any record read (live or not), or 1. A
  // member that has just been given partitions can publish its claim with
  // this when it has no group generation to use: it then outranks every
  // claim it could have read (a Lamport clock over the directory).
  int64_t NextGeneration() const;

  // True once the thread has read the topic to the end it had at start:
  // before that Snapshot() may miss members.
  bool CaughtUp() const;

  // Counts every change of the view: records read and expiries seen.
  uint64_t Version() const;

  // Waits until `predicate(Snapshot())` holds (it is checked at once, after
  // every change and at least every 50 ms, for expiries); false when
  // `timeout_ms` passed first. `predicate` runs on the caller's thread. For
  // tests and for handoffs ("wait until member X reports partition p
  // caught up").
  bool WaitFor(const std::function<bool(const std::vector<MemberInfo>&)>& predicate,
               int timeout_ms) const;

  // Records on the topic that were not a MemberInfo (or whose key was not
  // the member they named), each logged once with its offset and ignored.
  uint64_t MalformedRecords() const;

 private:
  struct Entry {
    MemberInfo info;
    int64_t received_ms = 0;  // steady clock; see "Liveness" above
  };

  explicit MembersDirectory(MembersDirectoryOptions options);
  void Run();
  void ReadOne(const rd_kafka_message_t& m);
  void MarkCaughtUp();
  void PublishIfDue();
  void ExpireIfDue();
  void Changed();
  // "<group>/", or "" for the empty group.
  std::string KeyPrefix() const { return options_.group.empty() ? "" : options_.group + "/"; }
  bool LiveLocked(const Entry& e, int64_t now_ms) const;
  std::vector<MemberInfo> LiveLocked(int64_t now_ms) const;

  const MembersDirectoryOptions options_;
  std::unique_ptr<base::KafkaProducer> producer_;
  rd_kafka_topic_t* rkt_ = nullptr;      // tally.members, owned by producer_
  base::KafkaHandle consumer_;           // confined to thread_
  base::LogLimiter read_log_{5, 60000};  // confined to thread_
  std::mutex delivery_log_mu_;           // delivery reports come on any polling thread
  base::LogLimiter delivery_log_{5, 60000};

  // What Publish() set, and whether the thread still has to write it;
  // guarded by publish_mu_, which a write holds so that a tombstone is
  // never queued before a heartbeat that was being written.
  mutable std::mutex publish_mu_;
  std::optional<MemberInfo> published_;
  bool publish_pending_ = false;
  int64_t last_write_ms_ = 0;

  mutable std::mutex mu_;  // guards the view
  mutable std::condition_variable changed_;
  std::map<std::string, Entry> entries_;  // latest record per member, live or not
  std::map<std::string, bool> was_live_;  // liveness last seen by ExpireIfDue
  int64_t max_generation_ = 0;
  bool caught_up_ = false;
  int64_t start_end_ = -1;  // the topic's end when Start() ran; -1: unknown (EOF tells)
  uint64_t version_ = 0;

  std::atomic<uint64_t> malformed_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tally::cluster
