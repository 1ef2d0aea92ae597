// A minimal Redis client: RESP2 over one TCP connection, blocking with timeouts.
// Not thread-safe (callers hold their own lock).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ferry::batch {

struct RedisReply {
  enum class Type { kString, kStatus, kError, kInteger, kNil, kArray };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<RedisReply> elements;

  bool is_nil() const { return type == Type::kNil; }
  bool is_error() const { return type == Type::kError; }
};

struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user;      // ACL user ("" = default)
  std::string password;  // "" = no AUTH
  int db = 0;
};

// redis://[[user]:password@]host[:port][/db]
Result<RedisAddress> ParseRedisUrl(const std::string& url);

class RedisConnection {
 public:
  RedisConnection() = default;
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects (and AUTH, SELECT); Unavailable on failure.
  Status Connect(const RedisAddress& address, int64_t timeout_ms);
  bool connected() const { return fd_ >= 0; }
  void Close();

  // One command; Unavailable (and the connection closed) on any I/O or protocol failure.
  // A Redis error reply is returned as a reply of type kError, not as a failed Status.
  Result<RedisReply> Command(const std::vector<std::string>& args);

 private:
  Status WriteAll(const std::string& data);
  Status ReadLine(std::string& line);
  Status ReadBytes(size_t n, std::string& out);
  Status ReadReply(RedisReply& reply, int depth);

  int fd_ = -1;
  int64_t timeout_ms_ = 5000;
  std::string buf_;
  size_t pos_ = 0;
};

}  // namespace ferry::batch
