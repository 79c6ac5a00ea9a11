#include "wire/group_messages.h"

#include "wire/field_io.h"

namespace tally::broker {

TALLY_WIRE_FIELDS(FindCoordinatorRequest) {
  io.String(m.key);
  if (v >= 1) io.Int8(m.key_type);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(FindCoordinatorResponse) {
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.Error(m.error_code);
  if (v >= 1) io.NullableString(m.error_message);
  io.Int32(m.node_id);
  io.String(m.host);
  io.Int32(m.port);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(JoinGroupRequest) {
  io.String(m.group_id);
  io.Int32(m.session_timeout_ms);
  if (v >= 1) io.Int32(m.rebalance_timeout_ms);
  io.String(m.member_id);
  if (v >= 5) io.NullableString(m.group_instance_id);
  io.String(m.protocol_type);
  io.Array(m.protocols, [&](auto& p) {
    io.String(p.name);
    io.Bytes(p.metadata);
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(JoinGroupResponse) {
  if (v >= 2) io.Int32(m.throttle_time_ms);
  io.Error(m.error_code);
  io.Int32(m.generation_id);
  io.String(m.protocol_name);
  io.String(m.leader);
  io.String(m.member_id);
  io.Array(m.members, [&](auto& mem) {
    io.String(mem.member_id);
    if (v >= 5) io.NullableString(mem.group_instance_id);
    io.Bytes(mem.metadata);
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(HeartbeatRequest) {
  io.String(m.group_id);
  io.Int32(m.generation_id);
  io.String(m.member_id);
  if (v >= 3) io.NullableString(m.group_instance_id);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(HeartbeatResponse) {
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.Error(m.error_code);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(LeaveGroupRequest) {
  io.String(m.group_id);
  io.String(m.member_id);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(LeaveGroupResponse) {
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.Error(m.error_code);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(SyncGroupRequest) {
  io.String(m.group_id);
  io.Int32(m.generation_id);
  io.String(m.member_id);
  if (v >= 3) io.NullableString(m.group_instance_id);
  io.Array(m.assignments, [&](auto& a) {
    io.String(a.member_id);
    io.Bytes(a.assignment);
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(SyncGroupResponse) {
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.Error(m.error_code);
  io.Bytes(m.assignment);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(DescribeGroupsRequest) {
  io.Array(m.groups, [&](auto& g) { io.String(g); });
  if (v >= 3) io.Bool(m.include_authorized_operations);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(DescribeGroupsResponse) {
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.Array(m.groups, [&](auto& g) {
    io.Error(g.error_code);
    io.String(g.group_id);
    io.String(g.group_state);
    io.String(g.protocol_type);
    io.String(g.protocol_data);
    io.Array(g.members, [&](auto& mem) {
      io.String(mem.member_id);
      if (v >= 4) io.NullableString(mem.group_instance_id);
      io.String(mem.client_id);
      io.String(mem.client_host);
      io.Bytes(mem.member_metadata);
      io.Bytes(mem.member_assignment);
      io.TaggedFields();
    });
    if (v >= 3) io.Int32(g.authorized_operations);
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(ListGroupsRequest) { io.TaggedFields(); }

TALLY_WIRE_FIELDS(ListGroupsResponse) {
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.Error(m.error_code);
  io.Array(m.groups, [&](auto& g) {
    io.String(g.group_id);
    io.String(g.protocol_type);
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(OffsetCommitRequest) {
  io.String(m.group_id);
  if (v >= 1) {
    io.Int32(m.generation_id);
    io.String(m.member_id);
  }
  if (v >= 7) io.NullableString(m.group_instance_id);
  if (v >= 2 && v <= 4) io.Int64(m.retention_time_ms);
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition_index);
      io.Int64(p.committed_offset);
      if (v >= 6) io.Int32(p.committed_leader_epoch);
      if (v == 1) io.Int64(p.commit_timestamp);
      io.NullableString(p.committed_metadata);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(OffsetCommitResponse) {
  if (v >= 3) io.Int32(m.throttle_time_ms);
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition_index);
      io.Error(p.error_code);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(OffsetFetchRequest) {
  io.String(m.group_id);
  io.NullableArray(
      m.topics,
      [&](auto& t) {
        io.String(t.name);
        io.Array(t.partition_indexes, [&](auto& p) { io.Int32(p); });
        io.TaggedFields();
      },
      /*nullable=*/v >= 2);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(OffsetFetchResponse) {
  if (v >= 3) io.Int32(m.throttle_time_ms);
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition_index);
      io.Int64(p.committed_offset);
      if (v >= 5) io.Int32(p.committed_leader_epoch);
      io.NullableString(p.metadata);
      io.Error(p.error_code);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  if (v >= 2) io.Error(m.error_code);
  io.TaggedFields();
}

}  // namespace tally::broker
