#include "testing/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

extern char** environ;

namespace tally::testing {

namespace {

// This process's environment with `overrides` set on top, as NAME=value.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; e++) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : overrides) replaced = replaced || name == k;
    if (!replaced) out.emplace_back(entry);
  }
  for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

ChildProcess::~ChildProcess() {
  Kill();
  if (out_fd_ >= 0) ::close(out_fd_);
}

base::Status ChildProcess::Start(const ChildOptions& options) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!options.log_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 2, options.log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  int pipe_fds[2] = {-1, -1};
  if (options.stdout_pipe) {
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      posix_spawn_file_actions_destroy(&fa);
      return base::Status::IOError("cannot start " + options.argv[0] +
                                   ": pipe: " + std::strerror(errno));
    }
    // dup2 clears close-on-exec on the child's stdout only.
    posix_spawn_file_actions_adddup2(&fa, pipe_fds[1], 1);
  } else if (!options.stdout_path.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, options.stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  } else if (!options.log_path.empty()) {
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
  }
  std::vector<std::string> args = options.argv;
  std::vector<std::string> env = ChildEnvironment(options.env);
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(env);
  int rc = ::posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  if (rc != 0) {
    pid_ = -1;
    if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
    return base::Status::IOError("cannot start " + options.argv[0] + ": " + std::strerror(rc));
  }
  out_fd_ = pipe_fds[0];
  status_.reset();
  return base::Status::Ok();
}

bool ChildProcess::Running() {
  if (pid_ <= 0 || status_) return false;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) {
    status_ = st;
    return false;
  }
  return true;
}

std::optional<int> ChildProcess::Wait(int timeout_ms) {
  if (pid_ <= 0) return std::nullopt;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Running()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status_;
}

int ChildProcess::StopWith(int sig, int timeout_ms) {
  if (sig != 0 && Running()) ::kill(pid_, sig);
  std::optional<int> st = Wait(timeout_ms);
  if (!st || !WIFEXITED(*st)) return -1;
  return WEXITSTATUS(*st);
}

int ChildProcess::Terminate(int grace_ms) {
  if (!Running()) return status_.value_or(-1);
  ::kill(pid_, SIGTERM);
  if (!Wait(grace_ms)) {
    ::kill(pid_, SIGKILL);
    Wait(grace_ms);
  }
  return status_.value_or(-1);
}

void ChildProcess::Kill() {
  if (!Running()) return;
  ::kill(pid_, SIGKILL);
  int st = 0;
  if (::waitpid(pid_, &st, 0) == pid_) status_ = st;
}

std::string ChildProcess::ReadLine(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (out_fd_ >= 0) {
    if (size_t nl = partial_.find('\n'); nl != std::string::npos) {
      std::string line = partial_.substr(0, nl);
      partial_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{out_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) != 1) {
      return {};  // timed out: the part read so far waits for the next call
    }
    char buf[256];
    ssize_t n = ::read(out_fd_, buf, sizeof(buf));
    if (n <= 0) break;  // closed
    partial_.append(buf, static_cast<size_t>(n));
  }
  return std::exchange(partial_, {});
}

}  // namespace tally::testing
