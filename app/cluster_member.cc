#include "cluster_member.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "base/clock.h"
#include "base/constant_time.h"
#include "base/log.h"

namespace tally::app {

std::string MemberIdOf(const std::string& advertise) {
  std::string id = advertise;
  if (id.rfind("http://", 0) == 0) id = id.substr(7);
  while (!id.empty() && id.back() == '/') id.pop_back();
  return id;
}

base::Status CheckAdvertise(const std::string& advertise) {
  const std::string id = MemberIdOf(advertise);
  const size_t colon = id.rfind(':');
  if (advertise.rfind("http://", 0) != 0 || colon == std::string::npos || colon == 0 ||
      colon + 1 == id.size() || id.find('/') != std::string::npos ||
      id.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return base::Status::InvalidArgument(
        fmt::format("--advertise {}: expected http://HOST:PORT", advertise));
  }
  return base::Status::Ok();
}

std::string DefaultAdvertise(const std::string& listen) {
  std::string host = listen, port;
  if (size_t colon = listen.rfind(':'); colon != std::string::npos) {
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
  }
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
    char name[256] = {0};
    host = gethostname(name, sizeof(name) - 1) == 0 && name[0] ? name : "127.0.0.1";
  }
  return fmt::format("http://{}:{}", host, port);
}

aggregator::ApplierClusterOptions ClusterApplierOptions(ClusterMember* member, int standbys) {
  aggregator::ApplierClusterOptions c;
  c.enabled = true;
  c.directory = member->directory();
  c.member = member->member();
  c.http = member->advertise();
  c.standbys = standbys;
  c.publish = [member](const cluster::MemberInfo& info) { member->Publish(info); };
  return c;
}

namespace {

// 128 bits from the system's random source, as 32 hex digits.
std::string RandomKey() {
  std::random_device rd;
  std::string key;
  for (int i = 0; i < 4; i++) key += fmt::format("{:08x}", static_cast<uint32_t>(rd()));
  return key;
}

// This machine's boot and pid namespace, "<boot id>:<pid namespace>:",
// which a pid is unique within; "" if either cannot be read.
std::string ProcessPrefix() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  std::error_code ec;
  const std::string ns = std::filesystem::read_symlink("/proc/self/ns/pid", ec).string();
  if (boot_id.empty() || ec || ns.empty()) return {};
  return boot_id + ":" + ns + ":";
}

// True only if `process` (MemberInfo::process) names a process of this
// machine and pid namespace that no longer exists.
bool ProcessGone(const std::string& process) {
  const std::string prefix = ProcessPrefix();
  if (prefix.empty() || process.size() <= prefix.size() || process.rfind(prefix, 0) != 0) {
    return false;
  }
  const std::string pid_text = process.substr(prefix.size());
  if (pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

ClusterMember::ClusterMember(ClusterMemberOptions options)
    : options_(std::move(options)),
      member_(MemberIdOf(options_.advertise)),
      peer_key_(RandomKey()),
      process_(ProcessPrefix().empty() ? std::string()
                                       : ProcessPrefix() + std::to_string(::getpid())) {}

ClusterMember::~ClusterMember() = default;

base::Result<std::unique_ptr<ClusterMember>> ClusterMember::Start(ClusterMemberOptions options) {
  TALLY_RETURN_IF_ERROR(CheckAdvertise(options.advertise));
  std::unique_ptr<ClusterMember> m(new ClusterMember(std::move(options)));
  cluster::MembersDirectoryOptions d;
  d.kafka = m->options_.kafka;
  d.member = m->member_;
  d.group = m->options_.group;
  auto dir = cluster::MembersDirectory::Start(d);
  if (!dir.ok()) return dir.status();
  m->directory_ = std::move(dir).value();
  TALLY_LOG_INFO("cluster", "member {} of group {}, reached at {}", m->member_, m->options_.group,
                 m->options_.advertise);
  return m;
}

base::Status ClusterMember::RefuseIfLiveElsewhere() {
  // Everything the directory held when it started, or what it has by then.
  const int64_t deadline = base::SteadyMs() + kCatchUpWaitMs;
  while (!directory_->CaughtUp() && base::SteadyMs() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto record = [this]() -> std::optional<cluster::MemberInfo> {
    for (auto& m : directory_->Snapshot()) {
      if (m.member == member_) return m;
    }
    return std::nullopt;
  };
  // Nothing has been published under this id yet, so a live record of it
  // is another process's: a predecessor that was SIGKILLed (its record
  // stands still until it expires) or a process running now with the same
  // --advertise (it rewrites the record every heartbeat).
  std::optional<cluster::MemberInfo> first = record();
  if (!first) return base::Status::Ok();
  if (ProcessGone(first->process)) {
    TALLY_LOG_INFO("cluster",
                   "member {}: the live record of this id in tally.members is a stopped "
                   "process's ({}); taking over",
                   member_, first->process);
    return base::Status::Ok();
  }
  TALLY_LOG_INFO("cluster",
                 "member {}: tally.members holds a live record of this id from another process; "
                 "watching it for {} ms (a process that ended leaves it unchanged)",
                 member_, kDuplicateWatchMs);
  const int64_t until = base::SteadyMs() + kDuplicateWatchMs;
  while (base::SteadyMs() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::optional<cluster::MemberInfo> now = record();
    if (!now) return base::Status::Ok();  // it left, or expired
    if (now->ts_ms != first->ts_ms || now->peer_key != first->peer_key) {
      return base::Status::FailedPrecondition(fmt::format(
          "member {}: another live process is already this member: it rewrote its record in "
          "tally.members (reached at {}) while this one started; give this one its own "
          "--advertise, or stop the other first",
          member_, now->http));
    }
  }
  return base::Status::Ok();
}

void ClusterMember::Publish(const cluster::MemberInfo& info) {
  cluster::MemberInfo copy = info;
  copy.member = member_;
  copy.http = options_.advertise;
  copy.peer_key = peer_key_;
  copy.process = process_;
  {
    std::lock_guard<std::mutex> l(mu_);
    local_ = copy;
    local_version_++;
  }
  directory_->Publish(copy);
  const bool holds_all =
      options_.partitions > 0 && copy.owns.size() + copy.standby.size() == options_.partitions;
  if (!ready_.load() && (copy.generation > 0 || holds_all) && copy.restoring.empty()) {
    ready_.store(true);
    TALLY_LOG_INFO("cluster", "member {} {}: owns {} partitions, {} standby; serving", member_,
                   copy.generation > 0 ? "joined the cluster" : "holds every partition",
                   copy.owns.size(), copy.standby.size());
  }
}

void ClusterMember::Leave() {
  if (auto st = directory_->Leave(); !st.ok()) TALLY_LOG_WARN("cluster", "{}", st.ToString());
}

std::optional<cluster::MemberInfo> ClusterMember::Local() const {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (local_) return local_;
  }
  for (auto& m : directory_->Snapshot()) {
    if (m.member == member_) return m;
  }
  return std::nullopt;
}

void ClusterMember::Unreachable(const std::string& member) {
  std::lock_guard<std::mutex> l(mu_);
  const int64_t now = base::WallMs();
  auto [it, inserted] = unreachable_.try_emplace(member, now);
  local_version_++;
  if (inserted || now - it->second > 10000) {
    TALLY_LOG_WARN("cluster",
                   "member {} does not answer; its partitions are read from standbys until it is "
                   "heard of again or expires",
                   member);
  }
  it->second = now;
}

bool ClusterMember::ReachableLocked(const cluster::MemberInfo& m) const {
  auto it = unreachable_.find(m.member);
  return it == unreachable_.end() || m.ts_ms > it->second;
}

void ClusterMember::RebuildHomesLocked(uint32_t partitions) const {
  using Where = query::PartitionHome::Where;
  // What this member holds: as published here, else (tally serve) its record.
  std::optional<cluster::MemberInfo> local = local_;
  std::vector<cluster::MemberInfo> members = directory_->Snapshot();
  if (!local) {
    for (auto& m : members) {
      if (m.member == member_) local = m;
    }
  }
  homes_.assign(partitions, query::PartitionHome{Where::kNowhere, "", ""});
  for (uint32_t i = 0; i < partitions; i++) {
    const auto p = static_cast<int32_t>(i);
    // What this member holds current is read here, also as a standby: a
    // standby is as current as its owner (both apply the log as it comes)
    // and a local read costs a twentieth of a remote one.
    if (local &&
        (cluster::HasPartition(local->owns, p) || cluster::HasPartition(local->standby, p))) {
      homes_[i] = {Where::kHere, "", ""};
      continue;
    }
    if (auto owner = directory_->OwnerOf(p);
        owner && owner->member != member_ && ReachableLocked(*owner)) {
      homes_[i] = {Where::kPeer, owner->member, owner->http};
      continue;
    }
    for (auto& s : directory_->CurrentStandbysOf(p)) {
      if (s.member != member_ && ReachableLocked(s)) {
        homes_[i] = {Where::kPeer, s.member, s.http};
        break;
      }
    }
  }
}

query::PartitionHome ClusterMember::Home(uint32_t partition) const {
  const uint64_t version = directory_->Version();
  const int64_t now = base::SteadyMs();
  std::lock_guard<std::mutex> l(mu_);
  // Also every second without a change: a member's record expires without
  // one (the directory counts an expiry once it has seen it) and an
  // unreachable member is forgiven by its next record's time.
  if (version != homes_directory_version_ || local_version_ != homes_local_version_ ||
      now - homes_built_ms_ >= 1000 || partition >= homes_.size()) {
    RebuildHomesLocked(std::max<uint32_t>(partition + 1, static_cast<uint32_t>(homes_.size())));
    homes_directory_version_ = version;
    homes_local_version_ = local_version_;
    homes_built_ms_ = now;
  }
  return homes_[partition];
}

std::vector<std::pair<std::string, std::string>> ClusterMember::Peers() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& m : directory_->Snapshot()) {
    if (m.member != member_) out.emplace_back(m.member, m.http);
  }
  return out;
}

std::string ClusterMember::PeerAuthorization() const {
  return fmt::format("{} {}", query::kPeerAuthScheme, peer_key_);
}

bool ClusterMember::FromMember(std::string_view forwarded, std::string_view authorization) const {
  const std::string_view scheme = query::kPeerAuthScheme;
  if (forwarded.empty() || authorization.size() <= scheme.size() + 1 ||
      authorization.substr(0, scheme.size()) != scheme || authorization[scheme.size()] != ' ') {
    return false;
  }
  const std::string_view given = authorization.substr(scheme.size() + 1);
  const uint64_t version = directory_->Version();
  std::lock_guard<std::mutex> l(mu_);
  if (version != keys_version_) {
    keys_.clear();
    for (auto& m : directory_->Snapshot()) {
      if (!m.peer_key.empty()) keys_[m.member] = std::move(m.peer_key);
    }
    keys_version_ = version;
  }
  auto it = keys_.find(forwarded);
  return it != keys_.end() && base::ConstantTimeEquals(given, it->second);
}

namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string ClusterMember::ClusterJson() const {
  std::vector<cluster::MemberInfo> members = directory_->Snapshot();
  if (auto local = Local()) {
    auto it = std::find_if(members.begin(), members.end(),
                           [&](const cluster::MemberInfo& m) { return m.member == member_; });
    if (it != members.end()) {
      *it = *local;
    } else {
      members.push_back(*local);
      std::sort(members.begin(), members.end(),
                [](const cluster::MemberInfo& a, const cluster::MemberInfo& b) {
                  return a.member < b.member;
                });
    }
  }
  int64_t generation = 0;
  for (const auto& m : members) generation = std::max(generation, m.generation);
  std::string out = fmt::format(R"({{"group":"{}-applier","generation":{},"members":[)",
                                Escape(options_.group), generation);
  for (size_t i = 0; i < members.size(); i++) {
    const auto& m = members[i];
    if (i) out += ',';
    out += fmt::format(R"({{"member":"{}","http":"{}","owns":[{}],"standby":[{}],"restoring":[)",
                       Escape(m.member), Escape(m.http), fmt::join(m.owns, ","),
                       fmt::join(m.standby, ","));
    for (size_t j = 0; j < m.restoring.size(); j++) {
      const auto& r = m.restoring[j];
      out += fmt::format(R"({}{{"partition":{},"offset":{},"end_offset":{}}})", j ? "," : "",
                         r.partition, r.offset, r.end_offset);
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

base::Result<std::unique_ptr<ClusterMember>> StartMember(
    bool join, ClusterMemberOptions options, int64_t standbys,
    aggregator::ApplierClusterOptions* applier) {
  if (!join) return std::unique_ptr<ClusterMember>();
  auto m = ClusterMember::Start(std::move(options));
  if (!m.ok()) return m;
  TALLY_RETURN_IF_ERROR((*m)->RefuseIfLiveElsewhere());
  *applier = ClusterApplierOptions(m->get(), static_cast<int>(standbys));
  return m;
}

}  // namespace tally::app
