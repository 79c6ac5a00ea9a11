// ClusterMember: this process as a member of a tally cluster (SPEC section
// 6): its entry in the members directory, and the query tier's view of who
// answers what (query::ClusterRouting).
//
// The applier says what this member holds (Publish, on its thread); the
// members directory (cluster/members_directory.h) says what the others
// hold. Reads of a partition are answered here while this member holds it
// current (owned and caught up, or a current standby), else by its owner,
// else by a current standby elsewhere, else nowhere (503 partition_moving).
// A member with no applier (`tally serve` beside `tally aggregate`) takes
// what it holds from the directory's record of its member id.
//
// Thread model: every method is safe for concurrent use.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aggregator/applier.h"
#include "base/kafka.h"
#include "base/status.h"
#include "cluster/member_info.h"
#include "cluster/members_directory.h"
#include "query/cluster_routing.h"

namespace tally::app {

struct ClusterMemberOptions {
  base::KafkaOptions kafka;
  std::string group;      // --group (GET /v1/cluster shows "<group>-applier")
  std::string advertise;  // http://HOST:PORT; the member id is HOST:PORT
  // Partitions of tally.deltas (0: unknown). A member holding every one
  // current is ready before the group's first assignment (Ready()).
  uint32_t partitions = 0;
};

// The member id of an advertised address: "http://h:p/" -> "h:p".
std::string MemberIdOf(const std::string& advertise);
// Checks --advertise: http://HOST:PORT. InvalidArgument otherwise.
base::Status CheckAdvertise(const std::string& advertise);
// The default --advertise for an HTTP tier listening on `listen`
// (HOST:PORT): http://listen, with this machine's host name for a
// wildcard host (0.0.0.0, ::, empty).
std::string DefaultAdvertise(const std::string& listen);

class ClusterMember : public query::ClusterRouting {
 public:
  // Starts the directory (reading tally.members). The errors of
  // MembersDirectory::Start.
  static base::Result<std::unique_ptr<ClusterMember>> Start(ClusterMemberOptions options);
  ~ClusterMember() override;

  // Before a member that publishes (`tally up`, `tally aggregate`) joins:
  // FailedPrecondition, naming the address, if another process is live
  // under this member id (the same --advertise) and rewrites its record
  // in tally.members while this one watches it (up to kDuplicateWatchMs,
  // a heartbeat and a half). A record that stands still is a predecessor
  // that was killed; it is left to expire. Two processes under one id
  // would overwrite each other's claims, and no partition would be served.
  base::Status RefuseIfLiveElsewhere();
  static constexpr int kDuplicateWatchMs = 3000;
  static constexpr int kCatchUpWaitMs = 5000;

  // What this member's applier says it holds; published to the directory.
  void Publish(const cluster::MemberInfo& info);
  // Leaves the directory cleanly (a tombstone), after the applier stopped.
  void Leave();
  // True once the applier has been given its first partitions by the group
  // (possibly none), or holds every partition current (a member that
  // started alone, before the group's first assignment), and has nothing
  // left to restore: until then the HTTP tier of a starting member is not
  // ready. Stays true.
  bool Ready() const { return ready_.load(std::memory_order_relaxed); }

  const cluster::MembersDirectory* directory() const { return directory_.get(); }
  const std::string& member() const { return member_; }
  const std::string& advertise() const { return options_.advertise; }

  // query::ClusterRouting
  std::string Self() const override { return member_; }
  query::PartitionHome Home(uint32_t partition) const override;
  void Unreachable(const std::string& member) override;
  std::string ClusterJson() const override;
  std::vector<std::pair<std::string, std::string>> Peers() const override;
  // "TallyMember <key>", the key (random at each start) that Publish()
  // puts in this member's record. A member that never publishes (`tally
  // serve --advertise`, whose record is its writer's, with the writer's
  // key) sends a key no member knows: its reads count as a client's.
  std::string PeerAuthorization() const override;
  // `authorization` is "TallyMember <key>" with the key of the live member
  // `forwarded` in the directory (compared in constant time).
  bool FromMember(std::string_view forwarded, std::string_view authorization) const override;

 private:
  explicit ClusterMember(ClusterMemberOptions options);
  // What this member holds: as published here, else its directory record.
  std::optional<cluster::MemberInfo> Local() const;

  const ClusterMemberOptions options_;
  const std::string member_;
  const std::string peer_key_;  // MemberInfo::peer_key: 128 random bits, hex
  const std::string process_;   // MemberInfo::process: this process, "" if unknown
  std::unique_ptr<cluster::MembersDirectory> directory_;
  mutable std::mutex mu_;
  std::optional<cluster::MemberInfo> local_;  // guarded by mu_
  std::atomic<bool> ready_{false};
  // Members a request got no answer from, with the wall time it failed:
  // passed over by Home() while their latest record is older than that.
  std::map<std::string, int64_t> unreachable_;  // guarded by mu_
  bool ReachableLocked(const cluster::MemberInfo& m) const;

  // Home() of every partition, computed again when the directory's view,
  // what this member holds or the unreachable members change, so that a
  // request costs a look-up (no copy of the directory).
  mutable std::vector<query::PartitionHome> homes_;   // guarded by mu_
  mutable uint64_t homes_directory_version_ = ~0ull;  // guarded by mu_
  mutable uint64_t local_version_ = 0;            // guarded by mu_; bumped by Publish, Unreachable
  mutable uint64_t homes_local_version_ = ~0ull;  // guarded by mu_
  mutable int64_t homes_built_ms_ = 0;            // guarded by mu_; steady clock
  void RebuildHomesLocked(uint32_t partitions) const;

  // The peer keys of the directory's members by member id, read again when
  // its version changes (FromMember).
  mutable std::map<std::string, std::string, std::less<>> keys_;  // guarded by mu_
  mutable uint64_t keys_version_ = ~0ull;                         // guarded by mu_
};

// The applier's cluster options for `member` (which must outlive the
// applier): it reads the directory and publishes through the member.
aggregator::ApplierClusterOptions ClusterApplierOptions(ClusterMember* member, int standbys);

// With `join`: ClusterMember::Start(options), and *applier set to its
// ClusterApplierOptions with `standbys` (tally up --brokers, tally
// aggregate --advertise). Without: null (a process that is no member).
base::Result<std::unique_ptr<ClusterMember>> StartMember(
    bool join, ClusterMemberOptions options, int64_t standbys,
    aggregator::ApplierClusterOptions* applier);

}  // namespace tally::app
