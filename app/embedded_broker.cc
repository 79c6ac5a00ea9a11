#include "embedded_broker.h"

#include <fmt/core.h>
#include <pthread.h>
#include <signal.h>
#include <syslog.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "base/kafka.h"
#include "base/log.h"
#include "bootstrap_forwarder.h"

namespace tally::app {
namespace {

constexpr std::string_view kComponent = "broker";
constexpr int kIncarnationTimeoutMs = 10000;

// For the host handle, which is not built by base::MakeKafkaConf (that
// wants bootstrap servers) and so does not get its log routing.
void LogFromMock(const rd_kafka_t* /*rk*/, int level, const char* fac, const char* buf) {
  base::LogLevel l = level <= LOG_ERR       ? base::LogLevel::kError
                     : level == LOG_WARNING ? base::LogLevel::kWarn
                     : level <= LOG_INFO    ? base::LogLevel::kInfo
                                            : base::LogLevel::kDebug;
  TALLY_LOG_AT(l, "kafka", "{}: {}", fac, buf);
}

// 128 random bits as 32 lowercase hex digits.
std::string NewIncarnationId() {
  std::random_device rd;
  uint64_t hi = (static_cast<uint64_t>(rd()) << 32) | rd();
  uint64_t lo = (static_cast<uint64_t>(rd()) << 32) | rd();
  return fmt::format("{:016x}{:016x}", hi, lo);
}

// Writes `incarnation` as the first record of tally.meta partition 0 and
// waits for the broker's acknowledgement.
base::Status WriteIncarnation(const std::string& bootstrap, const std::string& incarnation) {
  base::KafkaOptions kafka;
  kafka.brokers = bootstrap;
  auto conf =
      base::MakeKafkaConf(RD_KAFKA_PRODUCER, kafka, {{"acks", "all"},
                                  {"message.timeout.ms", std::to_string(kIncarnationTimeoutMs)},
                                  {"log_level", "4"}});
  if (!conf.ok()) return conf.status();
  struct Delivery {
    bool done = false;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  } delivery;
  rd_kafka_conf_set_opaque(conf->get(), &delivery);
  rd_kafka_conf_set_dr_msg_cb(conf->get(), [](rd_kafka_t*, const rd_kafka_message_t* m, void* op) {
    auto* d = static_cast<Delivery*>(op);
    d->done = true;
    d->err = m->err;
  });
  auto rk = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
  if (!rk.ok()) return rk.status();
  std::string topic(base::kMetaTopic);
  rd_kafka_resp_err_t err = rd_kafka_producev(
      rk->get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
      RD_KAFKA_V_VALUE(const_cast<char*>(incarnation.data()), incarnation.size()), RD_KAFKA_V_END);
  if (err) return base::KafkaStatus(err, "producing the incarnation record");
  // flush serves the delivery report on this thread.
  rd_kafka_flush(rk->get(), kIncarnationTimeoutMs + 1000);
  TALLY_LOG_DEBUG(kComponent, "incarnation record flushed");
  if (!delivery.done) {
    return base::Status::Unavailable(fmt::format(
        "no acknowledgement for the incarnation record within {} ms", kIncarnationTimeoutMs));
  }
  return base::KafkaStatus(delivery.err, "writing the incarnation record to tally.meta");
}

}  // namespace

struct EmbeddedBroker::Rep {
  EmbeddedBrokerOptions options;
  // The mock cluster lives inside this otherwise idle producer handle; it
  // must be destroyed before the handle.
  base::KafkaHandle host;
  rd_kafka_mock_cluster_t* mock = nullptr;
  std::unique_ptr<BootstrapForwarder> forwarder;
  std::string broker_address;
  std::string bootstrap;
  std::string incarnation;
  bool up = false;  // Start() completed
  // Heap taken before the mock cluster is made, held while it lives (see
  // Start): about 2 MiB.
  std::vector<std::unique_ptr<char[]>> ballast;

  ~Rep() { Stop(); }

  void Stop() {
    if (forwarder) forwarder->Stop();
    if (mock) {
      rd_kafka_mock_cluster_destroy(mock);
      mock = nullptr;
      TALLY_LOG_DEBUG(kComponent, "mock cluster destroyed");
    }
    host.reset();
    if (up) {
      up = false;
      TALLY_LOG_INFO(kComponent, "embedded broker at {} stopped; its log is gone", bootstrap);
    }
  }
};

base::Result<std::unique_ptr<EmbeddedBroker>> EmbeddedBroker::Start(
    const EmbeddedBrokerOptions& options) {
  if (options.partitions < 1 || options.partitions > 10000) {
    return base::Status::InvalidArgument(
        fmt::format("--partitions must be in 1..10000, got {}", options.partitions));
  }
  if (options.port < 0 || options.port > 65535) {
    return base::Status::InvalidArgument(
        fmt::format("--port must be in 0..65535, got {}", options.port));
  }
  auto rep = std::make_unique<Rep>();
  rep->options = options;

  // Claim the fixed port first: a taken port is the common failure, and it
  // should not cost a mock cluster start-up.
  if (options.port != 0) {
    auto fwd = BootstrapForwarder::Listen(options.host, options.port);
    if (!fwd.ok()) return fwd.status().WithContext("embedded broker");
    rep->forwarder = std::move(fwd).value();
  }

  base::KafkaConf conf(rd_kafka_conf_new());
  char err[512];
  // Warnings and errors only: the host handle never connects anywhere, and
  // librdkafka would otherwise note that it has no bootstrap.servers.
  if (rd_kafka_conf_set(conf.get(), "log_level", "4", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
    return base::Status::Internal(fmt::format("embedded broker: {}", err));
  }
  // The mock broker's accepted sockets take their options from this handle.
  // With Nagle on, a response written while the client still delays its ACK
  // of the previous one waits for it: ~40 ms per produce acknowledgement on
  // loopback. Kafka's own broker sets TCP_NODELAY too.
  if (rd_kafka_conf_set(conf.get(), "socket.nagle.disable", "true", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
    return base::Status::Internal(fmt::format("embedded broker: {}", err));
  }
  rd_kafka_conf_set_log_cb(conf.get(), &LogFromMock);
  auto host = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf));
  if (!host.ok()) return host.status().WithContext("embedded broker");
  rep->host = std::move(host).value();

  // The mock cluster's thread ends for good when a signal interrupts its
  // poll() ("Mock cluster failed to poll ...: Interrupted system call"),
  // and the broker can then no longer be stopped: SIGTERM or SIGUSR1 could
  // land on it. It is started with every signal blocked, as librdkafka
  // starts its client threads; the process's handlers run elsewhere.
  //
  // The mock's cluster id is "mockCluster" and its address. An allocator
  // that hands out the same addresses in every process (ASan's; glibc's
  // without ASLR) would give a restarted broker the id of the one before,
  // and its clients could not tell that the log behind the address is new:
  // librdkafka reports a changed cluster id, and the applier stops on that
  // report before it reads anything of a new log. A random amount of heap,
  // in every size class, taken first puts the cluster somewhere else.
  {
    // Sizes 1/8 apart, finer than an allocator's size classes, up to 8 KiB
    // (the cluster's own record is a few KiB), 0-63 blocks of each: two
    // brokers pick the same count for its class once in 64 starts, and then
    // the applier still stops at the first offset the new log lacks.
    // About 2 MiB in all.
    std::random_device rd;
    for (size_t size = 16; size <= (size_t{1} << 13); size += std::max<size_t>(size / 8, 16)) {
      for (unsigned n = rd() % 64; n > 0; n--)
        rep->ballast.push_back(std::make_unique<char[]>(size));
    }
  }
  {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rep->mock = rd_kafka_mock_cluster_new(rep->host.get(), 1);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  if (!rep->mock) {
    return base::Status::Internal(
        "embedded broker: librdkafka could not create the mock cluster (see the log above)");
  }
  rep->broker_address = rd_kafka_mock_cluster_bootstraps(rep->mock);
  TALLY_LOG_DEBUG(kComponent, "mock cluster listening on {}", rep->broker_address);

  // The mock also creates any topic a client asks for (4 partitions) and
  // offers no way to turn that off; tally's own topics are made here with
  // the partition counts tally expects.
  for (std::string_view topic : {base::kEventsTopic, base::kDeltasTopic, base::kDlqTopic,
                                 base::kMetaTopic, base::kMembersTopic}) {
    int n = topic == base::kMetaTopic || topic == base::kMembersTopic ? 1 : options.partitions;
    std::string name(topic);
    if (auto e = rd_kafka_mock_topic_create(rep->mock, name.c_str(), n, 1)) {
      return base::KafkaStatus(e, fmt::format("embedded broker: creating topic {}", topic));
    }
  }

  TALLY_LOG_DEBUG(kComponent, "topics created");
  rep->incarnation = NewIncarnationId();
  TALLY_RETURN_IF_ERROR(
      WriteIncarnation(rep->broker_address, rep->incarnation).WithContext("embedded broker"));
  TALLY_LOG_DEBUG(kComponent, "incarnation record written");

  if (rep->forwarder) {
    TALLY_RETURN_IF_ERROR(
        rep->forwarder->Start(rep->broker_address).WithContext("embedded broker"));
    rep->bootstrap = rep->forwarder->address();
  } else {
    rep->bootstrap = rep->broker_address;
  }
  rep->up = true;
  TALLY_LOG_INFO(kComponent,
                 "embedded broker up: bootstrap {} (broker {}), topics {}/{}/{} with {} "
                 "partitions, {} and {} with 1, incarnation {}",
                 rep->bootstrap, rep->broker_address, base::kEventsTopic, base::kDeltasTopic,
                 base::kDlqTopic, options.partitions, base::kMetaTopic, base::kMembersTopic,
                 rep->incarnation);
  return std::unique_ptr<EmbeddedBroker>(new EmbeddedBroker(std::move(rep)));
}

EmbeddedBroker::EmbeddedBroker(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

EmbeddedBroker::~EmbeddedBroker() = default;  // Rep stops

void EmbeddedBroker::Stop() { rep_->Stop(); }

base::Status EmbeddedBroker::SetAvailable(bool available) {
  if (!rep_->mock) return base::Status::FailedPrecondition("embedded broker is stopped");
  rd_kafka_resp_err_t err = available ? rd_kafka_mock_broker_set_up(rep_->mock, -1)
                                      : rd_kafka_mock_broker_set_down(rep_->mock, -1);
  return base::KafkaStatus(err, available ? "bringing the embedded broker up"
                                          : "taking the embedded broker down");
}

const std::string& EmbeddedBroker::bootstrap() const { return rep_->bootstrap; }
const std::string& EmbeddedBroker::broker_address() const { return rep_->broker_address; }
const std::string& EmbeddedBroker::incarnation() const { return rep_->incarnation; }
rd_kafka_mock_cluster_t* EmbeddedBroker::mock() const { return rep_->mock; }

}  // namespace tally::app
