// bench_util: the pieces tally-bench is made of. Child processes (tally,
// redis-server, wrk, redis-benchmark; started and stopped by tally_testing's
// ChildProcess) with their CPU and memory read from /proc, a small blocking
// HTTP/1.1 client, a pipelined RESP writer for the Redis baselines, and
// latency percentiles.
//
// Thread model: every class is externally synchronized unless it says
// otherwise.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/kafka.h"
#include "base/status.h"
#include "testing/child_process.h"
#include "testing/free_port.h"

namespace tally::bench {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A loopback TCP port nobody listens on right now (tally_testing's).
using ::tally::testing::FreePort;

// True once something accepts TCP connections on 127.0.0.1:port, waiting at
// most `timeout_s`.
bool WaitForPort(int port, double timeout_s);

// A child process. Its stderr goes to `log_path`, and so does its stdout
// unless `stdout_path` is given. The destructor kills (SIGKILL) a child
// still running.
class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  base::Status Start(const std::vector<std::string>& argv, const std::string& log_path,
                     const std::string& stdout_path = {});
  pid_t pid() const { return child_.pid(); }
  bool running() { return child_.Running(); }
  // SIGTERM, then SIGKILL after `grace_s`. Returns the exit status as
  // waitpid() gives it, or -1.
  int Stop(double grace_s = 10);
  // Waits for the child to exit on its own: its exit status as waitpid()
  // gives it; -1 on timeout (child left running).
  int Wait(double timeout_s);

  // user+system CPU seconds so far (from /proc/PID/stat; 0 once reaped).
  double CpuSeconds() const;
  // Current and peak resident set size in bytes (/proc/PID/status).
  uint64_t RssBytes() const;
  uint64_t PeakRssBytes() const;

 private:
  testing::ChildProcess child_;
};

// Runs argv to completion, returning its stdout (stderr goes to `log_path`).
base::Result<std::string> RunCapture(const std::vector<std::string>& argv, const std::string& log_path,
                                     double timeout_s);

// Sets the CPU affinity of every thread of process `pid` (and so of the
// threads they start later) to the CPUs in [first, last]. Best effort: a
// thread that ends meanwhile is skipped. Fails if none could be set.
base::Status PinProcess(pid_t pid, int first, int last);

// Bytes of all regular files under `dir` (recursively), and of those whose
// name ends with `suffix` when it is not empty.
uint64_t DirBytes(const std::string& dir, std::string_view suffix = {});

// A blocking HTTP/1.1 client on one keep-alive connection to 127.0.0.1:port.
class HttpClient {
 public:
  explicit HttpClient(int port) : port_(port) {}
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // GET `target`; fills *status and *body. Reconnects once if the
  // connection was closed. IOError when no answer comes within timeout.
  base::Status Get(std::string_view target, int* status, std::string* body, double timeout_s = 5);

 private:
  base::Status Connect();
  int port_;
  int fd_ = -1;
  std::string buf_;
};

// Writes RESP commands to one Redis connection while a reader thread counts
// the replies: the fastest way a client can apply a known list of commands.
class RedisPipe {
 public:
  // Appends one command (array of bulk strings) to the outgoing buffer.
  void Add(std::initializer_list<std::string_view> args);
  size_t commands() const { return commands_; }
  size_t bytes() const { return out_.size(); }

  // Connects to 127.0.0.1:port, sends everything queued, waits for every
  // reply. *errors counts error replies. Returns the seconds from the first
  // byte sent to the last reply read.
  base::Result<double> Send(int port, uint64_t* errors);

 private:
  std::string out_;
  size_t commands_ = 0;
};

// One request/reply to Redis (INFO, FLUSHALL, CONFIG): the reply's payload.
base::Result<std::string> RedisCommand(int port, std::initializer_list<std::string_view> args);

// Percentiles of a sample set, in the unit they were added in.
class Samples {
 public:
  void Add(double v) {
    v_.push_back(v);
    sorted_ = false;
  }
  size_t size() const { return v_.size(); }
  // p in [0, 100]; 0 when empty. Sorts on first use after Add().
  double Percentile(double p);

 private:
  std::vector<double> v_;
  bool sorted_ = false;
};

// One workload's outcome, as tally-bench prints it (a JSON line and a row
// of the table). NaN means "not measured".
struct WorkloadResult {
  std::string workload;
  std::string unit;
  double value = NAN;  // the headline number, in `unit`
  double p50_ms = NAN, p99_ms = NAN, p999_ms = NAN;
  double cpu_s = NAN;
  // The query workloads: CPU microseconds per request (query_batch: per
  // post) of the tally process and of redis-server in its baseline, each
  // utime+stime of every thread over its own measured window. ingest: per
  // event, tally up and the embedded broker against redis-server.
  double cpu_us = NAN;
  double baseline_cpu_us = NAN;
  double baseline_p99_ms = NAN;  // the baseline's p99, same connections
  double p99_ratio = NAN;        // p99_ms / baseline_p99_ms
  double rss_mb = NAN;
  double disk_mb = NAN;
  std::string baseline;
  double baseline_value = NAN;
  double ratio = NAN;
  std::string target;
  std::optional<bool> met;
  std::map<std::string, double> extra;
};

// Prints "  .. line" to stderr: a workload's progress.
void Progress(const std::string& line);

// The value of "key": in a flat JSON object, as a number; NaN if absent.
double JsonNumber(std::string_view json, std::string_view key);
// Sums "key":N over every object of a JSON text (the watermarks answer).
double SumField(std::string_view json, std::string_view key);

// Bytes in MiB.
inline double Mb(double bytes) { return bytes / (1024.0 * 1024.0); }
inline double Mb(uint64_t bytes) { return Mb(static_cast<double>(bytes)); }

// The median of v's numbers, NaNs left out; NaN if none is left.
double Median(std::vector<double> v);
// The least and the greatest of v; NaN if v is empty.
double Min(const std::vector<double>& v);
double Max(const std::vector<double>& v);
// "a, b, c" of seconds, for progress lines.
std::string Times(const std::vector<double>& v);

// Every partition's low and high watermarks of `topic` on the embedded
// broker at `brokers`, through *client, which the first query makes and
// the next ones reuse: a new client would first connect, inside the time a
// caller measures. Reset *client when the broker changes.
base::Result<std::vector<base::PartitionOffsets>> TopicWatermarks(const std::string& brokers,
                                                                  std::string_view topic,
                                                                  base::KafkaHandle* client);

// utime + stime, in seconds, of a /proc/PID/stat or /proc/PID/task/TID/stat
// text; 0 if it is not one.
double StatCpuSeconds(std::string_view stat);

void SleepMs(int ms);
// The wall clock, in ms since the epoch.
int64_t WallMs();

}  // namespace tally::bench
