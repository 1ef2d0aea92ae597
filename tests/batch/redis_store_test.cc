// What only the redis backend does: several consumers on one stream, a redis-server that
// restarts (AOF on) under a running client, and a server that is down at first.
#include "batch/redis_store.h"

#include <gtest/gtest.h>

#include "store_test_util.h"

namespace ferry::batch {
namespace {

using namespace ferry::batch::testing;

QueueOptions Redis(const std::string& url) {
  QueueOptions o;
  o.backend = QueueBackend::kRedis;
  o.url = url;
  o.lease_ms = 60000;
  o.reconnect_max_ms = 200;
  return o;
}

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ferry::testing::HaveRedisServer()) GTEST_SKIP() << "redis-server is not installed";
  }
};

TEST_F(RedisStoreTest, TwoStoresShareOneQueueWithoutOverlap) {
  ferry::testing::RedisServer redis(/*aof=*/false);
  ASSERT_TRUE(redis.Start());
  auto a = OpenRedisStore(Redis(redis.url()));
  auto b = OpenRedisStore(Redis(redis.url()));
  ASSERT_TRUE(a.ok() && b.ok());
  BatchInfo batch = MakeBatch("t", 10);
  ASSERT_TRUE((*a)->CreateBatch(batch, MakeEntries(batch.id, 10)).ok());
  auto la = (*a)->Lease("a", 4);
  auto lb = (*b)->Lease("b", 10);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(la->size(), 4u);
  EXPECT_EQ(lb->size(), 6u);
  std::set<std::string> ids;
  for (const Entry& e : *la) ids.insert(e.custom_id);
  for (const Entry& e : *lb) ids.insert(e.custom_id);
  EXPECT_EQ(ids.size(), 10u);
  // The batch finalizes on whichever records the last result.
  for (const Entry& e : *la) ASSERT_TRUE((*a)->Complete(e, Ok(e)).ok());
  for (const Entry& e : *lb) ASSERT_TRUE((*b)->Complete(e, Ok(e)).ok());
  auto done = (*a)->GetBatch("t", batch.id);
  EXPECT_EQ(done->status, kCompleted);
  EXPECT_EQ(done->completed, 10);
}

TEST_F(RedisStoreTest, ARestartedRedisServerIsReconnectedAndKeepsTheQueue) {
  ferry::testing::RedisServer redis(/*aof=*/true);
  ASSERT_TRUE(redis.Start());
  auto s = OpenRedisStore(Redis(redis.url()));
  ASSERT_TRUE(s.ok());
  BatchInfo batch = MakeBatch("t", 4);
  ASSERT_TRUE((*s)->CreateBatch(batch, MakeEntries(batch.id, 4)).ok());
  auto first = (*s)->Lease("w", 2);
  ASSERT_EQ(first->size(), 2u);
  ASSERT_TRUE((*s)->Complete((*first)[0], Ok((*first)[0])).ok());
  redis.Kill(/*hard=*/true);  // kill -9: AOF with appendfsync always has every write
  auto down = (*s)->Lease("w", 2);
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*s)->Complete((*first)[1], Ok((*first)[1])).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(redis.Start());
  // Calls fail until the backoff lets a reconnect through, then work.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  Result<bool> wrote = Unavailable("not yet");
  while (!wrote.ok() && std::chrono::steady_clock::now() < deadline) {
    wrote = (*s)->Complete((*first)[1], Ok((*first)[1]));
    if (!wrote.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  EXPECT_TRUE(*wrote);
  auto rest = (*s)->Lease("w", 10);
  ASSERT_TRUE(rest.ok());
  ASSERT_EQ(rest->size(), 2u);  // the two never leased; c0's result survived the restart
  for (const Entry& e : *rest) ASSERT_TRUE((*s)->Complete(e, Ok(e)).ok());
  auto done = (*s)->GetBatch("t", batch.id);
  EXPECT_EQ(done->status, kCompleted);
  EXPECT_EQ(done->completed, 4);
}

TEST_F(RedisStoreTest, AnUnreachableServerFailsTheOpen) {
  QueueOptions o = Redis("redis://127.0.0.1:" + std::to_string(ferry::testing::FreePort()));
  auto s = OpenRedisStore(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ferry::batch
