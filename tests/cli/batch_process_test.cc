// The Batch API's faults on real processes, small enough for the default run: kill -9 of a
// local server and its restart, kill -9 of one of two redis replicas, a redis-server
// killed and restarted (AOF on), cancel mid-batch on redis. The 2,000-request version is
// in batch_faults_slow_test.cc.
#include <gtest/gtest.h>

#include "batch_process_util.h"
#include "redis_server.h"

namespace ferry {
namespace {

using namespace ferry::testing;
using namespace std::chrono_literals;

constexpr int kTokens = 8;

TEST(BatchProcessTest, LocalQueueSurvivesKillNineAndRestart) {
  const std::string dir = TempDirectory();
  const std::string config =
      WriteBatchConfig(dir, "local", "  backend: local\n  path: " + dir + "/queue\n  max_in_flight: 8\n  poll_ms: 20\n");
  constexpr int n = 120;
  std::string id;
  {
    ServeProcess p({"serve", "--config", config});
    const int port = p.WaitReady();
    ASSERT_NE(port, 0) << p.Stderr();
    id = SubmitBatch(port, n, kTokens);
    ASSERT_FALSE(id.empty());
    const json mid = WaitFinished(port, id, n / 3, 120s);
    ASSERT_LT(Finished(mid), n) << "the batch finished before the kill";
    p.KillHard();
  }
  ServeProcess again({"serve", "--config", config});
  const int port = again.WaitReady();
  ASSERT_NE(port, 0) << again.Stderr();
  const json done = WaitCompleted(port, id, 180s);
  ExpectExactlyOnceAndOnlineEqual(port, done, n, kTokens);
  std::filesystem::remove_all(dir);
}

TEST(BatchProcessTest, RedisReplicaKilledMidBatchTheOtherFinishes) {
  if (!HaveRedisServer()) GTEST_SKIP() << "redis-server is not installed";
  RedisServer redis(/*aof=*/false);
  ASSERT_TRUE(redis.Start());
  const std::string dir = TempDirectory();
  const std::string queue = "  backend: redis\n  url: " + redis.url() +
                            "\n  max_in_flight: 8\n  poll_ms: 20\n  lease_ms: 1500\n";
  ServeProcess a({"serve", "--config", WriteBatchConfig(dir, "a", queue)});
  ServeProcess b({"serve", "--config", WriteBatchConfig(dir, "b", queue)});
  const int port_a = a.WaitReady(), port_b = b.WaitReady();
  ASSERT_NE(port_a, 0) << a.Stderr();
  ASSERT_NE(port_b, 0) << b.Stderr();
  constexpr int n = 150;
  const std::string id = SubmitBatch(port_a, n, kTokens);
  ASSERT_FALSE(id.empty());
  const json mid = WaitFinished(port_b, id, n / 3, 120s);
  ASSERT_LT(Finished(mid), n);
  a.KillHard();  // its leased requests come back to b after lease_ms
  const json done = WaitCompleted(port_b, id, 180s);
  ExpectExactlyOnceAndOnlineEqual(port_b, done, n, kTokens);
  std::filesystem::remove_all(dir);
}

TEST(BatchProcessTest, RedisServerRestartMidBatchIsReconnected) {
  if (!HaveRedisServer()) GTEST_SKIP() << "redis-server is not installed";
  RedisServer redis(/*aof=*/true);
  ASSERT_TRUE(redis.Start());
  const std::string dir = TempDirectory();
  const std::string queue = "  backend: redis\n  url: " + redis.url() +
                            "\n  max_in_flight: 8\n  poll_ms: 20\n  lease_ms: 3000\n  reconnect_max_ms: 500\n";
  ServeProcess p({"serve", "--config", WriteBatchConfig(dir, "r", queue)});
  const int port = p.WaitReady();
  ASSERT_NE(port, 0) << p.Stderr();
  constexpr int n = 120;
  const std::string id = SubmitBatch(port, n, kTokens);
  ASSERT_FALSE(id.empty());
  const json mid = WaitFinished(port, id, n / 3, 120s);
  ASSERT_LT(Finished(mid), n);
  redis.Kill(/*hard=*/true);
  // While Redis is down the API answers 503 and the server stays up.
  EXPECT_EQ(serve::testing::Http(port, "GET", "/v1/batches/" + id).status, 503);
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(redis.Start());
  const json done = WaitCompleted(port, id, 180s);
  ExpectExactlyOnceAndOnlineEqual(port, done, n, kTokens);
  EXPECT_NE(p.Stderr().find("redis: reconnected"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(BatchProcessTest, RedisCancelMidBatchKeepsFinishedResults) {
  if (!HaveRedisServer()) GTEST_SKIP() << "redis-server is not installed";
  RedisServer redis(/*aof=*/false);
  ASSERT_TRUE(redis.Start());
  const std::string dir = TempDirectory();
  ServeProcess p({"serve", "--config",
                  WriteBatchConfig(dir, "c", "  backend: redis\n  url: " + redis.url() +
                                                 "\n  max_in_flight: 4\n  poll_ms: 20\n")});
  const int port = p.WaitReady();
  ASSERT_NE(port, 0) << p.Stderr();
  constexpr int n = 200;
  const std::string id = SubmitBatch(port, n, 16);
  ASSERT_FALSE(id.empty());
  WaitFinished(port, id, 8, 120s);
  auto c = serve::testing::Http(port, "POST", "/v1/batches/" + id + "/cancel");
  ASSERT_EQ(c.status, 200) << c.body;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  json b;
  while (std::chrono::steady_clock::now() < deadline) {
    b = GetBatch(port, id);
    if (b.value("status", "") == "cancelled") break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(b.value("status", ""), "cancelled") << b.dump();
  const int64_t completed = b["request_counts"]["completed"];
  const int64_t cancelled = b["ferry"]["cancelled_requests"];
  EXPECT_GE(completed, 8);
  EXPECT_GE(cancelled, 1);
  EXPECT_EQ(completed + cancelled, n);
  auto out = serve::testing::Http(port, "GET", "/v1/files/" + b["output_file_id"].get<std::string>() + "/content");
  EXPECT_EQ(std::count(out.body.begin(), out.body.end(), '\n'), completed);
  auto err = serve::testing::Http(port, "GET", "/v1/files/" + b["error_file_id"].get<std::string>() + "/content");
  EXPECT_EQ(std::count(err.body.begin(), err.body.end(), '\n'), cancelled);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry
