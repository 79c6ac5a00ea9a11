#include "testing/embedded_cluster.h"

#include <cstdio>
#include <cstdlib>

#include "base/kafka.h"

namespace tally::testing {

EmbeddedCluster::EmbeddedCluster(int brokers) {
  char err[512] = "";
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof(err));
  // The handle only hosts the cluster: a producer never started sends nothing.
  rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (rk_ == nullptr) {
    std::fprintf(stderr, "EmbeddedCluster: rd_kafka_new: %s\n", err);
    std::abort();
  }
  mock_ = rd_kafka_mock_cluster_new(rk_, brokers);
  if (mock_ == nullptr) {
    std::fprintf(stderr, "EmbeddedCluster: rd_kafka_mock_cluster_new(%d brokers) failed\n",
                 brokers);
    std::abort();
  }
  bootstrap_ = rd_kafka_mock_cluster_bootstraps(mock_);
}

EmbeddedCluster::~EmbeddedCluster() {
  rd_kafka_mock_cluster_destroy(mock_);
  rd_kafka_destroy(rk_);
}

base::Status EmbeddedCluster::CreateTopic(const std::string& topic, int partitions,
                                          int replication) {
  return base::KafkaStatus(
      rd_kafka_mock_topic_create(mock_, topic.c_str(), partitions, replication),
      "create topic " + topic);
}

}  // namespace tally::testing
