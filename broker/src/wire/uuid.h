// Uuid: Kafka's UUID type (16 bytes, a topic id), as the protocol carries it.
//
// Thread model: a value type.
#pragma once

#include <array>
#include <cstdint>

namespace tally::broker {

struct Uuid {
  std::array<uint8_t, 16> bytes{};

  bool IsZero() const {
    for (uint8_t b : bytes) {
      if (b != 0) return false;
    }
    return true;
  }
  bool operator==(const Uuid&) const = default;
};

}  // namespace tally::broker
