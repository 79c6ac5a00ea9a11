// MemberInfo: what one member of a tally cluster says about itself in the
// members directory (members_directory.h), and its JSON form.
//
// A record of the compacted topic tally.members is keyed by the member id
// and holds one MemberInfo as a JSON object:
//
//   {"member":S,"http":S,"owns":[N],"standby":[N],
//    "restoring":[{"partition":N,"offset":N,"end_offset":N}],
//    "generation":N,"ts_ms":N,"peer_key":S,"process":S}
//
// which is also the per-member shape of SPEC section 6's GET /v1/cluster
// (that answer leaves out generation, ts_ms, peer_key and process; those
// last two are left out of the record too when empty). A null value (tombstone)
// is a clean leave. Anyone can write to the topic, so a record is hostile
// input: MemberInfoFromJson() checks every field and never throws.
//
// Thread model: plain values and pure functions, safe anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tally::cluster {

// A partition the member is bringing up from tally.deltas and does not serve
// yet: applied up to `offset` (the next to apply) of `end_offset` (the end of
// the partition when it last looked).
struct RestoringPartition {
  int32_t partition = 0;
  int64_t offset = 0;
  int64_t end_offset = 0;
  bool operator==(const RestoringPartition&) const = default;
};

struct MemberInfo {
  std::string member;  // the member id, also the record's key; not empty
  std::string http;    // where the other members reach it ("http://host:port")
  // tally.deltas partitions the member owns and serves (given it by the
  // applier group), kept sorted and without repeats by MemberInfoFromJson.
  std::vector<int32_t> owns;
  // Partitions it applies without owning (warm standbys), caught up.
  std::vector<int32_t> standby;
  std::vector<RestoringPartition> restoring;
  // Orders claims on one partition: of two members owning it, the one with
  // the higher generation is the owner (the other's record is stale).
  int64_t generation = 0;
  int64_t ts_ms = 0;  // the writer's wall clock when it wrote the record
  // The secret the member's forwarded requests carry (Authorization:
  // TallyMember <peer_key>), random at each start, so that the other members
  // know them from a client's (app/cluster_member.h). Empty: none (a writer
  // from before it). Only readers of tally.members learn it: never shown.
  std::string peer_key;
  // Which process wrote it: "<boot id>:<pid namespace>:<pid>", so that a
  // member restarting on the same machine knows a record its killed
  // predecessor left (app/cluster_member.h). Empty: unknown.
  std::string process;
  bool operator==(const MemberInfo&) const = default;
};

// The JSON object above, fields in that order. Never fails.
std::string ToJson(const MemberInfo& info);

// Parses and checks one record's value: a JSON object with every field of
// the shape above and the right types (partitions and offsets >= 0, a
// non-empty member id of at most 256 bytes; peer_key and process optional,
// strings of at most 256 bytes); unknown fields are ignored (a newer writer may add
// some). InvalidArgument naming what is wrong.
base::Result<MemberInfo> MemberInfoFromJson(std::string_view json);

// True if `partitions` (sorted) holds `p`.
bool HasPartition(const std::vector<int32_t>& partitions, int32_t p);

}  // namespace tally::cluster
