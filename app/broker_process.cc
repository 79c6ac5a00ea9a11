#include "broker_process.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"

extern char** environ;

namespace tally::app {

namespace {

constexpr std::string_view kComponent = "broker";
std::string RecordPath(const std::string& state_dir) {
  return (std::filesystem::path(state_dir) / BrokerSideFiles()[0]).string();
}

// The process's arguments, NUL-separated in /proc; empty if it is gone.
std::vector<std::string> CommandLine(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

// A process that exited but was not reaped yet (its parent died and no
// reaper took it, or it is ours and we have not waited) still answers
// kill(pid, 0).
bool IsZombie(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(in, stat);
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z';
}

// `pid` runs `tally broker --state-dir <state_dir>`.
bool IsBrokerOf(pid_t pid, const std::string& state_dir) {
  if (pid <= 0 || kill(pid, 0) != 0 || IsZombie(pid)) return false;
  std::vector<std::string> args = CommandLine(pid);
  if (args.size() < 2 || args[1] != "broker") return false;
  for (size_t i = 2; i + 1 < args.size(); i++) {
    if (args[i] == "--state-dir" && args[i + 1] == state_dir) return true;
  }
  return false;
}

std::string DescribeExit(int wstatus) {
  if (WIFEXITED(wstatus)) return fmt::format("exited with status {}", WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) return fmt::format("was killed by signal {}", WTERMSIG(wstatus));
  return "stopped";
}

// Writes `text` to `dir`/`tmp_name`, then renames it to `dir`/`name`, so a
// reader sees the old contents or the new, whole. IOError naming the path.
base::Status ReplaceFile(const std::string& dir, const std::string& name,
                         const std::string& tmp_name, const std::string& text) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  const std::string tmp = (std::filesystem::path(dir) / tmp_name).string();
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return base::Status::IOError(fmt::format("writing {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return base::Status::IOError(
        fmt::format("renaming {} to {}: {}", tmp, path, std::strerror(errno)));
  }
  return base::Status::Ok();
}

}  // namespace

base::Status WriteBrokerRecord(const std::string& state_dir, const BrokerRecord& record) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return base::Status::IOError(fmt::format("creating {}: {}", state_dir, ec.message()));
  nlohmann::json j = {
      {"pid", record.pid}, {"bootstrap", record.bootstrap}, {"cluster_id", record.cluster_id}};
  return ReplaceFile(state_dir, BrokerSideFiles()[0], BrokerSideFiles()[1], j.dump() + "\n");
}

base::Result<BrokerRecord> ReadBrokerRecord(const std::string& state_dir) {
  const std::string path = RecordPath(state_dir);
  std::ifstream in(path);
  if (!in) return base::Status::NotFound(fmt::format("no {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    nlohmann::json j = nlohmann::json::parse(ss.str());
    BrokerRecord r;
    r.pid = j.at("pid").get<pid_t>();
    r.bootstrap = j.at("bootstrap").get<std::string>();
    r.cluster_id = j.value("cluster_id", std::string());
    return r;
  } catch (const nlohmann::json::exception& e) {
    return base::Status::Corruption(fmt::format("{}: {}", path, e.what()));
  }
}

base::Status WriteBrokerMetrics(const std::string& state_dir, const std::string& text) {
  return ReplaceFile(state_dir, BrokerSideFiles()[3], BrokerSideFiles()[4], text);
}

std::string ReadBrokerMetrics(const std::string& state_dir, int64_t max_age_ms) {
  const std::string path = (std::filesystem::path(state_dir) / BrokerSideFiles()[3]).string();
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  const int64_t modified_ms =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  if (base::WallMs() - modified_ms > max_age_ms) return "";
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void RemoveBrokerRecord(const std::string& state_dir, pid_t pid) {
  auto r = ReadBrokerRecord(state_dir);
  if (r.ok() && r->pid == pid) std::remove(RecordPath(state_dir).c_str());
}

base::Result<std::unique_ptr<BrokerProcess>> BrokerProcess::FindOrStart(
    const BrokerProcessOptions& o) {
  if (auto r = ReadBrokerRecord(o.state_dir); r.ok() && IsBrokerOf(r->pid, o.state_dir)) {
    TALLY_LOG_INFO(
        kComponent,
        "found the embedded broker of {} still serving (pid {}, {}): going on with its log",
        o.state_dir, r->pid, r->bootstrap);
    return std::unique_ptr<BrokerProcess>(new BrokerProcess(std::move(r).value(), true, false));
  }

  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0)
    return base::Status::IOError(fmt::format("readlink /proc/self/exe: {}", std::strerror(errno)));
  exe[n] = '\0';
  std::vector<std::string> args = {exe,
                                   "broker",
                                   "--state-dir",
                                   o.state_dir,
                                   "--port",
                                   std::to_string(o.port),
                                   "--partitions",
                                   std::to_string(o.partitions),
                                   "--log-level",
                                   o.log_level};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A session of its own: a terminal's Ctrl-C (SIGINT to the foreground
  // process group) stops `tally up`, which then decides whether the broker
  // may stop. Default dispositions and an empty mask, whatever ours are.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE, SIGHUP}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, exe, &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return base::Status::IOError(fmt::format("starting {} broker: {}", exe, std::strerror(rc)));

  const int64_t deadline = base::SteadyMs() + o.start_timeout_ms;
  for (;;) {
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid) {
      return base::Status::Unavailable(
          fmt::format("the embedded broker (tally broker, pid {}) {} before it served; see its log "
                      "lines above",
                      pid, DescribeExit(wstatus)));
    }
    if (auto r = ReadBrokerRecord(o.state_dir); r.ok() && r->pid == pid) {
      TALLY_LOG_INFO(kComponent, "started the embedded broker for {}: pid {}, {}", o.state_dir, pid,
                     r->bootstrap);
      return std::unique_ptr<BrokerProcess>(new BrokerProcess(std::move(r).value(), false, true));
    }
    if (base::SteadyMs() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return base::Status::Unavailable(
          fmt::format("the embedded broker (pid {}) did not record itself in {} within {} ms", pid,
                      RecordPath(o.state_dir), o.start_timeout_ms));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

BrokerProcess::BrokerProcess(BrokerRecord record, bool found, bool child)
    : record_(std::move(record)), found_(found), child_(child) {}

BrokerProcess::~BrokerProcess() = default;

bool BrokerProcess::Alive() {
  if (exited_) return false;
  if (child_) {
    int wstatus = 0;
    pid_t r = waitpid(record_.pid, &wstatus, WNOHANG);
    if (r == record_.pid) exit_description_ = DescribeExit(wstatus);
    exited_ = r != 0;
  } else {
    exited_ = kill(record_.pid, 0) != 0 || IsZombie(record_.pid);
  }
  return !exited_;
}

base::Status BrokerProcess::SetAvailable(bool available) {
  if (!Alive() || kill(record_.pid, available ? SIGUSR2 : SIGUSR1) != 0) {
    return base::Status::IOError("the embedded broker's process is gone");
  }
  return base::Status::Ok();
}

base::Status BrokerProcess::Stop(int timeout_ms) {
  if (!Alive()) return base::Status::Ok();
  if (kill(record_.pid, SIGTERM) != 0) {
    return base::Status::IOError(fmt::format("SIGTERM to the embedded broker (pid {}): {}",
                                             record_.pid, std::strerror(errno)));
  }
  const int64_t deadline = base::SteadyMs() + timeout_ms;
  while (Alive()) {
    if (base::SteadyMs() >= deadline) {
      TALLY_LOG_WARN(kComponent, "the embedded broker (pid {}) did not stop within {} ms: SIGKILL",
                     record_.pid, timeout_ms);
      kill(record_.pid, SIGKILL);
      if (child_) waitpid(record_.pid, nullptr, 0);
      exited_ = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return base::Status::Ok();
}

}  // namespace tally::app
