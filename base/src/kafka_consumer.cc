#include "base/kafka_consumer.h"

#include <utility>

#include "base/log.h"

namespace tally::base {

Result<KafkaHandle> MakeConsumer(const KafkaOptions& kafka, const ConsumerSettings& settings) {
  std::map<std::string, std::string> defaults = {
      {"group.id", settings.group},
      {"enable.auto.commit", "false"},
  };
  if (!settings.client_id.empty()) defaults["client.id"] = settings.client_id;
  if (!settings.store_offsets) defaults["enable.auto.offset.store"] = "false";
  if (settings.partition_eof) defaults["enable.partition.eof"] = "true";
  if (settings.offset_reset_is_error) defaults["auto.offset.reset"] = "error";
  if (settings.short_fetch_wait) defaults["fetch.wait.max.ms"] = kafka.embedded ? "10" : "100";
  for (const auto& [k, v] : settings.extra) defaults[k] = v;
  auto conf = MakeKafkaConf(RD_KAFKA_CONSUMER, kafka, defaults);
  if (!conf.ok()) return conf.status();
  if (settings.rebalance_cb != nullptr) {
    rd_kafka_conf_set_rebalance_cb(conf->get(), settings.rebalance_cb);
  }
  if (settings.opaque != nullptr) rd_kafka_conf_set_opaque(conf->get(), settings.opaque);
  auto rk = MakeKafkaHandle(RD_KAFKA_CONSUMER, std::move(conf).value());
  if (!rk.ok()) return rk.status();
  rd_kafka_poll_set_consumer(rk->get());
  return rk;
}

Status Assign(rd_kafka_t* rk, const rd_kafka_topic_partition_list_t* parts, std::string_view what) {
  return KafkaStatus(rd_kafka_assign(rk, parts), what);
}

void UnassignAtStop(rd_kafka_t* rk, std::string_view component) {
  if (Status st = Assign(rk, nullptr, "unassigning at stop"); !st.ok()) {
    TALLY_LOG_WARN(component, "{}", st.message());
  }
}

}  // namespace tally::base
