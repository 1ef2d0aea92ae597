#include "serve/api_error.h"

#include <nlohmann/json.hpp>

namespace ferry::serve {

namespace {

}  // namespace

std::string ErrorTypeFor(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string ErrorCodeFor(int status) {
  switch (status) {
    case 405: return "method_not_allowed";
    case 408: return "request_timeout";
    case 413: return "request_too_large";
    case 417: return "expectation_failed";
    case 431: return "headers_too_large";
    case 499: return "client_closed_request";
    case 503: return "service_unavailable";
    case 504: return "timeout";
    default: return "";
  }
}

namespace {

}  // namespace

std::string ApiError::Body() const {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return Dump(nlohmann::json{{"error", e}});
}

ApiError BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError FromStatus(const Status& status, std::string param) {
  ApiError e;
  e.message = status.message();
  e.param = std::move(param);
  switch (status.code()) {
    case StatusCode::kInvalidArgument: e.http_status = 400; break;
    case StatusCode::kOutOfRange:
      e.http_status = 400;
      e.code = "context_length_exceeded";
      break;
    case StatusCode::kNotFound: e.http_status = 404; break;
    case StatusCode::kResourceExhausted: e.http_status = 429; break;
    case StatusCode::kUnavailable: e.http_status = 503; break;
    case StatusCode::kDeadlineExceeded: e.http_status = 504; break;
    case StatusCode::kCancelled: e.http_status = 499; break;
    default: e.http_status = 500; break;
  }
  e.type = ErrorTypeFor(e.http_status);
  if (e.code.empty()) e.code = ErrorCodeFor(e.http_status);
  return e;
}

std::string ErrorBody(int http_status, const std::string& message) {
  ApiError e;
  e.http_status = http_status;
  e.message = message;
  e.type = ErrorTypeFor(http_status);
  e.code = ErrorCodeFor(http_status);
  return e.Body();
}

}  // namespace ferry::serve
