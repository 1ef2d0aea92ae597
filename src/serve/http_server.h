// Asynchronous HTTP/1.1 server on Boost.Beast: keep-alive, chunked streaming (SSE), body
// and header limits, slow-client timeouts, client-disconnect notification, graceful
// shutdown. Knows nothing about models; a Handler turns requests into responses.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "serve/connection_stream.h"

namespace ferry::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port (see HttpServer::port())
  int io_threads = 2;
  size_t max_body_bytes = 1 << 20;
  // The request line and headers together; also the most a chunk-size line (with its
  // extensions) or a trailer block may take. Chunk framing may add at most max_body_bytes
  // more bytes on the wire than the body itself.
  size_t max_header_bytes = 32 * 1024;
  int64_t header_timeout_ms = 10000;  // a request must arrive whole within this once it starts
  int64_t idle_timeout_ms = 60000;    // keep-alive connections idle longer are closed
  int64_t write_timeout_ms = 60000;   // a client that stops reading its response is dropped
  int max_connections = 4096;
  TlsOptions tls;  // HTTPS when a certificate is given
  // Tests only: called at named points inside I/O handlers ("accept", "read", "write"); a
  // throw there must cost only that connection.
  std::function<void(const char* point)> fault_injection;
};

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // path and query, as sent
  std::string path;     // target without the query
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;   // peer address

  // Empty when absent.
  const std::string& Header(const std::string& lower_name) const;
};

// The response side of one request. Thread-safe: any thread may call it; writes are
// serialized on the connection's strand. Either Send once, or StartStream, Write*, End.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  using Headers = std::vector<std::pair<std::string, std::string>>;
  virtual void Send(int status, std::string content_type, std::string body, Headers headers = {}) = 0;
  virtual void StartStream(int status, std::string content_type, Headers headers = {}) = 0;
  virtual void Write(std::string data) = 0;  // one chunk of a streamed body
  virtual void End() = 0;
  // Called once, on an I/O thread, if the client disconnects before the response is done.
  // If the client is already gone the callback runs right away.
  virtual void OnDisconnect(std::function<void()> callback) = 0;
  virtual bool disconnected() const = 0;
};

// Runs on an I/O thread; must not block (hand work to a batcher, reply later).
using HttpHandler = std::function<void(HttpRequest&& request, std::shared_ptr<ResponseWriter> writer)>;
// Builds the error body for errors the server answers itself (413, 400, 408, 503).
using HttpErrorBody = std::function<std::string(int status, const std::string& message)>;

// Descriptors kept free of connections for everything else a server opens after it starts
// listening (model files and versions loaded later, the queue's store, logs, pipes).
inline constexpr int64_t kReservedDescriptors = 64;

// The connections a server may hold at once: `configured`, or fewer when `file_limit`
// descriptors (RLIMIT_NOFILE; < 0: unlimited), of which `open_now` are in use, would run out
// first, keeping kReservedDescriptors in reserve (at least 1). At this limit a new connection
// is still accepted and then takes an idle connection's place or gets a 503; past the
// descriptors, accept itself fails and a client waits unanswered in the backlog.
int MaxConnectionsWithin(int configured, int64_t file_limit, int64_t open_now);

// Thread-safe.
class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler, HttpErrorBody error_body);
  ~HttpServer();

  // Binds and listens (and loads the TLS certificate when there is one); the port is
  // chosen when options.port is 0.
  Status Listen();
  // Reads the TLS certificate and key again (after they were replaced on disk); new
  // connections use them, open ones keep theirs. On failure the old ones stay.
  Status ReloadTls();
  bool tls() const { return tls_; }
  int port() const { return port_; }
  // Starts the I/O threads; returns immediately.
  void Start();
  // Stops accepting new connections; idle keep-alive connections are closed, requests in
  // flight carry on.
  void StopAccepting();
  // Waits up to `timeout_ms` for in-flight responses to finish, then closes every
  // connection and joins the I/O threads.
  void Shutdown(int64_t timeout_ms);

  int active_connections() const { return connections_.load(); }
  int active_requests() const { return requests_.load(); }
  // Exceptions that escaped an I/O handler and were caught around the I/O loop.
  int64_t io_exceptions() const { return io_exceptions_.load(); }
  // Idle or slow connections closed at the connection limit to make room for a new one.
  int64_t evictions() const { return evictions_.load(); }

  // Tests only: runs `fn` on an I/O thread outside any connection, so that a throw from it
  // reaches the catch around the I/O loop.
  void PostForTesting(std::function<void()> fn);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  std::atomic<int64_t> io_exceptions_{0};
  std::atomic<int64_t> evictions_{0};
  int port_ = 0;
  int max_connections_ = 0;  // options.max_connections, lowered by Listen to what the descriptors allow
  bool tls_ = false;
};

}  // namespace ferry::serve
