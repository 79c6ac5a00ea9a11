// BrokerServer's handlers of consumer groups, through the GroupCoordinator:
// JoinGroup, SyncGroup, OffsetCommit, OffsetFetch, DescribeGroups,
// ListGroups (Heartbeat and LeaveGroup are answered in Dispatch). On the
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

std::optional<std::string> NonEmpty(const std::string& s) {
  if (s.empty()) return std::nullopt;
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------
// Groups.

void BrokerServer::HandleJoinGroup(Conn* c, const RequestHeader& h, const JoinGroupRequest& r) {
  GroupJoinRequest g;
  g.group_id = r.group_id;
  g.member_id = r.member_id;
  g.group_instance_id = r.group_instance_id.value_or("");
  g.client_id = h.client_id.value_or("");
  g.client_host = c->host;
  g.protocol_type = r.protocol_type;
  for (const auto& p : r.protocols) g.protocols.push_back({p.name, p.metadata});
  g.session_timeout_ms = r.session_timeout_ms;
  g.rebalance_timeout_ms = h.api_version == 0 ? r.session_timeout_ms : r.rebalance_timeout_ms;
  g.require_known_member_id = h.api_version >= 4;
  const uint64_t slot = NewSlot(c);
  coord_->JoinGroup(g, [this, conn_id = c->id, slot, corr = h.correlation_id,
                        version = h.api_version](JoinGroupResult res) {
    JoinGroupResponse resp;
    resp.error_code = static_cast<ErrorCode>(res.error);
    resp.generation_id = res.generation_id;
    resp.protocol_name = res.protocol_name;
    resp.leader = res.leader_id;
    resp.member_id = res.member_id;
    for (auto& m : res.members) {
      resp.members.push_back({m.member_id, NonEmpty(m.group_instance_id), std::move(m.metadata)});
    }
    Fill(conn_id, slot, corr, resp, version);
  });
}

void BrokerServer::HandleSyncGroup(Conn* c, const RequestHeader& h, const SyncGroupRequest& r) {
  GroupSyncRequest g;
  g.group_id = r.group_id;
  g.generation_id = r.generation_id;
  g.member_id = r.member_id;
  g.group_instance_id = r.group_instance_id.value_or("");
  for (const auto& a : r.assignments) g.assignments.push_back({a.member_id, a.assignment});
  const uint64_t slot = NewSlot(c);
  coord_->SyncGroup(g, [this, conn_id = c->id, slot, corr = h.correlation_id,
                        version = h.api_version](SyncGroupResult res) {
    SyncGroupResponse resp;
    resp.error_code = static_cast<ErrorCode>(res.error);
    resp.assignment = std::move(res.assignment);
    Fill(conn_id, slot, corr, resp, version);
  });
}

void BrokerServer::HandleOffsetCommit(Conn* c, const RequestHeader& h,
                                      const OffsetCommitRequest& r) {
  GroupOffsetCommitRequest g;
  g.group_id = r.group_id;
  g.generation_id = r.generation_id;
  g.member_id = r.member_id;
  g.group_instance_id = r.group_instance_id.value_or("");
  OffsetCommitResponse skeleton;
  for (const auto& t : r.topics) {
    auto& st = skeleton.topics.emplace_back();
    st.name = t.name;
    for (const auto& p : t.partitions) {
      g.partitions.push_back({t.name, p.partition_index, p.committed_offset,
                              p.committed_leader_epoch, p.committed_metadata.value_or("")});
      st.partitions.push_back({p.partition_index, ErrorCode::kNone});
    }
  }
  const uint64_t slot = NewSlot(c);
  coord_->OffsetCommit(
      g, [this, conn_id = c->id, slot, corr = h.correlation_id, version = h.api_version,
          resp = std::move(skeleton)](OffsetCommitResult res) mutable {
        size_t i = 0;
        for (auto& t : resp.topics) {
          for (auto& p : t.partitions) {
            if (i < res.partitions.size())
              p.error_code = static_cast<ErrorCode>(res.partitions[i].error);
            i++;
          }
        }
        Fill(conn_id, slot, corr, resp, version);
      });
}

ResponseBody BrokerServer::HandleOffsetFetch(const OffsetFetchRequest& r) {
  GroupOffsetFetchRequest g;
  g.group_id = r.group_id;
  g.all_partitions = !r.topics.has_value();
  if (r.topics.has_value()) {
    for (const auto& t : *r.topics) {
      for (int32_t p : t.partition_indexes) g.partitions.push_back({t.name, p});
    }
  }
  OffsetFetchResult res = coord_->OffsetFetch(g);
  OffsetFetchResponse resp;
  resp.error_code = static_cast<ErrorCode>(res.error);
  for (auto& p : res.partitions) {
    if (resp.topics.empty() || resp.topics.back().name != p.topic) {
      resp.topics.emplace_back().name = p.topic;
    }
    auto& rp = resp.topics.back().partitions.emplace_back();
    rp.partition_index = p.partition;
    rp.committed_offset = p.offset;
    rp.committed_leader_epoch = p.leader_epoch;
    rp.metadata = std::move(p.metadata);
    rp.error_code = static_cast<ErrorCode>(p.error != 0 ? p.error : res.error);
  }
  return resp;
}

ResponseBody BrokerServer::HandleDescribeGroups(const DescribeGroupsRequest& r) {
  DescribeGroupsResponse resp;
  for (const std::string& id : r.groups) {
    GroupDescription d = coord_->DescribeGroup(id);
    auto& g = resp.groups.emplace_back();
    g.error_code = static_cast<ErrorCode>(d.error);
    g.group_id = id;
    g.group_state = d.state;
    g.protocol_type = d.protocol_type;
    g.protocol_data = d.protocol_name;
    for (auto& m : d.members) {
      g.members.push_back({m.member_id, NonEmpty(m.group_instance_id), m.client_id, m.client_host,
                           std::move(m.metadata), std::move(m.assignment)});
    }
  }
  return resp;
}

ResponseBody BrokerServer::HandleListGroups() {
  ListGroupsResponse resp;
  for (const GroupListing& l : coord_->ListGroups()) {
    resp.groups.push_back({l.group_id, l.protocol_type});
  }
  return resp;
}

}  // namespace tally::broker
