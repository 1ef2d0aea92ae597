// Per-tenant token buckets on a fake clock: requests per minute, tokens per minute charged
// after the fact (debt), the headers, and refills.
#include "serve/rate_limiter.h"

#include <gtest/gtest.h>

#include <map>

namespace ferry::serve {
namespace {

using namespace std::chrono_literals;

std::map<std::string, std::string> AsMap(const RateLimiter::Headers& h) { return {h.begin(), h.end()}; }

TEST(RateLimiterTest, RequestsPerMinuteRefillContinuously) {
  RateLimiter rl;
  const RateLimits limits{60, 0};  // one request a second
  const auto t0 = RateLimiter::Clock::now();
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(rl.Admit("acme", limits, t0).admitted) << i;  // a full minute's burst
  RateLimiter::Admission refused = rl.Admit("acme", limits, t0);
  EXPECT_FALSE(refused.admitted);
  EXPECT_EQ(refused.limit, "requests");
  EXPECT_NEAR(refused.retry_after_s, 1.0, 1e-6);
  EXPECT_EQ(AsMap(refused.headers)["x-ratelimit-limit-requests"], "60");
  EXPECT_EQ(AsMap(refused.headers)["x-ratelimit-remaining-requests"], "0");
  EXPECT_FALSE(rl.Admit("acme", limits, t0 + 500ms).admitted);
  EXPECT_TRUE(rl.Admit("acme", limits, t0 + 1000ms).admitted);
  // Other tenants have their own buckets; tenants without limits are never refused.
  EXPECT_TRUE(rl.Admit("beta", limits, t0).admitted);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(rl.Admit("free", RateLimits{}, t0).admitted);
  EXPECT_TRUE(rl.Admit("free", RateLimits{}, t0).headers.empty());
}

TEST(RateLimiterTest, TokensAreChargedWhenKnownAndDebtWaitsOff) {
  RateLimiter rl;
  const RateLimits limits{0, 6000};  // 100 tokens a second
  const auto t0 = RateLimiter::Clock::now();
  ASSERT_TRUE(rl.Admit("acme", limits, t0).admitted);
  rl.Charge("acme", limits, 7000, t0);  // one long request overdraws by 1000 tokens
  RateLimiter::Admission refused = rl.Admit("acme", limits, t0);
  EXPECT_FALSE(refused.admitted);
  EXPECT_EQ(refused.limit, "tokens");
  EXPECT_NEAR(refused.retry_after_s, 10.0, 1e-6);
  EXPECT_EQ(AsMap(refused.headers)["x-ratelimit-remaining-tokens"], "0");
  EXPECT_EQ(AsMap(refused.headers)["x-ratelimit-reset-tokens"], "1m10s");
  EXPECT_FALSE(rl.Admit("acme", limits, t0 + 9s).admitted);
  RateLimiter::Admission again = rl.Admit("acme", limits, t0 + 10s);
  EXPECT_TRUE(again.admitted);
  EXPECT_EQ(AsMap(again.headers)["x-ratelimit-remaining-tokens"], "0");
  const RateLimiter::Admission later = rl.Admit("acme", limits, t0 + 20s);
  EXPECT_EQ(AsMap(later.headers)["x-ratelimit-remaining-tokens"], "1000");
}

TEST(RateLimiterTest, DurationsReadLikeOpenAIs) {
  EXPECT_EQ(RateLimiter::Duration(0), "0s");
  EXPECT_EQ(RateLimiter::Duration(0.02), "20ms");
  EXPECT_EQ(RateLimiter::Duration(1.2), "2s");
  EXPECT_EQ(RateLimiter::Duration(360), "6m0s");
}

}  // namespace
}  // namespace ferry::serve
