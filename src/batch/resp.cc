#include "batch/resp.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace ferry::batch {

namespace {

constexpr size_t kMaxBulk = size_t{512} << 20;  // Redis's own limit on a string
constexpr int kMaxDepth = 16;

bool ParseInt(std::string_view s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Result<RedisAddress> ParseRedisUrl(const std::string& url) {
  RedisAddress a;
  std::string rest = url;
  if (rest.rfind("redis://", 0) != 0) return InvalidArgument("queue.url: expected redis://host:port[/db], got '" + url + "'");
  rest = rest.substr(8);
  const size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = cred.find(':');
    if (colon == std::string::npos) {
      a.password = cred;
    } else {
      a.user = cred.substr(0, colon);
      a.password = cred.substr(colon + 1);
    }
  }
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    int64_t db = 0;
    const std::string d = rest.substr(slash + 1);
    if (!d.empty() && (!ParseInt(d, db) || db < 0 || db > 1000)) return InvalidArgument("queue.url: bad database number");
    a.db = static_cast<int>(db);
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.find(']');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    int64_t port = 0;
    if (!ParseInt(rest.substr(colon + 1), port) || port < 1 || port > 65535) return InvalidArgument("queue.url: bad port");
    a.port = static_cast<int>(port);
    rest = rest.substr(0, colon);
  }
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') rest = rest.substr(1, rest.size() - 2);
  if (rest.empty()) return InvalidArgument("queue.url: no host");
  a.host = rest;
  return a;
}

RedisConnection::~RedisConnection() { Close(); }

void RedisConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buf_.clear();
  pos_ = 0;
}

Status RedisConnection::Connect(const RedisAddress& address, int64_t timeout_ms) {
  Close();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(address.port);
  if (getaddrinfo(address.host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    return Unavailable("redis: cannot resolve " + address.host);
  }
  std::string last = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, static_cast<int>(timeout_ms)) == 1 ? 0 : -1;
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)) {
        rc = -1;
        errno = err;
      }
    }
    if (rc != 0) {
      last = std::strerror(errno);
      ::close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fd_ = fd;
    break;
  }
  freeaddrinfo(res);
  if (fd_ < 0) return Unavailable("redis: cannot connect to " + address.host + ":" + port + ": " + last);
  timeout_ms_ = timeout_ms;
  if (!address.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!address.user.empty()) auth.push_back(address.user);
    auth.push_back(address.password);
    FERRY_ASSIGN_OR_RETURN(RedisReply r, Command(auth));
    if (r.is_error()) {
      Close();
      return Unavailable("redis: AUTH failed: " + r.str);
    }
  }
  if (address.db != 0) {
    FERRY_ASSIGN_OR_RETURN(RedisReply r, Command({"SELECT", std::to_string(address.db)}));
    if (r.is_error()) {
      Close();
      return Unavailable("redis: SELECT failed: " + r.str);
    }
  }
  return Status::Ok();
}

Status RedisConnection::WriteAll(const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(timeout_ms_)) == 1) continue;
      return Unavailable("redis: write timed out");
    }
    if (n < 0 && errno == EINTR) continue;
    return Unavailable(std::string("redis: write failed: ") + std::strerror(errno));
  }
  return Status::Ok();
}

Status RedisConnection::ReadLine(std::string& line) {
  for (;;) {
    const size_t nl = buf_.find("\r\n", pos_);
    if (nl != std::string::npos) {
      line.assign(buf_, pos_, nl - pos_);
      pos_ = nl + 2;
      return Status::Ok();
    }
    if (buf_.size() - pos_ > (64 << 10)) return Unavailable("redis: protocol error (line too long)");
    FERRY_RETURN_IF_ERROR(ReadBytes(0, line));
  }
}

// n == 0: reads whatever arrives into buf_; else ensures buf_ holds n bytes from pos_.
Status RedisConnection::ReadBytes(size_t n, std::string& /*unused*/) {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1 << 20)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  while (n == 0 || buf_.size() - pos_ < n) {
    char tmp[65536];
    const ssize_t got = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (got > 0) {
      buf_.append(tmp, static_cast<size_t>(got));
      if (n == 0) return Status::Ok();
      continue;
    }
    if (got == 0) return Unavailable("redis: connection closed by the server");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(timeout_ms_)) == 1) continue;
      return Unavailable("redis: read timed out");
    }
    return Unavailable(std::string("redis: read failed: ") + std::strerror(errno));
  }
  return Status::Ok();
}

Status RedisConnection::ReadReply(RedisReply& reply, int depth) {
  if (depth > kMaxDepth) return Unavailable("redis: protocol error (nesting)");
  std::string line;
  FERRY_RETURN_IF_ERROR(ReadLine(line));
  if (line.empty()) return Unavailable("redis: protocol error (empty line)");
  const char kind = line[0];
  const std::string_view rest = std::string_view(line).substr(1);
  int64_t n = 0;
  switch (kind) {
    case '+':
      reply.type = RedisReply::Type::kStatus;
      reply.str = rest;
      return Status::Ok();
    case '-':
      reply.type = RedisReply::Type::kError;
      reply.str = rest;
      return Status::Ok();
    case ':':
      if (!ParseInt(rest, n)) return Unavailable("redis: protocol error (integer)");
      reply.type = RedisReply::Type::kInteger;
      reply.integer = n;
      return Status::Ok();
    case '$': {
      if (!ParseInt(rest, n) || n < -1 || (n > 0 && static_cast<size_t>(n) > kMaxBulk)) return Unavailable("redis: protocol error (bulk)");
      if (n == -1) {
        reply.type = RedisReply::Type::kNil;
        return Status::Ok();
      }
      std::string unused;
      FERRY_RETURN_IF_ERROR(ReadBytes(static_cast<size_t>(n) + 2, unused));
      reply.type = RedisReply::Type::kString;
      reply.str.assign(buf_, pos_, static_cast<size_t>(n));
      pos_ += static_cast<size_t>(n) + 2;
      return Status::Ok();
    }
    case '*': {
      if (!ParseInt(rest, n) || n < -1 || n > (int64_t{1} << 24)) return Unavailable("redis: protocol error (array)");
      if (n == -1) {
        reply.type = RedisReply::Type::kNil;
        return Status::Ok();
      }
      reply.type = RedisReply::Type::kArray;
      reply.elements.resize(static_cast<size_t>(n));
      for (RedisReply& e : reply.elements) FERRY_RETURN_IF_ERROR(ReadReply(e, depth + 1));
      return Status::Ok();
    }
    default:
      return Unavailable("redis: protocol error (unknown reply type)");
  }
}

Result<RedisReply> RedisConnection::Command(const std::vector<std::string>& args) {
  if (fd_ < 0) return Unavailable("redis: not connected");
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) {
    out += "$" + std::to_string(a.size()) + "\r\n";
    out += a;
    out += "\r\n";
  }
  Status st = WriteAll(out);
  RedisReply reply;
  if (st.ok()) st = ReadReply(reply, 0);
  if (!st.ok()) {
    Close();
    return st;
  }
  return reply;
}

}  // namespace ferry::batch
