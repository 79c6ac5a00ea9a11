// QueryService in a cluster (SPEC section 6): where a request is read, how
// it is asked of another member, and how answers from several members
// become one. The handlers in query_service.cc call these; without a
// ClusterRouting every partition is here and none of this asks anyone.
//
// A read that goes whole to another member is asked without holding a
// thread (ForwardAsync, PeerClient::GetAllAsync): the transport's I/O
// thread hands it to the peer client's, whose callback answers. Every
// other call to another member blocks its thread (PeerClient::Get/GetAll):
// those handlers are synchronous (Handle() returns the Response), so a
// request that may ask a peer that way runs on the transport's blocking
// pool (QueryService::MayBlock), never on an I/O thread; so does one whose
// owner did not answer ForwardAsync (it then goes to a standby, or 503).
// A forwarded request waits only on leaf reads (a peer's user counts, which
// that peer answers on its I/O thread without asking anyone), so members
// never wait on each other in a cycle.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "cluster_watermarks.h"
#include "http_metrics.h"
#include "query/cluster_routing.h"
#include "query/peer_client.h"
#include "query/query_service.h"
#include "query/watermarks.h"
#include "renderers.h"
#include "request_target.h"
#include "responses.h"
#include "routes.h"
#include "schemas/delta.h"
#include "schemas/json_escape.h"
#include "store/state_store.h"

namespace tally::query {

using internal::AddMembers;
using internal::ErrorResponse;
using internal::JsonResponse;

namespace {

// 503 partition_moving: reads of `partition` are answered by nobody now
// (it moves, its member is down, or it raced a move here). The client
// retries after a second; by then the directory has caught up.
Response PartitionMoving(uint32_t partition, std::string_view why) {
  Response r = ErrorResponse(
      base::Status::Unavailable(fmt::format("partition {} is moving: {}", partition, why)),
      "partition_moving");
  r.retry_after_s = 1;
  return r;
}

// A peer's answer passed through as it came: status, body, who answered,
// Retry-After. Every forwarded route answers JSON.
Response PassThrough(const PeerResponse& answer, const std::string& member) {
  Response r = JsonResponse(answer.status, answer.body);
  std::string_view who = answer.Header(kMemberHeader);
  r.member = who.empty() ? member : std::string(who);
  std::string_view retry = answer.Header("Retry-After");
  if (!retry.empty()) {
    int s = 0;
    for (char c : retry) {
      if (c < '0' || c > '9' || s > 3600) break;
      s = s * 10 + (c - '0');
    }
    r.retry_after_s = std::max(s, 1);
  }
  return r;
}

}  // namespace

// Appends the names in `members` (one or several, comma-separated) not yet
// in `seen`.
void internal::AddMembers(std::string_view members, std::vector<std::string>* seen) {
  while (!members.empty()) {
    const size_t comma = members.find(',');
    std::string_view one = members.substr(0, comma);
    if (!one.empty() && std::find(seen->begin(), seen->end(), one) == seen->end()) {
      seen->emplace_back(one);
    }
    if (comma == std::string_view::npos) break;
    members.remove_prefix(comma + 1);
  }
}

namespace {

// A field of a peer's JSON answer that must be an integer.
bool IntField(const nlohmann::json& j, const char* name, int64_t* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) return false;
  *out = it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>()) : it->get<int64_t>();
  return true;
}

}  // namespace

namespace {
// Set when the routing of the request on this thread turned out wrong: a
// peer asked gave no answer, or a partition routed here was gone when read
// (Dispatch runs a read once more: routing now goes around that peer, or to
// where the partition went).
thread_local bool t_route_again = false;
}  // namespace

void QueryService::PeerDidNotAnswer(const std::string& member) {
  t_route_again = true;
  options_.cluster->Unreachable(member);
}

bool QueryService::TakeRouteAgain() {
  bool again = t_route_again;
  t_route_again = false;
  return again;
}

std::string QueryService::SelfId() const {
  return options_.cluster != nullptr ? options_.cluster->Self() : options_.member;
}

Response QueryService::Local(Response response) const {
  response.member = SelfId();
  return response;
}

Response QueryService::ReadFailed(const base::Status& status, std::string_view context) {
  if (store::IsNotHeld(status)) {
    t_route_again = true;
    std::vector<uint32_t> parts = store::NotHeldPartitions(status);
    return PartitionMoving(parts.empty() ? 0 : parts[0],
                           fmt::format("{}: not held here now", context));
  }
  return Local(ErrorResponse(status.WithContext(context)));
}

std::optional<Response> QueryService::RouteElsewhere(const Request& request, uint64_t entity) {
  if (options_.cluster == nullptr) return std::nullopt;
  const uint32_t p = schemas::PartitionOf(entity, options_.store->partitions());
  PartitionHome home = options_.cluster->Home(p);
  switch (home.where) {
    case PartitionHome::Where::kHere:
      return std::nullopt;
    case PartitionHome::Where::kNowhere:
      return PartitionMoving(p, "no member serves it now");
    case PartitionHome::Where::kPeer:
      break;
  }
  if (!request.forwarded.empty()) {
    // Asked by a peer whose directory is behind ours: never a second hop.
    return PartitionMoving(p, fmt::format("not served here (asked by {}); {} serves it",
                                          request.forwarded, home.member));
  }
  if (request.must_not_block) {
    // MayBlock() saw it served here; it moved since. The retry is routed
    // afresh.
    return PartitionMoving(
        p, fmt::format("it moved to {} while the request was dispatched", home.member));
  }
  if (peers_ == nullptr) return PartitionMoving(p, peers_error_.message());
  PeerResponse answer =
      peers_->Get(home.http, request.target, {}, PeerClient::In(options_.peer_timeout_ms));
  if (!answer.ok()) {
    PeerDidNotAnswer(home.member);
    return PartitionMoving(p, fmt::format("{} did not answer: {}", home.member, answer.error));
  }
  return PassThrough(answer, home.member);
}

struct QueryService::PeerBatchPart {
  PartitionHome home;
  uint32_t partition = 0;  // one of the member's partitions, for messages
  std::vector<size_t> positions;
};

bool QueryService::ForwardAsync(const Request& request, ForwardDone done) {
  if (options_.cluster == nullptr || peers_ == nullptr || !request.forwarded.empty() ||
      request.method != "GET" || request.body_too_large) {
    return false;
  }
  Match m = internal::MatchRoute(request.target);
  if (m.route == nullptr || !m.route->may_forward || m.route->needs_auth ||
      m.route->method != "GET") {
    return false;
  }
  if (m.route->needs_ready && options_.ready && !options_.ready()) return false;
  // A batch spans members: each is asked its share.
  if (m.route->name == "post_counts_batch") return BatchAsync(m, std::move(done));
  if (m.params == 0) return false;
  for (int i = 0; i < m.params; i++) {
    if (m.param_name[i].ends_with("_id") && !ParseId(m.param[i], &m.id[i])) return false;
  }
  const uint32_t p = schemas::PartitionOf(m.id[0], options_.store->partitions());
  PartitionHome home = options_.cluster->Home(p);
  if (home.where != PartitionHome::Where::kPeer) return false;
  const int64_t start = internal::NowNs();
  const int slot = internal::RouteSlot(m.route);
  std::vector<PeerRequest> one;
  one.push_back(PeerRequest{std::move(home.http), std::string(request.target), {}});
  peers_->GetAllAsync(std::move(one), PeerClient::In(options_.peer_timeout_ms),
                      [this, slot, start, member = std::move(home.member),
                       done = std::move(done)](std::vector<PeerResponse> answers) {
                        if (answers.empty() || !answers[0].ok()) {
                          options_.cluster->Unreachable(member);
                          done(std::nullopt);
                          return;
                        }
                        Response r = PassThrough(answers[0], member);
                        RecordQuietly(slot, r.status, start);
                        done(std::move(r));
                      });
  return true;
}

bool QueryService::BatchAsync(const Match& m, ForwardDone done) {
  std::vector<uint64_t> ids;
  if (ParseBatchIds(m.query, &ids)) return false;  // a 400: Handle() answers it
  const uint32_t n = options_.store->partitions();
  std::vector<uint64_t> local_ids;
  std::vector<size_t> local_positions, remote_positions;
  for (size_t i = 0; i < ids.size(); i++) {
    switch (options_.cluster->Home(schemas::PartitionOf(ids[i], n)).where) {
      case PartitionHome::Where::kHere:
        local_ids.push_back(ids[i]);
        local_positions.push_back(i);
        break;
      case PartitionHome::Where::kPeer:
        remote_positions.push_back(i);
        break;
      case PartitionHome::Where::kNowhere:
        return false;  // Handle() answers 503 partition_moving
    }
  }
  const int64_t start = internal::NowNs();
  const int slot = internal::RouteSlot(m.route);
  if (remote_positions.empty()) {
    // Every id is served here (a client that asks the owner): answered
    // now, on this thread, without a hand-over to the blocking pool.
    std::vector<store::PostCounts> counts;
    store::MissingPartitions missing;
    base::Status st = options_.store->GetPostCounts(ids, &counts, &missing);
    if (!st.ok() || !missing.empty()) return false;  // Handle() says why
    Response r = Local(JsonResponse(200, internal::RenderPostCountsBatch(counts)));
    RecordQuietly(slot, r.status, start);
    done(std::move(r));
    return true;
  }
  auto parts = std::make_shared<std::vector<PeerBatchPart>>();
  if (PlanPeerBatch(ids, remote_positions, parts.get())) return false;
  auto counts = std::make_shared<std::vector<store::PostCounts>>(ids.size());
  if (!local_ids.empty()) {
    // Read now, on this thread, as ClusterPostCounts does before it asks.
    std::vector<store::PostCounts> local;
    store::MissingPartitions missing;
    base::Status st = options_.store->GetPostCounts(local_ids, &local, &missing);
    if (!st.ok() || !missing.empty()) return false;  // Handle() says why
    for (size_t k = 0; k < local_positions.size(); k++) (*counts)[local_positions[k]] = local[k];
  }
  std::vector<PeerRequest> requests = PeerBatchRequests(ids, *parts);
  peers_->GetAllAsync(
      std::move(requests), PeerClient::In(options_.peer_timeout_ms),
      [this, ids = std::move(ids), parts, counts, local_positions = std::move(local_positions),
       slot, start, done = std::move(done)](std::vector<PeerResponse> answers) {
        for (size_t k = 0; k < parts->size(); k++) {
          if (k >= answers.size() || !answers[k].ok()) {
            options_.cluster->Unreachable((*parts)[k].home.member);
            done(std::nullopt);
            return;
          }
        }
        std::vector<std::string> answered_by(ids.size());
        std::optional<Response> failed =
            MergePeerBatch(ids, *parts, answers, counts.get(), &answered_by);
        Response r =
            failed ? std::move(*failed) : MergedPostCounts(*counts, local_positions, &answered_by);
        RecordQuietly(slot, r.status, start);
        done(std::move(r));
      });
  return true;
}

std::optional<Response> QueryService::PlanPeerBatch(std::span<const uint64_t> ids,
                                                    const std::vector<size_t>& positions,
                                                    std::vector<PeerBatchPart>* parts) {
  const uint32_t n = options_.store->partitions();
  for (size_t pos : positions) {
    const uint32_t p = schemas::PartitionOf(ids[pos], n);
    PartitionHome home = options_.cluster->Home(p);
    if (home.where == PartitionHome::Where::kNowhere) {
      return PartitionMoving(p, "no member serves it now");
    }
    if (home.where == PartitionHome::Where::kHere) {
      return PartitionMoving(p, "it moved while being read here");
    }
    auto it = std::find_if(parts->begin(), parts->end(),
                           [&](const PeerBatchPart& x) { return x.home.member == home.member; });
    if (it == parts->end()) it = parts->insert(parts->end(), PeerBatchPart{std::move(home), p, {}});
    it->positions.push_back(pos);
  }
  if (!parts->empty() && peers_ == nullptr) {
    return PartitionMoving((*parts)[0].partition, peers_error_.message());
  }
  return std::nullopt;
}

std::vector<PeerRequest> QueryService::PeerBatchRequests(std::span<const uint64_t> ids,
                                                         const std::vector<PeerBatchPart>& parts) {
  std::vector<PeerRequest> requests;
  for (const PeerBatchPart& part : parts) {
    std::string target = "/v1/posts/counts?ids=";
    for (size_t i = 0; i < part.positions.size(); i++) {
      if (i > 0) target.push_back(',');
      fmt::format_to(std::back_inserter(target), "{}", ids[part.positions[i]]);
    }
    requests.push_back(PeerRequest{part.home.http, std::move(target), {}});
  }
  return requests;
}

std::optional<Response> QueryService::MergePeerBatch(std::span<const uint64_t> ids,
                                                     const std::vector<PeerBatchPart>& parts,
                                                     const std::vector<PeerResponse>& answers,
                                                     std::vector<store::PostCounts>* counts,
                                                     std::vector<std::string>* answered_by) {
  for (size_t k = 0; k < parts.size(); k++) {
    const PeerBatchPart& part = parts[k];
    const PeerResponse& a = answers[k];
    if (!a.ok()) {
      PeerDidNotAnswer(part.home.member);
      return PartitionMoving(part.partition,
                             fmt::format("{} did not answer: {}", part.home.member, a.error));
    }
    if (a.status != 200) return PassThrough(a, part.home.member);
    nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
    if (j.is_discarded() || !j.contains("posts") || !j["posts"].is_array() ||
        j["posts"].size() != part.positions.size()) {
      return ErrorResponse(base::Status::Internal(
          fmt::format("{} answered the post counts in an unknown form", part.home.member)));
    }
    for (size_t i = 0; i < part.positions.size(); i++) {
      const nlohmann::json& e = j["posts"][i];
      store::PostCounts& c = (*counts)[part.positions[i]];
      int64_t id = 0;
      if (!e.is_object() || !IntField(e, "post_id", &id) || !IntField(e, "like", &c.like) ||
          !IntField(e, "repost", &c.repost) || !IntField(e, "comment", &c.comment) ||
          !IntField(e, "view", &c.view) || static_cast<uint64_t>(id) != ids[part.positions[i]]) {
        return ErrorResponse(base::Status::Internal(
            fmt::format("{} answered the post counts in an unknown form", part.home.member)));
      }
      c.post_id = static_cast<uint64_t>(id);
    }
    std::string_view who = a.Header(kMemberHeader);
    for (size_t pos : part.positions) {
      (*answered_by)[pos] = who.empty() ? part.home.member : std::string(who);
    }
  }
  return std::nullopt;
}

std::optional<Response> QueryService::FillFromPeers(std::span<const uint64_t> ids,
                                                    const std::vector<size_t>& positions,
                                                    std::vector<store::PostCounts>* counts,
                                                    std::vector<std::string>* answered_by) {
  // One request per peer, every peer at once.
  std::vector<PeerBatchPart> parts;
  if (auto failed = PlanPeerBatch(ids, positions, &parts)) return failed;
  if (parts.empty()) return std::nullopt;
  std::vector<PeerResponse> answers =
      peers_->GetAll(PeerBatchRequests(ids, parts), PeerClient::In(options_.peer_timeout_ms));
  return MergePeerBatch(ids, parts, answers, counts, answered_by);
}

std::optional<Response> QueryService::UserPostsFromPeers(const std::vector<uint64_t>& users,
                                                         std::vector<int64_t>* posts,
                                                         std::vector<std::string>* members) {
  posts->assign(users.size(), 0);
  if (users.empty()) return std::nullopt;
  const uint32_t n = options_.store->partitions();
  std::vector<PeerRequest> requests;
  std::vector<std::string> peer_of;
  std::vector<uint32_t> partition_of;
  for (uint64_t u : users) {
    const uint32_t p = schemas::PartitionOf(u, n);
    PartitionHome home = options_.cluster->Home(p);
    if (home.where == PartitionHome::Where::kNowhere) {
      return PartitionMoving(p, fmt::format("user {}: no member serves it now", u));
    }
    if (home.where == PartitionHome::Where::kHere) {
      return PartitionMoving(p, fmt::format("user {}: it moved while being read here", u));
    }
    requests.push_back(PeerRequest{home.http, fmt::format("/v1/users/{}/counts", u), {}});
    peer_of.push_back(std::move(home.member));
    partition_of.push_back(p);
  }
  if (peers_ == nullptr) return PartitionMoving(partition_of[0], peers_error_.message());
  std::vector<PeerResponse> answers =
      peers_->GetAll(std::move(requests), PeerClient::In(options_.peer_timeout_ms));
  for (size_t i = 0; i < users.size(); i++) {
    const PeerResponse& a = answers[i];
    if (!a.ok()) {
      PeerDidNotAnswer(peer_of[i]);
      return PartitionMoving(partition_of[i],
                             fmt::format("{} did not answer: {}", peer_of[i], a.error));
    }
    if (a.status != 200) return PassThrough(a, peer_of[i]);
    nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !IntField(j, "posts", &(*posts)[i])) {
      return ErrorResponse(base::Status::Internal(fmt::format(
          "{} answered the counts of user {} in an unknown form", peer_of[i], users[i])));
    }
    std::string_view who = a.Header(kMemberHeader);
    AddMembers(who.empty() ? std::string_view(peer_of[i]) : who, members);
  }
  return std::nullopt;
}

std::optional<Response> QueryService::CurrentFolloweePostsAnywhere(
    uint64_t user_id, std::vector<std::pair<uint64_t, uint64_t>>* out,
    std::vector<std::string>* members) {
  store::MissingPartitions missing;
  auto now = options_.store->CurrentFolloweePosts(user_id,
                                                  options_.cluster != nullptr ? &missing : nullptr);
  if (!now.ok()) return ReadFailed(now.status(), fmt::format("user {}", user_id));
  *out = std::move(now).value();
  AddMembers(SelfId(), members);
  if (options_.cluster == nullptr) return std::nullopt;
  // A count is taken from here only where reads of its partition are
  // answered here: a partition held but not served (a copy still being
  // restored, a standby, the notice partition every member applies) is
  // asked of the member that serves it, as one not held is.
  const uint32_t n = options_.store->partitions();
  std::vector<PartitionHome::Where> where(n);
  for (uint32_t p = 0; p < n; p++) where[p] = options_.cluster->Home(p).where;
  std::vector<size_t> ask;
  size_t next_missing = 0;
  for (size_t i = 0; i < out->size(); i++) {
    const bool was_missing =
        next_missing < missing.positions.size() && missing.positions[next_missing] == i;
    if (was_missing) next_missing++;
    if (was_missing ||
        where[schemas::PartitionOf((*out)[i].first, n)] != PartitionHome::Where::kHere) {
      ask.push_back(i);
    }
  }
  if (ask.empty()) return std::nullopt;
  std::vector<uint64_t> users;
  for (size_t pos : ask) users.push_back((*out)[pos].first);
  std::vector<int64_t> posts;
  if (auto failed = UserPostsFromPeers(users, &posts, members)) return failed;
  for (size_t i = 0; i < ask.size(); i++) {
    (*out)[ask[i]].second = static_cast<uint64_t>(std::max<int64_t>(0, posts[i]));
  }
  return std::nullopt;
}

std::optional<Response> QueryService::CurrentFolloweePostsOfOwner(
    uint64_t user_id, std::vector<std::pair<uint64_t, uint64_t>>* out) {
  const uint32_t p = schemas::PartitionOf(user_id, options_.store->partitions());
  PartitionHome home = options_.cluster->Home(p);
  if (home.where != PartitionHome::Where::kPeer) {
    return PartitionMoving(p, fmt::format("user {}: no member serves it now", user_id));
  }
  if (peers_ == nullptr) return PartitionMoving(p, peers_error_.message());
  PeerResponse a =
      peers_->Get(home.http, fmt::format("/v1/users/{}/feed/snapshot?current=true", user_id), {},
                  PeerClient::In(options_.peer_timeout_ms));
  if (!a.ok()) {
    PeerDidNotAnswer(home.member);
    return PartitionMoving(p, fmt::format("{} did not answer: {}", home.member, a.error));
  }
  if (a.status != 200) return PassThrough(a, home.member);
  nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("followees") ||
      !j["followees"].is_object()) {
    return ErrorResponse(base::Status::Internal(fmt::format(
        "{} answered the followees of user {} in an unknown form", home.member, user_id)));
  }
  out->clear();
  for (const auto& [id, posts] : j["followees"].items()) {
    uint64_t f = 0;
    if (!ParseId(id, &f) || !posts.is_number_unsigned()) {
      return ErrorResponse(base::Status::Internal(fmt::format(
          "{} answered the followees of user {} in an unknown form", home.member, user_id)));
    }
    out->emplace_back(f, posts.get<uint64_t>());
  }
  std::sort(out->begin(), out->end());
  return std::nullopt;
}

Response QueryService::ClusterPostCounts(const Request& request, const std::vector<uint64_t>& ids) {
  std::vector<store::PostCounts> counts;
  const uint32_t n = options_.store->partitions();
  // The posts of `want` from this member's state, or the answer saying why not.
  auto read_here = [&](const std::vector<uint64_t>& want,
                       std::vector<store::PostCounts>* out) -> std::optional<Response> {
    store::MissingPartitions missing;
    base::Status st = options_.store->GetPostCounts(want, out, &missing);
    if (st.ok() && !missing.empty()) st = store::NotHeldError(missing.partitions);
    if (!st.ok()) return ReadFailed(st, fmt::format("{} posts", want.size()));
    return std::nullopt;
  };
  // Every id read here (one member alone, or a client that asks the owner):
  // the plain read, without the bookkeeping of a split.
  const auto elsewhere = std::find_if(ids.begin(), ids.end(), [&](uint64_t id) {
    return options_.cluster->Home(schemas::PartitionOf(id, n)).where != PartitionHome::Where::kHere;
  });
  if (elsewhere == ids.end()) {
    if (auto failed = read_here(ids, &counts)) return std::move(*failed);
    return Local(JsonResponse(200, internal::RenderPostCountsBatch(counts)));
  }
  if (request.must_not_block) {
    // MayBlock() saw every partition here; one moved since. The retry is
    // routed afresh.
    return PartitionMoving(schemas::PartitionOf(*elsewhere, n),
                           "it moved while the request was dispatched");
  }
  std::vector<uint64_t> local_ids;
  std::vector<size_t> local_positions, remote_positions;
  for (size_t i = 0; i < ids.size(); i++) {
    const uint32_t p = schemas::PartitionOf(ids[i], n);
    PartitionHome home = options_.cluster->Home(p);
    if (home.where == PartitionHome::Where::kHere) {
      local_ids.push_back(ids[i]);
      local_positions.push_back(i);
    } else if (home.where == PartitionHome::Where::kPeer && !request.forwarded.empty()) {
      // Asked by a peer: never a second hop.
      return ReadFailed(store::NotHeldError(std::vector<uint32_t>{p}),
                        fmt::format("post {} (asked by {})", ids[i], Clip(request.forwarded)));
    } else {
      remote_positions.push_back(i);  // kNowhere: FillFromPeers answers 503
    }
  }
  counts.resize(ids.size());
  if (!local_ids.empty()) {
    std::vector<store::PostCounts> local;
    if (auto failed = read_here(local_ids, &local)) return std::move(*failed);
    for (size_t k = 0; k < local_positions.size(); k++) counts[local_positions[k]] = local[k];
  }
  std::vector<std::string> answered_by(ids.size());
  if (auto failed = FillFromPeers(ids, remote_positions, &counts, &answered_by)) {
    return std::move(*failed);
  }
  return MergedPostCounts(counts, local_positions, &answered_by);
}

Response QueryService::MergedPostCounts(const std::vector<store::PostCounts>& counts,
                                        const std::vector<size_t>& local_positions,
                                        std::vector<std::string>* answered_by) {
  // X-Tally-Member: every member that answered, in the order of the ids.
  const std::string self = SelfId();
  for (size_t pos : local_positions) (*answered_by)[pos] = self;
  std::vector<std::string> members;
  for (const std::string& who : *answered_by) internal::AddMembers(who, &members);
  Response r = JsonResponse(200, internal::RenderPostCountsBatch(counts));
  r.member = fmt::format("{}", fmt::join(members, ","));
  return r;
}

std::optional<Response> QueryService::CountFeedWhereServed(uint64_t user_id, int64_t* feed,
                                                           std::vector<std::string>* members) {
  // The feed counts each followee where its partition is served (the
  // store counted those of every partition it holds, restoring copies
  // included): the snapshot's followees in the current set, each adding
  // max(0, posts now - posts then), as the store's FeedUnread does.
  auto snap = options_.store->GetFeedSnapshot(user_id);
  if (!snap.ok()) return ReadFailed(snap.status(), fmt::format("user {}", user_id));
  *feed = 0;
  if (snap->exists && !snap->followees.empty()) {
    std::vector<std::pair<uint64_t, uint64_t>> now;
    if (auto failed = CurrentFolloweePostsAnywhere(user_id, &now, members)) {
      return std::move(*failed);
    }
    auto then = snap->followees.begin();  // both ascend by id
    for (const auto& [f, posts] : now) {
      while (then != snap->followees.end() && then->first < f) ++then;
      if (then == snap->followees.end()) break;
      if (then->first == f && posts > then->second) {
        *feed += static_cast<int64_t>(posts - then->second);
      }
    }
  }
  return std::nullopt;
}

base::Result<WatermarkReport> QueryService::ClusterWatermarks(bool* moving) {
  if (moving != nullptr) *moving = false;
  auto local = options_.watermarks->Compute();
  if (!local.ok() || options_.cluster == nullptr) return local;
  std::vector<internal::MemberWatermarks> reports;
  reports.push_back({SelfId(), std::move(local).value()});
  auto peers = options_.cluster->Peers();
  if (!peers.empty() && peers_ != nullptr) {
    std::vector<PeerRequest> requests;
    for (const auto& [member, http] : peers) requests.push_back({http, "/v1/watermarks", {}});
    std::vector<PeerResponse> answers =
        peers_->GetAll(std::move(requests), PeerClient::In(options_.peer_timeout_ms));
    // A member that does not answer leaves out only its partitions; the
    // merge fails if nobody else reports them.
    for (size_t i = 0; i < answers.size(); i++) {
      if (!answers[i].ok() || answers[i].status != 200) continue;
      auto report = internal::ParseWatermarkReport(answers[i].body);
      if (report.ok()) reports.push_back({peers[i].first, std::move(report).value()});
    }
  }
  const std::string self = SelfId();
  auto merged = internal::MergeWatermarkReports(reports, options_.watermarks->deltas_topic(),
                                                options_.store->partitions(),
                                                [this, &self](uint32_t d) -> std::string {
                                                  PartitionHome home = options_.cluster->Home(d);
                                                  switch (home.where) {
                                                    case PartitionHome::Where::kHere:
                                                      return self;
                                                    case PartitionHome::Where::kPeer:
                                                      return home.member;
                                                    case PartitionHome::Where::kNowhere:
                                                      break;
                                                  }
                                                  return {};
                                                });
  if (!merged.ok() && moving != nullptr) *moving = true;
  return merged;
}

Response QueryService::HandleCluster(const Request&, const Match&) {
  if (options_.cluster != nullptr) return JsonResponse(200, options_.cluster->ClusterJson());
  return JsonResponse(200, cluster_one_body_);
}

}  // namespace tally::query
