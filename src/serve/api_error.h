// OpenAI-style error objects and the HTTP status of each failure.
#pragma once

#include <string>

#include "core/status.h"

namespace ferry::serve {

// An error a route answers with: HTTP status plus the OpenAI error fields.
struct ApiError {
  int http_status = 400;
  std::string message;
  // OpenAI's types only: invalid_request_error, authentication_error, permission_error,
  // not_found_error, rate_limit_error, server_error.
  std::string type = "invalid_request_error";
  std::string param;                           // the offending field, when there is one
  std::string code;                            // machine-readable: model_not_found, context_length_exceeded, ...
  int retry_after_s = 0;                       // 429/503: the Retry-After header (0: 1 second)

  // {"error": {"message", "type", "param", "code"}} (null param/code when empty).
  std::string Body() const;
};

ApiError BadRequest(std::string message, std::string param = {}, std::string code = {});
// The OpenAI error type of an HTTP status (401 authentication_error, 403 permission_error,
// 404 not_found_error, 429 rate_limit_error, 5xx server_error, other 4xx invalid_request_error),
// and the machine-readable code ferry gives statuses that have no more specific one.
std::string ErrorTypeFor(int status);
std::string ErrorCodeFor(int status);
// A Status from the engine or a batcher as the client should see it: InvalidArgument and
// OutOfRange → 400, NotFound → 404, ResourceExhausted → 429, Unavailable → 503,
// DeadlineExceeded → 504 (request timeout), anything else → 500.
ApiError FromStatus(const Status& status, std::string param = {});
// The error body for a status and message alone (used by the HTTP layer).
std::string ErrorBody(int http_status, const std::string& message);

// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
template <typename Json>
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace ferry::serve
