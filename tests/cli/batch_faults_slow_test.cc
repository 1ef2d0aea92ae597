// The fault test at full size: two replicas on one redis queue work a batch of
// 2,000 greedy completions; one is killed with SIGKILL halfway; the other finishes it.
// Every custom_id appears once in the output and every text equals the online response.
#include <gtest/gtest.h>

#include "batch_process_util.h"
#include "redis_server.h"

namespace ferry {
namespace {

using namespace ferry::testing;
using namespace std::chrono_literals;

TEST(BatchFaultsSlowTest, TwoReplicasTwoThousandCompletionsOneKilledHalfway) {
  if (!HaveRedisServer()) GTEST_SKIP() << "redis-server is not installed";
  RedisServer redis(/*aof=*/true);
  ASSERT_TRUE(redis.Start());
  const std::string dir = TempDirectory();
  const std::string queue = "  backend: redis\n  url: " + redis.url() +
                            "\n  max_in_flight: 16\n  poll_ms: 20\n  lease_ms: 2000\n";
  ServeProcess a({"serve", "--config", WriteBatchConfig(dir, "a", queue)});
  ServeProcess b({"serve", "--config", WriteBatchConfig(dir, "b", queue)});
  const int port_a = a.WaitReady(), port_b = b.WaitReady();
  ASSERT_NE(port_a, 0) << a.Stderr();
  ASSERT_NE(port_b, 0) << b.Stderr();
  constexpr int n = 2000, tokens = 8;
  const std::string id = SubmitBatch(port_a, n, tokens);
  ASSERT_FALSE(id.empty());
  const json mid = WaitFinished(port_b, id, n / 2, 600s);
  ASSERT_LT(Finished(mid), n);
  a.KillHard();
  const json done = WaitCompleted(port_b, id, 600s);
  ExpectExactlyOnceAndOnlineEqual(port_b, done, n, tokens, /*threads=*/8);
  std::filesystem::remove_all(dir);
}

TEST(BatchFaultsSlowTest, LocalKillNineHalfwayThroughOneThousand) {
  const std::string dir = TempDirectory();
  const std::string config =
      WriteBatchConfig(dir, "local", "  backend: local\n  path: " + dir + "/queue\n  max_in_flight: 16\n  poll_ms: 20\n");
  constexpr int n = 1000, tokens = 8;
  std::string id;
  {
    ServeProcess p({"serve", "--config", config});
    const int port = p.WaitReady();
    ASSERT_NE(port, 0) << p.Stderr();
    id = SubmitBatch(port, n, tokens);
    ASSERT_FALSE(id.empty());
    ASSERT_LT(Finished(WaitFinished(port, id, n / 2, 600s)), n);
    p.KillHard();
  }
  ServeProcess again({"serve", "--config", config});
  const int port = again.WaitReady();
  ASSERT_NE(port, 0) << again.Stderr();
  ExpectExactlyOnceAndOnlineEqual(port, WaitCompleted(port, id, 600s), n, tokens, /*threads=*/8);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry
