#include "pipeline.h"

#include "cli.h"

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "base/clock.h"
#include "base/log.h"
#include "base/shutdown.h"

namespace tally::app {

using base::Status;

void AddKafkaFlags(base::FlagSet* fs, CommonFlags* f) {
  fs->String("brokers", &f->brokers, "Kafka bootstrap servers host:port,...");
  fs->Repeated("kafka", &f->kafka, "librdkafka setting KEY=VALUE (security, tuning)");
  fs->String("log-level", &f->log_level, "debug, info, warn or error");
}

void AddTopicFlags(base::FlagSet* fs, CommonFlags* f) {
  fs->Repeated("input-topic", &f->input_topics, "input topic");
  fs->String("group", &f->group, "consumer group of the router (the applier uses GROUP-applier)");
}

void AddStateFlags(base::FlagSet* fs, CommonFlags* f) {
  fs->String("state-dir", &f->state_dir, "state directory (RocksDB per partition)");
  fs->Int("block-cache-mb", &f->block_cache_mb, "RocksDB block cache shared by all partitions, MiB");
  fs->Int("write-buffer-mb", &f->write_buffer_mb, "RocksDB memtable size per partition, MiB");
  fs->Bool("sync", &f->sync, "fsync the RocksDB WAL on every window (survives power loss, slower)");
  fs->Int("viewed-mb", &f->viewed_mb, "memory budget of the \"viewed\" Bloom filter tables, MiB, all partitions");
  fs->Int("inactive-days", &f->inactive_days,
          "purge notice and red-dot records of users inactive this long (0: never)");
}

void AddAuthFlags(base::FlagSet* fs, CommonFlags* f) {
  fs->String("auth-token", &f->auth_token,
             "require 'Authorization: Bearer TOKEN' on POST /v1/events and the resets");
  fs->String("auth-token-file", &f->auth_token_file, "read that token from the first line of a file");
}

base::Result<std::string> ResolveAuthToken(const CommonFlags& f) {
  if (!f.auth_token.empty() && !f.auth_token_file.empty()) {
    return Status::InvalidArgument("give --auth-token or --auth-token-file, not both");
  }
  if (f.auth_token_file.empty()) return f.auth_token;
  std::ifstream in(f.auth_token_file);
  std::string token;
  if (!in || !std::getline(in, token)) {
    return Status::InvalidArgument(fmt::format("--auth-token-file {}: cannot read it", f.auth_token_file));
  }
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) return Status::InvalidArgument(fmt::format("--auth-token-file {}: empty", f.auth_token_file));
  return token;
}

Status ApplyCommonFlags(const CommonFlags& f, base::KafkaOptions* out) {
  TALLY_RETURN_IF_ERROR(ApplyLogLevel(f.log_level));
  out->brokers = f.brokers;
  out->overrides.clear();
  return ParseKafkaOverrides(f.kafka, out);
}

base::Result<ClusterInfo> ConnectCluster(base::KafkaOptions* kafka, const CommonFlags& f, bool create_topics,
                                         int wait_ms) {
  ClusterInfo info;
  int64_t deadline = base::SteadyMs() + wait_ms;
  bool said = false;
  for (;;) {
    auto id = base::FetchClusterIdentity(*kafka, 3000);
    if (id.ok()) {
      info.identity = std::move(id).value();
      break;
    }
    if (base::SteadyMs() >= deadline || base::ShutdownRequested()) return id.status();
    if (!said) {
      TALLY_LOG_WARN("cluster", "waiting for Kafka at {}: {}", kafka->brokers, id.status().message());
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  kafka->embedded = info.identity.embedded;
  auto conf = base::MakeKafkaConf(RD_KAFKA_PRODUCER, *kafka, {{"client.id", "tally-admin"}});
  if (!conf.ok()) return conf.status();
  auto admin = base::MakeKafkaHandle(RD_KAFKA_PRODUCER, std::move(conf).value());
  if (!admin.ok()) return admin.status();
  if (create_topics && !info.identity.embedded) {
    std::vector<std::string> topics = f.input_topics;
    for (auto t : {base::kDeltasTopic, base::kDlqTopic}) topics.emplace_back(t);
    TALLY_RETURN_IF_ERROR(base::EnsureTopics(admin->get(), topics, static_cast<int>(f.partitions), -1, 15000));
  }
  auto n = base::PartitionCount(admin->get(), base::kDeltasTopic, 10000);
  if (!n.ok()) {
    return n.status().WithContext(fmt::format("{} on {}", base::kDeltasTopic, kafka->brokers));
  }
  info.deltas_partitions = static_cast<uint32_t>(*n);
  TALLY_LOG_INFO("cluster", "connected to {} (cluster {}{}), {} has {} partitions", kafka->brokers,
                 info.identity.ToString(), info.identity.embedded ? ", embedded broker" : "",
                 base::kDeltasTopic, info.deltas_partitions);
  return info;
}

base::Result<std::unique_ptr<store::StateStore>> OpenState(const CommonFlags& f, uint32_t partitions,
                                                           bool read_only) {
  store::StoreOptions o;
  o.dir = f.state_dir;
  o.partitions = partitions;
  o.block_cache_bytes = static_cast<uint64_t>(std::max<int64_t>(f.block_cache_mb, 1)) << 20;
  o.write_buffer_bytes = static_cast<uint64_t>(std::max<int64_t>(f.write_buffer_mb, 1)) << 20;
  o.read_only = read_only;
  o.sync_writes = f.sync;
  o.inactive_days = f.inactive_days;
  // Fault drills and tests (not a flag: nobody should arm it by accident).
  if (const char* fault = std::getenv("TALLY_STORE_FAULT_FILE"); fault && *fault && !read_only) {
    o.fault_file = fault;
  }
  uint32_t parts = partitions ? partitions : 1;
  o.viewed.budget_bytes = (static_cast<uint64_t>(std::max<int64_t>(f.viewed_mb, 1)) << 20) / parts;
  return store::StateStore::Open(o);
}

}  // namespace tally::app
