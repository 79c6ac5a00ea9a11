// Fixed 64-bit mixing functions, for hashes that are stored (in the state,
// in tally.deltas) or must spread consecutive ids: never change them.
// Thread model: pure functions.
#pragma once

#include <cstdint>

namespace tally::base {

// splitmix64's finalizer: every input bit affects every output bit, and
// consecutive inputs land far apart.
inline uint64_t SplitMix64(uint64_t h) {
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

}  // namespace tally::base
