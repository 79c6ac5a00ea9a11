// query_peer_client_bench: what a remote read costs a cluster member. Fills
// a store with N posts, serves it with HttpServer in this process, and
// reads GET /v1/posts/{random}/counts for --seconds per workload, from 1
// and from --threads threads:
//
//   local    QueryService::Handle() called directly (what an owned read costs)
//   peer     PeerClient::Get() through the server (what a remote read costs)
//   batch4   PeerClient::GetAll() of 4 such reads at once (counted as 4)
//   raw      a blocking keep-alive socket per thread, no pool, no I/O thread:
//            the floor for any HTTP client of this server
//   connect  a new TCP connection per request: what the pool saves
//
// Prints requests/s, latency percentiles and CPU per request: the whole
// process's, the client's (calling threads plus the client's tally-peers
// thread) and the server's (its tally-http-* threads).
//
//   query_peer_client_bench --posts 100000 --seconds 3 --threads 8
#include <arpa/inet.h>
#include <dirent.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "query/http_server.h"
#include "query/peer_client.h"
#include "query/query_service.h"
#include "schemas/delta.h"
#include "store/state_store.h"

using namespace tally;  // NOLINT: a small program
using Clock = std::chrono::steady_clock;

namespace {

// CPU seconds used so far by this process's threads whose name starts with
// `prefix` (threads that have exited are not counted).
double ThreadsCpuSeconds(std::string_view prefix) {
  double ticks = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::string base = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(base + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::ifstream stat(base + "/stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::string field;
    for (int i = 0; i < 11; i++) rest >> field;  // state .. cmajflt
    double utime = 0, stime = 0;
    rest >> utime >> stime;
    ticks += utime + stime;
  }
  ::closedir(dir);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double ThisThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// A blocking HTTP/1.1 connection: send a request, read one answer by its
// Content-Length.
class BlockingConn {
 public:
  explicit BlockingConn(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~BlockingConn() { ::close(fd_); }
  // The body of the answer; "" on any failure.
  std::string Get(const std::string& target) {
    std::string req = "GET " + target + " HTTP/1.1\r\nHost: bench\r\n\r\n";
    if (!ok_ ||
        ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
      return "";
    }
    for (;;) {
      size_t end = buf_.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t cl = buf_.find("Content-Length: ");
        size_t len = cl < end ? std::stoul(buf_.substr(cl + 16)) : 0;
        if (buf_.size() >= end + 4 + len) {
          std::string body = buf_.substr(end + 4, len);
          buf_.erase(0, end + 4 + len);
          return body;
        }
      }
      char tmp[16384];
      ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string buf_;
};

struct Result {
  uint64_t requests = 0;
  uint64_t errors = 0;
  std::vector<uint32_t> latency_ns;  // per call (a batch4 call is one)
  double caller_cpu = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir = (std::filesystem::temp_directory_path() / "tally-peer-bench").string();
  int64_t posts = 100000, partitions = 16, server_threads = 2, threads = 8, seconds = 3;
  int64_t io_threads = 1;
  std::string only;
  base::FlagSet flags("query_peer_client_bench",
                      "Measures remote reads through PeerClient against a local HttpServer.");
  flags.String("dir", &dir, "state directory (emptied first)");
  flags.Int("posts", &posts, "number of posts to write (ids 1..N)");
  flags.Int("partitions", &partitions, "store partitions");
  flags.Int("server-threads", &server_threads, "HttpServer I/O threads");
  flags.Int("threads", &threads, "calling threads of the multi-threaded runs");
  flags.Int("seconds", &seconds, "seconds per workload");
  flags.Int("io-threads", &io_threads, "PeerClient I/O threads");
  flags.String("only", &only, "run only this workload (local, peer, batch4, raw, connect)");
  bool help = false;
  if (auto st = flags.Parse(argc - 1, argv + 1, &help); !st.ok() || help) {
    std::fprintf(stderr, "%s\n%s", st.ToString().c_str(), flags.Usage().c_str());
    return help ? 0 : 2;
  }
  std::filesystem::remove_all(dir);

  store::StoreOptions so;
  so.dir = dir;
  so.partitions = static_cast<uint32_t>(partitions);
  auto store = store::StateStore::Open(so);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  {
    std::vector<store::PartitionBatch> batches(so.partitions);
    for (uint64_t id = 1; id <= static_cast<uint64_t>(posts); id++) {
      store::CounterOp ops[4] = {store::CounterOp::Add(static_cast<int64_t>(id % 1000)),
                                 store::CounterOp::Add(static_cast<int64_t>(id % 100)),
                                 store::CounterOp::Add(static_cast<int64_t>(id % 10)),
                                 store::CounterOp::Add(static_cast<int64_t>(id))};
      batches[schemas::PartitionOf(id, so.partitions)].MergePostCounters(id, ops);
    }
    for (uint32_t p = 0; p < so.partitions; p++) {
      if (auto st = (*store)->partition(p)->Commit(&batches[p]); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        return 1;
      }
    }
  }

  query::QueryServiceOptions qo;
  qo.store = store->get();
  query::QueryService service(std::move(qo));
  query::ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  server_options.threads = static_cast<int>(server_threads);
  auto server = query::HttpServer::Start(server_options, &service);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  const uint16_t port = (*server)->bound_port();
  const std::string peer = fmt::format("http://127.0.0.1:{}", port);
  query::PeerClientOptions client_options;
  client_options.io_threads = static_cast<int>(io_threads);
  auto client = query::PeerClient::Start(client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }

  auto run = [&](const std::string& mode, int nthreads) {
    std::vector<Result> results(static_cast<size_t>(nthreads));
    std::atomic<bool> go{false};
    const auto duration = std::chrono::seconds(seconds);
    std::vector<std::thread> workers;
    for (int t = 0; t < nthreads; t++) {
      workers.emplace_back([&, t] {
        Result& r = results[static_cast<size_t>(t)];
        r.latency_ns.reserve(1 << 20);
        std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
        std::uniform_int_distribution<uint64_t> ids(1, static_cast<uint64_t>(posts));
        auto target = [&] { return fmt::format("/v1/posts/{}/counts", ids(rng)); };
        std::unique_ptr<BlockingConn> conn;
        if (mode == "raw") conn = std::make_unique<BlockingConn>(port);
        while (!go) std::this_thread::yield();
        const double cpu0 = ThisThreadCpuSeconds();
        const auto end = Clock::now() + duration;
        for (auto now = Clock::now(); now < end;) {
          bool ok = true;
          uint64_t n = 1;
          if (mode == "local") {
            std::string t = target();
            query::Request req;
            req.method = "GET";
            req.target = t;
            ok = service.Handle(req).status == 200;
          } else if (mode == "peer") {
            auto a = (*client)->Get(peer, target(), {}, query::PeerClient::In(1000));
            ok = a.ok() && a.status == 200;
          } else if (mode == "batch4") {
            std::vector<query::PeerRequest> reqs(4);
            for (auto& q : reqs) q = {peer, target(), {}};
            auto a = (*client)->GetAll(std::move(reqs), query::PeerClient::In(1000));
            for (auto& x : a) ok = ok && x.ok() && x.status == 200;
            n = 4;
          } else if (mode == "raw") {
            ok = !conn->Get(target()).empty();
          } else if (mode == "connect") {
            ok = !BlockingConn(port).Get(target()).empty();
          }
          auto after = Clock::now();
          r.latency_ns.push_back(static_cast<uint32_t>(std::min<int64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(after - now).count(),
              UINT32_MAX)));
          r.requests += n;
          if (!ok) r.errors += n;
          now = after;
        }
        r.caller_cpu = ThisThreadCpuSeconds() - cpu0;
      });
    }
    const double process0 = ProcessCpuSeconds();
    const double peers0 = ThreadsCpuSeconds("tally-peers");
    const double server0 = ThreadsCpuSeconds("tally-http");
    const auto start = Clock::now();
    go = true;
    for (auto& w : workers) w.join();
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    const double process = ProcessCpuSeconds() - process0;
    const double peers = ThreadsCpuSeconds("tally-peers") - peers0;
    const double srv = ThreadsCpuSeconds("tally-http") - server0;
    uint64_t requests = 0, errors = 0;
    double callers = 0;
    std::vector<uint32_t> lat;
    for (auto& r : results) {
      requests += r.requests;
      errors += r.errors;
      callers += r.caller_cpu;
      lat.insert(lat.end(), r.latency_ns.begin(), r.latency_ns.end());
    }
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double p) {
      return lat.empty() ? 0.0
                         : lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))] / 1e3;
    };
    const double per = 1e6 / static_cast<double>(std::max<uint64_t>(requests, 1));
    std::printf(
        "%-8s %2d thr %9.0f req/s  p50 %7.1f us  p99 %7.1f us  cpu/req: process %6.1f us"
        "  client %6.1f us (callers %5.1f + io %5.1f)  server %6.1f us%s\n",
        mode.c_str(), nthreads, static_cast<double>(requests) / wall, pct(0.5), pct(0.99),
        process * per, (callers + peers) * per, callers * per, peers * per, srv * per,
        errors ? fmt::format("  ERRORS {}", errors).c_str() : "");
    std::fflush(stdout);
  };

  for (const std::string mode : {"local", "peer", "batch4", "raw", "connect"}) {
    if (!only.empty() && mode != only) continue;
    run(mode, 1);
    run(mode, static_cast<int>(threads));
  }
  auto s = (*client)->stats();
  std::printf(
      "peer client: %llu requests, %llu connects, %llu reused, %llu failed, %llu timed out\n",
      static_cast<unsigned long long>(s.requests), static_cast<unsigned long long>(s.connects),
      static_cast<unsigned long long>(s.reused),
      static_cast<unsigned long long>(s.failed + s.connect_failed),
      static_cast<unsigned long long>(s.timed_out));
  (*client)->Stop();
  (*server)->Stop();
  std::filesystem::remove_all(dir);
  return 0;
}
