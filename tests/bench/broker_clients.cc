#include "broker_clients.h"

#include <fmt/core.h>
#include <signal.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "base/flags.h"
#include "base/kafka_consumer.h"
#include "base/log.h"
#include "testing/embedded_cluster.h"

namespace tally::bench {

using base::Result;
using base::Status;

namespace {

constexpr std::string_view kTsPrefix = "{\"ts\":";
constexpr size_t kTsDigits = 20;

// One record's value: 200 bytes of JSON, as tally's input events are, with
// the steady clock's nanoseconds first. `out` holds kRecordValueBytes + 1.
// Its key, a user id, goes to *key.
void FillRecord(uint64_t seq, int64_t ts_ns, char* out, std::string* key) {
  const uint64_t user = (seq * 0x9E3779B97F4A7C15ULL >> 40) % 100000;
  const uint64_t post = (seq * 0xC2B2AE3D27D4EB4FULL >> 40) % 1000000;
  int n =
      std::snprintf(out, kRecordValueBytes + 1,
                    "{\"ts\":%020lld,\"type\":\"like\",\"user_id\":\"u%llu\",\"post_id\":\"p%llu\","
                    "\"event_id\":\"e%llu\",\"pad\":\"",
                    static_cast<long long>(ts_ns), static_cast<unsigned long long>(user),
                    static_cast<unsigned long long>(post), static_cast<unsigned long long>(seq));
  std::memset(out + n, 'x', kRecordValueBytes - n - 2);
  out[kRecordValueBytes - 2] = '"';
  out[kRecordValueBytes - 1] = '}';
  *key = fmt::format("u{}", user);
}

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

int64_t RecordTimestampNs(const void* value, size_t len) {
  const char* v = static_cast<const char*>(value);
  if (len < kTsPrefix.size() + kTsDigits || std::string_view(v, kTsPrefix.size()) != kTsPrefix)
    return -1;
  int64_t ts = -1;
  const char* digits = v + kTsPrefix.size();
  if (std::from_chars(digits, digits + kTsDigits, ts).ec != std::errc()) return -1;
  return ts;
}

Result<std::unique_ptr<ChildBroker>> StartChildBroker(const BrokerBenchOptions& o, int n, bool mock,
                                                      int64_t flush_ms) {
  auto b = std::make_unique<ChildBroker>();
  b->label = mock ? "mock" : "tally";
  b->flush_ms = mock ? -1 : flush_ms;
  const int port = FreePort();
  const std::string name = fmt::format("{}/broker{}-{}", o.dir, n, b->label);
  // tally's broker is `tally broker`, as a user runs it (jemalloc and
  // all); the mock runs in a child of this binary.
  std::vector<std::string> argv;
  if (mock) {
    argv = {o.self, "--broker-child", "--mock", "--partitions", std::to_string(o.partitions)};
  } else {
    argv = {o.tally,          "broker",
            "--log-dir",      name,
            "--port",         std::to_string(port),
            "--log-flush-ms", std::to_string(flush_ms),
            "--partitions",   std::to_string(o.partitions),
            "--log-level",    "warn"};
  }
  TALLY_RETURN_IF_ERROR(b->proc.Start(argv, name + ".log", name + ".out"));
  // The child prints its bootstrap address once it serves (the mock picks
  // its own port).
  std::string bootstrap;
  for (int i = 0; i < 1500 && bootstrap.empty(); i++) {
    std::ifstream in(name + ".out");
    std::string line;
    // A whole line: the child may be writing it.
    if (std::getline(in, line) && !in.eof() && line.rfind("bootstrap: ", 0) == 0) {
      bootstrap = line.substr(11);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (bootstrap.empty()) {
    return Status::Unavailable(fmt::format("{} broker did not start; see {}.log", b->label, name));
  }
  b->kafka.brokers = bootstrap;
  b->kafka.embedded = mock;
  return b;
}

Status BenchProducer::Init(const base::KafkaOptions& kafka) {
  base::ProducerSettings s;
  s.client_id = "tally-bench";
  s.linger_ms = 5;  // the event publisher's
  s.extra = {{"partitioner", "murmur2_random"}};
  s.on_delivery = [this](const rd_kafka_message_t& m) {
    if (m.err) {
      failed_.fetch_add(1, std::memory_order_relaxed);
      last_error_ = m.err;
    }
  };
  auto made = base::KafkaProducer::Create(kafka, std::move(s));
  if (!made.ok()) return made.status();
  p_ = std::move(made).value();
  auto t = p_->Topic(kBrokerBenchTopic, 10000);
  if (!t.ok()) return t.status();
  rkt_ = *t;
  TALLY_RETURN_IF_ERROR(Send(NowNs()));
  return Flush();
}

Status BenchProducer::Send(int64_t ts_ns) {
  FillRecord(seq_++, ts_ns, value_, &key_);
  base::ProducerRecord r;
  r.rkt = rkt_;
  r.key = key_;
  r.value = std::string_view(value_, kRecordValueBytes);
  return p_->Produce(r, base::QueueFullWait{},
                     [] { return fmt::format("producing to {}", kBrokerBenchTopic); });
}

Status BenchProducer::Flush() {
  TALLY_RETURN_IF_ERROR(p_->Flush(nullptr, [](int) {}));
  if (failed_ > 0) {
    return Status::Unavailable(
        fmt::format("{} records not delivered; last error: {}", failed_.load(),
                    rd_kafka_err2str(static_cast<rd_kafka_resp_err_t>(last_error_.load()))));
  }
  return Status::Ok();
}

Status BenchProducer::SendAll(int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    TALLY_RETURN_IF_ERROR(Send(NowNs()));
    if ((i & 1023) == 0) Poll();
  }
  return Flush();
}

Status BenchProducer::Paced(int64_t rate, double seconds,
                            const std::function<void(double, int64_t)>& tick) {
  const auto t0 = Clock::now();
  int64_t sent = 0;
  for (double t = 0; t < seconds; t = SecondsSince(t0)) {
    const auto due = static_cast<int64_t>(static_cast<double>(rate) * t);
    for (; sent < due; sent++) {
      TALLY_RETURN_IF_ERROR(Send(NowNs()));
      if ((sent & 1023) == 0) Poll();
    }
    Poll();
    tick(t, sent);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  tick(SecondsSince(t0), sent);
  return Status::Ok();
}

Result<base::KafkaHandle> MakeBenchConsumer(const base::KafkaOptions& kafka,
                                            const std::string& group) {
  base::ConsumerSettings s;
  s.group = group;
  s.client_id = "tally-bench";
  s.offset_reset_is_error = false;
  s.short_fetch_wait = true;
  s.extra = {{"auto.offset.reset", "earliest"}};
  return base::MakeConsumer(kafka, s);
}

Status AssignAll(rd_kafka_t* rk, int partitions, int64_t offset) {
  base::KafkaPartitionList parts(rd_kafka_topic_partition_list_new(partitions));
  const std::string topic(kBrokerBenchTopic);
  for (int i = 0; i < partitions; i++) {
    rd_kafka_topic_partition_list_add(parts.get(), topic.c_str(), i)->offset = offset;
  }
  return base::Assign(rk, parts.get(), "assigning the bench topic");
}

int RunBrokerChild(int argc, char** argv) {
  int64_t partitions = 16;
  base::FlagSet flags(
      "tally-bench --broker-child --mock",
      "Runs librdkafka's mock cluster (in memory, on a port of its own) for the "
      "broker workloads: the baseline, what tally's one-machine broker was before.");
  flags.Int("partitions", &partitions, "partitions of tally.events, created at start");
  bool mock = false;
  flags.Bool("mock", &mock, "required: the mock is the only broker this child runs");
  bool help = false;
  if (auto st = flags.Parse(argc, argv, &help); !st.ok() || help || !mock) {
    std::fprintf(stderr, "%s%s", st.ok() ? "" : (st.ToString() + "\n").c_str(),
                 flags.Usage().c_str());
    return help ? 0 : 2;
  }
  base::SetLogLevel(base::LogLevel::kWarn);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  // Blocked before the mock's threads start, so they inherit the mask and
  // sigwait below receives the signal.
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  testing::EmbeddedCluster cluster(1);
  Status created =
      cluster.CreateTopic(std::string(kBrokerBenchTopic), static_cast<int>(partitions));
  if (!created.ok()) {
    std::fprintf(stderr, "mock: %s\n", created.ToString().c_str());
    return 1;
  }
  std::printf("bootstrap: %s\n", cluster.bootstrap().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}

}  // namespace tally::bench
