// Operator control of the embedded broker through signals, for fault drills
// and tests: SIGUSR1 takes every broker of the mock cluster down (open
// connections are closed, new ones refused; the log is kept), SIGUSR2 brings
// them up again. `tally broker` and `tally up` (with its embedded broker)
// honour them; any other process leaves the two signals at their defaults.
//
// Thread model: InstallBrokerControlSignals() once from main's thread before
// other threads start; ServeUntilShutdown() on main's thread.
#pragma once

#include "embedded_broker.h"

namespace tally::app {

// Installs the SIGUSR1/SIGUSR2 handlers (async-signal-safe: they only set a
// flag that ServeUntilShutdown() acts on).
void InstallBrokerControlSignals();

// Blocks until a shutdown is requested (base/shutdown.h). Meanwhile applies
// each SIGUSR1/SIGUSR2 to `broker`, logging one line for each change; with no
// broker (null: tally up --brokers) it logs that the signal is ignored.
void ServeUntilShutdown(EmbeddedBroker* broker);

}  // namespace tally::app
