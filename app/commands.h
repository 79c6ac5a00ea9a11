// The subcommands of the `tally` binary (SPEC section 5).
//
// main() dispatches `tally <command> [flags]` to one of these with the
// arguments after the command name. Each parses its own flags (--help prints
// its usage), runs in the calling thread and returns the process exit code:
// 0 success (including a clean stop on SIGINT/SIGTERM), 1 failure at run
// time, 2 bad usage. main() has installed base::InstallShutdownHandlers().
#pragma once

namespace tally::app {

int RunUp(int argc, char** argv);         // broker (unless --brokers) + aggregator + HTTP
int RunBroker(int argc, char** argv);     // the embedded broker only
int RunProduce(int argc, char** argv);    // JSON lines or --gen N to the input topic
int RunAggregate(int argc, char** argv);  // the aggregator (router + applier) only
int RunServe(int argc, char** argv);      // the HTTP tier only
int RunReplay(int argc, char** argv);     // rebuild state from tally.deltas or the input

}  // namespace tally::app
