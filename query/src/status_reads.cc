// The status page and the JSON it reads: GET / and /status (the page),
// /status/{file} (its scripts and styles), /v1/status (what runs and what is
// wrong), /v1/status/history (the last 15 minutes) and
// /v1/status/hot-posts (the hottest posts of the last minute). None of them
// reads state or waits on anyone: they answer on the I/O thread, while the
// state is not ready, and never rate limited.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/hot_keys.h"
#include "query/cluster_routing.h"
#include "query/query_service.h"
#include "query/status_history.h"
#include "request_target.h"
#include "responses.h"
#include "routes.h"
#include "schemas/json_escape.h"
#include "status_files.h"
#include "store/state_store.h"

namespace tally::query {

using internal::JsonResponse;
using internal::ProtocolError;
using schemas::AppendJsonString;

namespace {

// Hot posts shown: the page's table and the endpoint's answer.
constexpr size_t kHotPosts = 20;

// Revalidated on every load (a 304 when unchanged), so a new binary's page
// is never mixed with an old one's script.
constexpr std::string_view kRevalidate = "no-cache";

Response FileResponse(const internal::EmbeddedFile& f, const Request& request) {
  Response r;
  r.etag = f.etag;
  r.cache_control = kRevalidate;
  r.content_type = f.content_type;
  if (!request.if_none_match.empty() &&
      request.if_none_match.find(f.etag) != std::string_view::npos) {
    r.status = 304;
    return r;
  }
  r.status = 200;
  r.body.assign(f.data);
  return r;
}

// `v` with one decimal, or null when negative (unknown).
void AppendNumber(std::string* out, double v) {
  if (v < 0) {
    out->append("null");
  } else {
    fmt::format_to(std::back_inserter(*out), "{:.1f}", v);
  }
}

void AppendInt(std::string* out, int64_t v) {
  if (v < 0) {
    out->append("null");
  } else {
    fmt::format_to(std::back_inserter(*out), "{}", v);
  }
}

// "name":[v,v,...] of one column of the samples.
template <typename F>
void AppendColumn(std::string* out, std::string_view name, const std::vector<StatusSample>& samples,
                  F value) {
  fmt::format_to(std::back_inserter(*out), ",\"{}\":[", name);
  for (size_t i = 0; i < samples.size(); i++) {
    if (i > 0) out->push_back(',');
    value(out, samples[i]);
  }
  out->push_back(']');
}

void AppendAlert(std::string* out, bool* first, std::string_view code, std::string_view message) {
  if (!*first) out->push_back(',');
  *first = false;
  out->append("{\"code\":");
  AppendJsonString(out, code);
  out->append(",\"message\":");
  AppendJsonString(out, message);
  out->push_back('}');
}

}  // namespace

Response QueryService::HandleStatusPage(const Request& request, const Match&) {
  const internal::EmbeddedFile* f = internal::FindEmbeddedFile("index.html");
  if (f == nullptr) return ProtocolError(500, "the status page is not in this binary", "internal");
  return FileResponse(*f, request);
}

Response QueryService::HandleStatusFile(const Request& request, const Match& m) {
  const internal::EmbeddedFile* f = internal::FindEmbeddedFile(m.param[0]);
  if (f == nullptr) {
    return ProtocolError(404, fmt::format("no such file: \"{}\"", Clip(m.param[0])));
  }
  return FileResponse(*f, request);
}

std::string QueryService::PartitionsMoving() const {
  if (options_.cluster == nullptr) return {};
  uint32_t nowhere = 0;
  int without_owner = 0;
  for (uint32_t p = 0; p < options_.store->partitions(); p++) {
    if (options_.cluster->Home(p).where == PartitionHome::Where::kNowhere) {
      if (without_owner++ == 0) nowhere = p;
    }
  }
  if (without_owner > 0) {
    return fmt::format("{} partition(s) have no current owner (partition {} first)", without_owner,
                       nowhere);
  }
  // Restores under way, from what the members say about themselves.
  const auto cluster = nlohmann::json::parse(options_.cluster->ClusterJson(), nullptr, false);
  if (!cluster.is_object() || !cluster.contains("members")) return {};
  for (const auto& member : cluster["members"]) {
    if (!member.is_object() || !member.contains("restoring")) continue;
    const auto& restoring = member["restoring"];
    if (!restoring.is_array() || restoring.empty()) continue;
    const auto& first = restoring[0];
    return fmt::format("{} restores {} partition(s) (partition {} at {} of {})",
                       member.value("member", std::string("a member")), restoring.size(),
                       first.value("partition", 0), first.value("offset", int64_t{0}),
                       first.value("end_offset", int64_t{0}));
  }
  return {};
}

Response QueryService::HandleStatus(const Request&, const Match&) {
  const int64_t now = base::WallMs();
  const bool ready = !options_.ready || options_.ready();
  const std::string kafka = KafkaProblem();
  const std::string disk = options_.store->WriteProblem();
  const std::string moving = PartitionsMoving();
  std::string growing;
  const bool lag_growing = history_ != nullptr && history_->LagGrowingNow(&growing);

  std::string body = info_body_;
  body.pop_back();  // the closing brace: /v1/info's fields, then the status's
  body.append(",\"member\":");
  AppendJsonString(&body, SelfId());
  fmt::format_to(std::back_inserter(body),
                 ",\"started_ms\":{},\"now_ms\":{},\"uptime_s\":{},\"ready\":{}", started_wall_ms_,
                 now, std::max<int64_t>(0, (base::SteadyMs() - started_steady_ms_) / 1000),
                 ready ? "true" : "false");
  body.append(",\"alerts\":[");
  bool first = true;
  if (!kafka.empty()) AppendAlert(&body, &first, "kafka_lost", kafka);
  if (!moving.empty()) AppendAlert(&body, &first, "partition_moving", moving);
  if (lag_growing) AppendAlert(&body, &first, "lag_growing", growing);
  if (!disk.empty()) AppendAlert(&body, &first, "state_not_writable", disk);
  if (!ready) {
    AppendAlert(&body, &first, "not_ready", "the state is still being opened or caught up");
  }
  body.append("]}");
  return Local(JsonResponse(200, std::move(body)));
}

Response QueryService::HandleStatusHistory(const Request& request, const Match& m) {
  std::string value;
  bool found = false;
  if (base::Status st = FindQueryParam(m.query, "since", &found, &value); !st.ok()) {
    return internal::ErrorResponse(st, "bad_request");
  }
  uint64_t since = 0;
  if (found && !value.empty() && value != "0" && !ParseId(value, &since)) {
    return ProtocolError(400,
                         fmt::format("since=\"{}\": milliseconds since the epoch", Clip(value)));
  }
  (void)request;
  StatusHistorySnapshot h;
  if (history_ != nullptr) {
    h = history_->Since(static_cast<int64_t>(since));
  }
  std::string body;
  body.reserve(64 + h.samples.size() * (96 + 6 * h.partitions.size()));
  fmt::format_to(std::back_inserter(body), "{{\"interval_ms\":{}", h.interval_ms);
  const auto& s = h.samples;
  AppendColumn(&body, "t", s, [](std::string* o, const StatusSample& x) { AppendInt(o, x.t_ms); });
  AppendColumn(&body, "routed", s,
               [](std::string* o, const StatusSample& x) { AppendNumber(o, x.routed_per_s); });
  AppendColumn(&body, "applied", s,
               [](std::string* o, const StatusSample& x) { AppendNumber(o, x.applied_per_s); });
  AppendColumn(&body, "dead_letters", s, [](std::string* o, const StatusSample& x) {
    AppendNumber(o, x.dead_letters_per_s);
  });
  AppendColumn(&body, "lag", s, [](std::string* o, const StatusSample& x) { AppendInt(o, x.lag); });
  AppendColumn(&body, "freshness_ms", s,
               [](std::string* o, const StatusSample& x) { AppendInt(o, x.freshness_ms); });
  AppendColumn(&body, "http", s,
               [](std::string* o, const StatusSample& x) { AppendNumber(o, x.http_per_s); });
  AppendColumn(&body, "http_p99_ms", s,
               [](std::string* o, const StatusSample& x) { AppendNumber(o, x.http_p99_ms); });
  AppendColumn(&body, "commit_p99_ms", s,
               [](std::string* o, const StatusSample& x) { AppendNumber(o, x.commit_p99_ms); });
  body.append(",\"partitions\":[");
  for (size_t i = 0; i < h.partitions.size(); i++) {
    const PartitionLagSeries& p = h.partitions[i];
    if (i > 0) body.push_back(',');
    body.append("{\"topic\":");
    AppendJsonString(&body, p.topic);
    fmt::format_to(std::back_inserter(body), ",\"partition\":{},\"lag\":[", p.partition);
    for (size_t j = 0; j < p.lag.size(); j++) {
      if (j > 0) body.push_back(',');
      AppendInt(&body, p.lag[j]);
    }
    body.append("]}");
  }
  body.append("]}");
  return Local(JsonResponse(200, std::move(body)));
}

Response QueryService::HandleHotPosts(const Request&, const Match&) {
  std::vector<base::HotKey> top;
  int window_s = 60;
  if (options_.hot_posts != nullptr) {
    top = options_.hot_posts->Top(kHotPosts, base::SteadyMs());
    window_s = options_.hot_posts->window_s();
  }
  std::string body = fmt::format("{{\"window_s\":{},\"posts\":[", window_s);
  for (size_t i = 0; i < top.size(); i++) {
    if (i > 0) body.push_back(',');
    fmt::format_to(std::back_inserter(body), "{{\"post_id\":{},\"increments\":{}}}", top[i].key,
                   top[i].weight);
  }
  body.append("]}");
  return Local(JsonResponse(200, std::move(body)));
}

}  // namespace tally::query
