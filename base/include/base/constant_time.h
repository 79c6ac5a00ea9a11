// ConstantTimeEquals: compares a secret a client sent with the one
// expected in time that depends only on the expected secret's length, so
// that the answer's timing does not tell how much of a guess was right.
// Used for the bearer token (query/) and the members' peer keys (app/).
//
// Thread model: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace tally::base {

inline bool ConstantTimeEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); i++) {
    diff |= static_cast<unsigned char>(expected[i]) ^
            static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  }
  return diff == 0;
}

}  // namespace tally::base
