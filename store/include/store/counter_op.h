// CounterOp: the coalescing monoid of tally's counters.
//
// Every counter update is a function x -> max(x + add, floor), or, after a
// reset, x -> max(add, floor) whatever x was. Such functions compose into the
// same shape, so any run of increments, decrements (floored at 0) and resets
// collapses into one CounterOp: "three +1s become one +3", and a reset
// between two increments leaves exactly the later one. The applier coalesces
// a window with Then(); the RocksDB merge operator composes operands with
// the same rule, so the result never depends on where windows were cut.
// Thread model: a value type.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tally::store {

struct CounterOp {
  bool reset = false;
  int64_t add = 0;
  int64_t floor = 0;  // >= 0: counters never go below 0

  static CounterOp Add(int64_t n) { return CounterOp{false, n, 0}; }
  static CounterOp Reset() { return CounterOp{true, 0, 0}; }

  bool IsIdentity() const { return !reset && add == 0 && floor == 0; }

  // The value after applying this op to `x` (x >= 0).
  int64_t Apply(int64_t x) const { return std::max((reset ? 0 : x) + add, floor); }

  // this := `next` after this. Associative; identity is CounterOp{}.
  void Then(const CounterOp& next) {
    if (next.reset) {
      *this = next;
      return;
    }
    // max(max(x + a1, f1) + a2, f2) = max(x + a1 + a2, max(f1 + a2, f2))
    add += next.add;
    floor = std::max(floor + next.add, next.floor);
  }
};

}  // namespace tally::store
