#include "base/kafka.h"

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>

#include "base/kafka_consumer.h"
#include "base/kafka_health.h"
#include "base/log.h"

namespace tally::base {

Status KafkaStatus(rd_kafka_resp_err_t err, std::string_view context) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return Status::Ok();
  std::string msg = fmt::format("{}: {} ({})", context, rd_kafka_err2str(err), rd_kafka_err2name(err));
  switch (err) {
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
      return Status::Unavailable(std::move(msg));
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
      return Status::NotFound(std::move(msg));
    case RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE:
      return Status::OutOfRange(std::move(msg));
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
      return Status::ResourceExhausted(std::move(msg));
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR_INVALID_CONFIG:
      return Status::InvalidArgument(std::move(msg));
    case RD_KAFKA_RESP_ERR__DESTROY:
      return Status::Aborted(std::move(msg));
    default:
      return Status::Internal(std::move(msg));
  }
}

Status ParseKafkaOverride(std::string_view text, std::pair<std::string, std::string>* out) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return Status::InvalidArgument(fmt::format("--kafka expects KEY=VALUE, got '{}'", text));
  }
  out->first = std::string(text.substr(0, eq));
  out->second = std::string(text.substr(eq + 1));
  return Status::Ok();
}

namespace {

std::atomic<uint64_t> g_cluster_id_reports{0};
std::mutex g_cluster_id_mu;
std::string g_cluster_id_reported;  // guarded by g_cluster_id_mu

// librdkafka 2.0.2: 'Broker B reports different ClusterId "NEW" than
// previously known "OLD": a client must not be simultaneously connected to
// multiple clusters'.
void NoteClusterIdReport(const char* buf) {
  std::string_view line(buf);
  constexpr std::string_view kBefore = "reports different ClusterId \"";
  size_t at = line.find(kBefore);
  if (at == std::string_view::npos) return;
  at += kBefore.size();
  size_t end = line.find('"', at);
  if (end == std::string_view::npos) return;
  {
    std::lock_guard<std::mutex> lock(g_cluster_id_mu);
    g_cluster_id_reported.assign(line.substr(at, end - at));
  }
  g_cluster_id_reports.fetch_add(1, std::memory_order_release);
}

// librdkafka's own log lines go through tally's logger (syslog levels).
void LogFromKafka(const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
  if (std::strcmp(fac, "CLUSTERID") == 0) NoteClusterIdReport(buf);
  LogLevel l = level <= 3 ? LogLevel::kError : level <= 4 ? LogLevel::kWarn : level <= 6 ? LogLevel::kInfo
                                                                                          : LogLevel::kDebug;
  // A broker connection failing is also an error callback, which KafkaHealth
  // turns into one line per outage; librdkafka's own line per client and
  // broker (often guessing at TLS or SASL) is detail for debugging.
  if (std::strcmp(fac, "FAIL") == 0) l = LogLevel::kDebug;
  if (!LogEnabled(l)) return;
  LogLine(l, "kafka", fmt::format("{} {}: {}", rk ? rd_kafka_name(rk) : "-", fac, buf));
}

Status SetConf(rd_kafka_conf_t* conf, const std::string& key, const std::string& value) {
  char err[512];
  if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
    return Status::InvalidArgument(fmt::format("kafka setting {}={}: {}", key, value, err));
  }
  return Status::Ok();
}
}  // namespace

uint64_t ClusterIdReports() { return g_cluster_id_reports.load(std::memory_order_acquire); }

std::string LastReportedClusterId() {
  std::lock_guard<std::mutex> lock(g_cluster_id_mu);
  return g_cluster_id_reported;
}

Result<KafkaConf> MakeKafkaConf(rd_kafka_type_t type, const KafkaOptions& options,
                                const std::map<std::string, std::string>& defaults) {
  if (options.brokers.empty()) return Status::InvalidArgument("no brokers given (--brokers)");
  KafkaConf conf(rd_kafka_conf_new());
  TALLY_RETURN_IF_ERROR(SetConf(conf.get(), "bootstrap.servers", options.brokers));
  rd_kafka_conf_set_log_cb(conf.get(), &LogFromKafka);
  rd_kafka_conf_set_error_cb(conf.get(), &KafkaHealth::OnClientError);
  // After an outage every client is back within about a second of the
  // broker (librdkafka's default backoff grows to 10 s).
  TALLY_RETURN_IF_ERROR(SetConf(conf.get(), "reconnect.backoff.max.ms", "1000"));
  // librdkafka leaves Nagle on: a small request (a produce of derived deltas,
  // an offset commit) sent while an earlier one is unacknowledged then waits
  // for the peer's delayed ACK, tens of milliseconds. Batching is done by
  // linger.ms, not by TCP.
  TALLY_RETURN_IF_ERROR(SetConf(conf.get(), "socket.nagle.disable", "true"));
  if (type == RD_KAFKA_CONSUMER) {
    // A member that died (a SIGKILL, a lost machine) holds its partitions
    // until its session times out: librdkafka's 45 s would stall a crashed
    // router's input that long. 6 s is Kafka's smallest allowed session
    // (group.min.session.timeout.ms); a heartbeat every 500 ms tells the
    // others of a rebalance within half a second.
    TALLY_RETURN_IF_ERROR(SetConf(conf.get(), "session.timeout.ms", "6000"));
    TALLY_RETURN_IF_ERROR(SetConf(conf.get(), "heartbeat.interval.ms", "500"));
  }
  for (const auto& [k, v] : defaults) TALLY_RETURN_IF_ERROR(SetConf(conf.get(), k, v));
  for (const auto& [k, v] : options.overrides) TALLY_RETURN_IF_ERROR(SetConf(conf.get(), k, v));
  return conf;
}

Result<KafkaHandle> MakeKafkaHandle(rd_kafka_type_t type, KafkaConf conf) {
  char err[512];
  rd_kafka_t* rk = rd_kafka_new(type, conf.get(), err, sizeof(err));
  if (!rk) return Status::InvalidArgument(fmt::format("creating Kafka client: {}", err));
  conf.release();  // owned by rk now
  return KafkaHandle(rk);
}

std::string ClusterIdentity::ToString() const {
  if (incarnation.empty()) return cluster_id;
  return cluster_id + "/" + incarnation;
}

Result<ClusterIdentity> FetchClusterIdentity(const KafkaOptions& options, int timeout_ms) {
  // This consumer never joins, commits or subscribes.
  ConsumerSettings settings;
  settings.group = "tally-probe";
  settings.partition_eof = true;
  settings.offset_reset_is_error = false;
  settings.extra = {{"log_level", "3"}};
  auto rk = MakeConsumer(options, settings);
  if (!rk.ok()) return rk.status();
  // A metadata request first: it connects to a bootstrap broker at once.
  // rd_kafka_clusterid() alone only waits for metadata, and a new client
  // connects on its own only at its main thread's next 1 s tick, so every
  // tally command started a second late.
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk->get(), 0, nullptr, &md, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_metadata_destroy(md);
  }
  char* id = rd_kafka_clusterid(rk->get(), timeout_ms);
  if (!id) {
    return Status::Unavailable(
        fmt::format("cannot reach Kafka at {} within {} ms", options.brokers, timeout_ms));
  }
  ClusterIdentity ident;
  ident.cluster_id = id;
  rd_kafka_mem_free(rk->get(), id);
  ident.embedded = ident.cluster_id.rfind("mockCluster", 0) == 0;
  if (!ident.embedded) return ident;

  // The embedded broker's incarnation: the first record of tally.meta.
  // Its first offset is asked for here and the fetch starts there: from
  // the logical "beginning", librdkafka 2.0 often resolves the offset only
  // on its 500 ms retry timer, and every tally command started that late.
  int64_t low = 0, high = 0;
  rd_kafka_resp_err_t werr = rd_kafka_query_watermark_offsets(
      rk->get(), std::string(kMetaTopic).c_str(), 0, &low, &high, timeout_ms);
  KafkaPartitionList parts(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(parts.get(), std::string(kMetaTopic).c_str(), 0)->offset =
      werr == RD_KAFKA_RESP_ERR_NO_ERROR ? low : RD_KAFKA_OFFSET_BEGINNING;
  TALLY_RETURN_IF_ERROR(Assign(rk->get(), parts.get(), "assigning tally.meta"));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    KafkaMessage m(rd_kafka_consumer_poll(rk->get(), 100));
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) break;
    if (m->err) continue;  // transient; retried until the deadline
    ident.incarnation.assign(static_cast<const char*>(m->payload), m->len);
    break;
  }
  // Never joined a group: skip the consumer close handshake (it costs seconds).
  UnassignAtStop(rk->get(), "kafka");
  rd_kafka_destroy_flags(rk->release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  if (ident.incarnation.empty()) {
    return Status::Unavailable("embedded broker has no incarnation record in tally.meta");
  }
  return ident;
}

Result<int> PartitionCount(rd_kafka_t* rk, std::string_view topic, int timeout_ms) {
  const rd_kafka_metadata_t* md = nullptr;
  std::string name(topic);
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, name.c_str(), nullptr);
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
  rd_kafka_topic_destroy(rkt);
  if (err) return KafkaStatus(err, fmt::format("metadata for {}", topic));
  int count = -1;
  rd_kafka_resp_err_t terr = RD_KAFKA_RESP_ERR_NO_ERROR;
  for (int i = 0; i < md->topic_cnt; i++) {
    if (name == md->topics[i].topic) {
      terr = md->topics[i].err;
      count = md->topics[i].partition_cnt;
    }
  }
  rd_kafka_metadata_destroy(md);
  if (terr) return KafkaStatus(terr, fmt::format("topic {}", topic));
  if (count <= 0) return Status::NotFound(fmt::format("topic {} does not exist", topic));
  return count;
}

Result<std::vector<PartitionOffsets>> QueryWatermarks(rd_kafka_t* rk, std::string_view topic,
                                                     int timeout_ms) {
  auto n = PartitionCount(rk, topic, timeout_ms);
  if (!n.ok()) return n.status();
  // Every partition's start, then every partition's end, each in one
  // ListOffsets request per broker: EARLIEST (-2) and LATEST (-1) are that
  // request's own logical times, which rd_kafka_query_watermark_offsets()
  // sends one partition at a time. /v1/watermarks asks for two topics of 16
  // partitions; one partition at a time, polling it took 16 ms.
  std::vector<PartitionOffsets> out(static_cast<size_t>(*n));
  const std::string name(topic);
  for (int64_t logical : {int64_t{RD_KAFKA_OFFSET_BEGINNING}, int64_t{RD_KAFKA_OFFSET_END}}) {
    KafkaPartitionList list(rd_kafka_topic_partition_list_new(*n));
    for (int p = 0; p < *n; p++)
      rd_kafka_topic_partition_list_add(list.get(), name.c_str(), p)->offset = logical;
    rd_kafka_resp_err_t err = rd_kafka_offsets_for_times(rk, list.get(), timeout_ms);
    if (err) return KafkaStatus(err, fmt::format("watermarks of {}", topic));
    for (int i = 0; i < list->cnt; i++) {
      const rd_kafka_topic_partition_t& e = list->elems[i];
      if (e.err) return KafkaStatus(e.err, fmt::format("watermarks of {}/{}", topic, e.partition));
      if (e.partition < 0 || e.partition >= *n || e.offset < 0) {
        return Status::Internal(
            fmt::format("watermarks of {}: the broker answered partition {} offset {}", topic,
                        e.partition, e.offset));
      }
      PartitionOffsets& po = out[static_cast<size_t>(e.partition)];
      po.partition = e.partition;
      (logical == RD_KAFKA_OFFSET_BEGINNING ? po.low : po.high) = e.offset;
    }
  }
  return out;
}

namespace {
struct BackgroundDestroys {
  std::mutex mu;
  std::condition_variable done;
  int running = 0;
};
// Never destroyed: a destroy may still run while the process exits.
BackgroundDestroys& Destroys() {
  static auto* d = new BackgroundDestroys;
  return *d;
}
}  // namespace

void DestroyInBackground(KafkaHandle rk, int flags) {
  if (!rk) return;
  BackgroundDestroys& d = Destroys();
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.running++;
  }
  std::thread([h = rk.release(), flags, &d] {
    rd_kafka_destroy_flags(h, flags);
    std::lock_guard<std::mutex> lock(d.mu);
    d.running--;
    d.done.notify_all();
  }).detach();
}

int AwaitBackgroundDestroys(int timeout_ms) {
  BackgroundDestroys& d = Destroys();
  std::unique_lock<std::mutex> lock(d.mu);
  d.done.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&d] { return d.running == 0; });
  return d.running;
}

Status EnsureTopics(rd_kafka_t* rk, const std::vector<std::string>& topics, int partitions,
                    int replication_factor, int timeout_ms) {
  std::vector<rd_kafka_NewTopic_t*> news;
  char err[512];
  for (const auto& t : topics) {
    auto existing = PartitionCount(rk, t, timeout_ms);
    if (existing.ok()) continue;
    int np = t == kMetaTopic || t == kMembersTopic ? 1 : partitions;
    rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(t.c_str(), np, replication_factor, err, sizeof(err));
    if (!nt) {
      for (auto* x : news) rd_kafka_NewTopic_destroy(x);
      return Status::InvalidArgument(fmt::format("topic {}: {}", t, err));
    }
    // Readers keep the latest record per member; compaction keeps the log
    // as short as the member list. tally.deltas is what a member that takes
    // a partition over without a copy restores it from (SPEC section 6):
    // kept for ever, whatever the broker's default retention.
    const char* key = nullptr;
    const char* value = nullptr;
    if (t == kMembersTopic) {
      key = "cleanup.policy";
      value = "compact";
    } else if (t == kDeltasTopic) {
      key = "retention.ms";
      value = "-1";
    }
    if (key != nullptr) {
      if (auto e = rd_kafka_NewTopic_set_config(nt, key, value)) {
        rd_kafka_NewTopic_destroy(nt);
        for (auto* x : news) rd_kafka_NewTopic_destroy(x);
        return KafkaStatus(e, fmt::format("topic {}: {}", t, key));
      }
    }
    news.push_back(nt);
  }
  if (news.empty()) return Status::Ok();
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_AdminOptions_t* opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
  rd_kafka_AdminOptions_set_operation_timeout(opts, timeout_ms, err, sizeof(err));
  rd_kafka_CreateTopics(rk, news.data(), news.size(), opts, q);
  Status st = Status::Ok();
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, timeout_ms + 2000);
  if (!ev) {
    st = Status::Unavailable("CreateTopics timed out");
  } else if (rd_kafka_event_error(ev)) {
    st = KafkaStatus(rd_kafka_event_error(ev), "CreateTopics");
  } else {
    const rd_kafka_CreateTopics_result_t* res = rd_kafka_event_CreateTopics_result(ev);
    size_t cnt = 0;
    const rd_kafka_topic_result_t** trs = rd_kafka_CreateTopics_result_topics(res, &cnt);
    for (size_t i = 0; i < cnt; i++) {
      auto e = rd_kafka_topic_result_error(trs[i]);
      if (e && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        st = KafkaStatus(e, fmt::format("creating topic {}", rd_kafka_topic_result_name(trs[i])));
      }
    }
  }
  if (ev) rd_kafka_event_destroy(ev);
  rd_kafka_AdminOptions_destroy(opts);
  rd_kafka_queue_destroy(q);
  for (auto* x : news) rd_kafka_NewTopic_destroy(x);
  return st;
}

}  // namespace tally::base
