// ClusterRouting: what the query tier asks of the cluster (SPEC section 6)
// to answer any request on any member: where the reads of a partition are
// answered, who this member is, and what GET /v1/cluster shows.
//
// The query tier reads locally what Home() says is here, asks the peer it
// names for the rest (PeerClient, with the forwarded header), and answers
// 503 partition_moving with Retry-After where it says nowhere. A member
// that is asked by a peer (the request carries kForwardedHeader) never asks
// another one: it answers from what it holds, or 503 partition_moving.
//
// The implementation (app/cluster_member.h) follows the members directory
// (cluster/members_directory.h) and this member's applier. Without one
// (QueryServiceOptions::cluster null: a single process) every partition is
// here.
//
// Thread model: every method is called on request threads, concurrently;
// each must be cheap (no I/O, no waiting) and safe for concurrent use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tally::query {

// Marks a request one member sends another; its value is the asking
// member's id. A request with it is never forwarded again.
inline constexpr std::string_view kForwardedHeader = "X-Tally-Forwarded";
// The Authorization scheme of a member's forwarded requests:
// "TallyMember <key>", the key the member published in the members
// directory (ClusterRouting::PeerAuthorization). The forwarded header alone
// is a client's to send; this proves the request comes from that member.
inline constexpr std::string_view kPeerAuthScheme = "TallyMember";
// Names the member (or members, comma-separated, for a batch answered by
// several) whose state answered.
inline constexpr std::string_view kMemberHeader = "X-Tally-Member";

// Where the reads of one tally.deltas partition are answered.
struct PartitionHome {
  enum class Where {
    kHere,     // this member holds the partition and it is current
    kPeer,     // `member` at `http` does (the owner, else a current standby)
    kNowhere,  // nobody current: 503 partition_moving
  };
  Where where = Where::kHere;
  std::string member;  // kPeer: the peer's id
  std::string http;    // kPeer: its base URL, "http://host:port"
};

class ClusterRouting {
 public:
  virtual ~ClusterRouting() = default;

  // This member's id (the value of X-Tally-Member for a local answer).
  virtual std::string Self() const = 0;

  // Where reads of `partition` go now. Never kHere for a partition this
  // member is still restoring.
  virtual PartitionHome Home(uint32_t partition) const = 0;

  // A request to `member` got no answer (refused, reset, deadline): the
  // member may have died before the directory knows. Home() routes around
  // it (to a current standby, else nowhere) until it is heard of again.
  virtual void Unreachable(const std::string& member) { (void)member; }

  // The body of GET /v1/cluster (SPEC section 6), rendered.
  virtual std::string ClusterJson() const = 0;

  // The live members other than this one, as {member id, base URL}, sorted
  // by id: GET /v1/watermarks asks each for its partitions.
  virtual std::vector<std::pair<std::string, std::string>> Peers() const = 0;

  // The Authorization value this member's forwarded requests carry
  // ("TallyMember <key>"), or "" when it has no key the others can know
  // (its requests are then treated as any client's).
  virtual std::string PeerAuthorization() const { return {}; }

  // True when a request with kForwardedHeader `forwarded` and
  // `authorization` comes from that member: a live member of the
  // directory whose published key the authorization carries. Such a read
  // was already counted against its client's rate limit where the client
  // reached the cluster (HttpServer's ServerOptions::from_member).
  virtual bool FromMember(std::string_view forwarded, std::string_view authorization) const {
    (void)forwarded;
    (void)authorization;
    return false;
  }
};

}  // namespace tally::query
