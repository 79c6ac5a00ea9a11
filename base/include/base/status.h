// Status and Result<T>: how every tally module reports an outcome.
//
// Errors are values, as in RocksDB and librdkafka: a Status carries a code
// and a one-line message with its context ("topic=tally.events partition=3
// offset=1042: missing field user_id"). Exceptions never cross a module
// boundary. Conversions from rocksdb::Status and Kafka error codes live in
// exactly one place each (store/, base/kafka.h).
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tally::base {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is bad (an event, a request, a flag)
  kNotFound,            // the thing asked for does not exist
  kCorruption,          // stored or transmitted bytes do not decode
  kIOError,             // the disk or the OS said no
  kUnavailable,         // a dependency (broker, store) cannot be reached now; retry
  kFailedPrecondition,  // the system is not in a state that allows this
  kOutOfRange,          // an offset or index outside what exists
  kResourceExhausted,   // a limit was hit (body size, queue, budget)
  kAborted,             // stopped on request (shutdown)
  kDeadlineExceeded,    // a wait ran out of time; what it waited for may still happen
  kInternal,            // a bug or an unexpected library answer
};

// Returns the snake_case name of `code` ("invalid_argument"); never null.
const char* StatusCodeName(StatusCode code);

// An outcome: OK, or a code with a message. Cheap to copy when OK.
// Thread model: a value type; not shared.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status IOError(std::string msg) { return {StatusCode::kIOError, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status FailedPrecondition(std::string msg) { return {StatusCode::kFailedPrecondition, std::move(msg)}; }
  static Status OutOfRange(std::string msg) { return {StatusCode::kOutOfRange, std::move(msg)}; }
  static Status ResourceExhausted(std::string msg) { return {StatusCode::kResourceExhausted, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
  static Status DeadlineExceeded(std::string msg) {
    return {StatusCode::kDeadlineExceeded, std::move(msg)};
  }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "OK" or "<code name>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value of type T, or a non-OK Status. Accessing value() of an error is a
// programmer error (asserted).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tally::base

// Returns early from the enclosing function with the Status of `expr` if it
// is not OK.
#define TALLY_RETURN_IF_ERROR(expr)                       \
  do {                                                    \
    ::tally::base::Status _tally_st = (expr);             \
    if (!_tally_st.ok()) return _tally_st;                \
  } while (0)
