// Process-wide shutdown signal: SIGINT and SIGTERM request a clean stop.
//
// Long-running commands poll ShutdownRequested() in their loops or block in
// WaitForShutdown(). A second signal while stopping exits at once (code 130).
// Thread model: safe for concurrent use; the handler is async-signal-safe.
#pragma once

namespace tally::base {

// Installs the SIGINT/SIGTERM handlers. Call once from main.
void InstallShutdownHandlers();

// True once a stop was requested (by a signal or RequestShutdown()).
bool ShutdownRequested();

// Requests a stop from inside the process (e.g. a fatal error in a thread).
void RequestShutdown();

// Blocks until a stop is requested or `timeout_ms` passes (<0: forever).
// Returns true if a stop was requested.
bool WaitForShutdown(int timeout_ms);

}  // namespace tally::base
