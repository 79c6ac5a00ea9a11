// Logging: one line per event worth knowing, to stderr.
//
// Format: "2026-11-22T10:01:02.123Z INFO  router: <message>". Messages use
// fmt syntax and carry their context (topic, partition, offset, key).
// Thread model: safe for concurrent use; each line is written with one
// write(2) so lines from different threads never interleave.
#pragma once

#include <fmt/core.h>

#include <string_view>

namespace tally::base {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Sets the minimum level written; default kInfo. Thread-safe.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// Parses "debug", "info", "warn", "error", "off". Returns false if unknown.
bool ParseLogLevel(std::string_view text, LogLevel* out);

// Writes one line. Prefer the TALLY_LOG_* macros, which skip formatting when
// the level is disabled.
void LogLine(LogLevel level, std::string_view component, std::string_view message);

inline bool LogEnabled(LogLevel level) { return level >= GetLogLevel(); }

}  // namespace tally::base

#define TALLY_LOG_AT(level, component, ...)                                            \
  do {                                                                                 \
    if (::tally::base::LogEnabled(level))                                              \
      ::tally::base::LogLine(level, component, ::fmt::format(__VA_ARGS__));            \
  } while (0)
#define TALLY_LOG_DEBUG(component, ...) TALLY_LOG_AT(::tally::base::LogLevel::kDebug, component, __VA_ARGS__)
#define TALLY_LOG_INFO(component, ...) TALLY_LOG_AT(::tally::base::LogLevel::kInfo, component, __VA_ARGS__)
#define TALLY_LOG_WARN(component, ...) TALLY_LOG_AT(::tally::base::LogLevel::kWarn, component, __VA_ARGS__)
#define TALLY_LOG_ERROR(component, ...) TALLY_LOG_AT(::tally::base::LogLevel::kError, component, __VA_ARGS__)
