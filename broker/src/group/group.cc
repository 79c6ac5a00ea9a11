#include "group/group.h"

#include <algorithm>

namespace tally::broker::internal {

const char* GroupStateName(GroupState state) {
  switch (state) {
    case GroupState::kEmpty:
      return "Empty";
    case GroupState::kPreparingRebalance:
      return "PreparingRebalance";
    case GroupState::kCompletingRebalance:
      return "CompletingRebalance";
    case GroupState::kStable:
      return "Stable";
  }
  return "Dead";
}

const std::string& Member::MetadataFor(const std::string& name) const {
  static const std::string kNone;
  for (const GroupProtocol& p : protocols) {
    if (p.name == name) return p.metadata;
  }
  return kNone;
}

bool Member::SameProtocols(const std::vector<GroupProtocol>& other) const {
  if (other.size() != protocols.size()) return false;
  for (size_t i = 0; i < other.size(); i++) {
    if (other[i].name != protocols[i].name || other[i].metadata != protocols[i].metadata) {
      return false;
    }
  }
  return true;
}

bool Group::SupportsProtocols(const std::string& type,
                              const std::vector<GroupProtocol>& protocols) const {
  if (members.empty()) return !type.empty() && !protocols.empty();
  if (type != protocol_type) return false;
  for (const GroupProtocol& p : protocols) {
    bool everyone = std::all_of(members.begin(), members.end(), [&](const auto& entry) {
      const auto& mine = entry.second.protocols;
      return std::any_of(mine.begin(), mine.end(),
                         [&](const GroupProtocol& q) { return q.name == p.name; });
    });
    if (everyone) return true;
  }
  return false;
}

std::string Group::SelectProtocol() const {
  if (members.empty()) return "";
  // Candidates in the order of the leader (or of any member if the leader
  // is gone), which breaks ties deterministically.
  auto lead = members.find(leader_id);
  const Member& order = lead != members.end() ? lead->second : members.begin()->second;
  std::vector<std::string> candidates;
  for (const GroupProtocol& p : order.protocols) {
    bool everyone = std::all_of(members.begin(), members.end(), [&](const auto& entry) {
      const auto& mine = entry.second.protocols;
      return std::any_of(mine.begin(), mine.end(),
                         [&](const GroupProtocol& q) { return q.name == p.name; });
    });
    if (everyone) candidates.push_back(p.name);
  }
  if (candidates.empty()) return "";
  std::vector<int> votes(candidates.size(), 0);
  for (const auto& [id, m] : members) {
    for (const GroupProtocol& p : m.protocols) {
      auto it = std::find(candidates.begin(), candidates.end(), p.name);
      if (it != candidates.end()) {
        votes[static_cast<size_t>(it - candidates.begin())]++;
        break;
      }
    }
  }
  size_t best = 0;
  for (size_t i = 1; i < votes.size(); i++) {
    if (votes[i] > votes[best]) best = i;
  }
  return candidates[best];
}

bool Group::IsFenced(const std::string& member_id, const std::string& instance_id) const {
  if (instance_id.empty()) return false;
  auto it = static_members.find(instance_id);
  return it != static_members.end() && it->second != member_id;
}

bool Group::AllJoined() const {
  if (!pending_members.empty()) return false;
  return std::all_of(members.begin(), members.end(),
                     [](const auto& entry) { return entry.second.awaiting_join(); });
}

int32_t Group::MaxRebalanceTimeoutMs() const {
  int32_t max = 0;
  for (const auto& [id, m] : members) max = std::max(max, m.rebalance_timeout_ms);
  return max;
}

}  // namespace tally::broker::internal
