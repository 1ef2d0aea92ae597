// Status and Result<T>: the error currency of ferry. Recoverable failures (bad input,
// missing files, full queues, failed kernel launches) travel as values, never as
// exceptions across module or thread boundaries.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ferry {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kOutOfRange,
  kFailedPrecondition,
  kResourceExhausted,
  kUnimplemented,
  kDataLoss,
  kUnavailable,
  kCancelled,
  kDeadlineExceeded,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

// Thread-compatible value type. An ok Status carries no message.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message"
  std::string ToString() const;

  // Prefixes context to the message, keeping the code: "loading x: <original>".
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status OutOfRange(std::string message);
Status FailedPrecondition(std::string message);
Status ResourceExhausted(std::string message);
Status Unimplemented(std::string message);
Status DataLoss(std::string message);
Status Unavailable(std::string message);
Status Cancelled(std::string message);
Status DeadlineExceeded(std::string message);
Status Internal(std::string message);

// Holds either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(data_).ok() && "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(data_); }

  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace ferry

#define FERRY_CONCAT_INNER_(a, b) a##b
#define FERRY_CONCAT_(a, b) FERRY_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if it is not ok.
#define FERRY_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::ferry::Status ferry_status_ = (expr);    \
    if (!ferry_status_.ok()) return ferry_status_; \
  } while (0)

// `FERRY_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a Result or returns its error.
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL_(FERRY_CONCAT_(ferry_result_, __LINE__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
