// The broker under stress and faults: restarts and SIGKILLs on the same log
// directory, hostile bytes, many idle connections, the fault injection
// hooks, long-poll fetches and the order of pipelined answers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <map>
#include <set>
#include <string>
#include <thread>

#include "base/clock.h"
#include "server_test_util.h"
#include "testing/child_process.h"
#include "testing/temp_dir.h"
#include "testing/wait_for.h"

namespace tally::broker::test {
namespace {

using testing::TempDir;
using testing::WaitFor;

TEST(ServerDurabilityTest, RestartKeepsRecordsOffsetsAndClusterId) {
  TempDir dir("broker-server");
  std::string cluster;
  {
    auto broker = StartBroker(dir.path());
    ASSERT_NE(broker, nullptr);
    cluster = broker->cluster_id();
    EXPECT_EQ(cluster.size(), 22u);
    ASSERT_TRUE(broker->CreateTopic("keep", 2).ok());
    Producer producer(broker->bootstrap());
    for (int i = 0; i < 50; i++)
      ASSERT_TRUE(producer.Produce("keep", i % 2, "", std::to_string(i)));
    ASSERT_TRUE(producer.Flush(10000));
    EXPECT_EQ(producer.failed(), 0);
    Consumer consumer(broker->bootstrap(), "keepers");
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(2);
    rd_kafka_topic_partition_list_add(list, "keep", 0)->offset = 7;
    rd_kafka_topic_partition_list_add(list, "keep", 1)->offset = 25;
    // A commit outside group management (generation -1), as kcat does.
    ASSERT_EQ(rd_kafka_commit(consumer.handle(), list, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(list);
    // The destructor stops the broker.
  }
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  EXPECT_EQ(broker->cluster_id(), cluster);
  Consumer consumer(broker->bootstrap(), "keepers");
  EXPECT_EQ(CommittedOffset(consumer.handle(), "keep", 0), 7);
  EXPECT_EQ(CommittedOffset(consumer.handle(), "keep", 1), 25);
  for (int32_t p = 0; p < 2; p++) {
    int64_t low = -1, high = -1;
    ASSERT_EQ(rd_kafka_query_watermark_offsets(consumer.handle(), "keep", p, &low, &high, 5000),
              RD_KAFKA_RESP_ERR_NO_ERROR);
    EXPECT_EQ(low, 0);
    EXPECT_EQ(high, 25);
  }
  consumer.Subscribe({"keep"});
  // From the committed offsets: 25 - 7 and 25 - 25 records.
  std::vector<Msg> got = consumer.Read(18, 15000);
  EXPECT_EQ(got.size(), 18u);
  for (const Msg& m : got) {
    EXPECT_EQ(m.partition, 0);
    EXPECT_GE(m.offset, 7);
  }

  TempDir other("broker-server");
  auto fresh = StartBroker(other.path());
  ASSERT_NE(fresh, nullptr);
  EXPECT_NE(fresh->cluster_id(), cluster);
}

TEST(ServerDurabilityTest, WithoutGroupCommitEverythingIsAnsweredAtOnce) {
  TempDir dir("broker-server");
  BrokerOptions o;
  o.log_flush_ms = 0;
  auto broker = StartBroker(dir.path(), o);
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("nosync", 2).ok());
  Producer producer(broker->bootstrap(), {{"enable.idempotence", "true"}});
  for (int i = 0; i < 100; i++) ASSERT_TRUE(producer.Produce("nosync", -1, "", std::to_string(i)));
  ASSERT_TRUE(producer.Flush(10000));
  EXPECT_EQ(producer.failed(), 0);
  Consumer consumer(broker->bootstrap(), "nosync-group");
  consumer.Subscribe({"nosync"});
  EXPECT_EQ(consumer.Read(100, 15000).size(), 100u);
  EXPECT_EQ(consumer.Commit(), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(broker->Stats().flush_rounds, 0);
}

TEST(ServerDurabilityTest, SecondBrokerOnTheSameDirectoryIsRefused) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  BrokerOptions o;
  o.log_dir = dir.path();
  auto second = Broker::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), base::StatusCode::kFailedPrecondition);
}

TEST(ServerDurabilityTest, IdempotentProducerAcrossBrokerKills) {
  TempDir dir("broker-server");
  const std::filesystem::path log_dir = dir.path() / "log";
  auto child = std::make_unique<testing::ChildProcess>();
  const std::string bootstrap = StartBrokerChild(child.get(), log_dir, 0);
  ASSERT_FALSE(bootstrap.empty());
  const int port = PortOf(bootstrap);
  Producer producer(bootstrap, {{"enable.idempotence", "true"},
                                {"message.timeout.ms", "60000"},
                                {"linger.ms", "2"},
                                {"topic.metadata.refresh.interval.ms", "1000"}});
  constexpr int kRecords = 4000;
  constexpr int kPartitions = 4;
  int produced = 0;
  for (int kill = 0; kill < 3; kill++) {
    const size_t target = static_cast<size_t>((kill + 1) * kRecords / 4);
    // Keep producing until a quarter more is acknowledged, then kill.
    const int64_t deadline = base::SteadyMs() + 15000;
    while (producer.reports().size() < target && base::SteadyMs() < deadline) {
      for (int i = 0; i < 50 && produced < kRecords; i++, produced++) {
        ASSERT_TRUE(
            producer.Produce("kills", produced % kPartitions, "", std::to_string(produced)));
      }
      producer.Poll(5);
    }
    if (producer.reports().size() < target) dir.Keep();
    ASSERT_GE(producer.reports().size(), target);
    child->Kill();
    child = std::make_unique<testing::ChildProcess>();
    ASSERT_FALSE(StartBrokerChild(child.get(), log_dir, port).empty());
  }
  while (produced < kRecords) {
    ASSERT_TRUE(producer.Produce("kills", produced % kPartitions, "", std::to_string(produced)));
    produced++;
  }
  ASSERT_TRUE(producer.Flush(30000));
  ASSERT_EQ(producer.reports().size(), static_cast<size_t>(kRecords));
  EXPECT_EQ(producer.failed(), 0);

  // Read every partition from the start with a plain (assigned) consumer.
  Consumer consumer(bootstrap, "checker");
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(kPartitions);
  for (int p = 0; p < kPartitions; p++) {
    rd_kafka_topic_partition_list_add(list, "kills", p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(consumer.handle(), list);
  rd_kafka_topic_partition_list_destroy(list);
  std::vector<Msg> log = consumer.Read(kRecords, 20000);
  EXPECT_FALSE(consumer.PollOnce(300).has_value());
  std::map<int32_t, std::vector<int>> by_partition;
  std::multiset<std::string> seen;
  for (const Msg& m : log) {
    by_partition[m.partition].push_back(std::stoi(m.value));
    seen.insert(m.value);
  }
  for (const Msg& r : producer.reports()) {
    if (r.err != 0) continue;
    EXPECT_EQ(seen.count(r.value), 1u) << "record " << r.value;
  }
  for (auto& [p, values] : by_partition) {
    EXPECT_TRUE(std::is_sorted(values.begin(), values.end())) << "partition " << p;
  }
  EXPECT_EQ(log.size(), static_cast<size_t>(kRecords));
  if (HasFailure()) dir.Keep();  // the children's logs
}

TEST(ServerHostileTest, BadBytesAreClosedAndTheBrokerServesOn) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  const int port = broker->port();
  {
    RawConn c(port);  // an HTTP request: its first 4 bytes are a huge size
    ASSERT_TRUE(c.SendBytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_TRUE(c.WaitClosed(5000));
  }
  {
    RawConn c(port);  // a 2 GiB size prefix (negative)
    ASSERT_TRUE(c.SendBytes(std::string("\x80\x00\x00\x00", 4) + "xxxx"));
    EXPECT_TRUE(c.WaitClosed(5000));
  }
  {
    RawConn c(port);  // size 0x7fffffff: over the limit
    ASSERT_TRUE(c.SendBytes(std::string("\x7f\xff\xff\xff", 4)));
    EXPECT_TRUE(c.WaitClosed(5000));
  }
  {
    RawConn c(port);  // a zero-length frame
    ASSERT_TRUE(c.SendBytes(std::string(4, '\0')));
    EXPECT_TRUE(c.WaitClosed(5000));
  }
  {
    RawConn c(port);  // a frame that does not decode: Metadata v1 cut short
    ASSERT_TRUE(
        c.SendBytes(std::string("\x00\x00\x00\x0b\x00\x03\x00\x01\x00\x00\x00\x07\x00\x01X", 15)));
    EXPECT_TRUE(c.WaitClosed(5000));
  }
  {
    RawConn c(port);  // an unknown api key
    ASSERT_TRUE(
        c.SendBytes(std::string("\x00\x00\x00\x0a\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff", 14)));
    EXPECT_TRUE(c.WaitClosed(5000));
  }
  {
    RawConn c(port);  // a truncated frame, then the client closes
    ASSERT_TRUE(c.SendBytes(std::string("\x00\x00\x01\x00\x00\x12", 6)));
  }
  for (int i = 0; i < 20; i++) {
    RawConn c(port);  // random garbage
    std::string junk;
    uint32_t x = 2463534242u + static_cast<uint32_t>(i);
    for (int j = 0; j < 200; j++) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      junk.push_back(static_cast<char>(x));
    }
    // Closed, or held as the start of a frame; either way no crash.
    c.SendBytes(junk);
  }
  // ApiVersions at a version the broker does not speak: the v0 error answer
  // with the table, and the connection stays usable.
  RawConn c(port);
  std::string frame = EncodeRequest(MakeRequest(ApiVersionsRequest{}, 0, 77));
  frame[7] = 9;  // api_version's low byte
  ASSERT_TRUE(c.SendBytes(frame));
  auto body = c.ReceiveFrame(5000);
  ASSERT_TRUE(body.has_value());
  int32_t corr = 0;
  auto resp = DecodeResponse(ApiKey::kApiVersions, 0, *body, &corr);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(corr, 77);
  EXPECT_EQ(std::get<ApiVersionsResponse>(*resp).error_code, ErrorCode::kUnsupportedVersion);
  EXPECT_FALSE(std::get<ApiVersionsResponse>(*resp).api_keys.empty());
  auto ok = c.RoundTrip(ApiVersionsRequest{}, 3);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(std::get<ApiVersionsResponse>(*ok).error_code, ErrorCode::kNone);

  // A normal client still works.
  Producer producer(broker->bootstrap());
  ASSERT_TRUE(producer.Produce("after", -1, "", "fine"));
  ASSERT_TRUE(producer.Flush(10000));
  EXPECT_EQ(producer.failed(), 0);
}

TEST(ServerHostileTest, ThousandIdleConnections) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 2600 && rl.rlim_max >= 2600) {
    rl.rlim_cur = 2600;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 2600) GTEST_SKIP() << "needs 2600 file descriptors, has " << rl.rlim_cur;
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  std::vector<std::unique_ptr<RawConn>> idle;
  for (int i = 0; i < 1000; i++) {
    idle.push_back(std::make_unique<RawConn>(broker->port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  EXPECT_TRUE(WaitFor([&] { return broker->Stats().connections >= 1000; }, 10000));
  // Idle connections cost no CPU: the process stays mostly asleep.
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  const int64_t start = base::SteadyMs();
  WaitFor([] { return false; }, 500);
  ::getrusage(RUSAGE_SELF, &after);
  const auto cpu_us = [](const rusage& r) {
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000 + r.ru_utime.tv_usec +
           r.ru_stime.tv_usec;
  };
  const int64_t wall_us = (base::SteadyMs() - start) * 1000;
  EXPECT_LT(cpu_us(after) - cpu_us(before), wall_us / 5);
  RawConn c(broker->port());
  auto md = c.RoundTrip(MetadataRequest{}, 4);
  ASSERT_TRUE(md.ok()) << md.status().ToString();
  EXPECT_EQ(std::get<MetadataResponse>(*md).brokers.size(), 1u);
  idle.clear();
  EXPECT_TRUE(WaitFor([&] { return broker->Stats().connections == 1; }, 10000));
}

TEST(ServerHostileTest, MaxConnectionsRefusesMore) {
  TempDir dir("broker-server");
  BrokerOptions o;
  o.max_connections = 3;
  auto broker = StartBroker(dir.path(), o);
  ASSERT_NE(broker, nullptr);
  RawConn a(broker->port()), b(broker->port()), c(broker->port());
  ASSERT_TRUE(WaitFor([&] { return broker->Stats().connections == 3; }, 5000));
  RawConn d(broker->port());
  EXPECT_TRUE(d.WaitClosed(5000));
  EXPECT_TRUE(a.RoundTrip(ApiVersionsRequest{}, 2).ok());
}

// Produce with one record through a raw connection.
ProduceRequest OneRecordProduce(const std::string& topic, const std::string& value) {
  ProduceRequest p;
  p.acks = -1;
  p.timeout_ms = 5000;
  auto& t = p.topics.emplace_back();
  t.name = topic;
  t.partitions.push_back({0, MakeBatch({value})});
  return p;
}

FetchRequest OneFetch(const std::string& topic, int64_t offset, int32_t max_wait_ms) {
  FetchRequest f;
  f.max_wait_ms = max_wait_ms;
  f.min_bytes = 1;
  f.max_bytes = 1 << 20;
  auto& t = f.topics.emplace_back();
  t.topic = topic;
  FetchRequest::Partition p;
  p.partition = 0;
  p.fetch_offset = offset;
  p.partition_max_bytes = 1 << 20;
  t.partitions.push_back(p);
  return f;
}

TEST(ServerFetchTest, LongPollIsAnsweredWhenDataArrivesOrAtMaxWait) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("wait", 1).ok());
  RawConn consumer(broker->port());
  // Nothing arrives: an empty answer after about max_wait_ms.
  int64_t start = base::SteadyMs();
  auto empty = consumer.RoundTrip(OneFetch("wait", 0, 500), 11);
  const int64_t waited = base::SteadyMs() - start;
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  const auto& e = std::get<FetchResponse>(*empty).responses.at(0).partitions.at(0);
  EXPECT_EQ(e.error_code, ErrorCode::kNone);
  EXPECT_EQ(e.high_watermark, 0);
  EXPECT_TRUE(!e.records.has_value() || e.records->empty());
  EXPECT_GE(waited, 450);
  EXPECT_LT(waited, 1500);

  // A record arrives while the fetch waits: answered well before 500 ms.
  ASSERT_TRUE(consumer.Send(MakeRequest(OneFetch("wait", 0, 500), 11, 1000)));
  RawConn producer(broker->port());
  start = base::SteadyMs();
  auto produced = producer.RoundTrip(OneRecordProduce("wait", "hello"), 7);
  ASSERT_TRUE(produced.ok()) << produced.status().ToString();
  EXPECT_EQ(std::get<ProduceResponse>(*produced).topics.at(0).partitions.at(0).error_code,
            ErrorCode::kNone);
  auto frame = consumer.ReceiveFrame(2000);
  const int64_t latency = base::SteadyMs() - start;
  ASSERT_TRUE(frame.has_value());
  int32_t corr = 0;
  auto full = DecodeResponse(ApiKey::kFetch, 11, *frame, &corr);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(corr, 1000);
  const auto& f = std::get<FetchResponse>(*full).responses.at(0).partitions.at(0);
  EXPECT_EQ(f.high_watermark, 1);
  EXPECT_EQ(f.last_stable_offset, 1);
  EXPECT_EQ(f.preferred_read_replica, -1);
  ASSERT_TRUE(f.records.has_value());
  EXPECT_NE(f.records->find("hello"), std::string::npos);
  EXPECT_LT(latency, 300);

  // Offset == high watermark is not out of range; above it is.
  auto at_end = consumer.RoundTrip(OneFetch("wait", 1, 0), 11);
  ASSERT_TRUE(at_end.ok());
  EXPECT_EQ(std::get<FetchResponse>(*at_end).responses[0].partitions[0].error_code,
            ErrorCode::kNone);
  auto beyond = consumer.RoundTrip(OneFetch("wait", 2, 0), 11);
  ASSERT_TRUE(beyond.ok());
  EXPECT_EQ(std::get<FetchResponse>(*beyond).responses[0].partitions[0].error_code,
            ErrorCode::kOffsetOutOfRange);
}

TEST(ServerFetchTest, LibrdkafkaConsumerGetsARecordBeforeItsFetchWaitEnds) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("lp", 1).ok());
  Consumer consumer(broker->bootstrap(), "lpg", {{"fetch.wait.max.ms", "500"}});
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, "lp", 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(consumer.handle(), list);
  rd_kafka_topic_partition_list_destroy(list);
  // Let the consumer start its (empty) long polls.
  WaitFor([&] { return broker->Stats().fetch_requests >= 2; }, 5000);
  Producer producer(broker->bootstrap(), {{"linger.ms", "0"}});
  ASSERT_TRUE(producer.Produce("lp", 0, "", "ping"));
  ASSERT_TRUE(producer.Flush(5000));
  const int64_t acked = base::SteadyMs();
  auto got = consumer.Read(1, 5000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LT(base::SteadyMs() - acked, 400);
}

TEST(ServerOrderTest, PipelinedAnswersComeInRequestOrderBehindAHeldFetch) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("order", 1).ok());
  RawConn c(broker->port());
  const int64_t start = base::SteadyMs();
  ASSERT_TRUE(c.Send(MakeRequest(OneFetch("order", 0, 300), 11, 1)));
  ASSERT_TRUE(c.Send(MakeRequest(ApiVersionsRequest{}, 2, 2)));
  ASSERT_TRUE(c.Send(MakeRequest(MetadataRequest{}, 1, 3)));
  for (int32_t want = 1; want <= 3; want++) {
    auto frame = c.ReceiveFrame(3000);
    ASSERT_TRUE(frame.has_value());
    int32_t corr = 0;
    const ApiKey key = want == 1   ? ApiKey::kFetch
                       : want == 2 ? ApiKey::kApiVersions
                                   : ApiKey::kMetadata;
    const int16_t version = want == 1 ? 11 : want == 2 ? 2 : 1;
    ASSERT_TRUE(DecodeResponse(key, version, *frame, &corr).ok());
    EXPECT_EQ(corr, want);
    if (want == 1) {
      EXPECT_GE(base::SteadyMs() - start, 250);
    }
  }
}

TEST(ServerFaultTest, UnavailableThenAvailableDeliversEverything) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("flaky", 2).ok());
  Producer producer(broker->bootstrap(), {{"enable.idempotence", "true"}});
  for (int i = 0; i < 100; i++)
    ASSERT_TRUE(producer.Produce("flaky", i % 2, "", std::to_string(i)));
  ASSERT_TRUE(producer.Flush(10000));
  broker->SetAvailable(false);
  EXPECT_EQ(broker->Stats().connections, 0);
  for (int i = 100; i < 200; i++)
    ASSERT_TRUE(producer.Produce("flaky", i % 2, "", std::to_string(i)));
  // Nothing is acknowledged while the broker is down.
  EXPECT_FALSE(WaitFor(
      [&] {
        producer.Poll(10);
        return producer.reports().size() > 100;
      },
      500));
  EXPECT_EQ(broker->Stats().connections, 0);
  broker->SetAvailable(true);
  ASSERT_TRUE(producer.Flush(15000));
  ASSERT_EQ(producer.reports().size(), 200u);
  EXPECT_EQ(producer.failed(), 0);
  int64_t total = 0;
  for (const auto& p : broker->Stats().partitions) total += p.high_watermark;
  EXPECT_EQ(total, 200);
}

TEST(ServerFaultTest, InjectedProduceErrorsAreRetried) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("retry", 1).ok());
  broker->PushRequestErrors(static_cast<int16_t>(ApiKey::kProduce),
                            {static_cast<int16_t>(ErrorCode::kNotLeaderOrFollower),
                             static_cast<int16_t>(ErrorCode::kNotLeaderOrFollower)});
  Producer producer(broker->bootstrap(), {{"enable.idempotence", "true"}});
  ASSERT_TRUE(producer.Produce("retry", 0, "", "once"));
  ASSERT_TRUE(producer.Flush(10000));
  ASSERT_EQ(producer.reports().size(), 1u);
  EXPECT_EQ(producer.failed(), 0);
  EXPECT_EQ(producer.reports()[0].offset, 0);
  BrokerStats stats = broker->Stats();
  EXPECT_GE(stats.produce_requests, 1);
  EXPECT_EQ(stats.produce_records, 1);
  EXPECT_EQ(stats.partitions.at(0).high_watermark, 1);

  // A raw request sees the injected error itself.
  broker->PushRequestErrors(static_cast<int16_t>(ApiKey::kFetch),
                            {static_cast<int16_t>(ErrorCode::kNotLeaderOrFollower)});
  RawConn c(broker->port());
  auto f = c.RoundTrip(OneFetch("retry", 0, 0), 11);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(std::get<FetchResponse>(*f).responses[0].partitions[0].error_code,
            ErrorCode::kNotLeaderOrFollower);
  f = c.RoundTrip(OneFetch("retry", 0, 0), 11);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(std::get<FetchResponse>(*f).responses[0].partitions[0].error_code, ErrorCode::kNone);
}

TEST(ServerFaultTest, RoundTripDelayShowsInFetchLatency) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("slow", 1).ok());
  RawConn c(broker->port());
  int64_t start = base::SteadyMs();
  ASSERT_TRUE(c.RoundTrip(OneFetch("slow", 0, 0), 11).ok());
  EXPECT_LT(base::SteadyMs() - start, 200);
  broker->SetRoundTripDelayMs(300);
  start = base::SteadyMs();
  ASSERT_TRUE(c.RoundTrip(OneFetch("slow", 0, 0), 11).ok());
  const int64_t slow = base::SteadyMs() - start;
  EXPECT_GE(slow, 290);
  EXPECT_LT(slow, 1500);
  broker->SetRoundTripDelayMs(0);
  start = base::SteadyMs();
  ASSERT_TRUE(c.RoundTrip(OneFetch("slow", 0, 0), 11).ok());
  EXPECT_LT(base::SteadyMs() - start, 200);
}

TEST(ServerProduceTest, ProduceErrorsAndAcksZero) {
  TempDir dir("broker-server");
  auto broker = StartBroker(dir.path());
  ASSERT_NE(broker, nullptr);
  ASSERT_TRUE(broker->CreateTopic("p", 1).ok());
  RawConn c(broker->port());
  // Unknown topic, corrupt batch, good batch, in one request.
  ProduceRequest p = OneRecordProduce("p", "good");
  p.topics.push_back({"nope", {{0, MakeBatch({"x"})}}});
  std::string bad = MakeBatch({"y"});
  bad[bad.size() - 1] ^= 0x55;  // breaks the CRC
  p.topics.push_back({"p", {{0, bad}}});
  auto r = c.RoundTrip(p, 7);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& topics = std::get<ProduceResponse>(*r).topics;
  ASSERT_EQ(topics.size(), 3u);
  EXPECT_EQ(topics[0].partitions[0].error_code, ErrorCode::kNone);
  EXPECT_EQ(topics[0].partitions[0].base_offset, 0);
  EXPECT_EQ(topics[0].partitions[0].log_append_time_ms, -1);
  EXPECT_EQ(topics[1].partitions[0].error_code, ErrorCode::kUnknownTopicOrPartition);
  EXPECT_EQ(topics[2].partitions[0].error_code, ErrorCode::kCorruptMessage);
  // acks=0: no answer at all; the next request's answer comes first.
  ProduceRequest quiet = OneRecordProduce("p", "quiet");
  quiet.acks = 0;
  ASSERT_TRUE(c.Send(MakeRequest(quiet, 7, 50)));
  auto v = c.RoundTrip(ApiVersionsRequest{}, 0);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return broker->Stats().partitions.at(0).high_watermark == 2; }, 5000));
}

}  // namespace
}  // namespace tally::broker::test
