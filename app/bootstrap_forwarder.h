// BootstrapForwarder: a small TCP relay that gives the embedded broker a
// fixed, well-known address.
//
// librdkafka's mock broker binds 127.0.0.1 on a random port. The forwarder
// listens on the port users expect (9092) and relays every connection, byte
// for byte, to the mock's listener. A Kafka client uses it only to bootstrap:
// the metadata it receives names the mock's real address, which it then
// connects to directly. So the relay is simple rather than fast: one thread,
// poll(2), non-blocking sockets, a 64 KiB buffer per direction, and a
// connection pair closed as a whole when either side ends (after relaying
// what that side sent) or fails.
//
// Thread model: Listen/Start/Stop/destruction from one thread; the relay
// runs on its own thread; address() and connections() are safe anywhere.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"

namespace tally::app {

class BootstrapForwarder {
 public:
  // Binds `host:port` (an IPv4 address or "localhost"; port 1..65535) and
  // listens, without accepting yet, so that a taken port is reported before
  // anything else starts. IOError naming the address when the bind or listen
  // fails (EADDRINUSE: "already in use"); InvalidArgument for a bad host or
  // port. The caller owns the result.
  static base::Result<std::unique_ptr<BootstrapForwarder>> Listen(const std::string& host,
                                                                  int port);

  // Stop()s.
  ~BootstrapForwarder();
  BootstrapForwarder(const BootstrapForwarder&) = delete;
  BootstrapForwarder& operator=(const BootstrapForwarder&) = delete;

  // Starts relaying accepted connections to `upstream` ("IPv4:port").
  // InvalidArgument for a malformed upstream, FailedPrecondition if already
  // started or stopped, Internal if the thread cannot be set up. Once
  // started, a connection to the upstream that fails closes the client's
  // connection; the forwarder keeps running.
  base::Status Start(const std::string& upstream);

  // Stops accepting, closes every relayed connection and the listener, and
  // joins the relay thread. Idempotent.
  void Stop();

  // "host:port" it listens on.
  const std::string& address() const { return address_; }
  // Client connections currently relayed (for tests and metrics).
  int connections() const { return connections_.load(std::memory_order_relaxed); }

 private:
  BootstrapForwarder(int listen_fd, int wake_fd, std::string address);
  void Run(uint32_t upstream_ip, uint16_t upstream_port);

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: written by Stop() to end Run()
  std::string address_;
  std::thread thread_;
  bool started_ = false;
  bool stopped_ = false;
  std::atomic<int> connections_{0};
};

}  // namespace tally::app
