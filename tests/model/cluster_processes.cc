#include "cluster_processes.h"

#include <fmt/core.h>
#include <signal.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "testing/free_port.h"

namespace tally::model {

namespace fs = std::filesystem;

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

ClusterProcesses::ClusterProcesses(ClusterProcessesOptions options)
    : options_(std::move(options)) {}

ClusterProcesses::~ClusterProcesses() {
  for (auto& m : members_) {
    if (m.proc) m.proc->Kill();
  }
  directory_.reset();
  if (broker_) broker_->Terminate(10000);
}

base::Status ClusterProcesses::Start() {
  std::string bootstrap;
  for (int attempt = 0; attempt < 3 && bootstrap.empty(); attempt++) {
    const int port = testing::FreePort();
    if (port <= 0) return base::Status::IOError("no free port for the broker");
    testing::ChildOptions o;
    o.argv = {options_.binary, "broker",
              "--port",        std::to_string(port),
              "--partitions",  std::to_string(options_.partitions),
              "--log-level",   "info",
              "--log-dir",     (options_.dir / "broker-data").string()};
    o.log_path = (options_.dir / "broker.log").string();
    o.stdout_pipe = true;
    broker_ = std::make_unique<testing::ChildProcess>();
    if (auto st = broker_->Start(o); !st.ok()) return st;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::string line = broker_->ReadLine(1000);
      if (line.rfind("bootstrap: ", 0) == 0) {
        bootstrap = line.substr(11);
        break;
      }
      if (!broker_->Running()) break;  // the port was taken meanwhile
    }
    if (bootstrap.empty()) broker_->Terminate(5000);
  }
  if (bootstrap.empty()) {
    return base::Status::Unavailable("tally broker printed no bootstrap address (see broker.log)");
  }
  kafka_.brokers = bootstrap;
  kafka_.embedded = true;
  kafka_.overrides.push_back({"log_level", "3"});
  if (options_.progress) {
    options_.progress(
        fmt::format("tally broker up at {} ({} partitions)", bootstrap, options_.partitions));
  }

  // Reads tally.members and never publishes: no member.
  cluster::MembersDirectoryOptions d;
  d.kafka = kafka_;
  d.member = "test-observer";
  d.group = options_.group;
  auto dir = cluster::MembersDirectory::Start(d);
  if (!dir.ok()) return dir.status();
  directory_ = std::move(dir).value();
  return base::Status::Ok();
}

Member& ClusterProcesses::AddMember(int standbys) {
  Member m;
  m.name = "m" + std::to_string(members_.size() + 1);
  m.port = testing::FreePort();
  m.standbys = standbys;
  m.state_dir = options_.dir / (m.name + "-state");
  m.log = options_.dir / (m.name + ".log");
  members_.push_back(std::move(m));
  return members_.back();
}

base::Status ClusterProcesses::StartMember(Member& m, bool empty_state) {
  std::error_code ec;
  if (empty_state) fs::remove_all(m.state_dir, ec);
  fs::create_directories(m.state_dir, ec);
  {
    std::ofstream log(m.log, std::ios::app);
    log << "==== test: starting " << m.name << " (" << m.id() << ")"
        << (empty_state ? " with an empty state dir" : " with its state dir") << " at +"
        << Seconds(t0_) << " s ====\n";
  }
  testing::ChildOptions o;
  o.argv = {options_.binary, "up",           "--brokers",   kafka_.brokers,
            "--group",       options_.group, "--state-dir", m.state_dir.string(),
            "--http",        m.id(),         "--flush-ms",  std::to_string(options_.flush_ms),
            "--log-level",   "info"};
  if (m.standbys > 0) {
    o.argv.push_back("--standbys");
    o.argv.push_back(std::to_string(m.standbys));
  }
  o.log_path = m.log.string();
  m.proc = std::make_unique<testing::ChildProcess>();
  m.killed = false;
  return m.proc->Start(o);
}

int ClusterProcesses::Leave(Member& m, int timeout_ms) {
  const int code = m.proc->StopWith(SIGTERM, timeout_ms);
  m.proc->Kill();
  m.proc.reset();
  return code;
}

void ClusterProcesses::Kill(Member& m) {
  m.proc->Kill();
  m.proc.reset();
  m.killed = true;
}

std::vector<Member*> ClusterProcesses::Live() {
  std::vector<Member*> out;
  for (auto& m : members_) {
    if (m.proc) out.push_back(&m);
  }
  return out;
}

std::vector<Member*> ClusterProcesses::Killed() {
  std::vector<Member*> out;
  for (auto& m : members_) {
    if (!m.proc && m.killed) out.push_back(&m);
  }
  return out;
}

std::string ClusterProcesses::LiveNames() {
  std::string out;
  for (Member* m : Live()) out += (out.empty() ? "" : ", ") + m->name + "=" + m->id();
  return out;
}

std::string ClusterProcesses::Exited() {
  for (Member* m : Live()) {
    if (!m->proc->Running()) {
      auto st = m->proc->Wait(0);
      return fmt::format("{} ({}) exited by itself, wait status {}", m->name, m->id(),
                         st ? *st : -1);
    }
  }
  return "";
}

bool ClusterProcesses::SettledNow() {
  if (!directory_->CaughtUp()) return false;
  std::set<std::string> want, got;
  for (Member* m : Live()) want.insert(m->id());
  std::vector<int> owners(options_.partitions, 0);
  size_t fewest = SIZE_MAX, most = 0;
  for (const auto& m : directory_->Snapshot()) {
    got.insert(m.member);
    if (!m.restoring.empty()) return false;
    for (int32_t p : m.owns) {
      if (p < 0 || p >= options_.partitions) return false;
      owners[p]++;
    }
    fewest = std::min(fewest, m.owns.size());
    most = std::max(most, m.owns.size());
  }
  if (got != want || most > fewest + 1) return false;
  return std::all_of(owners.begin(), owners.end(), [](int n) { return n == 1; });
}

base::Result<double> ClusterProcesses::WaitSettled(int timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  int in_a_row = 0;
  while (Seconds(start) < timeout_s) {
    if (std::string exited = Exited(); !exited.empty()) return base::Status::Aborted(exited);
    in_a_row = SettledNow() ? in_a_row + 1 : 0;
    if (in_a_row >= 3) return Seconds(start);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return base::Status::DeadlineExceeded(
      fmt::format("the cluster did not settle within {} s; live: {}; the directory shows:\n{}",
                  timeout_s, LiveNames(), DescribeDirectory()));
}

std::string ClusterProcesses::DescribeDirectory() const {
  std::string out;
  for (const auto& m : directory_->Snapshot()) {
    out += "  " + m.member + " gen " + std::to_string(m.generation) + " owns [";
    for (size_t i = 0; i < m.owns.size(); i++) out += (i ? "," : "") + std::to_string(m.owns[i]);
    out += "] standby [";
    for (size_t i = 0; i < m.standby.size(); i++) {
      out += (i ? "," : "") + std::to_string(m.standby[i]);
    }
    out += "] restoring [";
    for (size_t i = 0; i < m.restoring.size(); i++) {
      const auto& r = m.restoring[i];
      out += (i ? "," : "") + std::to_string(r.partition) + "@" + std::to_string(r.offset) + "/" +
             std::to_string(r.end_offset);
    }
    out += "]\n";
  }
  return out.empty() ? "  (no live member)\n" : out;
}

void ClusterProcesses::PrintLogTails() const {
  auto print = [](const std::string& title, const fs::path& path) {
    std::ifstream in(path);
    std::deque<std::string> tail, marked;
    std::string line;
    while (std::getline(in, line)) {
      tail.push_back(line);
      if (tail.size() > 30) tail.pop_front();
      if (line.find(" WARN ") != std::string::npos || line.find(" ERROR ") != std::string::npos ||
          line.rfind("==== test", 0) == 0) {
        marked.push_back(line);
        if (marked.size() > 30) marked.pop_front();
      }
    }
    std::printf("---- %s (%s): warnings, errors and starts ----\n", title.c_str(), path.c_str());
    for (const auto& l : marked) std::printf("%s\n", l.c_str());
    std::printf("---- %s: last lines ----\n", title.c_str());
    for (const auto& l : tail) std::printf("%s\n", l.c_str());
  };
  print("broker", options_.dir / "broker.log");
  for (const auto& m : members_) {
    print(m.name + " " + m.id() + (m.proc ? " (live)" : m.killed ? " (killed)" : " (left)"), m.log);
  }
  std::fflush(stdout);
}

}  // namespace tally::model
