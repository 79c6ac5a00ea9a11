#include "log/log_manager.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <random>

#include "base/clock.h"
#include "base/log.h"

namespace tally::broker {

using base::Result;
using base::Status;

namespace {

constexpr char kMetaFile[] = "meta.properties";
constexpr char kLockFile[] = ".lock";
constexpr char kDeleteSuffix[] = "-delete";

// key=value lines; '#' starts a comment line.
std::map<std::string, std::string> ParseProperties(std::string_view text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    out[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return out;
}

bool ParseInt32(std::string_view text, int32_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string NewClusterId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::random_device rd;
  while (true) {
    uint8_t b[16];
    for (int i = 0; i < 16; i += 4) {
      uint32_t r = rd();
      std::memcpy(b + i, &r, 4);
    }
    b[6] = static_cast<uint8_t>((b[6] & 0x0F) | 0x40);
    b[8] = static_cast<uint8_t>((b[8] & 0x3F) | 0x80);
    std::string out;
    int bits = 0;
    uint32_t acc = 0;
    for (uint8_t byte : b) {
      acc = (acc << 8) | byte;
      bits += 8;
      while (bits >= 6) {
        bits -= 6;
        out.push_back(kAlphabet[(acc >> bits) & 0x3F]);
      }
    }
    if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 0x3F]);
    if (out[0] != '-') return out;
  }
}

Result<std::unique_ptr<LogManager>> LogManager::Open(const LogManagerOptions& options) {
  if (options.log_dir.empty()) return Status::InvalidArgument("log dir is empty");
  std::error_code ec;
  std::filesystem::create_directories(options.log_dir / "topics", ec);
  if (ec) {
    return Status::IOError(fmt::format("create {}: {}", options.log_dir.string(), ec.message()));
  }
  std::unique_ptr<LogManager> m(new LogManager(options));
  TALLY_RETURN_IF_ERROR(m->Lock());
  TALLY_RETURN_IF_ERROR(m->LoadOrCreateMeta());
  TALLY_RETURN_IF_ERROR(m->LoadTopics());
  if (!m->topics_.empty()) {
    size_t partitions = 0;
    for (const auto& [name, topic] : m->topics_) partitions += topic.partitions.size();
    TALLY_LOG_INFO("log", "opened {}: cluster id {}, {} topic(s), {} partition(s)",
                   options.log_dir.string(), m->cluster_id_, m->topics_.size(), partitions);
  }
  m->RefreshFlushList();
  m->flush_pool_ = std::make_unique<FlushPool>(std::max(options.flush_parallelism, 1) - 1);
  if (options.log_flush_ms > 0) m->flusher_ = std::thread([p = m.get()] { p->FlusherLoop(); });
  return m;
}

LogManager::~LogManager() {
  Status st = Close();
  if (!st.ok()) TALLY_LOG_ERROR("log", "closing {}: {}", options_.log_dir.string(), st.ToString());
}

Status LogManager::Lock() {
  std::filesystem::path path = options_.log_dir / kLockFile;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::IOError(fmt::format("open {}: {}", path.string(), std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (err == EWOULDBLOCK) {
      return Status::FailedPrecondition(fmt::format(
          "log dir {} is in use by another broker (pid {})", options_.log_dir.string(), holder));
    }
    return Status::IOError(fmt::format("lock {}: {}", path.string(), std::strerror(err)));
  }
  std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    int err = errno;
    ::close(fd);
    return Status::IOError(fmt::format("write {}: {}", path.string(), std::strerror(err)));
  }
  lock_fd_ = fd;
  return Status::Ok();
}

Status LogManager::LoadOrCreateMeta() {
  std::filesystem::path path = options_.log_dir / kMetaFile;
  std::string text;
  Status st = ReadWholeFile(path, &text);
  if (st.code() == base::StatusCode::kNotFound) {
    cluster_id_ = NewClusterId();
    TALLY_LOG_INFO("log", "new log dir {}: cluster id {}", options_.log_dir.string(), cluster_id_);
    return WriteFileAtomically(path,
                               fmt::format("#tally broker log directory\nversion=1\ncluster.id={}\n"
                                           "node.id={}\n",
                                           cluster_id_, options_.node_id),
                               /*sync_dir=*/true);
  }
  TALLY_RETURN_IF_ERROR(st);
  auto props = ParseProperties(text);
  int32_t node_id;
  if (props["cluster.id"].empty() || !ParseInt32(props["node.id"], &node_id)) {
    return Status::Corruption(fmt::format("{}: no cluster.id or node.id", path.string()));
  }
  if (node_id != options_.node_id) {
    return Status::FailedPrecondition(
        fmt::format("{}: node.id is {}, not {}", path.string(), node_id, options_.node_id));
  }
  cluster_id_ = props["cluster.id"];
  return Status::Ok();
}

PartitionLogOptions LogManager::PartitionOptions(const TopicConfig& config) {
  PartitionLogOptions o;
  o.config = config;
  o.index_interval_bytes = options_.index_interval_bytes;
  o.log_flush_ms = options_.log_flush_ms;
  o.ops = options_.ops;
  if (options_.log_flush_ms > 0) o.on_dirty = [this] { NoteDirty(); };
  return o;
}

Status LogManager::OpenPartitions(Topic* topic) {
  int64_t now = base::WallMs();
  for (int32_t p = static_cast<int32_t>(topic->partitions.size()); p < topic->info.partitions;
       ++p) {
    std::filesystem::path dir = options_.log_dir / fmt::format("{}-{}", topic->info.name, p);
    Result<std::unique_ptr<PartitionLog>> log =
        PartitionLog::Open(dir, topic->info.name, p, PartitionOptions(topic->info.config), now);
    if (!log.ok()) return log.status();
    topic->partitions.push_back(std::shared_ptr<PartitionLog>(std::move(*log)));
  }
  return Status::Ok();
}

Status LogManager::LoadTopics() {
  std::error_code ec;
  Result<std::vector<DirEntry>> dirs = ListDir(options_.log_dir);
  if (!dirs.ok()) return dirs.status();
  for (const DirEntry& entry : *dirs) {
    // Topics whose deletion a crash interrupted.
    if (entry.is_dir && EndsWith(entry.name, kDeleteSuffix)) {
      std::filesystem::remove_all(options_.log_dir / entry.name, ec);
    }
  }
  Result<std::vector<DirEntry>> files = ListDir(TopicsDir());
  if (!files.ok()) return files.status();
  for (const DirEntry& entry : *files) {
    std::filesystem::path path = TopicsDir() / entry.name;
    if (EndsWith(entry.name, kTempSuffix)) {
      std::filesystem::remove(path, ec);
      continue;
    }
    const std::string& name = entry.name;
    std::string text;
    TALLY_RETURN_IF_ERROR(ReadWholeFile(path, &text));
    auto props = ParseProperties(text);
    Topic topic;
    topic.info.name = name;
    Status st = ValidateTopicName(name);
    if (st.ok() &&
        (!ParseInt32(props["partitions"], &topic.info.partitions) || topic.info.partitions < 1)) {
      st = Status::Corruption("no valid partitions= line");
    }
    props.erase("partitions");
    if (st.ok()) {
      Result<TopicConfig> config = ParseTopicConfig(props, options_.default_topic_config);
      if (config.ok()) {
        topic.info.config = *config;
      } else {
        st = config.status();
      }
    }
    if (!st.ok()) return Status::Corruption(fmt::format("{}: {}", path.string(), st.message()));
    TALLY_RETURN_IF_ERROR(OpenPartitions(&topic));
    topics_.emplace(name, std::move(topic));
  }
  return Status::Ok();
}

Status LogManager::WriteTopicFile(const TopicInfo& info) {
  std::string text = fmt::format("partitions={}\n", info.partitions);
  for (const auto& [key, value] : ToProperties(info.config))
    text += fmt::format("{}={}\n", key, value);
  return WriteFileAtomically(TopicsDir() / info.name, text, /*sync_dir=*/true);
}

void LogManager::RefreshFlushList() {
  std::vector<std::shared_ptr<PartitionLog>> list;
  for (const auto& [name, topic] : topics_) {
    list.insert(list.end(), topic.partitions.begin(), topic.partitions.end());
  }
  std::lock_guard<std::mutex> lock(mu_);
  flush_list_ = std::move(list);
}

Status LogManager::CreateTopic(std::string_view name, int32_t partitions,
                               const TopicConfig& config) {
  TALLY_RETURN_IF_ERROR(ValidateTopicName(name));
  if (partitions < 1) {
    return Status::InvalidArgument(
        fmt::format("topic {}: {} partitions; at least 1", name, partitions));
  }
  if (topics_.find(name) != topics_.end()) {
    return Status::FailedPrecondition(fmt::format("topic {} already exists", name));
  }
  Topic topic;
  topic.info = TopicInfo{std::string(name), partitions, config};
  TALLY_RETURN_IF_ERROR(WriteTopicFile(topic.info));
  Status st = OpenPartitions(&topic);
  if (st.ok()) st = SyncDir(options_.log_dir);
  if (!st.ok()) {
    // Not created: a restart must not find it half made.
    std::error_code ec;
    std::filesystem::remove(TopicsDir() / topic.info.name, ec);
    for (auto& log : topic.partitions) std::filesystem::remove_all(log->dir(), ec);
    return st;
  }
  TALLY_LOG_INFO("log", "created topic {} with {} partition(s)", name, partitions);
  topics_.emplace(std::string(name), std::move(topic));
  RefreshFlushList();
  return Status::Ok();
}

Status LogManager::DeleteTopic(std::string_view name) {
  auto it = topics_.find(name);
  if (it == topics_.end()) return Status::NotFound(fmt::format("unknown topic {}", name));
  Topic topic = std::move(it->second);
  topics_.erase(it);
  RefreshFlushList();
  // Out of the way first (renamed, as Kafka does), so that a crash never
  // leaves old data under a name a new topic of the same name would reuse.
  std::vector<std::filesystem::path> doomed;
  std::error_code ec;
  for (auto& log : topic.partitions) {
    std::filesystem::path dir = log->dir();
    (void)log->Close();
    // A short name of its own: "<topic>-<p>" plus a suffix could pass
    // NAME_MAX for a 249-character topic name.
    std::filesystem::path target = options_.log_dir / (NewClusterId() + kDeleteSuffix);
    std::filesystem::rename(dir, target, ec);
    if (ec) return Status::IOError(fmt::format("rename {}: {}", dir.string(), ec.message()));
    doomed.push_back(target);
  }
  TALLY_RETURN_IF_ERROR(SyncDir(options_.log_dir));
  std::filesystem::remove(TopicsDir() / std::string(name), ec);
  if (ec) return Status::IOError(fmt::format("remove topic file of {}: {}", name, ec.message()));
  TALLY_RETURN_IF_ERROR(SyncDir(TopicsDir()));
  for (const auto& dir : doomed) std::filesystem::remove_all(dir, ec);
  TALLY_LOG_INFO("log", "deleted topic {}", name);
  return Status::Ok();
}

Status LogManager::AlterTopicConfig(std::string_view name, const TopicConfig& config) {
  auto it = topics_.find(name);
  if (it == topics_.end()) return Status::NotFound(fmt::format("unknown topic {}", name));
  TopicInfo info = it->second.info;
  info.config = config;
  TALLY_RETURN_IF_ERROR(WriteTopicFile(info));
  it->second.info = info;
  for (auto& log : it->second.partitions) log->SetConfig(config);
  return Status::Ok();
}

const TopicInfo* LogManager::FindTopic(std::string_view name) const {
  auto it = topics_.find(name);
  return it == topics_.end() ? nullptr : &it->second.info;
}

std::vector<TopicInfo> LogManager::Topics() const {
  std::vector<TopicInfo> out;
  for (const auto& [name, topic] : topics_) out.push_back(topic.info);
  return out;
}

PartitionLog* LogManager::GetPartition(std::string_view topic, int32_t partition) const {
  auto it = topics_.find(topic);
  if (it == topics_.end() || partition < 0 ||
      partition >= static_cast<int32_t>(it->second.partitions.size())) {
    return nullptr;
  }
  return it->second.partitions[static_cast<size_t>(partition)].get();
}

Status LogManager::RunMaintenance(int64_t now_ms) {
  Status first;
  for (auto& [name, topic] : topics_) {
    for (auto& log : topic.partitions) {
      Result<int> deleted = log->EnforceRetention(now_ms);
      Status st = deleted.status();
      if (st.ok()) {
        Result<int64_t> removed = log->Compact();
        st = removed.status();
      }
      if (!st.ok()) {
        TALLY_LOG_ERROR("log", "maintenance of {}-{}: {}", name, log->partition(), st.ToString());
        if (first.ok()) first = st;
      }
    }
  }
  return first;
}

Status LogManager::FlushRound() {
  std::vector<std::shared_ptr<PartitionLog>> list;
  {
    std::lock_guard<std::mutex> lock(mu_);
    list = flush_list_;
  }
  // Those with something to sync, synced side by side (FlushPool).
  std::erase_if(list,
                [](const std::shared_ptr<PartitionLog>& log) { return !log->flush_pending(); });
  std::vector<Status> results(list.size());
  std::vector<int64_t> before(list.size());
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < list.size(); i++) before[i] = list[i]->high_watermark();
  flush_pool_->Run(list.size(), [&](size_t i) { results[i] = list[i]->Flush(); });
  Status first;
  bool advanced = false;
  for (size_t i = 0; i < list.size(); i++) {
    if (!results[i].ok() && first.ok()) first = results[i];
    if (list[i]->high_watermark() != before[i]) advanced = true;
  }
  if (advanced) {
    int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
    flush_rounds_.fetch_add(1, std::memory_order_relaxed);
    flush_total_us_.fetch_add(us, std::memory_order_relaxed);
    flush_last_us_.store(us, std::memory_order_relaxed);
    int64_t max = flush_max_us_.load(std::memory_order_relaxed);
    while (us > max && !flush_max_us_.compare_exchange_weak(max, us)) {
    }
  }
  if (advanced && options_.on_flushed) options_.on_flushed();
  return first;
}

Status LogManager::FlushAll() { return FlushRound(); }

FlushStats LogManager::flush_stats() const {
  FlushStats s;
  s.rounds = flush_rounds_.load(std::memory_order_relaxed);
  s.total_micros = flush_total_us_.load(std::memory_order_relaxed);
  s.last_micros = flush_last_us_.load(std::memory_order_relaxed);
  s.max_micros = flush_max_us_.load(std::memory_order_relaxed);
  return s;
}

void LogManager::NoteDirty() {
  // The first write after a round wakes the flusher; the others cost one
  // atomic exchange.
  if (dirty_.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_one();
}

// Sleeps while nothing is written (an idle broker never wakes for it), then
// flushes at once, but rounds start at least log_flush_ms apart: under load
// that is the group commit, and a write after a quiet spell is made
// durable without waiting out an interval.
void LogManager::FlusherLoop() {
  const auto interval = std::chrono::milliseconds(options_.log_flush_ms);
  auto last_round = std::chrono::steady_clock::now() - interval;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait(lock, [this] { return stop_ || dirty_.load(std::memory_order_acquire); });
    if (stop_) break;
    cv_.wait_until(lock, last_round + interval, [this] { return stop_; });
    if (stop_) break;
    // Cleared before the round looks at the partitions: a write after this
    // point is either in this round or wakes the next one.
    dirty_.store(false, std::memory_order_release);
    last_round = std::chrono::steady_clock::now();
    lock.unlock();
    // A failing partition logs once itself (PartitionLog::Flush); the
    // others go on being flushed.
    (void)FlushRound();
    lock.lock();
  }
}

Result<DiskSpace> LogManager::GetDiskSpace() const {
  struct statvfs vfs;
  if (::statvfs(options_.log_dir.c_str(), &vfs) != 0) {
    return Status::IOError(
        fmt::format("statvfs {}: {}", options_.log_dir.string(), std::strerror(errno)));
  }
  DiskSpace out;
  out.total_bytes = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize);
  out.free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  return out;
}

Status LogManager::Close() {
  if (closed_) return Status::Ok();
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  Status first;
  for (auto& [name, topic] : topics_) {
    for (auto& log : topic.partitions) {
      Status st = log->Close();
      if (!st.ok() && first.ok()) first = st;
    }
  }
  topics_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    flush_list_.clear();
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  return first;
}

}  // namespace tally::broker
