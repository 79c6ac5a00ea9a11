// `tally produce`: publishes events to the input topic (SPEC section 5).
//
// Lines mode (default): every non-empty line of --file (or stdin) must be one
// event; invalid lines are reported on stderr as "line N: <reason>" and
// skipped, valid ones are published unchanged with DefaultKey(). --gen N
// instead publishes N synthetic events from the WorkloadGenerator. Both end
// with one summary line on stdout; SIGINT/SIGTERM stops early, flushes what
// was queued and still prints it.

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "base/clock.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/shutdown.h"
#include "cli.h"
#include "commands.h"
#include "ingest/event_publisher.h"
#include "ingest/workload_generator.h"
#include "schemas/event.h"

namespace tally::app {
namespace {

constexpr std::string_view kComponent = "produce";

// Spaces records at `rate` per second (0: no limit), as steps of at most
// 2 ms worth of records: it reads the clock about 10,000 times a second and
// sleeps when 2 ms ahead, so a high rate pays neither a clock read per record
// nor a context switch per millisecond (at 335k events/s those were a fifth
// of this command's CPU, which a benchmark on the same cores takes from the
// system it measures). The producer's own linger (50 ms) batches coarser.
class Pacer {
 public:
  explicit Pacer(int64_t rate)
      : rate_(rate),
        check_every_(rate > 0 ? std::max<int64_t>(1, rate / 10000) : 1),
        start_(std::chrono::steady_clock::now()) {}
  void Wait(uint64_t sent) {
    if (rate_ <= 0 || sent % static_cast<uint64_t>(check_every_) != 0) return;
    auto due = start_ + std::chrono::nanoseconds(static_cast<int64_t>(
                            static_cast<double>(sent) * 1e9 / static_cast<double>(rate_)));
    auto ahead = due - std::chrono::steady_clock::now();
    if (ahead > std::chrono::milliseconds(2)) std::this_thread::sleep_for(ahead);
  }

 private:
  int64_t rate_;
  int64_t check_every_;
  std::chrono::steady_clock::time_point start_;
};

// Prints "produced X/N (R ev/s)" to stderr about once a second; nothing for
// runs shorter than a second.
class Progress {
 public:
  // `rate` is the --rate limit: a slow paced run looks at the clock on every
  // record, a fast one (or an unpaced one) every 1024 records.
  Progress(uint64_t total, int64_t rate)
      : total_(total), check_mask_(rate > 0 && rate < 10000 ? 0 : 1023), start_ms_(base::SteadyMs()) {
    last_ms_ = start_ms_;
  }
  void Tick(uint64_t done) {
    if ((done & check_mask_) != 0) return;
    int64_t now = base::SteadyMs();
    if (now - last_ms_ < 1000) return;
    double rate =
        static_cast<double>(done - last_done_) * 1000.0 / static_cast<double>(now - last_ms_);
    if (total_ > 0) {
      std::fprintf(stderr, "produced %llu/%llu (%.0f ev/s)\n",
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
                   rate);
    } else {
      std::fprintf(stderr, "produced %llu (%.0f ev/s)\n", static_cast<unsigned long long>(done),
                   rate);
    }
    last_ms_ = now;
    last_done_ = done;
  }

 private:
  uint64_t total_;
  uint64_t check_mask_;
  int64_t start_ms_;
  int64_t last_ms_;
  uint64_t last_done_ = 0;
};

struct ProduceFlags {
  std::string brokers = "127.0.0.1:9092";
  std::string topic = std::string(base::kEventsTopic);
  std::string file = "-";
  int64_t gen = 0;
  int64_t seed = 1;
  int64_t rate = 0;
  int64_t users = 100000;
  int64_t posts = 100000;
  bool ids = false;
  std::vector<std::string> kafka;
  std::string log_level = "info";
};

// The outcome of the publishing loop, before the final flush.
struct LoopResult {
  uint64_t queued = 0;
  uint64_t invalid = 0;
  base::Status status;  // a failure that stopped the loop
};

LoopResult PublishLines(std::FILE* in, const std::string& source, ingest::EventPublisher* publisher,
                        int64_t rate) {
  LoopResult r;
  schemas::EventParser parser;
  schemas::Event event;
  ingest::PublishRecord record;
  Pacer pacer(rate);
  Progress progress(0, rate);
  char* line = nullptr;
  size_t cap = 0;
  uint64_t line_no = 0;
  ssize_t len;
  while (!base::ShutdownRequested() && (len = getline(&line, &cap, in)) >= 0) {
    line_no++;
    std::string_view text(line, static_cast<size_t>(len));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
    if (text.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (base::Status st = parser.Parse(text, &event); !st.ok()) {
      std::fprintf(stderr, "line %llu: %s\n", static_cast<unsigned long long>(line_no),
                   st.message().c_str());
      r.invalid++;
      continue;
    }
    pacer.Wait(r.queued);
    record.key = ingest::DefaultKey(event);
    record.value.assign(text);
    if (base::Status st = publisher->PublishAsync(record); !st.ok()) {
      r.status = st.WithContext(fmt::format("{} line {}", source, line_no));
      break;
    }
    progress.Tick(++r.queued);
  }
  if (std::ferror(in)) {
    r.status = base::Status::IOError(fmt::format("reading {}: {}", source, std::strerror(errno)));
  }
  std::free(line);
  return r;
}

LoopResult PublishGenerated(const ProduceFlags& f, ingest::EventPublisher* publisher) {
  LoopResult r;
  ingest::WorkloadOptions options;
  options.users = static_cast<uint64_t>(f.users);
  options.posts = static_cast<uint64_t>(f.posts);
  options.seed = static_cast<uint64_t>(f.seed);
  options.with_ids = f.ids;
  ingest::WorkloadGenerator generator(options);
  schemas::Event event;
  ingest::PublishRecord record;
  Pacer pacer(f.rate);
  Progress progress(static_cast<uint64_t>(f.gen), f.rate);
  const uint64_t total = static_cast<uint64_t>(f.gen);
  while (r.queued < total && !base::ShutdownRequested()) {
    generator.Next(&event);
    record.key = ingest::DefaultKey(event);
    record.value.clear();
    schemas::AppendEventJson(event, &record.value);
    pacer.Wait(r.queued);
    if (base::Status st = publisher->PublishAsync(record); !st.ok()) {
      r.status = st.WithContext(fmt::format("generated event {}", r.queued));
      break;
    }
    progress.Tick(++r.queued);
  }
  return r;
}

}  // namespace

int RunProduce(int argc, char** argv) {
  const std::string command = "tally produce";
  ProduceFlags f;
  base::FlagSet flags(
      command,
      "Publishes events to the input topic. By default reads JSON lines from stdin\n"
      "(or --file): each non-empty line is validated first; invalid lines are reported\n"
      "on stderr as 'line N: <reason>' and skipped. --gen N instead publishes N\n"
      "synthetic events (Zipf-popular posts, power-law follow graph, all 14 types).\n"
      "Records are keyed as SPEC section 2 recommends. Prints one summary line; exits 0\n"
      "when every valid line was delivered, 1 on a delivery failure.");
  flags.String("brokers", &f.brokers, "Kafka bootstrap servers, host:port,...");
  flags.String("input-topic", &f.topic, "topic to publish to");
  flags.String("file", &f.file, "file of JSON lines to publish ('-': stdin)");
  flags.Int("gen", &f.gen, "publish N synthetic events instead of reading lines");
  flags.Int("seed", &f.seed, "seed of the synthetic workload (same seed, same events)");
  flags.Int("rate", &f.rate, "events per second (0: as fast as possible)");
  flags.Int("users", &f.users, "synthetic workload: number of users");
  flags.Int("posts", &f.posts, "synthetic workload: posts that exist before the first event");
  flags.Bool("ids", &f.ids,
             "synthetic workload: give every event an id (\"g<seed>-<n>\"), applied once per id");
  flags.Repeated("kafka", &f.kafka, "librdkafka setting KEY=VALUE for the producer");
  flags.String("log-level", &f.log_level, "debug, info, warn, error or off");
  if (int rc = ParseFlagsOrExit(flags, command, argc, argv); rc >= 0) return rc;
  if (auto st = ApplyLogLevel(f.log_level); !st.ok()) return Fail(command, st, kExitUsage);
  auto usage_error = [&](const std::string& msg) {
    return Fail(command, base::Status::InvalidArgument(msg), kExitUsage);
  };
  if (f.gen < 0) return usage_error("--gen must be >= 0");
  if (f.rate < 0) return usage_error("--rate must be >= 0");
  if (f.users < 2) return usage_error("--users must be >= 2");
  if (f.posts < 1) return usage_error("--posts must be >= 1");
  if (f.gen > 0 && flags.WasSet("file")) return usage_error("--file and --gen exclude each other");
  if (f.topic.empty()) return usage_error("--input-topic must not be empty");

  ingest::PublisherOptions options;
  options.kafka.brokers = f.brokers;
  options.topic = f.topic;
  // A bulk tool batches coarser than the HTTP tier's publisher (5 ms): at
  // a few thousand events a second 5 ms puts one or two records in each
  // partition's batch, and the embedded broker (librdkafka's mock) finds a
  // fetch's batch by walking its partition's batches from the oldest, so
  // its fetch cost grows with the square of the batch count it keeps
  // (app/README.md). --kafka linger.ms=N still decides.
  options.kafka.overrides.emplace_back("linger.ms", "50");
  if (auto st = ParseKafkaOverrides(f.kafka, &options.kafka); !st.ok()) {
    return Fail(command, st, kExitUsage);
  }
  auto publisher = ingest::EventPublisher::Create(options);
  if (!publisher.ok()) return Fail(command, publisher.status(), kExitUsage);

  LoopResult loop;
  int64_t start_ms = base::SteadyMs();
  if (f.gen > 0) {
    loop = PublishGenerated(f, publisher->get());
  } else {
    std::FILE* in = stdin;
    std::string source = "stdin";
    if (f.file != "-") {
      in = std::fopen(f.file.c_str(), "r");
      if (!in) {
        return Fail(command, base::Status::IOError(
                                 fmt::format("cannot open {}: {}", f.file, std::strerror(errno))));
      }
      source = f.file;
    }
    loop = PublishLines(in, source, publisher->get(), f.rate);
    if (in != stdin) std::fclose(in);
  }
  if (base::ShutdownRequested()) {
    TALLY_LOG_INFO(kComponent, "stop requested; flushing {} queued records",
                   (*publisher)->pending());
  }
  base::Status flushed = (*publisher)->Flush(options.delivery_timeout_ms + 5000);
  double seconds = static_cast<double>(base::SteadyMs() - start_ms) / 1000.0;
  ingest::PublisherStats stats = (*publisher)->stats();

  if (f.gen > 0) {
    std::printf("published %llu events in %.2f s (%.0f ev/s)\n",
                static_cast<unsigned long long>(stats.delivered), seconds,
                seconds > 0 ? static_cast<double>(stats.delivered) / seconds : 0.0);
  } else {
    std::printf("published %llu events (%llu invalid lines skipped)\n",
                static_cast<unsigned long long>(stats.delivered),
                static_cast<unsigned long long>(loop.invalid));
  }
  std::fflush(stdout);

  if (!loop.status.ok()) return Fail(command, loop.status);
  if (!flushed.ok()) return Fail(command, flushed);
  if (stats.failed > 0 || stats.delivered < loop.queued) {
    return Fail(command, base::Status::Unavailable(
                             fmt::format("{} of {} records were not delivered to {}",
                                         loop.queued - stats.delivered, loop.queued, f.topic)));
  }
  return kExitOk;
}

}  // namespace tally::app
