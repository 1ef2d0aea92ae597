// Per-tenant rate limits: requests per minute and tokens per minute, as token buckets that
// refill continuously (a full minute's worth at most), answered the way OpenAI's API does:
// a 429 with Retry-After and the x-ratelimit-* headers on every response.
//
// Requests are counted when they are admitted; tokens (prompt + generated, or encoder input
// tokens) when a request finishes, since only then are they known. A tenant whose token
// bucket is in debt is refused until it refills, so a burst of long requests overdraws the
// limit once, then waits it off.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ferry::serve {

struct RateLimits {
  int64_t requests_per_minute = 0;  // 0: unlimited
  int64_t tokens_per_minute = 0;    // 0: unlimited
  bool any() const { return requests_per_minute > 0 || tokens_per_minute > 0; }
};

// Thread-safe.
class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  using Headers = std::vector<std::pair<std::string, std::string>>;

  struct Admission {
    bool admitted = true;
    std::string limit;        // when refused: "requests" or "tokens"
    double retry_after_s = 0;  // when refused: until the bucket allows one more request
    Headers headers;          // x-ratelimit-* for the response, refused or not
  };

  // Admits one request of `tenant` at `now` (taking one request from its bucket) or says
  // which limit refuses it and for how long. Tenants without limits are always admitted.
  Admission Admit(const std::string& tenant, const RateLimits& limits, Clock::time_point now = Clock::now());
  // Charges `tokens` a finished request used.
  void Charge(const std::string& tenant, const RateLimits& limits, int64_t tokens, Clock::time_point now = Clock::now());

  // "1s", "6m0s", "20ms": the reset durations in OpenAI's header format.
  static std::string Duration(double seconds);

 private:
  struct Bucket {
    double level = 0;  // may go negative (tokens only): debt from finished requests
    Clock::time_point updated{};
    bool started = false;
    void Refill(double per_minute, Clock::time_point now);
  };
  struct Tenant {
    Bucket requests;
    Bucket tokens;
  };

  std::mutex mu_;
  std::map<std::string, Tenant> tenants_;  // GUARDED_BY(mu_)
};

}  // namespace ferry::serve
