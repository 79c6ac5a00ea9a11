// ChildProcess: a program a test or tool runs beside itself (`tally broker`,
// `tally up`, redis-server, wrk), with its output in a log file or on a
// pipe, waited for with a deadline and killed when the object dies, so no
// child outlives the test that started it. Part of tally_testing.
//
// Thread model: externally synchronized.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tally::testing {

struct ChildOptions {
  // argv[0] is a path, or a name looked up in PATH. Must not be empty.
  std::vector<std::string> argv;
  // NAME=value settings added to (or replacing in) this process's
  // environment for the child.
  std::vector<std::pair<std::string, std::string>> env;
  // stderr is appended to this file (created 0644); so is stdout unless
  // stdout_path or stdout_pipe says otherwise. Empty: both are this
  // process's own.
  std::string log_path;
  // stdout to this file, truncated first.
  std::string stdout_path;
  // stdout to a pipe, read with ReadLine(). Wins over stdout_path.
  bool stdout_pipe = false;
};

class ChildProcess {
 public:
  ChildProcess() = default;
  // SIGKILLs the child if it still runs, and reaps it.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts the child, stdin from /dev/null. Precondition: not started yet.
  // IOError naming argv[0] if it cannot be started (not found, not
  // executable, a log file that cannot be opened).
  [[nodiscard]] base::Status Start(const ChildOptions& options);

  // The child's pid; kept after it exited. -1 before Start().
  pid_t pid() const { return pid_; }

  // True while the child has not exited (reaps it once it has).
  bool Running();

  // Waits up to `timeout_ms` for the child to exit. Its wait status as
  // waitpid() gives it, also when it exited earlier; nullopt on timeout (the
  // child left running) or if it was never started.
  std::optional<int> Wait(int timeout_ms);

  // Sends `sig` (none if 0) and waits up to `timeout_ms` for the exit.
  // The exit code if it exited by itself, -1 on timeout or death by a signal.
  int StopWith(int sig, int timeout_ms);

  // SIGTERM, then SIGKILL if it has not exited after `grace_ms`. The wait
  // status, or -1 if it was never started or never went away.
  int Terminate(int grace_ms);

  // SIGKILL and reap, if it still runs.
  void Kill();

  // The next line (without '\n') the child wrote to its stdout pipe, or ""
  // if `timeout_ms` passes first: a line read in part by then is kept, and
  // the next call goes on with it. Once the pipe closes, what is left of
  // an unfinished line. Precondition: started with stdout_pipe.
  std::string ReadLine(int timeout_ms);

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;  // set once reaped
  int out_fd_ = -1;            // read end of the stdout pipe
  std::string partial_;        // a line ReadLine() has read in part
};

}  // namespace tally::testing
