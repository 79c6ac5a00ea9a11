// Broker: the public face of BrokerServer (broker/broker.h).
#include "broker/broker.h"

#include "server/server.h"

namespace tally::broker {

base::Result<std::unique_ptr<Broker>> Broker::Start(const BrokerOptions& options) {
  auto server = BrokerServer::Start(options);
  if (!server.ok()) return server.status();
  return std::unique_ptr<Broker>(new Broker(std::move(*server)));
}

Broker::Broker(std::unique_ptr<BrokerServer> server) : server_(std::move(server)) {}

Broker::~Broker() { Stop().ok(); }

std::string Broker::bootstrap() const { return server_->bootstrap(); }
int Broker::port() const { return server_->port(); }
std::string Broker::cluster_id() const { return server_->cluster_id(); }

base::Status Broker::CreateTopic(const std::string& name, int32_t partitions,
                                 const std::map<std::string, std::string>& configs) {
  return server_->CreateTopic(name, partitions, configs);
}

base::Status Broker::Stop() { return server_->Stop(); }
void Broker::SetAvailable(bool available) { server_->SetAvailable(available); }
void Broker::SetRoundTripDelayMs(int delay_ms) { server_->SetRoundTripDelayMs(delay_ms); }
void Broker::PushRequestErrors(int16_t api_key, const std::vector<int16_t>& error_codes) {
  server_->PushRequestErrors(api_key, error_codes);
}
BrokerStats Broker::Stats() { return server_->Stats(); }

}  // namespace tally::broker
