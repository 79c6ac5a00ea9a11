#include "server_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "base/clock.h"
#include "log/record_batch.h"

namespace tally::broker::test {

std::unique_ptr<Broker> StartBroker(const std::filesystem::path& dir, BrokerOptions options) {
  options.log_dir = dir;
  auto broker = Broker::Start(options);
  if (!broker.ok()) {
    std::fprintf(stderr, "broker start: %s\n", broker.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*broker);
}

namespace {

rd_kafka_conf_t* MakeConf(const std::string& bootstrap, const Conf& defaults, const Conf& extra) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  auto set = [&](const std::string& k, const std::string& v) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      std::fprintf(stderr, "rdkafka conf %s=%s: %s\n", k.c_str(), v.c_str(), err);
    }
  };
  set("bootstrap.servers", bootstrap);
  set("log_level", "3");
  for (const auto& [k, v] : defaults) set(k, v);
  for (const auto& [k, v] : extra) set(k, v);
  // TALLY_RDKAFKA_DEBUG=eos,msg,... turns on librdkafka's debug contexts.
  if (const char* debug = std::getenv("TALLY_RDKAFKA_DEBUG")) set("debug", debug);
  return conf;
}

}  // namespace

Producer::Producer(const std::string& bootstrap, const Conf& extra) {
  rd_kafka_conf_t* conf = MakeConf(bootstrap,
                                   {{"acks", "all"},
                                    {"linger.ms", "5"},
                                    {"reconnect.backoff.ms", "50"},
                                    {"reconnect.backoff.max.ms", "500"},
                                    {"retry.backoff.ms", "50"}},
                                   extra);
  rd_kafka_conf_set_dr_msg_cb(conf, &Producer::OnDelivery);
  rd_kafka_conf_set_opaque(conf, this);
  char err[512];
  rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (rk_ == nullptr) throw std::runtime_error(err);
}

Producer::~Producer() {
  rd_kafka_flush(rk_, 2000);
  rd_kafka_destroy(rk_);
}

void Producer::OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* self = static_cast<Producer*>(opaque);
  Msg msg;
  msg.topic = rd_kafka_topic_name(m->rkt);
  msg.partition = m->partition;
  msg.offset = m->offset;
  if (m->key != nullptr) msg.key.assign(static_cast<const char*>(m->key), m->key_len);
  if (m->payload != nullptr) msg.value.assign(static_cast<const char*>(m->payload), m->len);
  msg.err = m->err;
  self->reports_.push_back(std::move(msg));
}

bool Producer::Produce(const std::string& topic, int32_t partition, const std::string& key,
                       const std::string& value, int64_t timestamp_ms) {
  for (int attempt = 0; attempt < 1000; attempt++) {
    rd_kafka_resp_err_t err =
        rd_kafka_producev(rk_, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
                          RD_KAFKA_V_KEY(key.data(), key.size()),
                          RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_TIMESTAMP(timestamp_ms), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return true;
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) return false;
    rd_kafka_poll(rk_, 10);
  }
  return false;
}

bool Producer::Flush(int timeout_ms) {
  return rd_kafka_flush(rk_, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR;
}

int Producer::failed() const {
  int n = 0;
  for (const Msg& m : reports_) n += m.err != 0;
  return n;
}

Consumer::Consumer(const std::string& bootstrap, const std::string& group, const Conf& extra) {
  rd_kafka_conf_t* conf = MakeConf(bootstrap,
                                   {{"group.id", group},
                                    {"auto.offset.reset", "earliest"},
                                    {"enable.auto.commit", "false"},
                                    {"session.timeout.ms", "6000"},
                                    {"heartbeat.interval.ms", "200"},
                                    {"fetch.wait.max.ms", "100"},
                                    {"reconnect.backoff.ms", "50"},
                                    {"reconnect.backoff.max.ms", "500"}},
                                   extra);
  char err[512];
  rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
  if (rk_ == nullptr) throw std::runtime_error(err);
  rd_kafka_poll_set_consumer(rk_);
}

Consumer::~Consumer() {
  Close();
  rd_kafka_destroy(rk_);
}

void Consumer::Close() {
  if (closed_) return;
  closed_ = true;
  rd_kafka_consumer_close(rk_);
}

void Consumer::Subscribe(const std::vector<std::string>& topics) {
  rd_kafka_topic_partition_list_t* list =
      rd_kafka_topic_partition_list_new(static_cast<int>(topics.size()));
  for (const std::string& t : topics) {
    rd_kafka_topic_partition_list_add(list, t.c_str(), RD_KAFKA_PARTITION_UA);
  }
  rd_kafka_subscribe(rk_, list);
  rd_kafka_topic_partition_list_destroy(list);
}

std::optional<Msg> Consumer::PollOnce(int timeout_ms) {
  rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, timeout_ms);
  if (m == nullptr) return std::nullopt;
  std::optional<Msg> out;
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    Msg msg;
    msg.topic = rd_kafka_topic_name(m->rkt);
    msg.partition = m->partition;
    msg.offset = m->offset;
    if (m->key != nullptr) msg.key.assign(static_cast<const char*>(m->key), m->key_len);
    if (m->payload != nullptr) msg.value.assign(static_cast<const char*>(m->payload), m->len);
    out = std::move(msg);
  }
  rd_kafka_message_destroy(m);
  return out;
}

std::vector<Msg> Consumer::Read(size_t n, int timeout_ms) {
  std::vector<Msg> out;
  const int64_t deadline = base::SteadyMs() + timeout_ms;
  while (out.size() < n && base::SteadyMs() < deadline) {
    auto m = PollOnce(50);
    if (m.has_value()) out.push_back(std::move(*m));
  }
  return out;
}

rd_kafka_resp_err_t Consumer::Commit() { return rd_kafka_commit(rk_, nullptr, 0); }

std::vector<int32_t> Consumer::Assignment() {
  std::vector<int32_t> out;
  rd_kafka_topic_partition_list_t* list = nullptr;
  if (rd_kafka_assignment(rk_, &list) != RD_KAFKA_RESP_ERR_NO_ERROR) return out;
  for (int i = 0; i < list->cnt; i++) out.push_back(list->elems[i].partition);
  rd_kafka_topic_partition_list_destroy(list);
  return out;
}

RawConn::RawConn(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

RawConn::~RawConn() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawConn::SendBytes(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

bool RawConn::Send(const Request& request) { return SendBytes(EncodeRequest(request)); }

std::optional<std::string> RawConn::ReceiveFrame(int timeout_ms) {
  const int64_t deadline = base::SteadyMs() + timeout_ms;
  for (;;) {
    if (in_.size() >= 4) {
      const uint32_t size = LoadBe32(reinterpret_cast<const uint8_t*>(in_.data()));
      if (in_.size() >= 4 + size) {
        std::string body = in_.substr(4, size);
        in_.erase(0, 4 + size);
        return body;
      }
    }
    const int64_t left = deadline - base::SteadyMs();
    if (left <= 0) return std::nullopt;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return std::nullopt;
    in_.append(buf, static_cast<size_t>(n));
  }
}

base::Result<ResponseBody> RawConn::RoundTrip(RequestBody body, int16_t version, int timeout_ms) {
  const int32_t corr = next_correlation_++;
  Request request = MakeRequest(std::move(body), version, corr);
  const auto key = static_cast<ApiKey>(request.header.api_key);
  if (!Send(request)) return base::Status::IOError("send failed");
  auto frame = ReceiveFrame(timeout_ms);
  if (!frame.has_value()) return base::Status::IOError("no answer");
  int32_t got = 0;
  auto resp = DecodeResponse(key, version, *frame, &got);
  if (resp.ok() && got != corr) return base::Status::Internal("wrong correlation id");
  return resp;
}

bool RawConn::WaitClosed(int timeout_ms) {
  const int64_t deadline = base::SteadyMs() + timeout_ms;
  for (;;) {
    const int64_t left = deadline - base::SteadyMs();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return true;
  }
}

Request MakeRequest(RequestBody body, int16_t version, int32_t correlation_id) {
  Request r;
  r.body = std::move(body);
  r.header.api_version = version;
  r.header.correlation_id = correlation_id;
  r.header.client_id = "raw-test";
  r.header.api_key = std::visit(
      [](const auto& b) -> int16_t {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, UnsupportedRequest>) {
          return -1;
        } else {
          return static_cast<int16_t>(T::kApiKey);
        }
      },
      r.body);
  return r;
}

std::string MakeBatch(const std::vector<std::string>& values, int64_t timestamp_ms) {
  std::string records;
  for (size_t i = 0; i < values.size(); i++) {
    batch_encoding::AppendRecord(&records, 0, static_cast<int32_t>(i), std::nullopt, values[i]);
  }
  BatchHeader h;
  h.base_offset = 0;
  h.last_offset_delta = static_cast<int32_t>(values.size()) - 1;
  h.base_timestamp = timestamp_ms;
  h.max_timestamp = timestamp_ms;
  h.record_count = static_cast<int32_t>(values.size());
  return batch_encoding::BuildBatch(h, records);
}

std::string StartBrokerChild(testing::ChildProcess* child, const std::filesystem::path& log_dir,
                             int port, int log_flush_ms, const std::filesystem::path& child_log) {
  testing::ChildOptions o;
  o.argv = {TALLY_BROKER_MAIN, log_dir.string(), std::to_string(port),
            std::to_string(log_flush_ms)};
  o.stdout_pipe = true;
  o.log_path = child_log.empty()
                   ? (log_dir.parent_path() / (log_dir.filename().string() + "-child.log")).string()
                   : child_log.string();
  if (!child->Start(o).ok()) return "";
  for (int i = 0; i < 100; i++) {
    std::string line = child->ReadLine(100);
    if (line.rfind("BOOTSTRAP ", 0) == 0) return line.substr(10);
    if (!child->Running()) return "";
  }
  return "";
}

int PortOf(const std::string& bootstrap) {
  return std::stoi(bootstrap.substr(bootstrap.rfind(':') + 1));
}

bool CreateTopicRaw(int port, const std::string& topic, int32_t partitions) {
  RawConn c(port);
  CreateTopicsRequest create;
  create.topics.push_back({topic, partitions, 1, {}, {}});
  auto r = c.RoundTrip(create, 4);
  if (!r.ok()) {
    std::fprintf(stderr, "CreateTopics %s: %s\n", topic.c_str(), r.status().ToString().c_str());
    return false;
  }
  const auto& resp = std::get<CreateTopicsResponse>(*r);
  if (resp.topics.size() != 1 || resp.topics[0].error_code != ErrorCode::kNone) {
    std::fprintf(stderr, "CreateTopics %s: refused\n", topic.c_str());
    return false;
  }
  return true;
}

int64_t CommittedOffset(rd_kafka_t* rk, const std::string& topic, int32_t partition) {
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), partition);
  int64_t out = -100;
  if (rd_kafka_committed(rk, list, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) out = list->elems[0].offset;
  rd_kafka_topic_partition_list_destroy(list);
  return out;
}

std::vector<Msg> ReadWholeLog(const std::string& bootstrap, const std::string& topic,
                              int32_t partitions, int timeout_ms) {
  Consumer consumer(bootstrap, "whole-log-reader");
  size_t total = 0;
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
  for (int32_t p = 0; p < partitions; p++) {
    int64_t low = -1, high = -1;
    if (rd_kafka_query_watermark_offsets(consumer.handle(), topic.c_str(), p, &low, &high, 5000) ==
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      total += static_cast<size_t>(high);
    }
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(consumer.handle(), list);
  rd_kafka_topic_partition_list_destroy(list);
  return consumer.Read(total, timeout_ms);
}

std::string RunShell(const std::string& command, int* exit_code, bool with_stderr) {
  const std::string cmd = with_stderr ? command + " 2>&1" : command;
  FILE* f = ::popen(cmd.c_str(), "r");
  std::string out;
  if (f == nullptr) {
    *exit_code = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int status = ::pclose(f);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace tally::broker::test
