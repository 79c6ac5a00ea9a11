// ClusterRouting for tests: a routing table the test fixes and changes
// (partition -> member, member -> base URL), so real members can be wired
// without a members directory. Safe for concurrent use.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "query/cluster_routing.h"

namespace tally::query::testing {

// Partition -> member ("" nobody), member -> base URL; changeable while
// requests run. ClusterJson() is a fixed stub.
class FixedRouting : public ClusterRouting {
 public:
  explicit FixedRouting(std::string self) : self_(std::move(self)) {}

  void Set(uint32_t partition, std::string member) {
    std::lock_guard<std::mutex> lock(mu_);
    owner_[partition] = std::move(member);
  }
  // Where `partition` is read once its owner was reported unreachable (a
  // current standby); without one, nowhere.
  void SetFallback(uint32_t partition, std::string member) {
    std::lock_guard<std::mutex> lock(mu_);
    fallback_[partition] = std::move(member);
  }
  // The next `calls` calls of Home(partition) answer "here", whatever is
  // set: a routing that has not yet seen the partition leave this member.
  void SetStaleHere(uint32_t partition, int calls) {
    std::lock_guard<std::mutex> lock(mu_);
    stale_here_[partition] = calls;
  }
  std::vector<std::string> Unreachables() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {unreachable_.begin(), unreachable_.end()};
  }
  void Unreachable(const std::string& member) override {
    std::lock_guard<std::mutex> lock(mu_);
    unreachable_.insert(member);
  }
  void SetUrl(const std::string& member, std::string url) {
    std::lock_guard<std::mutex> lock(mu_);
    urls_[member] = std::move(url);
  }

  std::string Self() const override { return self_; }
  PartitionHome Home(uint32_t partition) const override {
    std::lock_guard<std::mutex> lock(mu_);
    PartitionHome h;
    if (auto stale = stale_here_.find(partition); stale != stale_here_.end() && stale->second > 0) {
      stale->second--;
      h.where = PartitionHome::Where::kHere;
      return h;
    }
    auto it = owner_.find(partition);
    if (it != owner_.end() && unreachable_.count(it->second)) {
      it = fallback_.find(partition);
      if (it == fallback_.end()) it = owner_.end();
    }
    if (it == owner_.end() || it->second.empty()) {
      h.where = PartitionHome::Where::kNowhere;
    } else if (it->second == self_) {
      h.where = PartitionHome::Where::kHere;
    } else {
      h.where = PartitionHome::Where::kPeer;
      h.member = it->second;
      auto u = urls_.find(it->second);
      h.http = u == urls_.end() ? "" : u->second;
    }
    return h;
  }
  std::string ClusterJson() const override { return "{\"group\":\"g\",\"generation\":7}"; }
  std::vector<std::pair<std::string, std::string>> Peers() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [m, u] : urls_) {
      if (m != self_) out.emplace_back(m, u);
    }
    return out;
  }

 private:
  const std::string self_;
  mutable std::mutex mu_;
  std::map<uint32_t, std::string> owner_;
  std::map<std::string, std::string> urls_;
  std::map<uint32_t, std::string> fallback_;
  std::set<std::string> unreachable_;
  mutable std::map<uint32_t, int> stale_here_;
};

}  // namespace tally::query::testing
