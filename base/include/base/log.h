// Logging: one line per event worth knowing, to stderr.
//
// Format: "2026-11-22T10:01:02.123Z INFO  router: <message>". Messages use
// fmt syntax and carry their context (topic, partition, offset, key).
// Thread model: safe for concurrent use; each line is written with one
// write(2) so lines from different threads never interleave.
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/clock.h"

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

// Keeps a line written once per bad record from flooding the log when the
// records keep coming: the first `burst` lines of each `period_ms` pass, the
// last of them says that the next ones are left out until the period ends,
// and the first line after that says how many were. The records themselves
// are counted in metrics either way.
// Thread model: externally synchronized (one per call site and thread).
class LogLimiter {
 public:
  LogLimiter(int burst, int64_t period_ms) : burst_(burst), period_ms_(period_ms) {}

  // True if a line may be written at `now_ms` (a steady clock); then
  // *suffix is what to end it with ("" for most lines).
  bool Allow(int64_t now_ms, std::string* suffix) {
    if (now_ms - period_start_ms_ >= period_ms_ || now_ms < period_start_ms_) {
      period_start_ms_ = now_ms;
      passed_ = 0;
    }
    if (passed_ >= burst_) {
      dropped_++;
      return false;
    }
    passed_++;
    suffix->clear();
    if (dropped_ > 0) {
      *suffix = fmt::format(" ({} similar line{} left out before this one)", dropped_,
                            dropped_ == 1 ? "" : "s");
    }
    dropped_ = 0;
    if (passed_ == burst_) {
      *suffix += fmt::format(" ({} line{} like this in {} s: the next ones are left out for {} s)",
                             burst_, burst_ == 1 ? "" : "s", period_ms_ / 1000,
                             (period_start_ms_ + period_ms_ - now_ms + 999) / 1000);
    }
    return true;
  }

 private:
  const int burst_;
  const int64_t period_ms_;
  int64_t period_start_ms_ = INT64_MIN / 2;
  int passed_ = 0;
  uint64_t dropped_ = 0;
};

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

// A warning through a LogLimiter (which must outlive the call).
#define TALLY_LOG_WARN_LIMITED(limiter, component, ...)                   \
  do {                                                                    \
    std::string tally_suffix_;                                            \
    if (::tally::base::LogEnabled(::tally::base::LogLevel::kWarn) &&      \
        (limiter).Allow(::tally::base::SteadyMs(), &tally_suffix_)) {     \
      ::tally::base::LogLine(::tally::base::LogLevel::kWarn, component,   \
                             ::fmt::format(__VA_ARGS__) + tally_suffix_); \
    }                                                                     \
  } while (0)
