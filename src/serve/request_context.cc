#include "serve/request_context.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/logging.h"

namespace ferry::serve {

void RequestLogger::Log(const nlohmann::json& line) {
  if (enabled_) Write(line);
}

void RequestLogger::LogEvent(const nlohmann::json& line) { Write(line); }

void RequestLogger::Write(const nlohmann::json& line) {
  if (failed_.load(std::memory_order_relaxed)) return;
  const std::string text = Dump(line) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_.load(std::memory_order_relaxed)) return;
  errno = 0;
  const bool ok = std::fwrite(text.data(), 1, text.size(), out_) == text.size() && std::fflush(out_) == 0;
  if (!ok) {
    // The reader of the log went away (EPIPE) or the disk is full: serving goes on without
    // the request log, and says so once on stderr.
    const int err = errno;
    failed_ = true;
    std::clearerr(out_);
    FERRY_LOG_ERROR("request log disabled: writing it failed ({})", err != 0 ? std::strerror(err) : "short write");
  }
}

RequestContext::RequestContext(std::string id, std::string route, Principal principal,
                               std::shared_ptr<ResponseWriter> writer, ServerMetrics& metrics, RequestLogger& logger,
                               std::function<void()> on_finish)
    : id_(std::move(id)),
      route_(std::move(route)),
      principal_(std::move(principal)),
      writer_(std::move(writer)),
      metrics_(metrics),
      logger_(logger),
      on_finish_(std::move(on_finish)) {}

RequestContext::~RequestContext() {
  // A request dropped without a response (should not happen) still releases its slot.
  if (!finished_.load()) Finish(500);
}

void RequestContext::SetLog(const std::string& key, nlohmann::json value) {
  std::lock_guard<std::mutex> lock(mu_);
  log_[key] = std::move(value);
}

void RequestContext::AddResponseHeaders(const ResponseWriter::Headers& headers) {
  std::lock_guard<std::mutex> lock(mu_);
  response_headers_.insert(response_headers_.end(), headers.begin(), headers.end());
}

void RequestContext::SetResponseHeader(const std::string& name, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [n, v] : response_headers_) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  response_headers_.emplace_back(name, std::move(value));
}

void RequestContext::AddResponseHeader(std::string name, std::string value) {
  std::lock_guard<std::mutex> lock(mu_);
  response_headers_.emplace_back(std::move(name), std::move(value));
}

ResponseWriter::Headers RequestContext::ResponseHeaders() {
  ResponseWriter::Headers headers{{"X-Request-Id", id_}};
  std::lock_guard<std::mutex> lock(mu_);
  headers.insert(headers.end(), response_headers_.begin(), response_headers_.end());
  return headers;
}

void RequestContext::SetUserLog(const std::string& user) {
  if (user.empty()) return;
  const Sha256Digest d = Sha256(user);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (int i = 0; i < 8; ++i) {
    hex += kHex[d[i] >> 4];
    hex += kHex[d[i] & 15];
  }
  SetLog("user_sha256", hex);
}

void RequestContext::ReplyJson(int status, const nlohmann::json& body) {
  if (finished_.load()) return;
  client_gone_ = writer_->disconnected();
  writer_->Send(status, "application/json", Dump(body), ResponseHeaders());
  Finish(status);
}

void RequestContext::ReplyBody(int status, std::string content_type, std::string body) {
  if (finished_.load()) return;
  client_gone_ = writer_->disconnected();
  writer_->Send(status, std::move(content_type), std::move(body), ResponseHeaders());
  Finish(status);
}

void RequestContext::ReplyError(const ApiError& error) {
  if (finished_.load()) return;
  ResponseWriter::Headers headers = ResponseHeaders();
  if (error.http_status == 429 || error.http_status == 503) {
    headers.emplace_back("Retry-After", std::to_string(std::max(1, error.retry_after_s)));
  }
  if (error.http_status == 401) headers.emplace_back("WWW-Authenticate", std::string(kWwwAuthenticate));
  client_gone_ = writer_->disconnected();
  writer_->Send(error.http_status, "application/json", error.Body(), headers);
  SetLog("error", error.message);
  Finish(error.http_status);
}

void RequestContext::FinishStream(int status) {
  if (finished_.load()) return;
  client_gone_ = writer_->disconnected();
  writer_->End();
  Finish(status);
}

void RequestContext::Hold(std::shared_ptr<const void> keep, std::shared_ptr<const void> in_flight) {
  std::lock_guard<std::mutex> lock(mu_);
  keep_ = std::move(keep);
  in_flight_ = std::move(in_flight);
}

void RequestContext::Finish(int status) {
  if (finished_.exchange(true)) return;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - arrival_).count();
  metrics_.RecordHttpRequest(route_, status);
  if (logger_.enabled()) {
    nlohmann::json line;
    {
      std::lock_guard<std::mutex> lock(mu_);
      line = log_;
    }
    char ts[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm;
    gmtime_r(&now, &tm);
    std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
    line["ts"] = ts;
    line["request_id"] = id_;
    line["route"] = route_;
    line["tenant"] = principal_.tenant;
    line["tier"] = principal_.tier;
    line["status"] = status;
    line["latency_ms"] = std::round(ms * 1000.0) / 1000.0;
    line["client_disconnected"] = client_gone_;
    logger_.Log(line);
  }
  if (principal_.tenant != "unknown") {
    metrics_.tenant_requests.WithLabels({principal_.tenant, std::to_string(status)}).Inc();
    if (tokens_.load() > 0) metrics_.tenant_tokens.WithLabels({principal_.tenant}).Inc(static_cast<double>(tokens_.load()));
  }
  if (limiter_ != nullptr) limiter_->Charge(principal_.tenant, principal_.rate_limits, tokens_.load());
  if (on_finish_) on_finish_();
  std::shared_ptr<const void> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done = std::move(in_flight_);
  }
}

}  // namespace ferry::serve
