// Command-line plumbing shared by the tally subcommands: flag parsing with
// tally's exit-code conventions, --log-level and --kafka handling.
// Thread model: start-up only, from main's thread.
#pragma once

#include <string>
#include <vector>

#include "base/flags.h"
#include "base/kafka.h"
#include "base/status.h"

namespace tally::app {

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Parses argv with `flags`. Returns -1 when the command should go on; else
// the exit code to return at once: kExitOk after printing the usage for
// --help (stdout), kExitUsage after printing the error for a bad flag or an
// unexpected positional argument (stderr, "<command>: <reason>").
int ParseFlagsOrExit(base::FlagSet& flags, const std::string& command, int argc, char** argv);

// Sets the process log level from a --log-level value. InvalidArgument
// naming the accepted values for anything else.
base::Status ApplyLogLevel(const std::string& level);

// Parses repeated --kafka KEY=VALUE values into `out->overrides`.
base::Status ParseKafkaOverrides(const std::vector<std::string>& values, base::KafkaOptions* out);

// Prints "<command>: <status message>" to stderr and returns `exit_code`.
int Fail(const std::string& command, const base::Status& status, int exit_code = kExitFailure);

}  // namespace tally::app
