// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of
// Kafka's record batch v2 (it covers a batch from its attributes to its end),
// of tally's broker log files and of anything else that must match what
// Kafka computes. A hardware path (SSE4.2 `crc32` instruction) is chosen at
// run time when the CPU has it; otherwise a table-driven slice-by-8 version
// runs. Both give the same answers.
// Thread model: pure functions, safe anywhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tally::base {

// Returns the CRC32C of `size` bytes at `data`, continuing from `init`, the
// CRC32C of the bytes before them (0 for none): Crc32c(b, n2, Crc32c(a, n1))
// equals the CRC32C of a followed by b. `data` may be null when `size` is 0.
uint32_t Crc32c(const void* data, size_t size, uint32_t init = 0);

namespace internal {

// The portable slice-by-8 implementation, whatever the CPU.
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t init);

// True if this CPU has the SSE4.2 crc32 instruction (x86-64 only).
bool Crc32cHardwareAvailable();

// The SSE4.2 implementation; only call it if Crc32cHardwareAvailable().
uint32_t Crc32cHardware(const void* data, size_t size, uint32_t init);

}  // namespace internal
}  // namespace tally::base
