// A real redis-server for tests: started on a free port in a temporary directory (AOF on
// when asked), stopped (SIGKILL or SIGTERM) and restarted on the same port and data.
// Tests that need it skip themselves when redis-server is not installed.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "batch/resp.h"

namespace ferry::testing {

inline bool HaveRedisServer() { return std::system("command -v redis-server >/dev/null 2>&1") == 0; }

// A port nothing listens on now (bound to 0 and released).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

class RedisServer {
 public:
  explicit RedisServer(bool aof) : aof_(aof), port_(FreePort()) {
    char tmpl[] = "/tmp/ferry_redis_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~RedisServer() {
    Kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Starts it and waits until it answers PING (false after `within`).
  bool Start(std::chrono::milliseconds within = std::chrono::seconds(10)) {
    pid_ = fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      const char* appendonly = aof_ ? "yes" : "no";
      // stdout/stderr to a log file in the directory.
      FILE* log = std::freopen((dir_ + "/redis.log").c_str(), "a", stdout);
      (void)log;
      dup2(STDOUT_FILENO, STDERR_FILENO);
      execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--dir", dir_.c_str(),
             "--appendonly", appendonly, "--appendfsync", "always", "--save", "", "--daemonize", "no",
             static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      batch::RedisConnection c;
      if (c.Connect(batch::RedisAddress{"127.0.0.1", port_, "", "", 0}, 500).ok()) {
        auto r = c.Command({"PING"});
        if (r.ok() && r->str == "PONG") return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // kill -9 (false: graceful SIGTERM), and waits for the process to end.
  void Kill(bool hard = true) {
    if (pid_ <= 0) return;
    kill(pid_, hard ? SIGKILL : SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  const std::string& dir() const { return dir_; }

 private:
  bool aof_;
  int port_;
  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace ferry::testing
