#include "base/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tally::base {
namespace internal {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;

// tables[k][b] is the CRC of byte b followed by k zero bytes, so eight
// input bytes fold into the CRC with eight independent lookups.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t;
};

constexpr Tables MakeTables() {
  Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    tables.t[0][b] = crc;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) {
      uint32_t prev = tables.t[k - 1][b];
      tables.t[k][b] = (prev >> 8) ^ tables.t[0][prev & 0xFF];
    }
  }
  return tables;
}

constexpr Tables kTables = MakeTables();

inline uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;  // x86-64 and aarch64 Linux are little-endian
}

}  // namespace

uint32_t Crc32cPortable(const void* data, size_t size, uint32_t init) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = ~init;
  const auto& t = kTables.t;
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
    --size;
  }
  while (size >= 8) {
    uint64_t v = LoadLe64(p) ^ crc;
    crc = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
          t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^
          t[0][(v >> 56) & 0xFF];
    p += 8;
    size -= 8;
  }
  while (size > 0) {
    crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
    --size;
  }
  return ~crc;
}

#if defined(__x86_64__)

bool Crc32cHardwareAvailable() {
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
}

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const void* data, size_t size,
                                                          uint32_t init) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t crc = ~init;
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc = _mm_crc32_u8(static_cast<uint32_t>(crc), *p++);
    --size;
  }
  while (size >= 8) {
    crc = _mm_crc32_u64(crc, LoadLe64(p));
    p += 8;
    size -= 8;
  }
  while (size > 0) {
    crc = _mm_crc32_u8(static_cast<uint32_t>(crc), *p++);
    --size;
  }
  return ~static_cast<uint32_t>(crc);
}

#else

bool Crc32cHardwareAvailable() { return false; }

uint32_t Crc32cHardware(const void* data, size_t size, uint32_t init) {
  return Crc32cPortable(data, size, init);
}

#endif

}  // namespace internal

uint32_t Crc32c(const void* data, size_t size, uint32_t init) {
  if (size == 0) return init;
  if (internal::Crc32cHardwareAvailable()) return internal::Crc32cHardware(data, size, init);
  return internal::Crc32cPortable(data, size, init);
}

}  // namespace tally::base
