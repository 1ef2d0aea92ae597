// Per-request plumbing shared by the routes: who asked, when, where the response goes, and
// the one place a request is finished (response sent, metrics and the JSON log line written).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "serve/api_error.h"
#include "serve/auth.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/rate_limiter.h"

namespace ferry::serve {

// Writes one JSON object per line to stdout (or `out`). Thread-safe. A failed write (the
// pipe's reader is gone) turns the log off instead of ending the process.
class RequestLogger {
 public:
  explicit RequestLogger(bool enabled, FILE* out = stdout) : enabled_(enabled), out_(out) {}
  void Log(const nlohmann::json& line);
  // A line written whether or not request logs are on (QoS decisions); it too stops once a
  // write has failed.
  void LogEvent(const nlohmann::json& line);
  bool enabled() const { return enabled_ && !failed_.load(); }

 private:
  void Write(const nlohmann::json& line);

  const bool enabled_;
  std::atomic<bool> failed_{false};  // a write failed: nothing more is written
  FILE* out_;
  std::mutex mu_;
};

// Thread-safe; shared by the route and the batcher callbacks of one request.
class RequestContext {
 public:
  using Clock = std::chrono::steady_clock;

  RequestContext(std::string id, std::string route, Principal principal, std::shared_ptr<ResponseWriter> writer,
                 ServerMetrics& metrics, RequestLogger& logger, std::function<void()> on_finish);
  ~RequestContext();

  const std::string& id() const { return id_; }
  const std::string& route() const { return route_; }
  const Principal& principal() const { return principal_; }
  Clock::time_point arrival() const { return arrival_; }
  ResponseWriter& writer() { return *writer_; }
  ServerMetrics& metrics() { return metrics_; }
  // Fields added to the request's log line.
  void SetLog(const std::string& key, nlohmann::json value);
  // The request's `user` field goes to the log as "user_sha256" (the first 16 hex digits of
  // its SHA-256): requests of one end user stay linkable, the value itself (often an e-mail
  // address) is not written.
  void SetUserLog(const std::string& user);
  // Headers every response of this request carries (x-ratelimit-*, X-Ferry-Variant, the
  // Warning of ignored unknown fields), added to those added before; set before replying.
  void AddResponseHeaders(const ResponseWriter::Headers& headers);
  void AddResponseHeader(std::string name, std::string value);
  // Replaces the header's value (adds it when absent).
  void SetResponseHeader(const std::string& name, std::string value);
  // X-Request-Id and the added headers: what a route passes when it starts a stream itself.
  ResponseWriter::Headers ResponseHeaders();
  // Tokens the request used (prompt + generated, or encoder input tokens), for rate limits.
  void CountTokens(int64_t tokens) { tokens_ += tokens; }
  // Where the request's tokens are charged when it finishes (the tenant's rate limits).
  void ChargeTokensTo(RateLimiter* limiter) { limiter_ = limiter; }
  int64_t tokens() const { return tokens_.load(); }

  // What the request runs on: `keep` lives as long as this context (the model version its
  // jobs refer to), `in_flight` until the request is finished (what a draining version
  // waits for).
  void Hold(std::shared_ptr<const void> keep, std::shared_ptr<const void> in_flight);

  // Sends a complete response and finishes the request (first call wins).
  void ReplyJson(int status, const nlohmann::json& body);
  void ReplyError(const ApiError& error);
  // A complete response of another content type (a file's contents).
  void ReplyBody(int status, std::string content_type, std::string body);
  // For streamed responses: the stream has ended with `status` (HTTP status already sent).
  void FinishStream(int status);

 private:
  void Finish(int status);

  const std::string id_;
  const std::string route_;
  const Principal principal_;
  const Clock::time_point arrival_ = Clock::now();
  std::shared_ptr<ResponseWriter> writer_;
  ServerMetrics& metrics_;
  RequestLogger& logger_;
  std::function<void()> on_finish_;
  std::mutex mu_;
  nlohmann::json log_ = nlohmann::json::object();  // GUARDED_BY(mu_)
  ResponseWriter::Headers response_headers_;        // GUARDED_BY(mu_)
  std::atomic<bool> finished_{false};
  bool client_gone_ = false;  // the client had gone before the response was handed over
  std::atomic<int64_t> tokens_{0};
  RateLimiter* limiter_ = nullptr;
  std::shared_ptr<const void> keep_;       // GUARDED_BY(mu_)
  std::shared_ptr<const void> in_flight_;  // GUARDED_BY(mu_)
};

}  // namespace ferry::serve
