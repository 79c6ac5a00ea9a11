#include "wire/produce_fetch_messages.h"

#include "wire/field_io.h"

namespace tally::broker {

TALLY_WIRE_FIELDS(ProduceRequest) {
  if (v >= 3) io.NullableString(m.transactional_id);
  io.Int16(m.acks);
  io.Int32(m.timeout_ms);
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.index);
      io.NullableBytes(p.records);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(ProduceResponse) {
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.index);
      io.Error(p.error_code);
      io.Int64(p.base_offset);
      if (v >= 2) io.Int64(p.log_append_time_ms);
      if (v >= 5) io.Int64(p.log_start_offset);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(FetchRequest) {
  io.Int32(m.replica_id);
  io.Int32(m.max_wait_ms);
  io.Int32(m.min_bytes);
  if (v >= 3) io.Int32(m.max_bytes);
  if (v >= 4) io.Int8(m.isolation_level);
  if (v >= 7) {
    io.Int32(m.session_id);
    io.Int32(m.session_epoch);
  }
  io.Array(m.topics, [&](auto& t) {
    io.String(t.topic);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition);
      if (v >= 9) io.Int32(p.current_leader_epoch);
      io.Int64(p.fetch_offset);
      if (v >= 5) io.Int64(p.log_start_offset);
      io.Int32(p.partition_max_bytes);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  if (v >= 7) {
    io.Array(m.forgotten_topics_data, [&](auto& t) {
      io.String(t.topic);
      io.Array(t.partitions, [&](auto& p) { io.Int32(p); });
      io.TaggedFields();
    });
  }
  if (v >= 11) io.String(m.rack_id);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(FetchResponse) {
  if (v >= 1) io.Int32(m.throttle_time_ms);
  if (v >= 7) {
    io.Error(m.error_code);
    io.Int32(m.session_id);
  }
  io.Array(m.responses, [&](auto& t) {
    io.String(t.topic);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition_index);
      io.Error(p.error_code);
      io.Int64(p.high_watermark);
      if (v >= 4) io.Int64(p.last_stable_offset);
      if (v >= 5) io.Int64(p.log_start_offset);
      if (v >= 4) {
        io.NullableArray(p.aborted_transactions, [&](auto& a) {
          io.Int64(a.producer_id);
          io.Int64(a.first_offset);
          io.TaggedFields();
        });
      }
      if (v >= 11) io.Int32(p.preferred_read_replica);
      io.NullableBytes(p.records);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(ListOffsetsRequest) {
  io.Int32(m.replica_id);
  if (v >= 2) io.Int8(m.isolation_level);
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition_index);
      if (v >= 4) io.Int32(p.current_leader_epoch);
      io.Int64(p.timestamp);
      if (v == 0) io.Int32(p.max_num_offsets);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(ListOffsetsResponse) {
  if (v >= 2) io.Int32(m.throttle_time_ms);
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition_index);
      io.Error(p.error_code);
      if (v == 0) io.Array(p.old_style_offsets, [&](auto& o) { io.Int64(o); });
      if (v >= 1) {
        io.Int64(p.timestamp);
        io.Int64(p.offset);
      }
      if (v >= 4) io.Int32(p.leader_epoch);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(DeleteRecordsRequest) {
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition_index);
      io.Int64(p.offset);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.Int32(m.timeout_ms);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(DeleteRecordsResponse) {
  io.Int32(m.throttle_time_ms);
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Array(t.partitions, [&](auto& p) {
      io.Int32(p.partition_index);
      io.Int64(p.low_watermark);
      io.Error(p.error_code);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.TaggedFields();
}

}  // namespace tally::broker
