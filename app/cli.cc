#include "cli.h"

#include <fmt/core.h>

#include <cstdio>

#include "base/log.h"

namespace tally::app {

int ParseFlagsOrExit(base::FlagSet& flags, const std::string& command, int argc, char** argv) {
  bool help = false;
  base::Status st = flags.Parse(argc, argv, &help);
  if (!st.ok()) return Fail(command, st, kExitUsage);
  if (help) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty()) {
    return Fail(command,
                base::Status::InvalidArgument(fmt::format(
                    "unexpected argument '{}' (see {} --help)", flags.positional()[0], command)),
                kExitUsage);
  }
  return -1;
}

base::Status ApplyLogLevel(const std::string& level) {
  base::LogLevel parsed;
  if (!base::ParseLogLevel(level, &parsed)) {
    return base::Status::InvalidArgument(
        fmt::format("--log-level must be debug, info, warn, error or off, got '{}'", level));
  }
  base::SetLogLevel(parsed);
  return base::Status::Ok();
}

base::Status ParseKafkaOverrides(const std::vector<std::string>& values, base::KafkaOptions* out) {
  for (const auto& v : values) {
    std::pair<std::string, std::string> kv;
    TALLY_RETURN_IF_ERROR(base::ParseKafkaOverride(v, &kv));
    out->overrides.push_back(std::move(kv));
  }
  return base::Status::Ok();
}

int Fail(const std::string& command, const base::Status& status, int exit_code) {
  std::fprintf(stderr, "%s: %s\n", command.c_str(), status.message().c_str());
  return exit_code;
}

}  // namespace tally::app
