// ClusterProcesses: a tally cluster made of real processes, for tests of
// SPEC section 6: one `tally broker` child (the embedded broker, tally's
// topics with a given partition count) and `tally up --brokers` members as
// children that join, leave cleanly (SIGTERM), are SIGKILLed and are
// restarted with their state directory or an emptied one. An observer of
// the members directory (tally.members, never publishing itself) tells when
// the applier group has settled. Every child logs at info into a file of
// the test's directory; PrintLogTails() shows the ends of them all.
//
// Test-only (GoogleTest is not used here: failures come back as a Status
// or a message for the test to assert on). Thread model: externally
// synchronized.
#pragma once

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"
#include "cluster/members_directory.h"
#include "testing/child_process.h"

namespace tally::model {

// One `tally up` member: its port (and so its member id "127.0.0.1:<port>"),
// state directory and log file stay across restarts.
struct Member {
  std::string name;  // m1, m2, ... in the order they were added
  int port = 0;
  int standbys = 0;  // --standbys
  std::filesystem::path state_dir, log;
  std::unique_ptr<testing::ChildProcess> proc;  // null while not running
  bool killed = false;                          // SIGKILLed and not started since
  std::string id() const { return "127.0.0.1:" + std::to_string(port); }
  std::string url() const { return "http://" + id(); }
};

struct ClusterProcessesOptions {
  std::string binary;         // the tally binary
  std::filesystem::path dir;  // state dirs and logs go here; must exist
  int partitions = 4;         // of tally.events, tally.deltas, tally.dlq
  std::string group = "g";    // --group of every member
  int flush_ms = 20;          // --flush-ms of every member
  // Lines of progress (may be empty).
  std::function<void(const std::string&)> progress;
};

class ClusterProcesses {
 public:
  explicit ClusterProcesses(ClusterProcessesOptions options);
  // SIGKILLs every member still running, stops the observer and the broker.
  ~ClusterProcesses();
  ClusterProcesses(const ClusterProcesses&) = delete;
  ClusterProcesses& operator=(const ClusterProcesses&) = delete;

  // Starts `tally broker` on a free port (another one if it was taken
  // meanwhile) and the observer of the members directory. An error if the
  // broker did not print its bootstrap address within 30 s.
  [[nodiscard]] base::Status Start();

  // How clients of the test reach the broker (valid after Start()).
  const base::KafkaOptions& kafka() const { return kafka_; }

  // A new member (not started) with a free port of its own.
  Member& AddMember(int standbys);
  // Starts `tally up --brokers` for `m` (not running), its state dir
  // emptied first if `empty_state`; a line in its log marks the start.
  [[nodiscard]] base::Status StartMember(Member& m, bool empty_state);
  // SIGTERM, and waits up to `timeout_ms` for the exit: its exit code, -1
  // on a timeout (then SIGKILLed) or a death by signal.
  int Leave(Member& m, int timeout_ms);
  // SIGKILL; the member may be started again.
  void Kill(Member& m);

  std::vector<Member*> Live();
  std::vector<Member*> Killed();  // SIGKILLed, not started since
  std::string LiveNames();        // "m1=127.0.0.1:P, ..."

  // Empty while every live member's process runs; else says which exited.
  std::string Exited();

  // True when the directory shows exactly the live members, every
  // partition owned by exactly one of them, the counts owned differing by
  // at most one (cooperative-sticky balances them), and nothing restoring.
  bool SettledNow();
  // Waits until SettledNow() has held for three polls in a row (~0.5 s),
  // or a member exited, or `timeout_s` passed. The seconds it took, or an
  // error saying why not (the directory's view included).
  base::Result<double> WaitSettled(int timeout_s);

  // What the directory shows, one member a line.
  std::string DescribeDirectory() const;

  // For each log (the broker's, every member's): its WARN and ERROR lines
  // and the test's start marks (the last 30), and its last 30 lines.
  void PrintLogTails() const;

 private:
  ClusterProcessesOptions options_;
  std::unique_ptr<testing::ChildProcess> broker_;
  base::KafkaOptions kafka_;
  std::unique_ptr<cluster::MembersDirectory> directory_;
  std::deque<Member> members_;  // stable addresses
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace tally::model
