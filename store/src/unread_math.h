// The unread arithmetic of SPEC section 3, as pure functions over records
// already read: StateStore::GetNoticeUnread and GetUnread read the records
// (the notice ids, the user's last-read id, the red-dot times, the feed
// snapshot and the followees' post counts) and count here, so the rules are
// tested without RocksDB (tests/unread_math_test.cc).
//
// Thread model: pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "store/state_store.h"

namespace tally::store {

// A user's unread notices: how many of `ids` (ascending, no duplicates: a
// partition's notice list) have an id above `last_read`, in whatever order
// they arrived (the list is a set of ids, not a sequence). A user without a
// last-read id (nullopt) has 0. A binary search: O(log n).
int64_t NoticesAbove(const NoticeIds& ids, std::optional<uint64_t> last_read);

// Whether one channel's red dot shows: when the user's click time is older
// than the channel's global time, or when the user has no click time (a
// click at the global time itself hides it).
bool RedDotShown(int64_t dot_ts, std::optional<int64_t> click_ts);

// Every channel of `dots` (global times, by channel), in the order given,
// with whether its dot shows for a user whose click times are `clicks`
// (channel -> click time; channels without a global time are ignored).
std::vector<std::pair<std::string, bool>> RedDotsShown(
    std::span<const std::pair<std::string, int64_t>> dots,
    const std::map<std::string, int64_t>& clicks);

// A user's unread feed: the sum, over followees both in the snapshot and in
// `current` (the followees now with their post counts, ascending id), of
// max(0, posts now - posts in the snapshot). 0 without a snapshot.
int64_t FeedUnread(const FeedSnapshot& snapshot,
                   std::span<const std::pair<uint64_t, uint64_t>> current);

}  // namespace tally::store
