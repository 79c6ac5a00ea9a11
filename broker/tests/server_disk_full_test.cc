// The broker on a full disk. Its log directory is on an 8 MiB tmpfs that a
// filler file takes almost whole, so produce requests soon fail with
// KAFKA_STORAGE_ERROR. While the disk is full the broker process stays up
// and a consumer still reads everything acknowledged. Once the filler is
// deleted, produce succeeds again without a restart, and in the end every
// acknowledged record is in the log exactly once.
//
// Needs root (mount -t tmpfs); without it the test is skipped, as
// tests/e2e/e2e_disk_full.py is.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "server_test_util.h"
#include "testing/child_process.h"
#include "testing/temp_dir.h"

namespace tally::broker::test {
namespace {

using testing::TempDir;

constexpr char kTopic[] = "full";
constexpr int32_t kPartitions = 2;
// Free bytes the filler leaves to the broker: a few hundred records.
constexpr int64_t kLeaveBytes = 256 << 10;

int64_t FreeBytes(const std::filesystem::path& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

class ServerDiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    disk_ = dir_.path() / "disk";
    std::filesystem::create_directories(disk_);
    int rc = 0;
    const std::string out =
        RunShell("mount -t tmpfs -o size=8m tmpfs " + disk_.string(), &rc, true);
    if (rc != 0) {
      GTEST_SKIP() << "the log directory must be a small tmpfs (mount needs root), and mount "
                      "failed: "
                   << out;
    }
    mounted_ = true;
  }

  void TearDown() override {
    child_.reset();  // SIGKILLs the broker if it still runs, before the unmount
    if (mounted_) {
      int rc = 0;
      RunShell("umount -l " + disk_.string(), &rc, true);
    }
  }

  // Creates disk_/`name` taking all but `leave` of the free bytes.
  bool Fill(const std::string& name, int64_t leave) {
    const std::filesystem::path path = disk_ / name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    const int64_t size = FreeBytes(disk_) - leave;
    const bool ok = size > 0 && ::posix_fallocate(fd, 0, size) == 0;
    ::close(fd);
    return ok;
  }

  TempDir dir_{"broker-disk-full"};
  std::filesystem::path disk_;
  bool mounted_ = false;
  std::unique_ptr<testing::ChildProcess> child_ = std::make_unique<testing::ChildProcess>();
};

// Every acknowledged value of `reports` (with its offset) into `acked`.
void CollectAcked(const std::vector<Msg>& reports, std::map<std::string, Msg>* acked) {
  for (const Msg& r : reports) {
    if (r.err == 0) (*acked)[r.value] = r;
  }
}

// Checks that every record of `acked` is in `log` exactly once, at the
// partition and offset of its report, and that no value is there twice.
void ExpectExactlyOnce(const std::map<std::string, Msg>& acked, const std::vector<Msg>& log,
                       const std::string& when) {
  std::map<std::string, std::vector<const Msg*>> where;
  for (const Msg& m : log) where[m.value].push_back(&m);
  for (const auto& [value, at] : where) {
    EXPECT_EQ(at.size(), 1u) << when << ": " << value << " is in the log " << at.size() << " times";
  }
  for (const auto& [value, r] : acked) {
    auto it = where.find(value);
    if (it == where.end()) {
      ADD_FAILURE() << when << ": " << value << " was acknowledged at " << r.partition << "/"
                    << r.offset << " but is not in the log";
      continue;
    }
    EXPECT_EQ(it->second[0]->partition, r.partition) << when << ": " << value;
    EXPECT_EQ(it->second[0]->offset, r.offset) << when << ": " << value;
  }
}

TEST_F(ServerDiskFullTest, StorageErrorWhileFullThenProduceResumesByItself) {
  const std::filesystem::path log_dir = disk_ / "log";
  // The broker's stderr off the small disk, so it outlives the unmount.
  const std::string bootstrap =
      StartBrokerChild(child_.get(), log_dir, 0, 2, dir_.path() / "broker-child.log");
  ASSERT_FALSE(bootstrap.empty());
  ASSERT_TRUE(CreateTopicRaw(PortOf(bootstrap), kTopic, kPartitions));
  // No retries: each storage error reaches the delivery report.
  Producer plain(bootstrap, {{"message.send.max.retries", "0"}, {"linger.ms", "1"}});
  const std::string pad(1000, 'x');
  int next = 0;
  auto produce = [&](int n) {
    for (int i = 0; i < n; i++, next++) {
      ASSERT_TRUE(plain.Produce(kTopic, next % kPartitions, "", fmt::format("v{}-{}", next, pad)));
    }
    ASSERT_TRUE(plain.Flush(10000));
  };
  produce(100);
  ASSERT_EQ(plain.failed(), 0);

  ASSERT_TRUE(Fill("filler", kLeaveBytes)) << "fallocate of the filler failed";
  std::printf("server_disk_full_test: %lld bytes left free\n",
              static_cast<long long>(FreeBytes(disk_)));
  const int64_t full_deadline = base::SteadyMs() + 20000;
  while (plain.failed() == 0 && base::SteadyMs() < full_deadline && next < 20000) {
    produce(20);
    ASSERT_FALSE(HasFatalFailure());
  }
  ASSERT_GT(plain.failed(), 0) << "no produce failed on the full disk";
  for (const Msg& r : plain.reports()) {
    if (r.err != 0) {
      EXPECT_EQ(r.err, RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR)
          << r.value.substr(0, 10) << ": "
          << rd_kafka_err2str(static_cast<rd_kafka_resp_err_t>(r.err));
    }
  }
  // A failed write is cut back, so a small one could still fit in what that
  // gave back: a second filler takes the last bytes, and every write fails.
  Fill("filler-2", 0);
  EXPECT_LT(FreeBytes(disk_), 4096);
  const int failed_before = plain.failed();
  produce(20);
  EXPECT_EQ(plain.failed(), failed_before + 20) << "produce succeeded on a full disk";

  // A commit cannot be written either: an error answer, not a crash.
  Consumer committer(bootstrap, "full-group");
  auto commit = [&](int64_t offset) {
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, kTopic, 0)->offset = offset;
    const rd_kafka_resp_err_t err = rd_kafka_commit(committer.handle(), list, 0);
    rd_kafka_topic_partition_list_destroy(list);
    return err;
  };
  // The first few may still fit in the last page of the offsets file.
  int64_t last_committed = -1001;
  rd_kafka_resp_err_t full_commit = RD_KAFKA_RESP_ERR_NO_ERROR;
  for (int64_t offset = 1; offset <= 1000; offset++) {
    full_commit = commit(offset);
    if (full_commit != RD_KAFKA_RESP_ERR_NO_ERROR) break;
    last_committed = offset;
  }
  EXPECT_NE(full_commit, RD_KAFKA_RESP_ERR_NO_ERROR) << "1000 commits on a full disk";
  std::printf("server_disk_full_test: %lld commits fitted, then: %s\n",
              static_cast<long long>(last_committed), rd_kafka_err2str(full_commit));
  EXPECT_EQ(CommittedOffset(committer.handle(), kTopic, 0), last_committed);

  // An idempotent producer queued now keeps retrying until the disk has room.
  Producer idempotent(bootstrap, {{"enable.idempotence", "true"},
                                  {"message.timeout.ms", "60000"},
                                  {"retry.backoff.ms", "100"}});
  for (int i = 0; i < 50; i++) {
    ASSERT_TRUE(idempotent.Produce(kTopic, i % kPartitions, "", fmt::format("i{}-{}", i, pad)));
  }
  idempotent.Poll(500);
  EXPECT_TRUE(child_->Running()) << "the broker died on the full disk";

  // While full, a consumer reads what was acknowledged.
  std::map<std::string, Msg> acked;
  CollectAcked(plain.reports(), &acked);
  CollectAcked(idempotent.reports(), &acked);
  ExpectExactlyOnce(acked, ReadWholeLog(bootstrap, kTopic, kPartitions, 20000), "while full");
  const size_t acked_while_full = acked.size();
  EXPECT_TRUE(child_->Running()) << "the broker died on the full disk";

  // Room again: produce succeeds without a restart.
  std::filesystem::remove(disk_ / "filler");
  std::filesystem::remove(disk_ / "filler-2");
  const int failed_when_freed = plain.failed();
  produce(100);
  EXPECT_EQ(plain.failed(), failed_when_freed) << "produce still fails once the disk has room";
  ASSERT_TRUE(idempotent.Flush(30000));
  EXPECT_EQ(idempotent.failed(), 0);
  EXPECT_EQ(idempotent.reports().size(), 50u);
  EXPECT_EQ(commit(2000), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(CommittedOffset(committer.handle(), kTopic, 0), 2000);
  EXPECT_TRUE(child_->Running());

  acked.clear();
  CollectAcked(plain.reports(), &acked);
  CollectAcked(idempotent.reports(), &acked);
  std::vector<Msg> log = ReadWholeLog(bootstrap, kTopic, kPartitions, 20000);
  ExpectExactlyOnce(acked, log, "after the disk had room again");
  // With no retries, a record that got a storage error is not in the log.
  std::set<std::string> in_log;
  for (const Msg& m : log) in_log.insert(m.value);
  for (const Msg& r : plain.reports()) {
    if (r.err != 0) {
      EXPECT_EQ(in_log.count(r.value), 0u) << r.value.substr(0, 10);
    }
  }
  EXPECT_EQ(log.size(), acked.size());
  std::printf(
      "server_disk_full_test: %zu acknowledged while full, %d storage errors, %zu acknowledged "
      "in all, %zu records in the log\n",
      acked_while_full, plain.failed(), acked.size(), log.size());
  if (HasFailure()) dir_.Keep();
}

}  // namespace
}  // namespace tally::broker::test
