// BrokerServer's handlers of records: Produce, Fetch, ListOffsets,
// DeleteRecords, InitProducerId. On the network thread.
#include <fmt/format.h>

#include <set>
#include <variant>

#include "base/clock.h"
#include "log/record_batch.h"
#include "log/topic_config.h"
#include "server/server.h"

namespace tally::broker {

namespace {

constexpr const char* kLog = "broker";

ErrorCode AppendError(const base::Status& st) {
  switch (st.code()) {
    case base::StatusCode::kCorruption:
      return ErrorCode::kCorruptMessage;
    case base::StatusCode::kResourceExhausted:
      return ErrorCode::kMessageTooLarge;
    case base::StatusCode::kInvalidArgument:
      return ErrorCode::kInvalidRecord;
    default:
      return ErrorCode::kKafkaStorageError;
  }
}

int64_t CountRecords(const std::string& bytes) {
  int64_t n = 0;
  size_t pos = 0;
  while (pos + kBatchHeaderSize <= bytes.size()) {
    auto be32 = [&](size_t at) {
      const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + at;
      return static_cast<int32_t>((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
                                  (uint32_t{p[2]} << 8) | uint32_t{p[3]});
    };
    const int32_t length = be32(pos + 8);
    if (length <= 0) break;
    n += be32(pos + 23) + 1;  // lastOffsetDelta
    pos += kBatchLogOverhead + static_cast<size_t>(length);
  }
  return n;
}

}  // namespace

// ---------------------------------------------------------------------------
// The data path.

void BrokerServer::HandleProduce(Conn* c, const RequestHeader& h, ProduceRequest& r) {
  produce_requests_.fetch_add(1, std::memory_order_relaxed);
  PendingProduce pending;
  pending.conn_id = c->id;
  pending.correlation_id = h.correlation_id;
  pending.version = h.api_version;
  const bool bad_acks = r.acks != 0 && r.acks != 1 && r.acks != -1;
  const int64_t now_ms = base::WallMs();
  bool appended = false;
  for (size_t ti = 0; ti < r.topics.size(); ti++) {
    auto& topic = r.topics[ti];
    auto& rt = pending.response.topics.emplace_back();
    rt.name = topic.name;
    for (size_t pi = 0; pi < topic.partitions.size(); pi++) {
      auto& part = topic.partitions[pi];
      auto& rp = rt.partitions.emplace_back();
      rp.index = part.index;
      if (bad_acks) {
        rp.error_code = ErrorCode::kInvalidRequiredAcks;
        continue;
      }
      if (r.transactional_id.has_value()) {
        rp.error_code = ErrorCode::kTransactionalIdAuthorizationFailed;
        continue;
      }
      PartitionLog* log = logs_->GetPartition(topic.name, part.index);
      if (log == nullptr) {
        rp.error_code = ErrorCode::kUnknownTopicOrPartition;
        continue;
      }
      rp.log_start_offset = log->log_start_offset();
      if (!part.records.has_value() || part.records->empty()) {
        rp.error_code = ErrorCode::kCorruptMessage;
        continue;
      }
      std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(part.records->data()),
                               part.records->size());
      auto result = log->Append(bytes, now_ms);
      if (!result.ok()) {
        rp.error_code = AppendError(result.status());
        TALLY_LOG_WARN_LIMITED(conn_log_, kLog, "produce to {}-{} from {} refused: {}", topic.name,
                               part.index, c->peer, result.status().ToString());
        continue;
      }
      switch (result->verdict) {
        case ProducerVerdict::kAppend:
          produce_records_.fetch_add(result->last_offset - result->base_offset + 1,
                                     std::memory_order_relaxed);
          produce_bytes_.fetch_add(static_cast<int64_t>(bytes.size()), std::memory_order_relaxed);
          appended = true;
          [[fallthrough]];
        case ProducerVerdict::kDuplicate:
          rp.base_offset = result->base_offset;
          pending.waits.push_back({ti, pi, result->last_offset});
          break;
        case ProducerVerdict::kOutOfOrderSequence:
          rp.error_code = ErrorCode::kOutOfOrderSequenceNumber;
          break;
        case ProducerVerdict::kInvalidEpoch:
          rp.error_code = ErrorCode::kInvalidProducerEpoch;
          break;
      }
    }
  }
  if (appended && options_.log_flush_ms == 0) recheck_ = true;  // wake fetches
  if (r.acks == 0) return;
  pending.slot = NewSlot(c);
  // Duplicates (a retry after a broker restart) and partitions the flusher
  // already passed are answered now: no flush round may come to wake them.
  bool durable = true;
  for (const PendingProduce::Wait& w : pending.waits) {
    const PartitionLog* log = logs_->GetPartition(
        r.topics[w.topic_index].name, r.topics[w.topic_index].partitions[w.partition_index].index);
    durable = durable && log != nullptr && log->high_watermark() > w.last_offset;
  }
  if (durable) {
    Fill(pending.conn_id, pending.slot, pending.correlation_id, pending.response, pending.version);
    return;
  }
  produces_.push_back(std::move(pending));
  if (options_.log_flush_ms == 0) recheck_ = true;
}

bool BrokerServer::BuildFetch(const FetchRequest& r, bool final, FetchResponse* out) {
  *out = FetchResponse();
  int64_t remaining = r.max_bytes > 0 ? r.max_bytes : INT32_MAX;
  int64_t total = 0;
  bool any_error = false;
  bool first_data = true;
  for (const auto& topic : r.topics) {
    auto& rt = out->responses.emplace_back();
    rt.topic = topic.topic;
    for (const auto& part : topic.partitions) {
      auto& rp = rt.partitions.emplace_back();
      rp.partition_index = part.partition;
      rp.preferred_read_replica = -1;
      rp.records = std::string();
      const PartitionLog* log = logs_->GetPartition(topic.topic, part.partition);
      if (log == nullptr) {
        rp.error_code = ErrorCode::kUnknownTopicOrPartition;
        rp.high_watermark = -1;
        any_error = true;
        continue;
      }
      const int64_t hw = log->high_watermark();
      rp.high_watermark = hw;
      rp.last_stable_offset = hw;
      rp.log_start_offset = log->log_start_offset();
      if (part.fetch_offset < rp.log_start_offset || part.fetch_offset > hw) {
        rp.error_code = ErrorCode::kOffsetOutOfRange;
        any_error = true;
        continue;
      }
      if (part.fetch_offset == hw) continue;
      const int64_t limit = std::min<int64_t>(part.partition_max_bytes, remaining);
      if (!first_data && limit <= 0) continue;
      auto data = log->Read(part.fetch_offset, std::max<int64_t>(limit, 1), hw);
      if (!data.ok()) {
        rp.error_code = data.status().code() == base::StatusCode::kOutOfRange
                            ? ErrorCode::kOffsetOutOfRange
                            : ErrorCode::kKafkaStorageError;
        any_error = true;
        continue;
      }
      if (data->empty()) continue;
      // Kafka's rule: only the first partition with data may exceed the
      // limits (by one batch), so a large batch never blocks a consumer.
      if (!first_data && static_cast<int64_t>(data->size()) > limit) continue;
      first_data = false;
      remaining -= static_cast<int64_t>(data->size());
      total += static_cast<int64_t>(data->size());
      rp.records = std::move(*data);
    }
  }
  const bool ready = final || any_error || r.max_wait_ms <= 0 || total >= r.min_bytes;
  if (ready) {
    fetch_bytes_.fetch_add(total, std::memory_order_relaxed);
    int64_t records = 0;
    for (const auto& t : out->responses) {
      for (const auto& p : t.partitions) {
        if (p.records.has_value()) records += CountRecords(*p.records);
      }
    }
    fetch_records_.fetch_add(records, std::memory_order_relaxed);
  }
  return ready;
}

void BrokerServer::HandleFetch(Conn* c, const RequestHeader& h, FetchRequest& r) {
  fetch_requests_.fetch_add(1, std::memory_order_relaxed);
  FetchResponse resp;
  const bool ready = BuildFetch(r, false, &resp);
  const uint64_t slot = NewSlot(c);
  if (ready) {
    Fill(c->id, slot, h.correlation_id, std::move(resp), h.api_version);
    return;
  }
  const int64_t deadline = base::SteadyMs() + r.max_wait_ms;
  fetches_.push_back({c->id, slot, h.correlation_id, h.api_version, std::move(r), deadline});
}

ResponseBody BrokerServer::HandleListOffsets(const ListOffsetsRequest& r, int16_t version) {
  ListOffsetsResponse resp;
  for (const auto& topic : r.topics) {
    auto& rt = resp.topics.emplace_back();
    rt.name = topic.name;
    for (const auto& part : topic.partitions) {
      auto& rp = rt.partitions.emplace_back();
      rp.partition_index = part.partition_index;
      const PartitionLog* log = logs_->GetPartition(topic.name, part.partition_index);
      if (log == nullptr) {
        rp.error_code = ErrorCode::kUnknownTopicOrPartition;
        continue;
      }
      auto found = log->ListOffsets(part.timestamp);
      if (!found.ok()) {
        rp.error_code = ErrorCode::kKafkaStorageError;
        continue;
      }
      const bool special =
          part.timestamp == kListOffsetsLatest || part.timestamp == kListOffsetsEarliest;
      if (version == 0) {
        if (found->offset >= 0 && part.max_num_offsets > 0) {
          rp.old_style_offsets.push_back(found->offset);
        }
        continue;
      }
      rp.offset = found->offset;
      rp.timestamp = special ? -1 : found->timestamp;
      rp.leader_epoch = found->offset >= 0 ? 0 : -1;
    }
  }
  return resp;
}

ResponseBody BrokerServer::HandleDeleteRecords(const DeleteRecordsRequest& r) {
  DeleteRecordsResponse resp;
  for (const auto& topic : r.topics) {
    auto& rt = resp.topics.emplace_back();
    rt.name = topic.name;
    for (const auto& part : topic.partitions) {
      auto& rp = rt.partitions.emplace_back();
      rp.partition_index = part.partition_index;
      rp.low_watermark = -1;
      PartitionLog* log = logs_->GetPartition(topic.name, part.partition_index);
      if (log == nullptr) {
        rp.error_code = ErrorCode::kUnknownTopicOrPartition;
        continue;
      }
      auto start = log->DeleteRecordsBefore(part.offset);
      if (!start.ok()) {
        rp.error_code = start.status().code() == base::StatusCode::kOutOfRange
                            ? ErrorCode::kOffsetOutOfRange
                            : ErrorCode::kKafkaStorageError;
        continue;
      }
      rp.low_watermark = *start;
    }
  }
  return resp;
}

ResponseBody BrokerServer::HandleInitProducerId(const InitProducerIdRequest& r) {
  InitProducerIdResponse resp;
  if (r.transactional_id.has_value()) {
    // Transactions are not supported; a fatal error for the client.
    resp.error_code = ErrorCode::kTransactionalIdAuthorizationFailed;
    return resp;
  }
  auto id = producer_ids_->Next();
  if (!id.ok()) {
    TALLY_LOG_ERROR(kLog, "cannot allocate a producer id: {}", id.status().ToString());
    resp.error_code = ErrorCode::kCoordinatorNotAvailable;
    return resp;
  }
  resp.producer_id = *id;
  resp.producer_epoch = 0;
  return resp;
}

}  // namespace tally::broker
