// Operator control of the embedded broker through signals, for fault drills
// and tests: SIGUSR1 takes every broker of the mock cluster down (open
// connections are closed, new ones refused; the log is kept), SIGUSR2 brings
// them up again. `tally broker` and `tally up` (with its embedded broker)
// honour them; any other process leaves the two signals at their defaults.
//
// Thread model: InstallBrokerControlSignals() once from main's thread before
// other threads start; ServeUntilShutdown() on main's thread.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace tally::app {

// Installs the SIGUSR1/SIGUSR2 handlers (async-signal-safe: they only set a
// flag that ServeUntilShutdown() acts on).
void InstallBrokerControlSignals();

// What the control signals act on: `set_available(false)` takes the broker
// down, `set_available(true)` brings it back. Null: this process runs no
// embedded broker (tally up --brokers).
struct BrokerControl {
  std::function<base::Status(bool available)> set_available;
  std::string address;  // for the log lines
};

// Blocks until a shutdown is requested (base/shutdown.h) or `done` (checked
// every `interval_ms`; may be null) returns true. Meanwhile applies each
// SIGUSR1/SIGUSR2 through `control` (within `interval_ms`), logging one line
// for each change; with no broker it logs that the signal is ignored.
void ServeUntilShutdown(const BrokerControl& control, const std::function<bool()>& done = nullptr,
                        int interval_ms = 50);

}  // namespace tally::app
