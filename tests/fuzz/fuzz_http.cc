// Raw bytes to the listener over a loopback connection: the HTTP parser, its limits and
// framing rules, then auth and routing, exactly as a remote client reaches them. After the
// bytes the client half-closes; the server must answer or close within its deadlines, and it
// must still be up (serving a health probe) afterwards.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_server.h"

namespace {

// Each input is one connection, and the client half-closes first, so most connections leave
// a TIME_WAIT entry on the client's side for a minute. At several hundred inputs a second one
// source address runs out of ephemeral ports (about 28,000) within the minute, and connect()
// fails with EADDRNOTAVAIL. Every 127.0.0.0/8 address is loopback, so the client binds each
// connection to the next address of 127.1.0.0/16 and each address keeps its own ports.
int Connect(int port) {
  static uint32_t next_source = 0;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | (1 + next_source++ % 65534));
  FUZZ_CHECK(bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::fprintf(stderr, "connect to the server: %s\n", std::strerror(errno));
    FUZZ_CHECK(false);  // the server is up
  }
  return fd;
}

// Reads until the server closes; false if it has not within `ms`.
bool DrainUntilClosed(int fd, int ms, std::string* out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char buf[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
    if (out->size() < 65536) out->append(buf, static_cast<size_t>(n));
  }
}

// The status codes of the responses in `reply`, read as a sequence of HTTP/1.x messages:
// each status line, then its body skipped by Content-Length or chunked framing. Scanning
// stops at bytes that do not start a message (a body that runs to the close, or a
// HEAD response's absent body), so text inside a body, such as a header value an error
// message quotes back, is never taken for a status line.
std::vector<int> StatusCodes(const std::string& reply) {
  std::vector<int> codes;
  size_t pos = 0;
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  while (pos + 12 <= reply.size() && reply.compare(pos, 7, "HTTP/1.") == 0 && reply[pos + 8] == ' ') {
    const std::string digits = reply.substr(pos + 9, 3);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) break;
    const int code = std::stoi(digits);
    codes.push_back(code);
    const size_t end = reply.find("\r\n\r\n", pos);
    if (end == std::string::npos) break;
    const std::string head = lower(reply.substr(pos, end - pos));
    pos = end + 4;
    if (code < 200 || code == 204 || code == 304) continue;  // no body
    const size_t cl = head.find("\r\ncontent-length:");
    if (cl != std::string::npos) {
      pos += std::strtoull(head.c_str() + cl + 17, nullptr, 10);
      continue;
    }
    if (head.find("\r\ntransfer-encoding: chunked") == std::string::npos) break;
    for (;;) {  // chunks, then the empty trailer
      const size_t line_end = reply.find("\r\n", pos);
      if (line_end == std::string::npos) return codes;
      const unsigned long long n = std::strtoull(reply.c_str() + pos, nullptr, 16);
      pos = line_end + 2;
      if (n == 0) {
        const size_t trailer_end = reply.find("\r\n", pos);
        if (trailer_end == std::string::npos) return codes;
        pos = trailer_end + 2;
        break;
      }
      pos += n + 2;
    }
  }
  return codes;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  signal(SIGPIPE, SIG_IGN);  // as ferry serve does; the client side writes to closed sockets
  (void)ferry::fuzz::FuzzServer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int port = ferry::fuzz::FuzzServer().port();
  const int fd = Connect(port);
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered and closed early: fine
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string reply;
  // Every request is bounded by the header timeout (2 s here) and, once routed, by its
  // own work; a pipelined batch of requests gets one generation each at most.
  FUZZ_CHECK(DrainUntilClosed(fd, 60000, &reply));
  close(fd);
  if (!reply.empty()) FUZZ_CHECK(reply.rfind("HTTP/1.", 0) == 0);
  // A 500 is never the answer to bytes from a client.
  for (const int code : StatusCodes(reply)) FUZZ_CHECK(code != 500);
  return 0;
}
