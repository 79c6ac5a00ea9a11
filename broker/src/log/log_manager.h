// LogManager: the broker's log directory (`--log-dir`) as a whole: an
// exclusive lock on it, `meta.properties` (cluster id and node id, as
// Kafka's), the topics with their configs (`topics/<topic>`),
// one PartitionLog per partition (`<topic>-<partition>/`), the flusher
// thread that makes appends durable in group commits, and the periodic
// retention and compaction pass.
//
// Thread model: every method on the broker's owning (network) thread,
// externally synchronized; the flusher thread is internal and calls only
// PartitionLog::Flush and the on_flushed callback. PartitionLog pointers
// handed out stay valid until DeleteTopic of their topic or Close.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"
#include "log/file_util.h"
#include "log/flush_pool.h"
#include "log/partition_log.h"
#include "log/topic_config.h"

namespace tally::broker {

// How LogManager::Open sets up the log directory.
struct LogManagerOptions {
  std::filesystem::path log_dir;
  int32_t node_id = 1;
  // Group commit interval; 0: no flusher, the HW follows the written end.
  int64_t log_flush_ms = 2;
  // Partitions a flush round syncs at once (FlushPool; 1: one after another).
  int flush_parallelism = 16;
  int64_t index_interval_bytes = 4096;
  // Configs of topics created without them (auto-created topics, and every
  // key a CreateTopics request leaves out).
  TopicConfig default_topic_config;
  // Borrowed; must outlive the manager. Tests pass one that fails writes.
  FileOps* ops = DefaultFileOps();
  // Called on the flusher thread after a flush round that moved some
  // partition's high watermark, so the server can answer produce requests
  // (acks != 0) and wake fetches waiting for data. Must be quick and
  // thread-safe (an eventfd write); may be empty.
  std::function<void()> on_flushed;
};

// A topic as the log directory keeps it.
struct TopicInfo {
  std::string name;
  int32_t partitions = 0;
  TopicConfig config;
};

// Group-commit figures for metrics ("flush latency").
struct FlushStats {
  int64_t rounds = 0;        // flush rounds that moved a high watermark
  int64_t total_micros = 0;  // their summed duration
  int64_t last_micros = 0;   // the last one's duration
  int64_t max_micros = 0;    // the longest
};

// Space of the file system holding the log directory.
struct DiskSpace {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;  // available to this (unprivileged) process
};

class LogManager {
 public:
  // Creates the directory if needed, locks it (kFailedPrecondition naming
  // the pid holding it if another broker has it), reads or writes
  // meta.properties (a new directory gets a new random cluster id; a node id
  // different from the one stored is kFailedPrecondition), opens every
  // topic's partitions with recovery (any refusal is the error, naming the
  // file) and starts the flusher thread.
  static base::Result<std::unique_ptr<LogManager>> Open(const LogManagerOptions& options);
  // Closes if Close() was not called (errors logged).
  ~LogManager();
  LogManager(const LogManager&) = delete;
  LogManager& operator=(const LogManager&) = delete;

  // Kafka's cluster id: 22 characters of base64url (a random UUID).
  const std::string& cluster_id() const { return cluster_id_; }
  int32_t node_id() const { return options_.node_id; }
  const std::filesystem::path& log_dir() const { return options_.log_dir; }

  // Creates a topic with `partitions` partitions (persisted first, then the
  // partition directories). Errors: kInvalidArgument for a bad name
  // (INVALID_TOPIC_EXCEPTION) or partitions < 1 (INVALID_PARTITIONS);
  // kFailedPrecondition if it exists (TOPIC_ALREADY_EXISTS); kIOError.
  // Validate configs beforehand with ParseTopicConfig (INVALID_CONFIG).
  base::Status CreateTopic(std::string_view name, int32_t partitions, const TopicConfig& config);

  // Deletes a topic and its data. kNotFound (UNKNOWN_TOPIC_OR_PARTITION) if
  // there is none. Pointers to its partitions become invalid.
  base::Status DeleteTopic(std::string_view name);

  // Replaces a topic's config (persisted) and applies it to its partitions.
  base::Status AlterTopicConfig(std::string_view name, const TopicConfig& config);

  // The topic, or null; valid until the topic is deleted or altered.
  const TopicInfo* FindTopic(std::string_view name) const;
  // Every topic, by name.
  std::vector<TopicInfo> Topics() const;

  // The partition's log, or null if the topic or partition does not exist.
  PartitionLog* GetPartition(std::string_view topic, int32_t partition) const;

  // One retention and compaction pass over every partition (call it every
  // 30 s or so from the owning thread; tests call it directly). Returns the
  // first error; the other partitions are still processed.
  base::Status RunMaintenance(int64_t now_ms);

  // One flush round now, as the flusher thread does (tests, shutdown).
  // Returns the first error.
  base::Status FlushAll();

  // Flush figures so far. Safe from any thread.
  FlushStats flush_stats() const;

  // Space of the file system holding the log directory (statvfs).
  base::Result<DiskSpace> GetDiskSpace() const;

  // Stops the flusher, flushes every partition, writes their producer
  // snapshots, closes them and releases the lock. Idempotent.
  base::Status Close();

 private:
  struct Topic {
    TopicInfo info;
    std::vector<std::shared_ptr<PartitionLog>> partitions;
  };

  explicit LogManager(const LogManagerOptions& options) : options_(options) {}
  base::Status Lock();
  base::Status LoadOrCreateMeta();
  base::Status LoadTopics();
  base::Status OpenPartitions(Topic* topic);
  base::Status WriteTopicFile(const TopicInfo& info);
  PartitionLogOptions PartitionOptions(const TopicConfig& config);
  std::filesystem::path TopicsDir() const { return options_.log_dir / "topics"; }
  void RefreshFlushList();
  // A partition wrote what no flush covers yet: wake the flusher.
  void NoteDirty();
  void FlusherLoop();
  base::Status FlushRound();

  LogManagerOptions options_;
  std::string cluster_id_;
  int lock_fd_ = -1;
  bool closed_ = false;
  std::map<std::string, Topic, std::less<>> topics_;

  // Shared with the flusher thread.
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;               // guarded by mu_
  std::atomic<bool> dirty_{false};  // written since the flusher's last round began
  std::vector<std::shared_ptr<PartitionLog>> flush_list_;  // guarded by mu_
  std::thread flusher_;
  // The flusher's helpers: a round's partitions are synced side by side.
  std::unique_ptr<FlushPool> flush_pool_;
  std::atomic<int64_t> flush_rounds_{0};
  std::atomic<int64_t> flush_total_us_{0};
  std::atomic<int64_t> flush_last_us_{0};
  std::atomic<int64_t> flush_max_us_{0};
};

// A new random cluster id as Kafka makes them: a version-4 UUID in base64url
// without padding (22 characters), never starting with '-'.
std::string NewClusterId();

}  // namespace tally::broker
