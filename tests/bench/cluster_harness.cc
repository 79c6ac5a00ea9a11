#include "cluster_harness.h"

#include <fmt/core.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "base/kafka.h"
#include "schemas/delta.h"
#include "store/state_store.h"

namespace tally::bench {

using base::Result;
using base::Status;
using cluster::HasPartition;
using cluster::MemberInfo;

namespace {

constexpr const char* kGroup = "bench";

// A line of a member's log: "2026-11-25T20:13:24.274Z INFO  applier: ..." ->
// its time in ms since the epoch; -1 if it has none.
int64_t LogLineMs(const std::string& line) {
  int y, mo, d, h, mi, s, ms;
  if (std::sscanf(line.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &y, &mo, &d, &h, &mi, &s, &ms) != 7)
    return -1;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<int64_t>(::timegm(&tm)) * 1000 + ms;
}

}  // namespace

Cluster::~Cluster() {
  directory_.reset();
  watermark_client_.reset();
  for (auto& m : members_) {
    if (!m->gone) ::kill(m->proc->pid(), SIGTERM);
  }
  for (auto& m : members_) {
    if (!m->gone && m->proc->Wait(15) == -1) m->proc->Stop(1);
  }
  broker_.Stop();
}

Status Cluster::Start() {
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  int port = FreePort();
  brokers_ = fmt::format("127.0.0.1:{}", port);
  TALLY_RETURN_IF_ERROR(broker_.Start(
      {o_.tally, "broker", "--port", std::to_string(port), "--partitions",
       std::to_string(partitions_), "--log-level", "warn", "--log-dir", Path("broker-data")},
      Path("broker.log")));
  if (!WaitForPort(port, 15))
    return Status::Unavailable("tally broker did not start; see " + Path("broker.log"));
  cluster::MembersDirectoryOptions d;
  d.kafka.brokers = brokers_;
  d.kafka.embedded = true;
  d.member = "tally-bench";
  d.group = kGroup;
  auto dir = cluster::MembersDirectory::Start(std::move(d));
  if (!dir.ok()) return dir.status();
  directory_ = std::move(dir).value();
  return Status::Ok();
}

Result<Member*> Cluster::Add() {
  auto m = std::make_unique<Member>();
  m->port = FreePort();
  m->id = fmt::format("127.0.0.1:{}", m->port);
  m->dir = Path(fmt::format("member-{}", m->port));
  m->log = Path(fmt::format("member-{}.log", m->port));
  std::vector<std::string> argv = {o_.tally,           "up",
                                   "--brokers",        brokers_,
                                   "--group",          kGroup,
                                   "--state-dir",      m->dir,
                                   "--http",           m->id,
                                   "--partitions",     std::to_string(partitions_),
                                   "--standbys",       std::to_string(standbys_),
                                   "--block-cache-mb", std::to_string(o_.block_cache_mb),
                                   "--log-level",      "info"};
  argv.insert(argv.end(), o_.up_args.begin(), o_.up_args.end());
  m->proc = std::make_unique<Process>();
  TALLY_RETURN_IF_ERROR(m->proc->Start(argv, m->log));
  m->http = std::make_unique<HttpClient>(m->port);
  members_.push_back(std::move(m));
  return members_.back().get();
}

void Cluster::Kill(Member* m) {
  ::kill(m->proc->pid(), SIGKILL);
  m->gone = true;
  m->proc->Wait(10);
}

void Cluster::Leave(Member* m) {
  m->gone = true;
  m->proc->Stop(30);
}

void Cluster::StopAll() {
  for (auto& m : members_) {
    if (!m->gone) ::kill(m->proc->pid(), SIGTERM);
  }
  for (auto& m : members_) {
    if (m->gone) continue;
    m->gone = true;
    if (m->proc->Wait(30) == -1) m->proc->Stop(1);
  }
}

std::vector<Member*> Cluster::Alive() const {
  std::vector<Member*> v;
  for (const auto& m : members_) {
    if (!m->gone) v.push_back(m.get());
  }
  return v;
}

std::vector<MemberInfo> Cluster::View() const {
  std::set<std::string> alive;
  for (const auto& m : members_) {
    if (!m->gone) alive.insert(m->id);
  }
  std::vector<MemberInfo> v;
  for (auto& info : directory_->Snapshot()) {
    if (alive.count(info.member)) v.push_back(std::move(info));
  }
  return v;
}

bool Cluster::Settled(const std::vector<MemberInfo>& view, std::string* why) const {
  const size_t n = Alive().size();
  if (view.size() != n) {
    *why = fmt::format("{} of {} members in the directory", view.size(), n);
    return false;
  }
  size_t lo = SIZE_MAX, hi = 0;
  for (const auto& m : view) {
    if (!m.restoring.empty()) {
      *why = fmt::format("{} restoring {} partitions", m.member, m.restoring.size());
      return false;
    }
    lo = std::min(lo, m.owns.size());
    hi = std::max(hi, m.owns.size());
  }
  if (hi - lo > 1) {
    *why = fmt::format("uneven: members own {} to {} partitions", lo, hi);
    return false;
  }
  const int want_standbys = std::min<int>(standbys_, static_cast<int>(n) - 1);
  for (int32_t p = 0; p < partitions_; p++) {
    int owners = 0, standbys = 0;
    for (const auto& m : view) {
      owners += HasPartition(m.owns, p);
      standbys += HasPartition(m.standby, p);
    }
    if (owners != 1) {
      *why = fmt::format("partition {} has {} owners", p, owners);
      return false;
    }
    if (standbys < want_standbys) {
      *why = fmt::format("partition {} has {} of {} standbys", p, standbys, want_standbys);
      return false;
    }
  }
  why->clear();
  return true;
}

Status Cluster::WaitSettled(double timeout_s, const std::string& what,
                            const std::function<void()>& on_poll) {
  auto t0 = Clock::now();
  auto last_print = t0;
  std::optional<Clock::time_point> since;
  std::string why;
  while (true) {
    for (Member* m : Alive()) {
      if (!m->proc->running())
        return Status::Internal(fmt::format("{} exited; see {}", m->id, m->log));
    }
    if (on_poll) on_poll();
    if (Settled(View(), &why)) {
      if (!since) since = Clock::now();
      if (SecondsSince(*since) >= 2) return Status::Ok();
    } else {
      since.reset();
    }
    if (SecondsSince(t0) > timeout_s) {
      return Status::Unavailable(
          fmt::format("{}: not settled after {:.0f} s: {}", what, timeout_s, why));
    }
    if (SecondsSince(last_print) >= 5) {
      last_print = Clock::now();
      Progress(fmt::format("{}: settling ({:.0f} s): {}", what, SecondsSince(t0),
                           why.empty() ? "settled" : why));
    }
    SleepMs(50);
  }
}

Result<std::vector<base::PartitionOffsets>> Cluster::TopicWatermarks(std::string_view topic) {
  return bench::TopicWatermarks(brokers_, topic, &watermark_client_);
}

Result<std::string> Cluster::Metrics(Member* m) {
  int status = 0;
  std::string body;
  TALLY_RETURN_IF_ERROR(m->http->Get("/metrics", &status, &body));
  if (status != 200)
    return Status::Unavailable(fmt::format("{}: GET /metrics: HTTP {}", m->id, status));
  return body;
}

std::vector<std::string> Cluster::TallyArgs(std::initializer_list<std::string> args) const {
  std::vector<std::string> v = {o_.tally};
  v.insert(v.end(), args);
  return v;
}

int32_t Cluster::global_partition() const {
  return static_cast<int32_t>(
      schemas::PartitionOf(schemas::kGlobalEntity, static_cast<uint32_t>(partitions_)));
}

Result<Look> LookAt(Cluster* c) {
  Look l;
  for (Member* m : c->Alive()) {
    auto body = c->Metrics(m);
    if (!body.ok()) return body.status();
    l.routed += MetricValue(*body, "tally_router_events_total");
    l.lost += MetricValue(*body, "tally_input_lost_records_total") +
              MetricValue(*body, "tally_deltas_lost_records_total");
    l.applied.push_back(MetricValue(*body, "tally_applier_deltas_total"));
    for (std::string_view name : kCountersShown) {
      double v = MetricValue(*body, name);
      if (!std::isnan(v)) l.counters[std::string(name)] += v;
    }
    l.cpu_s += m->proc->CpuSeconds();
  }
  return l;
}

// Waits until the members have routed `routed` events (counting those the
// broker dropped before they were read) and no member has applied a delta
// for `quiet_s`: lag 0 without per-partition offsets to compare. *last is
// the look at the last change.
Status WaitQuiet(Cluster* c, double routed, double quiet_s, double timeout_s,
                 const std::string& what, Look* last, Clock::time_point* last_change) {
  auto t0 = Clock::now();
  auto last_print = t0;
  std::vector<double> prev;
  *last_change = Clock::now();
  while (true) {
    auto l = LookAt(c);
    if (l.ok()) {
      if (l->applied != prev) {
        prev = l->applied;
        *last = *l;
        *last_change = Clock::now();
      }
      if (l->routed + l->lost >= routed && SecondsSince(*last_change) >= quiet_s)
        return Status::Ok();
      if (SecondsSince(last_print) >= 5) {
        last_print = Clock::now();
        double applied = 0;
        for (double a : l->applied) applied += a;
        Progress(fmt::format("{}: {:.0f}/{:.0f} events routed, {:.0f} deltas applied, {:.0f} s",
                             what, l->routed, routed, applied, SecondsSince(t0)));
      }
    }
    if (SecondsSince(t0) > timeout_s)
      return Status::Unavailable(fmt::format("{}: not applied within {:.0f} s", what, timeout_s));
    SleepMs(50);
  }
}

// The value of an unlabelled metric in a Prometheus text answer; NaN if
// absent.
double MetricValue(std::string_view body, std::string_view name) {
  std::string needle = fmt::format("\n{} ", name);
  size_t at = body.find(needle);
  if (at == std::string_view::npos) return NAN;
  return std::strtod(std::string(body.substr(at + needle.size(), 32)).c_str(), nullptr);
}

// CPU seconds of each thread of `pid` so far, by thread id, with its name.
std::map<std::string, std::pair<std::string, double>> ThreadCpu(pid_t pid) {
  std::map<std::string, std::pair<std::string, double>> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream in(e.path() / "stat");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t lp = s.find('('), rp = s.rfind(')');
    if (lp == std::string::npos || rp == std::string::npos) continue;
    out[e.path().filename().string()] = {s.substr(lp + 1, rp - lp - 1), StatCpuSeconds(s)};
  }
  return out;
}

std::map<int32_t, RestoreSpan> RestoresInLog(const std::string& path) {
  std::map<int32_t, RestoreSpan> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t at = line.find("tally.deltas/");
    if (at == std::string::npos) continue;
    int32_t p = std::atoi(line.c_str() + at + 13);
    if (line.find(": applying from offset 0 as owner") != std::string::npos) {
      out[p].start_ms = LogLineMs(line);
    } else if (size_t c = line.find(": caught up at offset ");
               c != std::string::npos && line.find("served here as owner") != std::string::npos) {
      auto it = out.find(p);
      if (it == out.end() || it->second.end_ms >= 0) continue;
      it->second.end_ms = LogLineMs(line);
      it->second.records = std::atoll(line.c_str() + c + 22);
    }
  }
  for (auto it = out.begin(); it != out.end();) {
    it = it->second.end_ms < 0 ? out.erase(it) : std::next(it);
  }
  return out;
}

// Bytes of a stopped member's state directory once every partition in it
// is compacted: what it holds, apart from when RocksDB last flushed.
Result<uint64_t> CompactedBytes(const std::string& dir) {
  std::vector<uint32_t> parts;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory(ec) && name.rfind("partition-", 0) == 0) {
      parts.push_back(static_cast<uint32_t>(std::atoi(name.c_str() + 10)));
    }
  }
  {
    store::StoreOptions so;
    so.dir = dir;
    so.partitions = 0;  // as recorded
    so.open_partitions = parts;
    so.block_cache_bytes = 8ull << 20;
    so.min_free_bytes = 0;
    so.inactive_days = 0;  // purge nothing: only what compaction merges counts
    so.dedup_hours = 24 * 365 * 100;
    auto st = store::StateStore::Open(so);
    if (!st.ok()) return st.status();
    TALLY_RETURN_IF_ERROR((*st)->CompactAll());
  }
  return DirBytes(dir);
}

}  // namespace tally::bench
