// The request handlers of BrokerServer: Dispatch, which decodes nothing
// itself but routes each request of the wire area's ApiVersions table to
// its handler (handlers_topics.cc, handlers_records.cc,
// handlers_groups.cc), and the errors injected for tests. All run on the
// network thread.
#include <fmt/format.h>

#include <set>
#include <variant>

#include "base/clock.h"
#include "log/record_batch.h"
#include "log/topic_config.h"
#include "server/server.h"

namespace tally::broker {

namespace {

constexpr const char* kLog = "broker";

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

void BrokerServer::Dispatch(Conn* c, Request& request) {
  const RequestHeader& h = request.header;
  const uint64_t conn_id = c->id;
  auto answer = [&](const ResponseBody& body) {
    const uint64_t slot = NewSlot(c);
    Fill(conn_id, slot, h.correlation_id, body, h.api_version);
  };
  if (std::holds_alternative<UnsupportedRequest>(request.body)) {
    if (h.api_key == static_cast<int16_t>(ApiKey::kApiVersions)) {
      const uint64_t slot = NewSlot(c);
      Fill(conn_id, slot, h.correlation_id, MakeUnsupportedApiVersionsResponse(), 0);
      return;
    }
    // As Kafka: a request the broker cannot parse has no answer it could
    // encode, so the connection is closed.
    TALLY_LOG_WARN_LIMITED(conn_log_, kLog, "closing {}: unsupported request {} ({}) v{}", c->peer,
                           ApiKeyName(h.api_key), h.api_key, h.api_version);
    CloseConn(c, "");
    return;
  }
  auto injected = injected_errors_.find(h.api_key);
  if (injected != injected_errors_.end() && !injected->second.empty()) {
    const auto code = static_cast<ErrorCode>(injected->second.front());
    injected->second.pop_front();
    const auto* produce = std::get_if<ProduceRequest>(&request.body);
    if (produce != nullptr && produce->acks == 0) return;
    std::optional<ResponseBody> body = InjectedError(request, code);
    if (body.has_value()) {
      answer(*body);
      return;
    }
  }
  std::visit(
      Overloaded{
          [&](UnsupportedRequest&) {},
          [&](ApiVersionsRequest&) { answer(MakeApiVersionsResponse()); },
          [&](MetadataRequest& r) { answer(HandleMetadata(r, h.api_version)); },
          [&](ProduceRequest& r) { HandleProduce(c, h, r); },
          [&](FetchRequest& r) { HandleFetch(c, h, r); },
          [&](ListOffsetsRequest& r) { answer(HandleListOffsets(r, h.api_version)); },
          [&](FindCoordinatorRequest& r) {
            FindCoordinatorResponse resp;
            if (r.key_type != 0) {
              // Transactions are not supported.
              resp.error_code = ErrorCode::kCoordinatorNotAvailable;
              resp.node_id = -1;
              resp.port = -1;
            } else {
              resp.node_id = options_.node_id;
              resp.host = advertised_host_;
              resp.port = port_;
            }
            answer(resp);
          },
          [&](JoinGroupRequest& r) { HandleJoinGroup(c, h, r); },
          [&](SyncGroupRequest& r) { HandleSyncGroup(c, h, r); },
          [&](HeartbeatRequest& r) {
            GroupHeartbeatRequest g{r.group_id, r.generation_id, r.member_id,
                                    r.group_instance_id.value_or("")};
            HeartbeatResponse resp;
            resp.error_code = static_cast<ErrorCode>(coord_->Heartbeat(g));
            answer(resp);
          },
          [&](LeaveGroupRequest& r) {
            GroupLeaveRequest g;
            g.group_id = r.group_id;
            g.members.push_back({r.member_id, ""});
            LeaveGroupResult res = coord_->LeaveGroup(g);
            int16_t e = res.error;
            if (e == 0 && !res.member_errors.empty()) e = res.member_errors[0];
            LeaveGroupResponse resp;
            resp.error_code = static_cast<ErrorCode>(e);
            answer(resp);
          },
          [&](OffsetCommitRequest& r) { HandleOffsetCommit(c, h, r); },
          [&](OffsetFetchRequest& r) { answer(HandleOffsetFetch(r)); },
          [&](DescribeGroupsRequest& r) { answer(HandleDescribeGroups(r)); },
          [&](ListGroupsRequest&) { answer(HandleListGroups()); },
          [&](CreateTopicsRequest& r) { answer(HandleCreateTopics(r, h.api_version)); },
          [&](DeleteTopicsRequest& r) { answer(HandleDeleteTopics(r)); },
          [&](DeleteRecordsRequest& r) { answer(HandleDeleteRecords(r)); },
          [&](InitProducerIdRequest& r) { answer(HandleInitProducerId(r)); },
          [&](DescribeConfigsRequest& r) { answer(HandleDescribeConfigs(r, h.api_version)); },
          [&](AlterConfigsRequest& r) { answer(HandleAlterConfigs(r)); },
      },
      request.body);
}

std::optional<ResponseBody> BrokerServer::InjectedError(const Request& request, ErrorCode code) {
  return std::visit(
      Overloaded{
          [&](const ProduceRequest& r) -> std::optional<ResponseBody> {
            ProduceResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (const auto& p : t.partitions) {
                rt.partitions.push_back({.index = p.index, .error_code = code});
              }
            }
            return resp;
          },
          [&](const FetchRequest& r) -> std::optional<ResponseBody> {
            FetchResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.responses.emplace_back();
              rt.topic = t.topic;
              for (const auto& p : t.partitions) {
                auto& rp = rt.partitions.emplace_back();
                rp.partition_index = p.partition;
                rp.error_code = code;
                rp.high_watermark = -1;
                rp.records = std::string();
              }
            }
            return resp;
          },
          [&](const ListOffsetsRequest& r) -> std::optional<ResponseBody> {
            ListOffsetsResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (const auto& p : t.partitions) {
                auto& rp = rt.partitions.emplace_back();
                rp.partition_index = p.partition_index;
                rp.error_code = code;
              }
            }
            return resp;
          },
          [&](const MetadataRequest& r) -> std::optional<ResponseBody> {
            MetadataResponse resp;
            resp.brokers.push_back({options_.node_id, advertised_host_, port_, std::nullopt});
            resp.cluster_id = cluster_id_;
            resp.controller_id = options_.node_id;
            for (const std::string& name : r.topics.value_or(std::vector<std::string>())) {
              auto& t = resp.topics.emplace_back();
              t.name = name;
              t.error_code = code;
            }
            return resp;
          },
          [&](const OffsetCommitRequest& r) -> std::optional<ResponseBody> {
            OffsetCommitResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (const auto& p : t.partitions) rt.partitions.push_back({p.partition_index, code});
            }
            return resp;
          },
          [&](const OffsetFetchRequest& r) -> std::optional<ResponseBody> {
            OffsetFetchResponse resp;
            resp.error_code = code;
            for (const auto& t : r.topics.value_or(std::vector<OffsetFetchRequest::Topic>())) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (int32_t p : t.partition_indexes) {
                auto& rp = rt.partitions.emplace_back();
                rp.partition_index = p;
                rp.error_code = code;
              }
            }
            return resp;
          },
          [&](const FindCoordinatorRequest&) -> std::optional<ResponseBody> {
            FindCoordinatorResponse resp;
            resp.error_code = code;
            resp.node_id = -1;
            resp.port = -1;
            return resp;
          },
          [&](const JoinGroupRequest& r) -> std::optional<ResponseBody> {
            JoinGroupResponse resp;
            resp.error_code = code;
            resp.member_id = r.member_id;
            return resp;
          },
          [&](const HeartbeatRequest&) -> std::optional<ResponseBody> {
            HeartbeatResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const LeaveGroupRequest&) -> std::optional<ResponseBody> {
            LeaveGroupResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const SyncGroupRequest&) -> std::optional<ResponseBody> {
            SyncGroupResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const ListGroupsRequest&) -> std::optional<ResponseBody> {
            ListGroupsResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const DescribeGroupsRequest& r) -> std::optional<ResponseBody> {
            DescribeGroupsResponse resp;
            for (const std::string& g : r.groups) {
              auto& rg = resp.groups.emplace_back();
              rg.error_code = code;
              rg.group_id = g;
            }
            return resp;
          },
          [&](const CreateTopicsRequest& r) -> std::optional<ResponseBody> {
            CreateTopicsResponse resp;
            for (const auto& t : r.topics) resp.topics.push_back({t.name, code, std::nullopt});
            return resp;
          },
          [&](const DeleteTopicsRequest& r) -> std::optional<ResponseBody> {
            DeleteTopicsResponse resp;
            for (const auto& t : r.topic_names) resp.responses.push_back({t, code});
            return resp;
          },
          [&](const DeleteRecordsRequest& r) -> std::optional<ResponseBody> {
            DeleteRecordsResponse resp;
            for (const auto& t : r.topics) {
              auto& rt = resp.topics.emplace_back();
              rt.name = t.name;
              for (const auto& p : t.partitions) {
                rt.partitions.push_back({p.partition_index, -1, code});
              }
            }
            return resp;
          },
          [&](const InitProducerIdRequest&) -> std::optional<ResponseBody> {
            InitProducerIdResponse resp;
            resp.error_code = code;
            return resp;
          },
          [&](const DescribeConfigsRequest& r) -> std::optional<ResponseBody> {
            DescribeConfigsResponse resp;
            for (const auto& res : r.resources) {
              auto& rr = resp.results.emplace_back();
              rr.error_code = code;
              rr.resource_type = res.resource_type;
              rr.resource_name = res.resource_name;
            }
            return resp;
          },
          [&](const AlterConfigsRequest& r) -> std::optional<ResponseBody> {
            AlterConfigsResponse resp;
            for (const auto& res : r.resources) {
              auto& rr = resp.responses.emplace_back();
              rr.error_code = code;
              rr.resource_type = res.resource_type;
              rr.resource_name = res.resource_name;
            }
            return resp;
          },
          [&](const auto&) -> std::optional<ResponseBody> { return std::nullopt; },
      },
      request.body);
}

}  // namespace tally::broker
