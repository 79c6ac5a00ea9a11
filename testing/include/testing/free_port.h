// FreePort: a loopback TCP port for a test's server or child process, picked
// by the kernel. Part of tally_testing.
//
// Thread model: safe for concurrent use.
#pragma once

namespace tally::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and
// released). Another process may take it before the caller binds it, so a
// caller that must not flake retries with a new port or binds port 0 itself.
// Returns -1 if no socket could be bound.
int FreePort();

}  // namespace tally::testing
