#include "serve/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ferry::serve {

void RateLimiter::Bucket::Refill(double per_minute, Clock::time_point now) {
  if (!started) {
    started = true;
    level = per_minute;  // a new tenant starts with a full minute
    updated = now;
    return;
  }
  const double seconds = std::chrono::duration<double>(now - updated).count();
  if (seconds > 0) level = std::min(per_minute, level + seconds * per_minute / 60.0);
  updated = std::max(updated, now);
}

std::string RateLimiter::Duration(double seconds) {
  if (seconds <= 0) return "0s";
  if (seconds < 1) return std::to_string(static_cast<int64_t>(std::ceil(seconds * 1000))) + "ms";
  const int64_t whole = static_cast<int64_t>(std::ceil(seconds));
  if (whole < 60) return std::to_string(whole) + "s";
  return std::to_string(whole / 60) + "m" + std::to_string(whole % 60) + "s";
}

RateLimiter::Admission RateLimiter::Admit(const std::string& tenant, const RateLimits& limits,
                                          Clock::time_point now) {
  Admission a;
  if (!limits.any()) return a;
  std::lock_guard<std::mutex> lock(mu_);
  Tenant& t = tenants_[tenant];
  double request_wait = 0, token_wait = 0;
  if (limits.requests_per_minute > 0) {
    const double rpm = static_cast<double>(limits.requests_per_minute);
    t.requests.Refill(rpm, now);
    if (t.requests.level < 1) request_wait = (1 - t.requests.level) * 60.0 / rpm;
  }
  if (limits.tokens_per_minute > 0) {
    const double tpm = static_cast<double>(limits.tokens_per_minute);
    t.tokens.Refill(tpm, now);
    if (t.tokens.level < 0) token_wait = -t.tokens.level * 60.0 / tpm;
  }
  if (request_wait > 0 || token_wait > 0) {
    a.admitted = false;
    a.limit = request_wait >= token_wait ? "requests" : "tokens";
    a.retry_after_s = std::max(request_wait, token_wait);
  } else if (limits.requests_per_minute > 0) {
    t.requests.level -= 1;
  }
  if (limits.requests_per_minute > 0) {
    const double rpm = static_cast<double>(limits.requests_per_minute);
    a.headers.emplace_back("x-ratelimit-limit-requests", std::to_string(limits.requests_per_minute));
    a.headers.emplace_back("x-ratelimit-remaining-requests",
                           std::to_string(std::max<int64_t>(0, static_cast<int64_t>(std::floor(t.requests.level)))));
    a.headers.emplace_back("x-ratelimit-reset-requests", Duration((rpm - t.requests.level) * 60.0 / rpm));
  }
  if (limits.tokens_per_minute > 0) {
    const double tpm = static_cast<double>(limits.tokens_per_minute);
    a.headers.emplace_back("x-ratelimit-limit-tokens", std::to_string(limits.tokens_per_minute));
    a.headers.emplace_back("x-ratelimit-remaining-tokens",
                           std::to_string(std::max<int64_t>(0, static_cast<int64_t>(std::floor(t.tokens.level)))));
    a.headers.emplace_back("x-ratelimit-reset-tokens", Duration((tpm - t.tokens.level) * 60.0 / tpm));
  }
  return a;
}

void RateLimiter::Charge(const std::string& tenant, const RateLimits& limits, int64_t tokens, Clock::time_point now) {
  if (limits.tokens_per_minute <= 0 || tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = tenants_[tenant].tokens;
  b.Refill(static_cast<double>(limits.tokens_per_minute), now);
  b.level -= static_cast<double>(tokens);
}

}  // namespace ferry::serve
