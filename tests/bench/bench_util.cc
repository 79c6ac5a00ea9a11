#include "bench_util.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tally::bench {

using base::Result;
using base::Status;

namespace {

int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads what is available into *buf, waiting up to timeout_ms. 0 on EOF,
// -1 on error or timeout, else bytes read.
ssize_t ReadSome(int fd, std::string* buf, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int r = ::poll(&p, 1, timeout_ms);
  if (r <= 0) return -1;
  char tmp[65536];
  ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
  if (n > 0) buf->append(tmp, static_cast<size_t>(n));
  return n;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Millis(double seconds) { return static_cast<int>(seconds * 1000); }

uint64_t StatusField(pid_t pid, const char* field) {
  std::string s = ReadFile(fmt::format("/proc/{}/status", pid));
  size_t at = s.find(field);
  if (at == std::string::npos) return 0;
  return std::strtoull(s.c_str() + at + std::strlen(field), nullptr, 10) * 1024;
}

}  // namespace

bool WaitForPort(int port, double timeout_s) {
  auto t0 = Clock::now();
  while (SecondsSince(t0) < timeout_s) {
    int fd = ConnectLoopback(port);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

Status Process::Start(const std::vector<std::string>& argv, const std::string& log_path,
                      const std::string& stdout_path) {
  testing::ChildOptions o;
  o.argv = argv;
  o.log_path = log_path;
  o.stdout_path = stdout_path;
  return child_.Start(o);
}

int Process::Wait(double timeout_s) { return child_.Wait(Millis(timeout_s)).value_or(-1); }

int Process::Stop(double grace_s) { return child_.Terminate(Millis(grace_s)); }

double Process::CpuSeconds() const {
  if (pid() <= 0) return 0;
  return StatCpuSeconds(ReadFile(fmt::format("/proc/{}/stat", pid())));
}

uint64_t Process::RssBytes() const { return pid() > 0 ? StatusField(pid(), "VmRSS:") : 0; }
uint64_t Process::PeakRssBytes() const { return pid() > 0 ? StatusField(pid(), "VmHWM:") : 0; }

Result<std::string> RunCapture(const std::vector<std::string>& argv, const std::string& log_path,
                               double timeout_s) {
  std::string out_path = log_path + ".out";
  Process p;
  TALLY_RETURN_IF_ERROR(p.Start(argv, log_path, out_path));
  int st = p.Wait(timeout_s);
  if (st == -1) {
    p.Stop(1);
    return Status::Unavailable(fmt::format("{} did not finish within {} s", argv[0], timeout_s));
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return Status::Internal(fmt::format("{} failed (status {}); see {}", argv[0], st, log_path));
  }
  return ReadFile(out_path);
}

uint64_t DirBytes(const std::string& dir, std::string_view suffix) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file(ec)) continue;
    std::string name = it->path().filename().string();
    if (!suffix.empty() && !name.ends_with(suffix)) continue;
    total += it->file_size(ec);
  }
  return total;
}

HttpClient::~HttpClient() {
  if (fd_ >= 0) ::close(fd_);
}

Status HttpClient::Connect() {
  if (fd_ >= 0) ::close(fd_);
  buf_.clear();
  fd_ = ConnectLoopback(port_);
  if (fd_ < 0) return Status::IOError(fmt::format("connect 127.0.0.1:{}: {}", port_, std::strerror(errno)));
  return Status::Ok();
}

Status HttpClient::Get(std::string_view target, int* status, std::string* body, double timeout_s) {
  std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", target);
  for (int attempt = 0; attempt < 2; attempt++) {
    if (fd_ < 0) TALLY_RETURN_IF_ERROR(Connect());
    if (!WriteAll(fd_, req.data(), req.size())) {
      ::close(fd_);
      fd_ = -1;
      continue;
    }
    buf_.clear();
    auto t0 = Clock::now();
    size_t header_end = std::string::npos;
    size_t content_length = 0;
    bool closed = false;
    while (true) {
      if (header_end == std::string::npos) {
        header_end = buf_.find("\r\n\r\n");
        if (header_end != std::string::npos) {
          std::string head = buf_.substr(0, header_end);
          std::transform(head.begin(), head.end(), head.begin(), ::tolower);
          size_t cl = head.find("content-length:");
          if (cl != std::string::npos) content_length = std::strtoull(head.c_str() + cl + 15, nullptr, 10);
          *status = std::atoi(buf_.c_str() + 9);
        }
      }
      if (header_end != std::string::npos && buf_.size() >= header_end + 4 + content_length) break;
      double left = timeout_s - SecondsSince(t0);
      if (left <= 0) return Status::IOError(fmt::format("GET {}: no answer within {} s", target, timeout_s));
      ssize_t n = ReadSome(fd_, &buf_, static_cast<int>(left * 1000) + 1);
      if (n == 0) {
        closed = true;
        break;
      }
      if (n < 0 && errno != EINTR && errno != EAGAIN) {
        closed = true;
        break;
      }
    }
    if (closed && header_end == std::string::npos) {
      ::close(fd_);
      fd_ = -1;
      continue;  // the server closed a kept-alive connection: once more
    }
    body->assign(buf_, header_end + 4, content_length);
    return Status::Ok();
  }
  return Status::IOError(fmt::format("GET {}: connection closed", target));
}

void RedisPipe::Add(std::initializer_list<std::string_view> args) {
  out_ += fmt::format("*{}\r\n", args.size());
  for (std::string_view a : args) {
    out_ += fmt::format("${}\r\n", a.size());
    out_.append(a);
    out_ += "\r\n";
  }
  commands_++;
}

Result<double> RedisPipe::Send(int port, uint64_t* errors) {
  int fd = ConnectLoopback(port);
  if (fd < 0) return Status::IOError(fmt::format("connect to redis on {}: {}", port, std::strerror(errno)));
  *errors = 0;
  std::atomic<bool> failed{false};
  size_t expect = commands_;
  auto t0 = Clock::now();
  double seconds = 0;
  // Replies of writes are integers (:n), statuses (+OK) or errors (-ERR):
  // one line each.
  std::thread reader([&] {
    std::string buf;
    size_t seen = 0, pos = 0;
    while (seen < expect) {
      ssize_t n = ReadSome(fd, &buf, 60000);
      if (n <= 0) {
        failed = true;
        return;
      }
      while (true) {
        size_t nl = buf.find("\r\n", pos);
        if (nl == std::string::npos) break;
        if (buf[pos] == '-') (*errors)++;
        seen++;
        pos = nl + 2;
      }
      buf.erase(0, pos);
      pos = 0;
    }
    seconds = SecondsSince(t0);
  });
  constexpr size_t kChunk = 256 * 1024;
  for (size_t off = 0; off < out_.size() && !failed; off += kChunk) {
    if (!WriteAll(fd, out_.data() + off, std::min(kChunk, out_.size() - off))) failed = true;
  }
  reader.join();
  ::close(fd);
  if (failed) return Status::IOError("redis connection failed during the pipeline");
  return seconds;
}

Result<std::string> RedisCommand(int port, std::initializer_list<std::string_view> args) {
  int fd = ConnectLoopback(port);
  if (fd < 0) return Status::IOError(fmt::format("connect to redis on {}", port));
  std::string cmd = fmt::format("*{}\r\n", args.size());
  for (std::string_view a : args) cmd += fmt::format("${}\r\n{}\r\n", a.size(), a);
  WriteAll(fd, cmd.data(), cmd.size());
  std::string buf;
  while (true) {
    if (ReadSome(fd, &buf, 120000) <= 0) break;
    size_t nl = buf.find("\r\n");
    if (nl == std::string::npos) continue;
    if (buf[0] != '$') break;
    long len = std::atol(buf.c_str() + 1);
    if (len < 0 || buf.size() >= nl + 2 + static_cast<size_t>(len)) break;
  }
  ::close(fd);
  if (buf.empty()) return Status::IOError("no reply from redis");
  if (buf[0] == '-') return Status::Internal(buf.substr(1));
  if (buf[0] == '$') {
    size_t nl = buf.find("\r\n");
    return buf.substr(nl + 2, static_cast<size_t>(std::atol(buf.c_str() + 1)));
  }
  return buf.substr(1, buf.find("\r\n") - 1);
}

void Progress(const std::string& line) {
  std::fprintf(stderr, "  .. %s\n", line.c_str());
  std::fflush(stderr);
}

double Samples::Percentile(double p) {
  if (v_.empty()) return 0;
  if (!sorted_) {
    std::sort(v_.begin(), v_.end());
    sorted_ = true;
  }
  double rank = p / 100.0 * static_cast<double>(v_.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, v_.size() - 1);
  return v_[lo] + (v_[hi] - v_[lo]) * (rank - static_cast<double>(lo));
}

double SumField(std::string_view json, std::string_view key) {
  std::string needle = fmt::format("\"{}\":", key);
  double sum = 0;
  for (size_t at = json.find(needle); at != std::string_view::npos;
       at = json.find(needle, at + 1)) {
    sum += std::strtod(std::string(json.substr(at + needle.size(), 24)).c_str(), nullptr);
  }
  return sum;
}

double JsonNumber(std::string_view json, std::string_view key) {
  std::string needle = fmt::format("\"{}\":", key);
  size_t at = json.find(needle);
  if (at == std::string_view::npos) return std::nan("");
  return std::strtod(std::string(json.substr(at + needle.size(), 32)).c_str(), nullptr);
}

base::Status PinProcess(pid_t pid, int first, int last) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c = first; c <= last; c++) CPU_SET(c, &set);
  int pinned = 0;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    const pid_t tid = static_cast<pid_t>(std::strtol(task.path().filename().c_str(), nullptr, 10));
    if (tid > 0 && sched_setaffinity(tid, sizeof(set), &set) == 0) pinned++;
  }
  if (pinned == 0)
    return base::Status::Internal(
        fmt::format("could not pin process {} to CPUs {}-{}", pid, first, last));
  return base::Status::Ok();
}

double Median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

double Min(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::min_element(v.begin(), v.end());
}
double Max(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

std::string Times(const std::vector<double>& v) {
  std::vector<std::string> s;
  for (double x : v) s.push_back(fmt::format("{:.2f}", x));
  return fmt::format("{}", fmt::join(s, ", "));
}

base::Result<std::vector<base::PartitionOffsets>> TopicWatermarks(const std::string& brokers,
                                                                  std::string_view topic,
                                                                  base::KafkaHandle* client) {
  if (!*client) {
    base::KafkaOptions ko;
    ko.brokers = brokers;
    ko.embedded = true;
    auto conf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, ko, {});
    if (!conf.ok()) return conf.status();
    auto rk = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
    if (!rk.ok()) return rk.status();
    *client = std::move(rk).value();
  }
  return base::QueryWatermarks(client->get(), topic, 10000);
}

double StatCpuSeconds(std::string_view stat) {
  size_t rp = stat.rfind(')');
  if (rp == std::string_view::npos || rp + 2 > stat.size()) return 0;
  std::istringstream in(std::string(stat.substr(rp + 2)));
  std::string field;
  // After ") ": state(3) ppid pgrp session tty tpgid flags minflt cminflt
  // majflt cmajflt utime(14) stime(15).
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; i++) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace tally::bench
