// OffsetStore: the durable file of committed offsets: reopen, torn tails,
// damage, compaction, and Flush on another thread.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "group/offset_store.h"
#include "testing/temp_dir.h"

namespace tally::broker {
namespace {

OffsetRecord Rec(const std::string& group, const std::string& topic, int32_t partition,
                 int64_t offset, std::string metadata = "") {
  return OffsetRecord{group, topic, partition, offset, -1, std::move(metadata), 1000, false};
}

class OffsetStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<OffsetStore> Open(OffsetStoreOptions options = {}) {
    auto s = OffsetStore::Open(dir_.path(), options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::filesystem::path File() const { return dir_.path() / "__consumer_offsets" / "offsets.log"; }

  std::string ReadFile() const {
    std::ifstream in(File(), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  void WriteFile(const std::string& data) const {
    std::ofstream out(File(), std::ios::binary | std::ios::trunc);
    out << data;
  }

  tally::testing::TempDir dir_{"offsets"};
};

TEST_F(OffsetStoreTest, ReopenKeepsTheLatestOffsets) {
  {
    auto s = Open();
    ASSERT_TRUE(s);
    std::vector<OffsetRecord> batch = {Rec("g", "t", 0, 10, "m0"), Rec("g", "t", 1, 11)};
    auto seq = s->Append(batch);
    ASSERT_TRUE(seq.ok());
    EXPECT_EQ(*seq, 1u);
    EXPECT_EQ(s->DurableSequence(), 0u);
    ASSERT_TRUE(s->Flush().ok());
    EXPECT_EQ(s->DurableSequence(), 1u);
    std::vector<OffsetRecord> next = {Rec("g", "t", 0, 20), Rec("h", "t", 0, 5)};
    ASSERT_TRUE(s->Append(next).ok());
    std::vector<OffsetRecord> del = {Rec("h", "t", 0, 0)};
    del[0].deleted = true;
    ASSERT_TRUE(s->Append(del).ok());
    EXPECT_EQ(s->ForGroup("h"), nullptr);
  }
  auto s = Open();
  ASSERT_TRUE(s);
  ASSERT_NE(s->Get("g", "t", 0), nullptr);
  EXPECT_EQ(s->Get("g", "t", 0)->offset, 20);
  EXPECT_EQ(s->Get("g", "t", 0)->metadata, "");
  EXPECT_EQ(s->Get("g", "t", 1)->offset, 11);
  EXPECT_EQ(s->Get("g", "t", 1)->commit_timestamp_ms, 1000);
  EXPECT_EQ(s->Get("h", "t", 0), nullptr);
  EXPECT_EQ(s->groups().size(), 1u);
}

TEST_F(OffsetStoreTest, TornTailIsDroppedAndTheFileRepaired) {
  {
    auto s = Open();
    for (int i = 0; i < 3; i++) {
      std::vector<OffsetRecord> one = {Rec("g", "t", i, 100 + i)};
      ASSERT_TRUE(s->Append(one).ok());
    }
  }
  const std::string whole = ReadFile();
  std::filesystem::resize_file(File(), whole.size() - 5);
  {
    auto s = Open();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->Get("g", "t", 1)->offset, 101);
    EXPECT_EQ(s->Get("g", "t", 2), nullptr);
    // Appends after the repair read back.
    std::vector<OffsetRecord> one = {Rec("g", "t", 2, 202)};
    ASSERT_TRUE(s->Append(one).ok());
  }
  auto s = Open();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->Get("g", "t", 2)->offset, 202);
}

TEST_F(OffsetStoreTest, ZerosAtTheEndAreATornTail) {
  {
    auto s = Open();
    std::vector<OffsetRecord> one = {Rec("g", "t", 0, 7)};
    ASSERT_TRUE(s->Append(one).ok());
  }
  WriteFile(ReadFile() + std::string(100, '\0'));
  auto s = Open();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->Get("g", "t", 0)->offset, 7);
  EXPECT_EQ(std::filesystem::file_size(File()), s->file_bytes());
}

TEST_F(OffsetStoreTest, BadCrcOnTheLastRecordIsATornTail) {
  {
    auto s = Open();
    std::vector<OffsetRecord> two = {Rec("g", "t", 0, 7), Rec("g", "t", 1, 8)};
    ASSERT_TRUE(s->Append(two).ok());
  }
  std::string data = ReadFile();
  data[data.size() - 3] ^= 0x40;
  WriteFile(data);
  auto s = Open();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->Get("g", "t", 0)->offset, 7);
  EXPECT_EQ(s->Get("g", "t", 1), nullptr);
}

TEST_F(OffsetStoreTest, DamageInTheMiddleRefusesToOpen) {
  {
    auto s = Open();
    for (int i = 0; i < 3; i++) {
      std::vector<OffsetRecord> one = {Rec("group", "topic", i, 100 + i)};
      ASSERT_TRUE(s->Append(one).ok());
    }
  }
  std::string data = ReadFile();
  data[8 + 12] ^= 0x01;  // inside the first record's body
  WriteFile(data);
  auto s = OffsetStore::Open(dir_.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), base::StatusCode::kCorruption);
  EXPECT_NE(s.status().message().find(File().string()), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("byte 8"), std::string::npos) << s.status().ToString();

  // A wild length in the middle is damage too, not a tail.
  data = ReadFile();
  data[8 + 12] ^= 0x01;
  data[8 + 3] = '\x7f';
  WriteFile(data);
  s = OffsetStore::Open(dir_.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), base::StatusCode::kCorruption);
}

TEST_F(OffsetStoreTest, FileTornAtCreationStartsEmpty) {
  std::filesystem::create_directories(File().parent_path());
  for (const std::string& torn : {std::string("TLYO"), std::string(16, '\0')}) {
    WriteFile(torn);
    auto s = Open();
    ASSERT_TRUE(s);
    EXPECT_TRUE(s->groups().empty());
    EXPECT_EQ(ReadFile(), "TLYOFS01");
    std::vector<OffsetRecord> one = {Rec("g", "t", 0, 1)};
    ASSERT_TRUE(s->Append(one).ok());
    s.reset();
    s = Open();
    EXPECT_EQ(s->Get("g", "t", 0)->offset, 1);
  }
}

TEST_F(OffsetStoreTest, AnotherFileRefusesToOpen) {
  std::filesystem::create_directories(File().parent_path());
  WriteFile("not an offsets file at all");
  auto s = OffsetStore::Open(dir_.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), base::StatusCode::kCorruption);
}

TEST_F(OffsetStoreTest, CompactionKeepsTheLatestPerKey) {
  OffsetStoreOptions options;
  options.compact_min_bytes = 4096;
  options.compact_ratio = 3;
  {
    auto s = Open(options);
    for (int i = 0; i < 2000; i++) {
      std::vector<OffsetRecord> batch = {Rec("g", "t", i % 4, i), Rec("h", "u", 0, -i)};
      ASSERT_TRUE(s->Append(batch).ok());
      EXPECT_LE(s->file_bytes(), std::max<uint64_t>(4096, 3 * s->live_bytes()) + 200) << i;
    }
    EXPECT_EQ(std::filesystem::file_size(File()), s->file_bytes());
    // Compacted data is on disk: all appends count as durable.
    EXPECT_GT(s->DurableSequence(), 1900u);
    std::vector<OffsetRecord> last = {Rec("g", "t", 0, 9999)};
    ASSERT_TRUE(s->Append(last).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(File().parent_path() / "offsets.log.tmp"));
  auto s = Open(options);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->Get("g", "t", 0)->offset, 9999);
  EXPECT_EQ(s->Get("g", "t", 1)->offset, 1997);
  EXPECT_EQ(s->Get("g", "t", 3)->offset, 1999);
  EXPECT_EQ(s->Get("h", "u", 0)->offset, -1999);
  s.reset();
  // An explicit compaction leaves just the live records.
  s = Open(options);
  ASSERT_TRUE(s->Compact().ok());
  EXPECT_EQ(s->file_bytes(), 8 + s->live_bytes());
  EXPECT_EQ(std::filesystem::file_size(File()), s->file_bytes());
}

TEST_F(OffsetStoreTest, FlushRunsOnAnotherThreadDuringAppendsAndCompactions) {
  OffsetStoreOptions options;
  options.compact_min_bytes = 2048;
  auto s = Open(options);
  std::atomic<bool> stop{false};
  std::thread flusher([&] {
    while (!stop.load()) EXPECT_TRUE(s->Flush().ok());
  });
  uint64_t last = 0;
  for (int i = 0; i < 3000; i++) {
    std::vector<OffsetRecord> one = {Rec("g", "t", i % 7, i)};
    auto seq = s->Append(one);
    ASSERT_TRUE(seq.ok());
    last = *seq;
  }
  stop = true;
  flusher.join();
  ASSERT_TRUE(s->Flush().ok());
  EXPECT_EQ(s->DurableSequence(), last);
  s.reset();
  s = Open(options);
  EXPECT_EQ(s->Get("g", "t", 2999 % 7)->offset, 2999);
}

TEST_F(OffsetStoreTest, WithoutSyncAnAppendIsDurableAtOnce) {
  OffsetStoreOptions options;
  options.sync = false;
  auto s = Open(options);
  std::vector<OffsetRecord> one = {Rec("g", "t", 0, 1)};
  auto seq = s->Append(one);
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(s->DurableSequence(), *seq);
}

}  // namespace
}  // namespace tally::broker
