#include "batch/resp.h"

#include <gtest/gtest.h>

#include "redis_server.h"

namespace ferry::batch {
namespace {

TEST(RespTest, ParsesRedisUrls) {
  auto a = ParseRedisUrl("redis://localhost:6380/2");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "localhost");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  auto b = ParseRedisUrl("redis://user:secret@10.0.0.1");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->user, "user");
  EXPECT_EQ(b->password, "secret");
  EXPECT_EQ(b->port, 6379);
  auto c = ParseRedisUrl("redis://:pw@[::1]:7000");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 7000);
  EXPECT_EQ(c->password, "pw");
  EXPECT_FALSE(ParseRedisUrl("http://x").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://x:0").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://x:99999").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://x/abc").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://").ok());
}

TEST(RespTest, SpeaksToARealServer) {
  if (!ferry::testing::HaveRedisServer()) GTEST_SKIP() << "redis-server is not installed";
  ferry::testing::RedisServer redis(/*aof=*/false);
  ASSERT_TRUE(redis.Start());
  RedisConnection c;
  ASSERT_TRUE(c.Connect(RedisAddress{"127.0.0.1", redis.port(), "", "", 0}, 1000).ok());
  const std::string binary("a\0b\r\nc", 6);
  auto set = c.Command({"SET", "k", binary});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->type, RedisReply::Type::kStatus);
  auto get = c.Command({"GET", "k"});
  ASSERT_TRUE(get.ok());
  EXPECT_EQ(get->str, binary);
  EXPECT_TRUE(c.Command({"GET", "missing"})->is_nil());
  EXPECT_EQ(c.Command({"INCR", "n"})->integer, 1);
  auto err = c.Command({"INCR", "k"});
  ASSERT_TRUE(err.ok());
  EXPECT_TRUE(err->is_error());
  auto arr = c.Command({"HMGET", "nohash", "a", "b"});
  ASSERT_TRUE(arr.ok());
  ASSERT_EQ(arr->elements.size(), 2u);
  EXPECT_TRUE(arr->elements[0].is_nil());
  const std::string big(3 << 20, 'x');  // larger than one read
  ASSERT_TRUE(c.Command({"SET", "big", big}).ok());
  EXPECT_EQ(c.Command({"GET", "big"})->str.size(), big.size());
  redis.Kill();
  EXPECT_EQ(c.Command({"PING"}).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(c.connected());
}

}  // namespace
}  // namespace ferry::batch
