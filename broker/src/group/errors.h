// The Kafka error codes the group coordinator answers with. Kafka's numeric
// values, as they travel on the wire; the wire area defines the full set
// later and the server passes these through unchanged.
// Thread model: constants.
#pragma once

#include <cstdint>

namespace tally::broker::group_error {

inline constexpr int16_t kNone = 0;
inline constexpr int16_t kUnknownTopicOrPartition = 3;
inline constexpr int16_t kOffsetMetadataTooLarge = 12;
inline constexpr int16_t kCoordinatorNotAvailable = 15;
inline constexpr int16_t kNotCoordinator = 16;
inline constexpr int16_t kIllegalGeneration = 22;
inline constexpr int16_t kInconsistentGroupProtocol = 23;
inline constexpr int16_t kInvalidGroupId = 24;
inline constexpr int16_t kUnknownMemberId = 25;
inline constexpr int16_t kInvalidSessionTimeout = 26;
inline constexpr int16_t kRebalanceInProgress = 27;
inline constexpr int16_t kGroupIdNotFound = 69;
inline constexpr int16_t kMemberIdRequired = 79;
inline constexpr int16_t kFencedInstanceId = 82;

}  // namespace tally::broker::group_error
