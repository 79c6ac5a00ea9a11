// Helpers of the broker server tests: an in-process broker on port 0 in a
// temporary directory, librdkafka producers and consumers with their
// delivery reports, a raw Kafka connection speaking the wire area's codec
// (for hostile bytes and exact timing), a broker in a child process, and
// running command-line clients.
//
// Thread model: each helper object belongs to the test thread that made it.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "broker/broker.h"
#include "testing/child_process.h"
#include "wire/request.h"

namespace tally::broker::test {

// A broker on 127.0.0.1, any free port, on `dir`.
std::unique_ptr<Broker> StartBroker(const std::filesystem::path& dir, BrokerOptions options = {});

using Conf = std::vector<std::pair<std::string, std::string>>;

// One record as a delivery report or a consumer saw it.
struct Msg {
  std::string topic;
  int32_t partition = -1;
  int64_t offset = -1;
  std::string key;
  std::string value;
  int err = 0;  // rd_kafka_resp_err_t of a delivery report
};

class Producer {
 public:
  // acks=all, linger 5 ms, quick reconnects; `extra` overrides.
  Producer(const std::string& bootstrap, const Conf& extra = {});
  ~Producer();
  // Queues a record (partition -1: the partitioner's choice); false if the
  // queue refused it.
  bool Produce(const std::string& topic, int32_t partition, const std::string& key,
               const std::string& value, int64_t timestamp_ms = 0);
  // Polls until every queued record has a report or `timeout_ms` passed.
  bool Flush(int timeout_ms);
  void Poll(int timeout_ms) { rd_kafka_poll(rk_, timeout_ms); }
  const std::vector<Msg>& reports() const { return reports_; }
  int failed() const;
  rd_kafka_t* handle() { return rk_; }

 private:
  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque);
  rd_kafka_t* rk_ = nullptr;
  std::vector<Msg> reports_;
};

class Consumer {
 public:
  // A group consumer (group.id = `group`), from the beginning when nothing
  // is committed, auto commit off, quick heartbeats; `extra` overrides.
  Consumer(const std::string& bootstrap, const std::string& group, const Conf& extra = {});
  ~Consumer();
  void Subscribe(const std::vector<std::string>& topics);
  // Polls until `n` records arrived or `timeout_ms` passed; returns them.
  std::vector<Msg> Read(size_t n, int timeout_ms);
  // One poll; a record if there was one.
  std::optional<Msg> PollOnce(int timeout_ms);
  // Synchronous commit of the current positions.
  rd_kafka_resp_err_t Commit();
  // The partitions assigned now.
  std::vector<int32_t> Assignment();
  void Close();
  rd_kafka_t* handle() { return rk_; }

 private:
  rd_kafka_t* rk_ = nullptr;
  bool closed_ = false;
};

// A plain TCP connection speaking Kafka frames with the wire codec.
class RawConn {
 public:
  explicit RawConn(int port);
  ~RawConn();
  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool SendBytes(const std::string& bytes);
  // Sends a request (correlation id = the header's).
  bool Send(const Request& request);
  // The next response frame body, or nullopt on EOF, error or timeout.
  std::optional<std::string> ReceiveFrame(int timeout_ms);
  // Sends and decodes the answer at `version`.
  base::Result<ResponseBody> RoundTrip(RequestBody body, int16_t version, int timeout_ms = 5000);
  // True once the broker closed the connection (within `timeout_ms`).
  bool WaitClosed(int timeout_ms);

 private:
  int fd_ = -1;
  int32_t next_correlation_ = 1;
  std::string in_;
};

Request MakeRequest(RequestBody body, int16_t version, int32_t correlation_id);

// A record batch (magic 2, not idempotent) holding `values`.
std::string MakeBatch(const std::vector<std::string>& values, int64_t timestamp_ms = 1000);

// Starts broker_test_main on 127.0.0.1:`port` (0: any free port) with its
// log in `log_dir` and group commits every `log_flush_ms`; its stderr goes
// to `child_log`, or if that is empty to `log_dir`-child.log beside the
// directory. The bootstrap "127.0.0.1:port" once it listens, or "" if it
// did not start within 10 s.
std::string StartBrokerChild(testing::ChildProcess* child, const std::filesystem::path& log_dir,
                             int port, int log_flush_ms = 2,
                             const std::filesystem::path& child_log = {});

// The port of a "host:port" bootstrap.
int PortOf(const std::string& bootstrap);

// Creates `topic` with `partitions` through a CreateTopics request to the
// broker on `port`; false (and why on stderr) unless it was created.
bool CreateTopicRaw(int port, const std::string& topic, int32_t partitions);

// The offset `rk`'s group has committed for `topic`/`partition` (-1001:
// none), or -100 if OffsetFetch failed.
int64_t CommittedOffset(rd_kafka_t* rk, const std::string& topic, int32_t partition);

// Every record of `topic`'s partitions [0, `partitions`) from offset 0 up to
// each partition's high watermark at the time of the call, read by an
// assigned consumer (no group membership). Fewer if `timeout_ms` passed.
std::vector<Msg> ReadWholeLog(const std::string& bootstrap, const std::string& topic,
                              int32_t partitions, int timeout_ms);

// Runs `command` with /bin/sh; its stdout (and stderr if `with_stderr`).
std::string RunShell(const std::string& command, int* exit_code, bool with_stderr = false);

}  // namespace tally::broker::test
