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

#include <chrono>
#include <cstdint>

#include "fuzz_server.h"

namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);  // the server is up
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
  FUZZ_CHECK(reply.find("HTTP/1.1 500") == std::string::npos);
  return 0;
}
