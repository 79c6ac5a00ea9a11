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

// Every wait of a clean stop for an unresponsive broker (requests in
// flight, producers flushing, offset commits answered, a watermarks query,
// the Kafka probe) fits in this much time from the stop request. What comes
// after it (Kafka clients left to finish in the background, at most 1 s,
// and closing the state) keeps a whole stop within kStopBoundMs, the bound
// the README promises.
inline constexpr int kStopBoundMs = 10000;
inline constexpr int kStopBudgetMs = 7000;

// Milliseconds left of kStopBudgetMs since the stop was requested, at most
// `cap_ms`; `cap_ms` when no stop was requested (a stage stopped to be
// started again keeps its own bounds).
int StopBudgetLeftMs(int cap_ms);

// Blocks until a stop is requested or `timeout_ms` passes (<0: forever).
// Returns true if a stop was requested.
bool WaitForShutdown(int timeout_ms);

}  // namespace tally::base
