// BrokerProcess: `tally up`'s own broker, run as a process of its own.
//
// `tally up` without --brokers runs `tally broker --state-dir DIR` as a
// child in a session of its own: a terminal's Ctrl-C reaches only `tally
// up`, and a SIGKILL of `tally up` leaves the broker serving, so producers
// (kcat, the apps) go on publishing while `tally up` restarts. The broker
// records itself in `DIR/BROKER` (BrokerRecord); the next `tally up` on DIR
// finds it there and goes on with it.
//
// A clean stop of `tally up` stops the broker too: its log is on disk, with
// every record it acknowledged and the offsets tally committed, so the next
// `tally up` applies whatever was not applied yet. The broker ends by itself
// when its state directory is removed.
//
// Thread model: one thread (main's) creates, controls and destroys it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace tally::app {

// The contents of `STATE_DIR/BROKER`: which process serves the embedded
// broker of that state directory, and where. One JSON object:
// {"pid":N,"bootstrap":"127.0.0.1:9092","cluster_id":"<its log's cluster id>"}.
struct BrokerRecord {
  pid_t pid = 0;
  std::string bootstrap;
  std::string cluster_id;  // empty in a record of an older broker
};

// What the broker of a state directory keeps there beside the state: its
// record, the record's temporary and its log directory (`tally broker
// --state-dir DIR` logs to DIR/log), for store::StoreOptions::side_files.
inline const std::vector<std::string>& BrokerSideFiles() {
  static const std::vector<std::string> files = {"BROKER", "BROKER.tmp", "log", "BROKER.metrics",
                                                 "BROKER.metrics.tmp"};
  return files;
}

// The broker of a state directory writes its figures to
// `state_dir`/BROKER.metrics every second, in Prometheus' text format
// (tally_broker_*: log size, start and end offsets per partition, produce
// and fetch totals, flush rounds and latency, disk space, connections);
// `tally up` serves them in its GET /metrics. IOError naming the path.
base::Status WriteBrokerMetrics(const std::string& state_dir, const std::string& text);

// What `state_dir`/BROKER.metrics holds if it was written within the last
// `max_age_ms` (a broker that stopped writing is not reported); "" else.
std::string ReadBrokerMetrics(const std::string& state_dir, int64_t max_age_ms);

// Writes `record` to `state_dir`/BROKER atomically (a temporary file, then
// rename), creating the directory if needed. IOError naming the path.
base::Status WriteBrokerRecord(const std::string& state_dir, const BrokerRecord& record);

// Reads `state_dir`/BROKER. NotFound when there is none; Corruption naming
// the path when it does not parse.
base::Result<BrokerRecord> ReadBrokerRecord(const std::string& state_dir);

// Removes `state_dir`/BROKER if it still names `pid` (a newer broker's
// record is left alone). Best effort.
void RemoveBrokerRecord(const std::string& state_dir, pid_t pid);

struct BrokerProcessOptions {
  std::string state_dir;
  // `tally broker --port`: the bootstrap port (0: a random one).
  int port = 9092;
  int partitions = 16;
  std::string log_level = "info";
  // How long a new broker may take to record itself.
  int start_timeout_ms = 30000;
};

class BrokerProcess {
 public:
  // Finds the broker recorded in options.state_dir, if its process is alive
  // and is a `tally broker`, or else starts one (this executable, `broker
  // --state-dir ... --port ... --partitions ...`, stdin and stdout on
  // /dev/null, stderr shared with this process, a session of its own) and
  // waits until it has recorded itself. IOError or Unavailable naming what
  // failed (the child exited early, e.g. its port was taken; it did not
  // record itself in time). The caller owns the result.
  static base::Result<std::unique_ptr<BrokerProcess>> FindOrStart(
      const BrokerProcessOptions& options);

  // Leaves the broker as it is (running): Stop() is never implied.
  ~BrokerProcess();
  BrokerProcess(const BrokerProcess&) = delete;
  BrokerProcess& operator=(const BrokerProcess&) = delete;

  const std::string& bootstrap() const { return record_.bootstrap; }
  pid_t pid() const { return record_.pid; }
  // True when the broker was found running rather than started here.
  bool found() const { return found_; }

  // True while the broker's process runs (not yet exited or reaped).
  bool Alive();
  // Once Alive() is false: how it ended ("was killed by signal 9"), when it
  // was this process's child; "exited" otherwise.
  const std::string& exit_description() const { return exit_description_; }

  // Takes the broker down (SIGUSR1: connections closed, new ones refused,
  // the log kept) or brings it back (SIGUSR2), as `tally broker` does on
  // those signals. IOError if the process is gone.
  base::Status SetAvailable(bool available);

  // SIGTERM, then waits up to `timeout_ms` for the process to exit, then
  // SIGKILL. Its log is gone afterwards. OK once it has exited; IOError if
  // it could not be signalled.
  base::Status Stop(int timeout_ms);

 private:
  BrokerProcess(BrokerRecord record, bool found, bool child);

  BrokerRecord record_;
  bool found_;
  bool child_;  // our child: reaped with waitpid
  bool exited_ = false;
  std::string exit_description_ = "exited";
};

}  // namespace tally::app
