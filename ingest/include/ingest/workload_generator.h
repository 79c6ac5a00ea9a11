// WorkloadGenerator: a deterministic, realistic stream of synthetic events.
//
// Drives `tally produce --gen`, the benchmarks and the model-based tests. The
// mix covers all 14 event types the way a social app produces them: mostly
// views and likes on Zipf-popular posts (s = 1.1) with some duplicate likes
// and unlikes of existing likes, reposts and comments that name the post's
// author, new posts and a few deletes of the author's own live posts, follows
// drawn from a power-law graph (popular targets) and some unfollows of
// existing edges, mentions of 1..5 users, direct messages, rare system
// notices (strictly increasing notice_id), rare red dots over a few channels,
// and reads of every unread kind (feed reads carry a small snapshot).
//
// The same Options (seed included) always give the same sequence, on every
// platform: the generator uses its own PRNG and distributions, not <random>'s
// implementation-defined ones. Event i has ts = base_ts_ms + i * ts_step_ms.
//
// Thread model: externally synchronized; one generator per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "schemas/event.h"

namespace tally::ingest {

struct WorkloadOptions {
  uint64_t users = 100000;  // user ids are 1..users
  // Posts that exist before the first event (ids 1..posts, with authors
  // chosen by the generator); new posts get ids posts+1, posts+2, ...
  uint64_t posts = 100000;
  uint64_t seed = 1;
  int64_t base_ts_ms = 1700000000000;  // 2023-11-14T22:13:20Z
  int64_t ts_step_ms = 1;
  double post_zipf_s = 1.1;    // popularity of posts (likes, views, comments, reposts)
  double follow_zipf_s = 1.1;  // in-degree of the follow graph
  bool with_ids = false;       // set Event::id to "g<seed>-<index>"
};

class WorkloadGenerator {
 public:
  // Preconditions: users >= 2, posts >= 1, ts_step_ms >= 0, zipf exponents
  // > 0 (asserted). Allocates O(users + posts) state up front.
  explicit WorkloadGenerator(const WorkloadOptions& options);
  ~WorkloadGenerator();
  WorkloadGenerator(const WorkloadGenerator&) = delete;
  WorkloadGenerator& operator=(const WorkloadGenerator&) = delete;

  // Overwrites `*out` (Clear() first, so buffers are reused) with the next
  // event. Every event passes schemas::EventParser after EventToJson().
  void Next(schemas::Event* out);

  // Events generated so far.
  uint64_t generated() const;
  // The author of `post_id` as the generator knows it (initial pool and the
  // posts it generated); 0 for an id it never used.
  uint64_t AuthorOf(uint64_t post_id) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tally::ingest
