#include "unread_math.h"

#include <algorithm>

namespace tally::store {

int64_t NoticesAbove(const NoticeIds& ids, std::optional<uint64_t> last_read) {
  if (!last_read.has_value()) return 0;
  return static_cast<int64_t>(ids.end() - std::upper_bound(ids.begin(), ids.end(), *last_read));
}

bool RedDotShown(int64_t dot_ts, std::optional<int64_t> click_ts) {
  return !click_ts.has_value() || *click_ts < dot_ts;
}

std::vector<std::pair<std::string, bool>> RedDotsShown(
    std::span<const std::pair<std::string, int64_t>> dots,
    const std::map<std::string, int64_t>& clicks) {
  std::vector<std::pair<std::string, bool>> out;
  out.reserve(dots.size());
  for (const auto& [channel, dot_ts] : dots) {
    auto click = clicks.find(channel);
    out.emplace_back(channel, RedDotShown(dot_ts, click == clicks.end()
                                                      ? std::nullopt
                                                      : std::optional<int64_t>(click->second)));
  }
  return out;
}

int64_t FeedUnread(const FeedSnapshot& snapshot,
                   std::span<const std::pair<uint64_t, uint64_t>> current) {
  if (!snapshot.exists) return 0;
  // Both lists ascend by followee id: one merge walk.
  int64_t unread = 0;
  const auto& a = snapshot.followees;
  const auto& b = current;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].first < b[j].first) {
      i++;
    } else if (b[j].first < a[i].first) {
      j++;
    } else {
      if (b[j].second > a[i].second) unread += static_cast<int64_t>(b[j].second - a[i].second);
      i++;
      j++;
    }
  }
  return unread;
}

}  // namespace tally::store
