#include "aggregator/event_router.h"

#include <algorithm>

namespace tally::aggregator {

using schemas::Delta;
using schemas::DeltaOp;
using schemas::Event;
using schemas::EventType;

EventRouter::EventRouter(uint32_t partitions) : partitions_(partitions) {}

uint32_t EventRouter::Route(const Event& e, std::string_view topic, int32_t partition, int64_t offset,
                            std::vector<schemas::DeltaBatchBuilder>* builders) {
  uint32_t effect = 0;
  const uint64_t event_id = e.id.empty() ? 0 : schemas::EventIdHash(e.id);
  auto emit = [&](Delta d) {
    auto& b = (*builders)[schemas::PartitionOf(d.entity, partitions_)];
    d.event_id = event_id;
    d.source.stream = b.StreamIndex(topic, partition);
    d.source.offset = offset;
    d.source.effect = effect++;
    d.source.ts = e.ts;
    b.Add(d);
  };
  auto counter = [&](DeltaOp op, uint64_t entity, uint8_t field, int64_t amount) {
    Delta d;
    d.op = op;
    d.entity = entity;
    d.field = field;
    d.amount = amount;
    emit(d);
  };
  auto edge = [&](DeltaOp op, uint64_t entity, uint64_t member) {
    Delta d;
    d.op = op;
    d.entity = entity;
    d.member = member;
    emit(d);
  };
  constexpr auto kPost = DeltaOp::kPostCounter;
  constexpr auto kUser = DeltaOp::kUserCounter;
  constexpr auto kUnread = DeltaOp::kUnreadAdd;
  auto field = [](auto f) { return static_cast<uint8_t>(f); };

  switch (e.type) {
    case EventType::kPost:
      // Feed unread needs no fan-out: readers compare followees' post counts
      // with their snapshot (SPEC section 3).
      counter(kUser, e.author_id, field(schemas::UserField::kPosts), 1);
      break;
    case EventType::kPostDelete:
      counter(kUser, e.author_id, field(schemas::UserField::kPosts), -1);
      break;
    case EventType::kLike:
      edge(DeltaOp::kLikeSet, e.post_id, e.user_id);
      if (e.author_id) counter(kUnread, e.author_id, field(schemas::UnreadKind::kLike), 1);
      break;
    case EventType::kUnlike:
      edge(DeltaOp::kLikeUnset, e.post_id, e.user_id);
      break;
    case EventType::kRepost:
      counter(kPost, e.post_id, field(schemas::PostField::kRepost), 1);
      if (e.author_id) counter(kUnread, e.author_id, field(schemas::UnreadKind::kRepost), 1);
      break;
    case EventType::kComment:
      counter(kPost, e.post_id, field(schemas::PostField::kComment), 1);
      if (e.author_id) counter(kUnread, e.author_id, field(schemas::UnreadKind::kComment), 1);
      break;
    case EventType::kView:
      counter(kPost, e.post_id, field(schemas::PostField::kView), 1);
      if (e.user_id) edge(DeltaOp::kViewMember, e.post_id, e.user_id);
      break;
    case EventType::kMention:
      // A user named twice in one mention is notified once.
      scratch_.assign(e.target_ids.begin(), e.target_ids.end());
      std::sort(scratch_.begin(), scratch_.end());
      scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
      for (uint64_t t : scratch_) counter(kUnread, t, field(schemas::UnreadKind::kMention), 1);
      break;
    case EventType::kDm:
      counter(kUnread, e.to_user_id, field(schemas::UnreadKind::kDm), 1);
      break;
    case EventType::kFollow:
      // The edge lives with the follower; the applier there derives the
      // target's followers and unread follower only if the edge was new.
      edge(DeltaOp::kFollowSet, e.user_id, e.target_id);
      break;
    case EventType::kUnfollow:
      edge(DeltaOp::kFollowUnset, e.user_id, e.target_id);
      break;
    case EventType::kNotice: {
      Delta d;
      d.op = DeltaOp::kNoticeAppend;
      d.entity = schemas::kGlobalEntity;
      d.member = e.notice_id;
      d.text = e.title;
      emit(d);
      break;
    }
    case EventType::kRedDot: {
      Delta d;
      d.op = DeltaOp::kRedDotPublish;
      d.entity = schemas::kGlobalEntity;
      d.text = e.channel;
      emit(d);
      break;
    }
    case EventType::kRead: {
      Delta d;
      d.entity = e.user_id;
      switch (e.read_kind) {
        case schemas::UnreadKind::kNotice:
          d.op = DeltaOp::kNoticeRead;
          d.member = e.notice_id;
          break;
        case schemas::UnreadKind::kRedDot:
          d.op = DeltaOp::kRedDotRead;
          d.text = e.channel;
          break;
        case schemas::UnreadKind::kFeed:
          d.op = DeltaOp::kFeedSnapshot;
          d.snapshot = e.snapshot.data();
          d.snapshot_size = static_cast<uint32_t>(e.snapshot.size());
          break;
        default:
          d.op = DeltaOp::kUnreadReset;
          d.field = field(e.read_kind);
          break;
      }
      emit(d);
      break;
    }
  }
  return effect;
}

}  // namespace tally::aggregator
