#include "wire/admin_messages.h"

#include <type_traits>

#include "wire/field_io.h"

namespace tally::broker {

TALLY_WIRE_FIELDS(ApiVersionsRequest) {
  if (v >= 3) {
    io.String(m.client_software_name);
    io.String(m.client_software_version);
  }
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(ApiVersionsResponse) {
  io.Error(m.error_code);
  io.Array(m.api_keys, [&](auto& k) {
    io.Int16(k.api_key);
    io.Int16(k.min_version);
    io.Int16(k.max_version);
    io.TaggedFields();
  });
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.TaggedFields();
}

ApiVersionsResponse MakeApiVersionsResponse() {
  ApiVersionsResponse r;
  for (const ApiVersionRange& range : ApiVersionsTable()) {
    r.api_keys.push_back(
        {static_cast<int16_t>(range.api_key), range.min_version, range.max_version});
  }
  return r;
}

ApiVersionsResponse MakeUnsupportedApiVersionsResponse() {
  ApiVersionsResponse r = MakeApiVersionsResponse();
  r.error_code = ErrorCode::kUnsupportedVersion;
  return r;
}

// Metadata's request topics are structs of one field (a name) up to v9;
// this codec keeps them as names.
TALLY_WIRE_FIELDS(MetadataRequest) {
  io.NullableArray(
      m.topics,
      [&](auto& name) {
        io.String(name);
        io.TaggedFields();
      },
      /*nullable=*/v >= 1);
  if constexpr (std::is_same_v<Io, internal::ReadIo>) {
    if (v == 0 && m.topics && m.topics->empty()) m.topics.reset();
  }
  if (v >= 4) io.Bool(m.allow_auto_topic_creation);
  if (v >= 8) {
    io.Bool(m.include_cluster_authorized_operations);
    io.Bool(m.include_topic_authorized_operations);
  }
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(MetadataResponse) {
  if (v >= 3) io.Int32(m.throttle_time_ms);
  io.Array(m.brokers, [&](auto& b) {
    io.Int32(b.node_id);
    io.String(b.host);
    io.Int32(b.port);
    if (v >= 1) io.NullableString(b.rack);
    io.TaggedFields();
  });
  if (v >= 2) io.NullableString(m.cluster_id);
  if (v >= 1) io.Int32(m.controller_id);
  io.Array(m.topics, [&](auto& t) {
    io.Error(t.error_code);
    io.String(t.name);
    if (v >= 1) io.Bool(t.is_internal);
    io.Array(t.partitions, [&](auto& p) {
      io.Error(p.error_code);
      io.Int32(p.partition_index);
      io.Int32(p.leader_id);
      if (v >= 7) io.Int32(p.leader_epoch);
      io.Array(p.replica_nodes, [&](auto& n) { io.Int32(n); });
      io.Array(p.isr_nodes, [&](auto& n) { io.Int32(n); });
      if (v >= 5) io.Array(p.offline_replicas, [&](auto& n) { io.Int32(n); });
      io.TaggedFields();
    });
    if (v >= 8) io.Int32(t.topic_authorized_operations);
    io.TaggedFields();
  });
  if (v >= 8 && v <= 10) io.Int32(m.cluster_authorized_operations);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(CreateTopicsRequest) {
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Int32(t.num_partitions);
    io.Int16(t.replication_factor);
    io.Array(t.assignments, [&](auto& a) {
      io.Int32(a.partition_index);
      io.Array(a.broker_ids, [&](auto& b) { io.Int32(b); });
      io.TaggedFields();
    });
    io.Array(t.configs, [&](auto& c) {
      io.String(c.name);
      io.NullableString(c.value);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.Int32(m.timeout_ms);
  if (v >= 1) io.Bool(m.validate_only);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(CreateTopicsResponse) {
  if (v >= 2) io.Int32(m.throttle_time_ms);
  io.Array(m.topics, [&](auto& t) {
    io.String(t.name);
    io.Error(t.error_code);
    if (v >= 1) io.NullableString(t.error_message);
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(DeleteTopicsRequest) {
  io.Array(m.topic_names, [&](auto& n) { io.String(n); });
  io.Int32(m.timeout_ms);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(DeleteTopicsResponse) {
  if (v >= 1) io.Int32(m.throttle_time_ms);
  io.Array(m.responses, [&](auto& r) {
    io.String(r.name);
    io.Error(r.error_code);
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(InitProducerIdRequest) {
  io.NullableString(m.transactional_id);
  io.Int32(m.transaction_timeout_ms);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(InitProducerIdResponse) {
  io.Int32(m.throttle_time_ms);
  io.Error(m.error_code);
  io.Int64(m.producer_id);
  io.Int16(m.producer_epoch);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(DescribeConfigsRequest) {
  io.Array(m.resources, [&](auto& r) {
    io.Int8(r.resource_type);
    io.String(r.resource_name);
    io.NullableArray(r.configuration_keys, [&](auto& k) { io.String(k); });
    io.TaggedFields();
  });
  if (v >= 1) io.Bool(m.include_synonyms);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(DescribeConfigsResponse) {
  io.Int32(m.throttle_time_ms);
  io.Array(m.results, [&](auto& r) {
    io.Error(r.error_code);
    io.NullableString(r.error_message);
    io.Int8(r.resource_type);
    io.String(r.resource_name);
    io.Array(r.configs, [&](auto& c) {
      io.String(c.name);
      io.NullableString(c.value);
      io.Bool(c.read_only);
      if (v == 0) io.Bool(c.is_default);
      if (v >= 1) io.Int8(c.config_source);
      io.Bool(c.is_sensitive);
      if (v >= 1) {
        io.Array(c.synonyms, [&](auto& s) {
          io.String(s.name);
          io.NullableString(s.value);
          io.Int8(s.source);
          io.TaggedFields();
        });
      }
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(AlterConfigsRequest) {
  io.Array(m.resources, [&](auto& r) {
    io.Int8(r.resource_type);
    io.String(r.resource_name);
    io.Array(r.configs, [&](auto& c) {
      io.String(c.name);
      io.NullableString(c.value);
      io.TaggedFields();
    });
    io.TaggedFields();
  });
  io.Bool(m.validate_only);
  io.TaggedFields();
}

TALLY_WIRE_FIELDS(AlterConfigsResponse) {
  io.Int32(m.throttle_time_ms);
  io.Array(m.responses, [&](auto& r) {
    io.Error(r.error_code);
    io.NullableString(r.error_message);
    io.Int8(r.resource_type);
    io.String(r.resource_name);
    io.TaggedFields();
  });
  io.TaggedFields();
}

}  // namespace tally::broker
