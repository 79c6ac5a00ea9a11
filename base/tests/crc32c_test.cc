#include "base/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tally::base {
namespace {

uint32_t Crc(const std::string& s) { return Crc32c(s.data(), s.size()); }

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc(""), 0u);
  EXPECT_EQ(Crc("a"), 0xC1D04330u);
  EXPECT_EQ(Crc("123456789"), 0xE3069283u);
  // RFC 3720 (iSCSI) B.4 test patterns.
  EXPECT_EQ(Crc(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc(ascending), 0x46DD794Eu);
  std::string descending;
  for (int i = 31; i >= 0; --i) descending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc(descending), 0x113FDB5Cu);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::string s = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t first = Crc32c(s.data(), cut);
    EXPECT_EQ(Crc32c(s.data() + cut, s.size() - cut, first), Crc(s)) << "cut=" << cut;
  }
}

TEST(Crc32cTest, PortableAndHardwareAgreeAtEveryAlignmentAndLength) {
  std::mt19937 rng(12345);
  std::vector<uint8_t> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 16; ++start) {
    for (size_t len : {0, 1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4096}) {
      uint32_t portable = internal::Crc32cPortable(buf.data() + start, len, 7);
      EXPECT_EQ(Crc32c(buf.data() + start, len, 7), portable);
      if (internal::Crc32cHardwareAvailable()) {
        EXPECT_EQ(internal::Crc32cHardware(buf.data() + start, len, 7), portable)
            << "start=" << start << " len=" << len;
      }
    }
  }
}

}  // namespace
}  // namespace tally::base
