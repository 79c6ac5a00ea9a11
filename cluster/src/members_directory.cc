#include "cluster/members_directory.h"

#include <fmt/core.h>

#include <algorithm>
#include <utility>

#include "base/clock.h"
#include "base/kafka_consumer.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/shutdown.h"

namespace tally::cluster {
namespace {

constexpr const char* kLog = "members";
// The thread's longest sleep in the consumer: bounds how late a Publish(),
// a heartbeat, an expiry and a stop are noticed.
constexpr int kPollMs = 50;
// Records are written to and read from this partition only (see the header:
// the embedded broker may have made the topic with more).
constexpr int32_t kPartition = 0;
// The reader never commits; librdkafka's consumer needs a group id for
// assign() all the same (base/kafka_consumer.h).
constexpr const char* kReaderGroup = "tally-members-reader";

base::Counter* MalformedCounter() {
  static base::Counter* c = base::MetricsRegistry::Global().GetCounter(
      "tally_members_malformed_records_total",
      "Records of tally.members that were not a member's record, ignored");
  return c;
}

}  // namespace

MembersDirectory::MembersDirectory(MembersDirectoryOptions options)
    : options_(std::move(options)) {}

base::Result<std::unique_ptr<MembersDirectory>> MembersDirectory::Start(
    MembersDirectoryOptions options) {
  if (options.member.empty() || options.member.find('/') != std::string::npos)
    return base::Status::InvalidArgument("members directory: empty member id, or one with '/'");
  if (options.heartbeat_ms <= 0 || options.expire_ms < 0) {
    return base::Status::InvalidArgument(
        "members directory: heartbeat_ms must be > 0, expire_ms >= 0");
  }
  if (options.expire_ms == 0) options.expire_ms = 3 * options.heartbeat_ms;
  std::unique_ptr<MembersDirectory> d(new MembersDirectory(std::move(options)));
  const auto& o = d->options_;
  const std::string topic(base::kMembersTopic);

  base::ProducerSettings ps;
  ps.client_id = "tally-members";
  ps.linger_ms = 0;  // a record at a time, every few seconds: nothing to batch
  if (!o.kafka.embedded) {
    // A producer's metadata request for a missing topic has Kafka create it
    // (when the broker allows that, as it does by default) with the broker's
    // defaults: not compacted. EnsureTopics looks the topic up before it
    // creates it; that look-up must not create it.
    ps.extra["allow.auto.create.topics"] = "false";
  }
  MembersDirectory* self = d.get();
  ps.on_delivery = [self](const rd_kafka_message_t& m) {
    if (m.err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
    std::lock_guard lock(self->delivery_log_mu_);
    TALLY_LOG_WARN_LIMITED(self->delivery_log_, kLog,
                           "{}: a record of member {} was not delivered: {}", base::kMembersTopic,
                           self->options_.member, rd_kafka_err2str(m.err));
  };
  auto producer = base::KafkaProducer::Create(o.kafka, std::move(ps));
  if (!producer.ok()) return producer.status().WithContext("members directory");
  d->producer_ = std::move(producer).value();

  // The embedded broker makes the topic when its metadata is asked for;
  // a real cluster has it made here, compacted.
  if (!o.kafka.embedded) {
    TALLY_RETURN_IF_ERROR(
        base::EnsureTopics(d->producer_->get(), {topic}, 1, -1, o.start_timeout_ms)
            .WithContext("members directory"));
  }
  auto rkt = d->producer_->Topic(topic, o.start_timeout_ms);
  if (!rkt.ok()) return rkt.status().WithContext("members directory");
  d->rkt_ = rkt.value();

  base::ConsumerSettings cs;
  cs.group = kReaderGroup;
  cs.client_id = "tally-members";
  cs.store_offsets = false;
  cs.partition_eof = true;  // tells when the records at start are all read
  // Reading from the start again is always right here: it only re-reads
  // the latest records.
  cs.offset_reset_is_error = false;
  cs.extra["auto.offset.reset"] = "earliest";
  // Short: a `tally serve` learns from the directory what its `tally
  // aggregate` holds, and a partition the aggregate gives up is dropped
  // right after its record says so; a 100 ms wait left the serve reading
  // it for that long after it was gone (503 partition_moving).
  cs.short_fetch_wait = true;
  auto consumer = base::MakeConsumer(o.kafka, cs);
  if (!consumer.ok()) return consumer.status().WithContext("members directory");
  d->consumer_ = std::move(consumer).value();
  // The partition's leader known before the assignment: assigned without
  // it, librdkafka retries the start offset's look-up only after 500 ms,
  // and the directory (which a member starting alone waits for) would
  // catch up that much later.
  if (auto n = base::PartitionCount(d->consumer_.get(), topic, o.start_timeout_ms); !n.ok()) {
    return n.status().WithContext("members directory");
  }
  base::KafkaPartitionList parts(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(parts.get(), topic.c_str(), kPartition)->offset =
      RD_KAFKA_OFFSET_BEGINNING;
  TALLY_RETURN_IF_ERROR(base::Assign(d->consumer_.get(), parts.get(), "assigning tally.members"));
  // Caught up once the records up to the log's end as of now are read,
  // without waiting for an empty fetch to say so (end of partition): the
  // broker may hold that fetch for fetch.wait.max.ms.
  int64_t low = 0, high = -1;
  if (rd_kafka_query_watermark_offsets(d->consumer_.get(), topic.c_str(), kPartition, &low, &high,
                                       o.start_timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    d->start_end_ = high;
    if (high <= low) d->caught_up_ = true;
  }

  d->thread_ = std::thread([self] { self->Run(); });
  return d;
}

MembersDirectory::~MembersDirectory() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (consumer_) {
    // The reader never joins its group nor commits, so nothing is left to
    // say to the coordinator: skip the consumer close, which during an
    // outage would wait for one.
    rd_kafka_destroy_flags(consumer_.release(), RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  }
  producer_.reset();  // drops what is not acknowledged yet
}

void MembersDirectory::Run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(consumer_.get(), kPollMs);
    if (m != nullptr) {
      base::KafkaMessage owned(m);
      ReadOne(*m);
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && start_end_ >= 0 && m->offset + 1 >= start_end_) {
        MarkCaughtUp();
      }
    }
    PublishIfDue();
    producer_->Poll(0);
    ExpireIfDue();
  }
}

void MembersDirectory::ReadOne(const rd_kafka_message_t& m) {
  if (m.err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
    MarkCaughtUp();
    return;
  }
  if (m.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    // The consumer retries by itself; an outage is reported by KafkaHealth.
    TALLY_LOG_WARN_LIMITED(read_log_, kLog, "reading {}: {}", base::kMembersTopic,
                           rd_kafka_message_errstr(&m));
    return;
  }
  std::string key =
      m.key == nullptr ? std::string() : std::string(static_cast<const char*>(m.key), m.key_len);
  // Another cluster's record (another --group sharing the topic).
  const std::string prefix = KeyPrefix();
  const size_t slash = key.rfind('/');
  const std::string key_group = slash == std::string::npos ? "" : key.substr(0, slash + 1);
  if (!key.empty() && key_group != prefix) return;
  key = key.substr(prefix.size());
  base::Status bad;
  MemberInfo info;
  if (key.empty()) {
    bad = base::Status::InvalidArgument("no key");
  } else if (m.payload != nullptr) {
    auto parsed = MemberInfoFromJson(std::string_view(static_cast<const char*>(m.payload), m.len));
    if (!parsed.ok()) {
      bad = parsed.status();
    } else if (parsed->member != key) {
      bad = base::Status::InvalidArgument(
          fmt::format("the key names member '{}' but the value '{}'", key, parsed->member));
    } else {
      info = std::move(parsed).value();
    }
  }
  if (!bad.ok()) {
    malformed_.fetch_add(1);
    MalformedCounter()->Inc();
    TALLY_LOG_WARN_LIMITED(read_log_, kLog, "{}/{} offset {}: not a member's record, ignored: {}",
                           base::kMembersTopic, m.partition, m.offset, bad.message());
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (m.payload == nullptr) {
      entries_.erase(key);  // a clean leave
    } else {
      int64_t now = base::SteadyMs();
      // See "Liveness" in the header: a record written before this reader
      // was there is as old as its ts_ms says.
      int64_t received = caught_up_ ? now : now - std::max<int64_t>(0, base::WallMs() - info.ts_ms);
      max_generation_ = std::max(max_generation_, info.generation);
      entries_[key] = Entry{std::move(info), received};
    }
  }
  Changed();
}

void MembersDirectory::MarkCaughtUp() {
  {
    std::lock_guard lock(mu_);
    if (caught_up_) return;
    caught_up_ = true;
  }
  Changed();
}

void MembersDirectory::PublishIfDue() {
  std::lock_guard lock(publish_mu_);
  if (!published_) return;
  int64_t now = base::SteadyMs();
  if (!publish_pending_ && now - last_write_ms_ < options_.heartbeat_ms) return;
  published_->ts_ms = base::WallMs();
  std::string value = ToJson(*published_);
  base::ProducerRecord r;
  r.rkt = rkt_;
  r.partition = kPartition;
  const std::string key = KeyPrefix() + options_.member;
  r.key = key;
  r.value = value;
  // Never wait for room: the next heartbeat writes a newer record anyway.
  base::QueueFullWait no_wait{.deadline_ms = 0, .poll = false};
  base::Status st =
      producer_->Produce(r, no_wait, [] { return std::string("writing tally.members"); });
  if (!st.ok()) {
    std::lock_guard log_lock(delivery_log_mu_);
    TALLY_LOG_WARN_LIMITED(delivery_log_, kLog, "{}", st.message());
  }
  publish_pending_ = false;
  last_write_ms_ = now;
}

void MembersDirectory::ExpireIfDue() {
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    int64_t now = base::SteadyMs();
    for (const auto& [member, e] : entries_) {
      bool live = LiveLocked(e, now);
      auto [it, inserted] = was_live_.try_emplace(member, live);
      if (!inserted && it->second != live) {
        it->second = live;
        changed = true;
      }
    }
    std::erase_if(was_live_, [&](const auto& kv) { return !entries_.contains(kv.first); });
  }
  if (changed) Changed();
}

void MembersDirectory::Changed() {
  {
    std::lock_guard lock(mu_);
    version_++;
  }
  changed_.notify_all();
  if (options_.on_change) options_.on_change();
}

bool MembersDirectory::LiveLocked(const Entry& e, int64_t now_ms) const {
  return now_ms - e.received_ms <= options_.expire_ms;
}

std::vector<MemberInfo> MembersDirectory::LiveLocked(int64_t now_ms) const {
  std::vector<MemberInfo> out;
  for (const auto& [member, e] : entries_) {
    if (LiveLocked(e, now_ms)) out.push_back(e.info);
  }
  return out;  // sorted by member id: entries_ is a map
}

void MembersDirectory::Publish(const MemberInfo& info) {
  MemberInfo copy = info;
  copy.member = options_.member;
  // One form for what is read back (MemberInfoFromJson sorts them too).
  for (auto* list : {&copy.owns, &copy.standby}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  std::lock_guard lock(publish_mu_);
  published_ = std::move(copy);
  publish_pending_ = true;
}

base::Status MembersDirectory::Leave() {
  {
    std::lock_guard lock(publish_mu_);
    published_.reset();
    publish_pending_ = false;
    base::ProducerRecord r;
    r.rkt = rkt_;
    r.partition = kPartition;
    const std::string key = KeyPrefix() + options_.member;
    r.key = key;  // and a null value: the tombstone
    base::QueueFullWait no_wait{.deadline_ms = 0, .poll = false};
    TALLY_RETURN_IF_ERROR(producer_->Produce(
        r, no_wait, [] { return std::string("writing the tombstone to tally.members"); }));
  }
  int wait_ms = base::StopBudgetLeftMs(options_.leave_timeout_ms);
  rd_kafka_resp_err_t err = rd_kafka_flush(producer_->get(), wait_ms);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return base::Status::Unavailable(fmt::format(
        "members directory: the broker did not acknowledge member {}'s leave within {} ms",
        options_.member, wait_ms));
  }
  return base::Status::Ok();
}

std::vector<MemberInfo> MembersDirectory::Snapshot() const {
  std::lock_guard lock(mu_);
  return LiveLocked(base::SteadyMs());
}

std::optional<MemberInfo> MembersDirectory::OwnerOf(int32_t partition) const {
  std::lock_guard lock(mu_);
  int64_t now = base::SteadyMs();
  const MemberInfo* best = nullptr;
  for (const auto& [member, e] : entries_) {
    if (!LiveLocked(e, now) || !HasPartition(e.info.owns, partition)) continue;
    // entries_ is in member order, so on a full tie the first (lowest) stays.
    if (best == nullptr || e.info.generation > best->generation ||
        (e.info.generation == best->generation && e.info.ts_ms > best->ts_ms)) {
      best = &e.info;
    }
  }
  if (best == nullptr) return std::nullopt;
  return *best;
}

std::vector<MemberInfo> MembersDirectory::CurrentStandbysOf(int32_t partition) const {
  std::lock_guard lock(mu_);
  int64_t now = base::SteadyMs();
  std::vector<MemberInfo> out;
  for (const auto& [member, e] : entries_) {
    if (LiveLocked(e, now) && HasPartition(e.info.standby, partition)) out.push_back(e.info);
  }
  return out;
}

int64_t MembersDirectory::NextGeneration() const {
  std::lock_guard lock(mu_);
  return max_generation_ + 1;
}

bool MembersDirectory::CaughtUp() const {
  std::lock_guard lock(mu_);
  return caught_up_;
}

uint64_t MembersDirectory::Version() const {
  std::lock_guard lock(mu_);
  return version_;
}

bool MembersDirectory::WaitFor(const std::function<bool(const std::vector<MemberInfo>&)>& predicate,
                               int timeout_ms) const {
  const int64_t deadline = base::SteadyMs() + timeout_ms;
  while (true) {
    uint64_t seen = Version();
    if (predicate(Snapshot())) return true;
    int64_t left = deadline - base::SteadyMs();
    if (left <= 0) return false;
    // Expiries change the answer without a new version: look again soon.
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, std::chrono::milliseconds(std::min<int64_t>(left, kPollMs)),
                      [&] { return version_ != seen; });
  }
}

uint64_t MembersDirectory::MalformedRecords() const { return malformed_.load(); }

}  // namespace tally::cluster
