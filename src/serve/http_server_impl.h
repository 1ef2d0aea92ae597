// Internal to the HTTP server: the state the acceptor and the connections share, and one
// connection's state machine. Not for use outside serve/http_*.cc.
#pragma once

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "serve/connection_stream.h"
#include "serve/http_server.h"

namespace ferry::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;


class Session;

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  HttpErrorBody error_body;
  HttpServer* owner = nullptr;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};
  std::vector<std::thread> threads;
  std::atomic<bool> accepting{false};
  std::mutex tls_mu;
  std::shared_ptr<boost::asio::ssl::context> tls;  // GUARDED_BY(tls_mu); null: plain HTTP

  std::mutex mu;
  std::condition_variable cv;
  std::unordered_set<std::shared_ptr<Session>> sessions;  // GUARDED_BY(mu)

  void Accept();
  void OnAccept(error_code ec, tcp::socket socket);
  bool EvictOne();
  void CountException() { owner->io_exceptions_++; }
  void RequestStarted() { owner->requests_++; }
  void RequestEnded() { owner->requests_--; }
  void ConnectionClosed() { owner->connections_--; }
  void Remove(const std::shared_ptr<Session>& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      sessions.erase(s);
    }
    cv.notify_all();
  }
};

// One connection. Everything runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<boost::asio::ssl::context> tls, HttpServer::Impl& server)
      : stream_(tls ? ConnectionStream(std::move(socket), std::move(tls)) : ConnectionStream(std::move(socket))),
        write_timer_(stream_.get_executor()),
        read_timer_(stream_.get_executor()),
        server_(server) {}

  void Start();

  // Closes the connection if it is waiting for a request (graceful shutdown).
  void CloseIfIdle() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      if (!self->in_request_) self->Close();
    });
  }
  void ForceClose() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }

  // For eviction at the connection limit, read from the accepting thread: since when the
  // connection has waited for a request (0: it is not idle), or has been receiving one
  // (0: it is not); `evicted` marks one already chosen.
  std::atomic<int64_t> idle_since_ns_{0};
  std::atomic<int64_t> reading_since_ns_{0};
  std::atomic<bool> evicted_{false};

  // --- ResponseWriter side (called through Writer, any thread) ---
  void PostSend(int status, std::string type, std::string body, ResponseWriter::Headers headers, bool close_after);
  void PostStartStream(int status, std::string type, ResponseWriter::Headers headers);
  void PostChunk(std::string data);
  void PostEnd();
  void PostOnDisconnect(std::function<void()> cb);
  std::atomic<bool> disconnected{false};

 private:
  enum class Phase { kIdle, kReading, kResponding, kLingering, kClosed };

  // Runs `body` (an I/O completion) so that a throw costs only this connection.
  template <class F>
  void Guarded(const char* point, F&& body);
  // TLS: the handshake, within header_timeout_ms; then (or at once) WaitForRequest.
  void Handshake();
  void WaitForRequest();
  void ReadRequest();
  void ReadMore();
  void OnRead(error_code ec, size_t n);
  void Parse();
  bool CheckHead();
  void RejectParse(error_code ec);
  void Dispatch();
  void WatchDisconnect();
  void Enqueue(std::string bytes);
  void WriteNext();
  void ResponseDone();
  void Close();
  void CountRequest() {
    if (!request_counted_) server_.RequestStarted();
    request_counted_ = true;
  }
  void UncountRequest() {
    if (request_counted_) server_.RequestEnded();
    request_counted_ = false;
  }
  void LingerThenClose();
  void Drain();
  void NotifyDisconnect();
  void SendSimple(int status, const std::string& message, bool close_after);
  std::string Head(int status, const std::string& type, const ResponseWriter::Headers& headers, bool chunked,
                   size_t length);

  ConnectionStream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  net::steady_timer write_timer_;
  net::steady_timer read_timer_;  // the whole-request deadline (slow clients get a 408)
  bool read_timed_out_ = false;
  std::chrono::steady_clock::time_point request_deadline_;
  size_t request_wire_bytes_ = 0;  // bytes of this request the parser has taken
  bool head_checked_ = false;
  bool head_request_ = false;      // HEAD: responses carry headers only
  std::map<std::string, std::string> request_headers_;  // captured at the end of the header
  HttpServer::Impl& server_;
  std::string remote_;
  Phase phase_ = Phase::kIdle;
  bool in_request_ = false;
  bool closing_ = false;
  bool keep_alive_ = true;
  bool close_after_write_ = false;
  bool watching_ = false;
  bool response_done_ = false;
  bool request_counted_ = false;  // this connection's request is in HttpServer::active_requests()
  bool client_closes_ = false;    // the request asked for "Connection: close" (or is HTTP/1.0)
  std::deque<std::string> writes_;
  bool writing_ = false;
  std::function<void()> on_disconnect_;
  bool disconnect_notified_ = false;
  size_t linger_bytes_ = 0;
  static constexpr int64_t kLingerMs = 1000;
  static constexpr size_t kLingerMaxBytes = 8 << 20;
};

}  // namespace ferry::serve
