// DeltasPosition: where, in tally.deltas, the effects of an input stream's
// committed records lie, as the router writes it into the metadata of its
// input offset commits and the watermark reader (query/) reads it back.
//
// For one input stream and one deltas partition d, after the router has
// committed input offset C, an entry says:
//   - every delta in d of the stream's records below C is in a message at
//     offset `last` or before (-1: there is none);
//   - every delta in d of the stream's records below `first_input` is in a
//     message at offset `previous` or before (-1: none). The router writes
//     the stream's smallest record in its message at `last` as first_input,
//     so once `previous` is applied, only the records from first_input on
//     may still wait in d.
// A partition without an entry is one the router cannot vouch for. The
// watermark rule built on it is in query/README.md ("Watermarks").
//
// Text encoding (Kafka offset-commit metadata is a string): "d1" then, per
// entry, ";" partition "," last "," first_input "," previous, in decimal.
// Entries beyond `max_bytes` are left out: a missing entry only makes the
// reader fall back to a coarser rule, never to a wrong one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tally::schemas {

struct DeltasPosition {
  uint32_t partition = 0;   // deltas partition
  int64_t last = -1;        // the committed records' deltas there are at or before it
  int64_t first_input = 0;  // the records below it have their deltas at or before...
  int64_t previous = -1;    // ...this offset (previous <= last)
  bool operator==(const DeltasPosition&) const = default;
};

// Kafka's default offset.metadata.max.bytes is 4096.
inline constexpr size_t kMaxDeltasPositionsBytes = 4000;

// Writes the encoding of `positions` to *out (replacing it), leaving out the
// entries that would take it past `max_bytes`.
void EncodeDeltasPositions(const std::vector<DeltasPosition>& positions, std::string* out,
                           size_t max_bytes = kMaxDeltasPositionsBytes);

// Decodes what EncodeDeltasPositions wrote. Empty metadata (another writer,
// an older tally) gives no entries. Corruption for anything else that does
// not parse; the caller then uses no entries.
base::Result<std::vector<DeltasPosition>> DecodeDeltasPositions(std::string_view text);

}  // namespace tally::schemas
