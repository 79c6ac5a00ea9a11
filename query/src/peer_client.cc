#include "query/peer_client.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "http_wire.h"
#include "peer_request.h"
#include "peer_shard.h"

namespace tally::query {

namespace {

// How long past its deadline a blocking call waits for the I/O thread,
// which ends the call at the deadline itself unless it is stalled.
constexpr auto kLateGrace = std::chrono::milliseconds(50);

std::vector<PeerResponse> Unanswered(size_t n, PeerOutcome outcome, std::string_view why) {
  std::vector<PeerResponse> out(n);
  for (PeerResponse& r : out) {
    r.outcome = outcome;
    r.error = std::string(why);
  }
  return out;
}

}  // namespace

const char* PeerOutcomeName(PeerOutcome outcome) {
  switch (outcome) {
    case PeerOutcome::kOk:
      return "ok";
    case PeerOutcome::kTimedOut:
      return "timed_out";
    case PeerOutcome::kConnectFailed:
      return "connect_failed";
    case PeerOutcome::kFailed:
      return "failed";
    case PeerOutcome::kInvalid:
      return "invalid";
    case PeerOutcome::kStopped:
      return "stopped";
  }
  return "unknown";
}

std::string_view PeerResponse::Header(std::string_view name) const {
  std::string_view h = headers;
  while (!h.empty()) {
    size_t eol = h.find("\r\n");
    std::string_view line = h.substr(0, eol);
    h.remove_prefix(eol == std::string_view::npos ? h.size() : eol + 2);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || !internal::SameHeaderName(line.substr(0, colon), name)) {
      continue;
    }
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    return value;
  }
  return {};
}

base::Status PeerResponse::ToStatus() const {
  switch (outcome) {
    case PeerOutcome::kOk:
      return base::Status::Ok();
    case PeerOutcome::kTimedOut:
      return base::Status::DeadlineExceeded(error);
    case PeerOutcome::kConnectFailed:
    case PeerOutcome::kFailed:
      return base::Status::Unavailable(error);
    case PeerOutcome::kInvalid:
      return base::Status::InvalidArgument(error);
    case PeerOutcome::kStopped:
      return base::Status::Aborted(error);
  }
  return base::Status::Internal(error);
}

struct PeerClient::Impl {
  PeerClientOptions options;
  std::string extra;  // options.extra_headers as sent
  internal::PeerCounters counters;
  std::vector<std::unique_ptr<internal::PeerShard>> shards;
  std::atomic<uint32_t> next{0};  // the shard of the next call

  // Stop() against Submit(): a submitter announces itself before it looks at
  // `stopped`, and Stop() waits for announced ones before it stops the
  // shards, so every call posted to a shard is ended by the shard's stop.
  std::atomic<bool> stopped{false};
  std::atomic<int> submitting{0};
  std::mutex stop_mu;  // serializes Stop()
  bool joined = false;

  void Submit(std::vector<PeerRequest> requests, Deadline deadline, Callback done) {
    if (requests.empty()) {
      done({});
      return;
    }
    submitting.fetch_add(1);
    if (stopped.load()) {
      submitting.fetch_sub(1);
      done(Unanswered(requests.size(), PeerOutcome::kStopped, "peer client stopped"));
      return;
    }
    const size_t shard = next.fetch_add(1, std::memory_order_relaxed) % shards.size();
    shards[shard]->Post(std::move(requests), deadline, std::move(done));
    submitting.fetch_sub(1);
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(stop_mu);
    if (joined) return;
    stopped.store(true);
    while (submitting.load() != 0) std::this_thread::yield();
    for (auto& shard : shards) shard->Stop();
    joined = true;
  }
};

base::Result<std::unique_ptr<PeerClient>> PeerClient::Start(PeerClientOptions options) {
  if (options.io_threads < 1) {
    return base::Status::InvalidArgument("peer client: io_threads must be >= 1");
  }
  if (options.max_connections_per_peer < 1) {
    return base::Status::InvalidArgument("peer client: max_connections_per_peer must be >= 1");
  }
  if (options.idle_timeout_ms < 1) {
    return base::Status::InvalidArgument("peer client: idle_timeout_ms must be >= 1");
  }
  if (options.max_header_bytes < 1024) {
    return base::Status::InvalidArgument("peer client: max_header_bytes must be >= 1024");
  }
  std::string extra;
  for (const auto& [name, value] : options.extra_headers) {
    std::string bad = internal::CheckHeader(name, value);
    if (!bad.empty()) return base::Status::InvalidArgument("peer client extra_headers: " + bad);
    internal::AppendHeader(&extra, name, value);
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->extra = std::move(extra);
  for (int i = 0; i < impl->options.io_threads; i++) {
    impl->shards.push_back(
        std::make_unique<internal::PeerShard>(impl->options, impl->extra, &impl->counters, i));
  }
  return std::unique_ptr<PeerClient>(new PeerClient(std::move(impl)));
}

PeerClient::PeerClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PeerClient::~PeerClient() { Stop(); }

void PeerClient::Stop() { impl_->Stop(); }

PeerResponse PeerClient::Get(std::string_view peer, std::string_view target,
                             const PeerHeaders& headers, Deadline deadline) {
  std::vector<PeerRequest> one(1);
  one[0].peer = std::string(peer);
  one[0].target = std::string(target);
  one[0].headers = headers;
  return std::move(GetAll(std::move(one), deadline)[0]);
}

std::vector<PeerResponse> PeerClient::GetAll(std::vector<PeerRequest> requests, Deadline deadline) {
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::vector<PeerResponse> results;
  };
  const size_t n = requests.size();
  auto waiter = std::make_shared<Waiter>();
  impl_->Submit(std::move(requests), deadline, [waiter](std::vector<PeerResponse> results) {
    {
      std::lock_guard<std::mutex> lock(waiter->mu);
      waiter->results = std::move(results);
      waiter->done = true;
    }
    waiter->cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(waiter->mu);
  // The I/O thread ends the call at the deadline; this bound only matters
  // if that thread is stalled.
  if (!waiter->cv.wait_until(lock, deadline + kLateGrace, [&] { return waiter->done; })) {
    return Unanswered(n, PeerOutcome::kTimedOut, "peer client: no answer by the deadline");
  }
  return std::move(waiter->results);
}

void PeerClient::GetAllAsync(std::vector<PeerRequest> requests, Deadline deadline, Callback done) {
  impl_->Submit(std::move(requests), deadline, std::move(done));
}

PeerClientStats PeerClient::stats() const {
  const internal::PeerCounters& c = impl_->counters;
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  PeerClientStats s;
  s.requests = v(c.requests);
  s.ok = v(c.ok);
  s.timed_out = v(c.timed_out);
  s.connect_failed = v(c.connect_failed);
  s.failed = v(c.failed);
  s.connects = v(c.connects);
  s.reused = v(c.reused);
  s.retries = v(c.retries);
  s.stale_closed = v(c.stale_closed);
  s.open_connections = v(c.open);
  return s;
}

}  // namespace tally::query
