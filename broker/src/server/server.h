// BrokerServer: the broker's network server behind broker/broker.h. One
// network thread runs an epoll loop (level-triggered, non-blocking sockets)
// and every request handler; it alone touches the log (LogManager), the
// group coordinator, the connections and the held requests, so the hot path
// takes no lock. Two threads write to its eventfd: the log's flusher (after
// a group commit moved a high watermark) and the offsets flusher of this
// file (after OffsetStore::Flush); the network thread then answers the
// produce requests now durable, wakes parked fetches and releases durable
// commits. Other threads reach the state only through RunOnLoop().
//
// Per connection, responses leave strictly in request order: each request
// that expects an answer gets a slot in the connection's queue when it is
// decoded, and the queue is written from its head while the head's answer is
// ready, so a held request (JoinGroup, a fetch long-poll, a produce waiting
// for the flush) holds back later answers but not the reading of later
// requests, up to the per-connection limits.
//
// Thread model: Start/Stop and the public methods from any thread (they
// marshal to the network thread); everything private on the network thread,
// except the members marked otherwise.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/log.h"
#include "base/status.h"
#include "broker/broker.h"
#include "group/group_coordinator.h"
#include "group/offset_store.h"
#include "log/log_manager.h"
#include "server/producer_ids.h"
#include "wire/request.h"

namespace tally::broker {

class BrokerServer {
 public:
  static base::Result<std::unique_ptr<BrokerServer>> Start(const BrokerOptions& options);
  ~BrokerServer();

  std::string bootstrap() const;
  int port() const { return port_; }
  std::string cluster_id() const { return cluster_id_; }
  base::Status CreateTopic(const std::string& name, int32_t partitions,
                           const std::map<std::string, std::string>& configs);
  base::Status Stop();
  void SetAvailable(bool available);
  void SetRoundTripDelayMs(int delay_ms) { delay_ms_.store(delay_ms, std::memory_order_relaxed); }
  void PushRequestErrors(int16_t api_key, const std::vector<int16_t>& error_codes);
  BrokerStats Stats();

 private:
  // One response in a connection's queue.
  struct Slot {
    bool ready = false;
    std::string bytes;       // the whole response frame once ready
    int64_t not_before = 0;  // steady ms; the round-trip delay
  };
  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    std::string peer;  // "ip:port", for log lines
    std::string host;  // "/ip", as DescribeGroups shows clients
    std::string in;    // bytes received, not yet decoded
    std::string out;   // response bytes not yet sent
    size_t out_off = 0;
    std::deque<Slot> slots;
    uint64_t first_slot = 0;  // the sequence number of slots.front()
    uint32_t events = 0;      // the epoll interest registered
    bool processing = false;  // inside ProcessInput
  };
  // A produce request (acks != 0) waiting for the flush.
  struct PendingProduce {
    uint64_t conn_id;
    uint64_t slot;
    int32_t correlation_id;
    int16_t version;
    ProduceResponse response;
    struct Wait {
      size_t topic_index, partition_index;
      int64_t last_offset;
    };
    std::vector<Wait> waits;
  };
  // A fetch waiting for min_bytes or max_wait_ms.
  struct ParkedFetch {
    uint64_t conn_id;
    uint64_t slot;
    int32_t correlation_id;
    int16_t version;
    FetchRequest request;
    int64_t deadline;  // steady ms
  };

  explicit BrokerServer(const BrokerOptions& options);
  base::Status Open();
  base::Status Listen();

  // The network thread.
  void Run();
  void RunShutdown();
  int64_t NextTimeout(int64_t now);
  void Accept();
  void OnConnEvent(Conn* c, uint32_t events);
  void ReadInput(Conn* c);
  void ProcessInput(Conn* c);
  void ResumeInput();
  bool Backpressured(const Conn* c) const;
  void WriteOutput(Conn* c);
  void PumpSlots(Conn* c);
  void UpdateInterest(Conn* c);
  void CloseConn(Conn* c, const std::string& why);
  void CloseAll(const std::string& why);
  Conn* FindConn(uint64_t id);
  void OnWake();
  // Wakes the offsets flusher when a commit was written since it was last told.
  void NotifyOffsetsFlusher();
  void RunCommands();
  void RecheckWaiting();
  void ExpireFetches(int64_t now);
  void ReleaseDelayed(int64_t now);
  bool PostToLoop(std::function<void()> fn);

  // Responses.
  uint64_t NewSlot(Conn* c);
  // Encodes `body` into the slot. A fetch answer is passed as an rvalue
  // (std::move), so its records are not copied into the variant first.
  void Fill(uint64_t conn_id, uint64_t slot, int32_t correlation_id, const ResponseBody& body,
            int16_t version);
  // A buffer for a response of about `bytes`: a spare one if one is big
  // enough, so large fetch answers are not built in fresh memory (fresh
  // pages fault in one by one, and allocators return large blocks to the
  // kernel at once). GiveBack() keeps a drained buffer as a spare, up to
  // kSpareBytes in all.
  std::string TakeBuffer(size_t bytes);
  void GiveBack(std::string* buffer);
  // Frees the spares once none was taken for a while (from the maintenance turn).
  void TrimSpares(int64_t now);

  // Handlers (handlers.cc). Each answers through Fill(), now or later.
  void Dispatch(Conn* c, Request& request);
  std::optional<ResponseBody> InjectedError(const Request& request, ErrorCode code);
  ResponseBody HandleMetadata(const MetadataRequest& r, int16_t version);
  void HandleProduce(Conn* c, const RequestHeader& h, ProduceRequest& r);
  void HandleFetch(Conn* c, const RequestHeader& h, FetchRequest& r);
  // Builds a fetch answer; false if it should wait (less than min_bytes).
  bool BuildFetch(const FetchRequest& r, bool final, FetchResponse* out);
  ResponseBody HandleListOffsets(const ListOffsetsRequest& r, int16_t version);
  ResponseBody HandleCreateTopics(const CreateTopicsRequest& r, int16_t version);
  // The config of a topic created without one: the broker's log.* settings.
  TopicConfig DefaultTopicConfig() const;
  ResponseBody HandleDeleteTopics(const DeleteTopicsRequest& r);
  ResponseBody HandleDeleteRecords(const DeleteRecordsRequest& r);
  ResponseBody HandleInitProducerId(const InitProducerIdRequest& r);
  ResponseBody HandleDescribeConfigs(const DescribeConfigsRequest& r, int16_t version);
  ResponseBody HandleAlterConfigs(const AlterConfigsRequest& r);
  void HandleJoinGroup(Conn* c, const RequestHeader& h, const JoinGroupRequest& r);
  void HandleSyncGroup(Conn* c, const RequestHeader& h, const SyncGroupRequest& r);
  void HandleOffsetCommit(Conn* c, const RequestHeader& h, const OffsetCommitRequest& r);
  ResponseBody HandleOffsetFetch(const OffsetFetchRequest& r);
  ResponseBody HandleDescribeGroups(const DescribeGroupsRequest& r);
  ResponseBody HandleListGroups();
  // Creates a topic as CreateTopics and auto-creation do.
  ErrorCode CreateTopicChecked(const std::string& name, int32_t partitions,
                               const std::map<std::string, std::string>& configs,
                               bool validate_only, std::string* message);

  const BrokerOptions options_;
  std::string advertised_host_;
  int port_ = 0;
  std::string cluster_id_;

  std::unique_ptr<LogManager> logs_;
  std::unique_ptr<OffsetStore> offsets_;
  std::unique_ptr<GroupCoordinator> coord_;
  std::unique_ptr<ProducerIdAllocator> producer_ids_;

  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread loop_thread_;
  std::thread offsets_flusher_;

  // Network thread state.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_conn_id_ = 1;
  std::deque<PendingProduce> produces_;
  std::vector<ParkedFetch> fetches_;
  bool recheck_ = false;          // a high watermark may have moved
  bool delayed_pending_ = false;  // a ready answer waits for the round-trip delay
  std::vector<uint64_t> resume_;  // connections with input to decode again
  std::vector<uint64_t> closed_;  // connections to free at the end of the turn
  bool available_ = true;
  int64_t next_maintenance_ms_ = 0;
  std::map<int16_t, std::deque<int16_t>> injected_errors_;
  base::LogLimiter accept_log_{5, 10000};
  base::LogLimiter conn_log_{20, 10000};
  std::string read_buf_;
  std::vector<std::string> spares_;  // empty, with capacity; see TakeBuffer()
  size_t spare_bytes_ = 0;           // their capacity in all
  int64_t spares_used_ms_ = 0;       // steady ms a spare was last asked for

  // Shared with other threads.
  std::atomic<bool> quit_{false};
  std::atomic<int> delay_ms_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> commands_;  // guarded by mu_
  bool loop_done_ = false;                       // guarded by mu_
  bool stopped_ = false;                         // guarded by mu_
  base::Status stop_status_;                     // guarded by mu_
  std::atomic<bool> offsets_quit_{false};
  // The offsets' written sequence the flusher was last told of (network thread).
  uint64_t offsets_notified_ = 0;
  // logs_ as the log's flusher thread reads it in on_flushed (set once the
  // manager is open; the flusher may run before).
  std::atomic<const LogManager*> logs_for_flusher_{nullptr};

  // Stats, written on the network thread (and the log flusher for the
  // histogram), read by Stats() on the network thread.
  std::atomic<int64_t> produce_requests_{0}, produce_records_{0}, produce_bytes_{0};
  std::atomic<int64_t> fetch_requests_{0}, fetch_records_{0}, fetch_bytes_{0};
  std::atomic<int64_t> requests_{0}, accepted_{0};
  static constexpr int kFlushBuckets = 24;
  std::atomic<int64_t> flush_hist_[kFlushBuckets] = {};
};

}  // namespace tally::broker
