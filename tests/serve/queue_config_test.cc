// The `queue:` keys: defaults, every key, the backends, ranges, environment overrides.
#include "serve/queue_config.h"

#include <gtest/gtest.h>

#include "serve/config.h"

namespace ferry::serve {
namespace {

const char* kModels = "auth: {mode: none}\nmodels:\n  - {name: m, path: /nonexistent}\n";

TEST(QueueConfigTest, OffByDefault) {
  auto c = ParseServerConfig(kModels);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->queue.enabled());
}

TEST(QueueConfigTest, ReadsEveryKey) {
  auto c = ParseServerConfig(std::string(kModels) +
                             "queue:\n  backend: redis\n  url: redis://h:1/2\n  key_prefix: x\n  consumer: me\n"
                             "  lease_ms: 5000\n  max_in_flight: 9\n  max_in_flight_under_load: 3\n  poll_ms: 7\n"
                             "  max_file_bytes: 1000\n  max_requests_per_batch: 10\n  reconnect_max_ms: 100\n"
                             "  tier: bulk\n  min_file_expiry_s: 5\n  output_file_expiry_s: 0\n"
                             "  completion_window_s: 30\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const batch::QueueOptions& q = c->queue;
  EXPECT_EQ(q.backend, batch::QueueBackend::kRedis);
  EXPECT_EQ(q.url, "redis://h:1/2");
  EXPECT_EQ(q.key_prefix, "x");
  EXPECT_EQ(q.consumer, "me");
  EXPECT_EQ(q.lease_ms, 5000);
  EXPECT_EQ(q.max_in_flight, 9);
  EXPECT_EQ(q.max_in_flight_under_load, 3);
  EXPECT_EQ(q.poll_ms, 7);
  EXPECT_EQ(q.max_file_bytes, 1000);
  EXPECT_EQ(q.max_requests_per_batch, 10);
  EXPECT_EQ(q.reconnect_max_ms, 100);
  EXPECT_EQ(q.tier, "bulk");
  EXPECT_EQ(q.min_file_expiry_s, 5);
  EXPECT_EQ(q.output_file_expiry_s, 0);  // never
  EXPECT_EQ(q.completion_window_s, 30);
}

TEST(QueueConfigTest, RetentionAndWindowDefaultsAreOpenAis) {
  auto c = ParseServerConfig(std::string(kModels) + "queue: {backend: local, path: /tmp/q}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->queue.min_file_expiry_s, 3600);
  EXPECT_EQ(c->queue.output_file_expiry_s, 30 * 86400);
  EXPECT_EQ(c->queue.completion_window_s, 86400);
}

TEST(QueueConfigTest, RejectsBadValuesNamingTheKey) {
  const auto error = [](const std::string& queue) {
    auto c = ParseServerConfig(std::string(kModels) + "queue:\n" + queue);
    return c.ok() ? std::string() : c.status().message();
  };
  EXPECT_NE(error("  backend: kafka\n").find("queue.backend"), std::string::npos);
  EXPECT_NE(error("  backend: local\n").find("queue.path"), std::string::npos);
  EXPECT_NE(error("  backend: redis\n").find("queue.url"), std::string::npos);
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  lease_ms: 5\n").find("queue.lease_ms"), std::string::npos);
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  max_in_flight: 0\n").find("queue.max_in_flight"), std::string::npos);
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  max_in_flight: 2\n  max_in_flight_under_load: 3\n")
                .find("queue.max_in_flight_under_load"),
            std::string::npos);
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  bogus: 1\n").find("queue.bogus"), std::string::npos);
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  min_file_expiry_s: 0\n").find("queue.min_file_expiry_s"),
            std::string::npos);
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  output_file_expiry_s: 60\n").find("queue.output_file_expiry_s"),
            std::string::npos);  // under the minimum (3600)
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  output_file_expiry_s: 2592001\n")
                .find("queue.output_file_expiry_s"),
            std::string::npos);
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  completion_window_s: 0\n").find("queue.completion_window_s"),
            std::string::npos);
  EXPECT_NE(error("  backend: local\n  path: /tmp/q\n  completion_window_s: 90000\n").find("queue.completion_window_s"),
            std::string::npos);
  // max_in_flight below the default width under load lowers that width with it.
  auto small = ParseServerConfig(std::string(kModels) + "queue: {backend: local, path: /tmp/q, max_in_flight: 1}\n");
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(small->queue.max_in_flight_under_load, 1);
}

TEST(QueueConfigTest, TheEnvironmentOverridesTheFile) {
  const std::map<std::string, std::string> env = {{"FERRY_QUEUE_BACKEND", "redis"},
                                                  {"FERRY_QUEUE_URL", "redis://127.0.0.1:7000"}};
  ServerConfigOverrides o;
  o.environment = &env;
  auto c = ParseServerConfig(std::string(kModels) + "queue: {backend: local, path: /tmp/q}\n", o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->queue.backend, batch::QueueBackend::kRedis);
  EXPECT_EQ(c->queue.url, "redis://127.0.0.1:7000");
}

}  // namespace
}  // namespace ferry::serve
