#include "serve/http_server.h"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <optional>
#include <unordered_set>

#include "core/logging.h"

namespace ferry::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

const std::string& HttpRequest::Header(const std::string& lower_name) const {
  static const std::string kEmpty;
  auto it = headers.find(lower_name);
  return it == headers.end() ? kEmpty : it->second;
}

namespace {

const char* Reason(int status) {
  return http::obsolete_reason(static_cast<http::status>(status)).data();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

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

  std::mutex mu;
  std::condition_variable cv;
  std::unordered_set<std::shared_ptr<Session>> sessions;  // GUARDED_BY(mu)

  void Accept();
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
  Session(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), write_timer_(stream_.get_executor()), read_timer_(stream_.get_executor()),
        server_(server) {}

  void Start() {
    error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->WaitForRequest(); });
  }

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

  // --- ResponseWriter side (called through Writer, any thread) ---
  void PostSend(int status, std::string type, std::string body, ResponseWriter::Headers headers, bool close_after);
  void PostStartStream(int status, std::string type, ResponseWriter::Headers headers);
  void PostChunk(std::string data);
  void PostEnd();
  void PostOnDisconnect(std::function<void()> cb);
  std::atomic<bool> disconnected{false};

 private:
  enum class Phase { kIdle, kReading, kResponding, kClosed };

  void WaitForRequest();
  void ReadRequest();
  void OnRead(error_code ec);
  void Dispatch();
  void WatchDisconnect();
  void Enqueue(std::string bytes);
  void WriteNext();
  void ResponseDone();
  void Close();
  void NotifyDisconnect();
  void SendSimple(int status, const std::string& message, bool close_after);
  std::string Head(int status, const std::string& type, const ResponseWriter::Headers& headers, bool chunked,
                   size_t length);

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  net::steady_timer write_timer_;
  net::steady_timer read_timer_;  // the whole-request deadline (slow clients get a 408)
  bool read_timed_out_ = false;
  HttpServer::Impl& server_;
  std::string remote_;
  Phase phase_ = Phase::kIdle;
  bool in_request_ = false;
  bool closing_ = false;
  bool keep_alive_ = true;
  bool close_after_write_ = false;
  bool watching_ = false;
  bool response_done_ = false;
  std::deque<std::string> writes_;
  bool writing_ = false;
  std::function<void()> on_disconnect_;
  bool disconnect_notified_ = false;
};

namespace {

// The handler's view of one request's response.
class Writer : public ResponseWriter {
 public:
  explicit Writer(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  void Send(int status, std::string type, std::string body, Headers headers) override {
    if (done_.exchange(true)) return;
    session_->PostSend(status, std::move(type), std::move(body), std::move(headers), false);
  }
  void StartStream(int status, std::string type, Headers headers) override {
    if (done_.load() || started_.exchange(true)) return;
    session_->PostStartStream(status, std::move(type), std::move(headers));
  }
  void Write(std::string data) override {
    if (done_.load() || data.empty()) return;
    session_->PostChunk(std::move(data));
  }
  void End() override {
    if (done_.exchange(true)) return;
    session_->PostEnd();
  }
  void OnDisconnect(std::function<void()> cb) override { session_->PostOnDisconnect(std::move(cb)); }
  bool disconnected() const override { return session_->disconnected.load(); }

 private:
  std::shared_ptr<Session> session_;
  std::atomic<bool> done_{false};
  std::atomic<bool> started_{false};
};

}  // namespace

void Session::WaitForRequest() {
  phase_ = Phase::kIdle;
  in_request_ = false;
  if (closing_) return Close();
  if (buffer_.size() > 0) return ReadRequest();
  // Wait for the first byte of the next request, up to the idle timeout.
  stream_.expires_after(std::chrono::milliseconds(server_.options.idle_timeout_ms));
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
    self->buffer_.commit(n);
    if (ec) return self->Close();
    self->ReadRequest();
  });
}

void Session::ReadRequest() {
  phase_ = Phase::kReading;
  in_request_ = true;
  parser_.emplace();
  parser_->body_limit(server_.options.max_body_bytes);
  parser_->header_limit(64 * 1024);
  stream_.expires_never();
  read_timed_out_ = false;
  read_timer_.expires_after(std::chrono::milliseconds(server_.options.header_timeout_ms));
  read_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->phase_ != Phase::kReading) return;
    self->read_timed_out_ = true;
    error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
  http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
    self->read_timer_.cancel();
    self->OnRead(ec);
  });
}

void Session::OnRead(error_code ec) {
  if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset) {
    return Close();
  }
  if (read_timed_out_) {
    SendSimple(408, "the request did not arrive within " + std::to_string(server_.options.header_timeout_ms) + " ms",
               true);
    return;
  }
  if (ec == http::error::body_limit) {
    SendSimple(413, "the request body exceeds the limit of " + std::to_string(server_.options.max_body_bytes) +
                        " bytes", true);
    return;
  }
  if (ec == http::error::header_limit) {
    SendSimple(431, "the request headers are too large", true);
    return;
  }
  if (ec) {
    if (ec == net::error::operation_aborted || ec == net::error::bad_descriptor) return Close();
    SendSimple(400, "malformed HTTP request: " + ec.message(), true);
    return;
  }
  Dispatch();
}

void Session::Dispatch() {
  http::request<http::string_body> msg = parser_->release();
  parser_.reset();
  stream_.expires_never();
  phase_ = Phase::kResponding;
  keep_alive_ = msg.keep_alive() && !closing_;
  response_done_ = false;
  on_disconnect_ = nullptr;
  disconnect_notified_ = false;
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& field : msg) req.headers[Lower(std::string(field.name_string()))] = std::string(field.value());
  req.body = std::move(msg.body());
  req.remote = remote_;
  WatchDisconnect();
  server_.RequestStarted();
  auto writer = std::make_shared<Writer>(shared_from_this());
  try {
    server_.handler(std::move(req), writer);
  } catch (const std::exception& e) {
    FERRY_LOG_ERROR("http handler threw: {}", e.what());
    writer->Send(500, "application/json", server_.error_body(500, "internal error"), {});
  }
}

// While a response is being produced, a pending read notices the client hanging up.
// Bytes that arrive (a pipelined request) stay in the buffer for the next parse.
void Session::WatchDisconnect() {
  if (watching_ || buffer_.size() > 64 * 1024) return;
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
    self->watching_ = false;
    self->buffer_.commit(n);
    if (ec == net::error::operation_aborted && self->phase_ == Phase::kIdle) return self->WaitForRequest();
    if (ec) {
      if (self->phase_ == Phase::kResponding) {
        self->disconnected = true;
        self->NotifyDisconnect();
        self->keep_alive_ = false;
      } else {
        self->Close();
      }
      return;
    }
    if (self->phase_ == Phase::kResponding) return self->WatchDisconnect();
    if (self->phase_ == Phase::kIdle) self->WaitForRequest();
  });
}

void Session::NotifyDisconnect() {
  if (disconnect_notified_ || response_done_) return;
  disconnect_notified_ = true;
  if (on_disconnect_) {
    auto cb = std::move(on_disconnect_);
    cb();
  }
}

void Session::PostOnDisconnect(std::function<void()> cb) {
  net::post(stream_.get_executor(), [self = shared_from_this(), cb = std::move(cb)]() mutable {
    if (self->disconnected.load() && !self->response_done_) {
      self->disconnect_notified_ = true;
      cb();
      return;
    }
    self->on_disconnect_ = std::move(cb);
  });
}

std::string Session::Head(int status, const std::string& type, const ResponseWriter::Headers& headers, bool chunked,
                          size_t length) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
  h += "Server: ferry\r\n";
  if (!type.empty()) h += "Content-Type: " + type + "\r\n";
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  if (chunked) {
    h += "Transfer-Encoding: chunked\r\n";
  } else {
    h += "Content-Length: " + std::to_string(length) + "\r\n";
  }
  h += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  h += "\r\n";
  return h;
}

void Session::PostSend(int status, std::string type, std::string body, ResponseWriter::Headers headers,
                       bool close_after) {
  net::post(stream_.get_executor(), [self = shared_from_this(), status, type = std::move(type),
                                     body = std::move(body), headers = std::move(headers), close_after]() mutable {
    if (self->phase_ != Phase::kResponding) return;
    if (close_after) self->keep_alive_ = false;
    self->Enqueue(self->Head(status, type, headers, false, body.size()) + body);
    self->ResponseDone();
  });
}

void Session::PostStartStream(int status, std::string type, ResponseWriter::Headers headers) {
  net::post(stream_.get_executor(),
            [self = shared_from_this(), status, type = std::move(type), headers = std::move(headers)] {
              if (self->phase_ != Phase::kResponding) return;
              self->Enqueue(self->Head(status, type, headers, true, 0));
            });
}

void Session::PostChunk(std::string data) {
  net::post(stream_.get_executor(), [self = shared_from_this(), data = std::move(data)] {
    if (self->phase_ != Phase::kResponding) return;
    char size[20];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    self->Enqueue(size + data + "\r\n");
  });
}

void Session::PostEnd() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->phase_ != Phase::kResponding) return;
    self->Enqueue("0\r\n\r\n");
    self->ResponseDone();
  });
}

void Session::Enqueue(std::string bytes) {
  if (disconnected.load()) return;
  writes_.push_back(std::move(bytes));
  if (!writing_) WriteNext();
}

void Session::WriteNext() {
  if (writes_.empty()) {
    writing_ = false;
    write_timer_.cancel();
    if (response_done_) {
      // The whole response is out.
      server_.RequestEnded();
      response_done_ = false;
      phase_ = Phase::kIdle;
      if (!keep_alive_ || closing_) return Close();
      if (watching_) {
        stream_.socket().cancel();  // the watch read's handler continues with the next request
      } else {
        WaitForRequest();
      }
    }
    return;
  }
  writing_ = true;
  write_timer_.expires_after(std::chrono::milliseconds(server_.options.write_timeout_ms));
  write_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->Close();  // the client stopped reading
  });
  net::async_write(stream_.socket(), net::buffer(writes_.front()),
                   [self = shared_from_this()](error_code ec, size_t) {
                     if (ec) {
                       self->writes_.clear();
                       self->writing_ = false;
                       self->disconnected = true;
                       self->NotifyDisconnect();
                       if (self->response_done_) self->server_.RequestEnded();
                       self->response_done_ = false;
                       return self->Close();
                     }
                     self->writes_.pop_front();
                     self->WriteNext();
                   });
}

void Session::ResponseDone() {
  response_done_ = true;
  if (!writing_) WriteNext();
}

void Session::SendSimple(int status, const std::string& message, bool close_after) {
  phase_ = Phase::kResponding;
  stream_.expires_never();
  keep_alive_ = !close_after;
  server_.RequestStarted();
  const std::string body = server_.error_body(status, message);
  Enqueue(Head(status, "application/json", {}, false, body.size()) + body);
  ResponseDone();
}

void Session::Close() {
  if (phase_ == Phase::kClosed) return;
  read_timer_.cancel();
  const bool was_responding = phase_ == Phase::kResponding;
  phase_ = Phase::kClosed;
  disconnected = true;
  if (was_responding) NotifyDisconnect();
  if (was_responding && response_done_) server_.RequestEnded();
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  write_timer_.cancel();
  server_.ConnectionClosed();
  server_.Remove(shared_from_this());
}

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
    if (ec) {
      if (!accepting.load() || ec == net::error::operation_aborted) return;
      // Out of file descriptors (or another transient failure): retry shortly instead of
      // spinning on an accept that keeps failing.
      FERRY_LOG_WARN("accept failed: {}; retrying in 50 ms", ec.message());
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](error_code wait_ec) {
        if (!wait_ec && accepting.load()) Accept();
      });
      return;
    }
    if (owner->connections_.load() >= options.max_connections) {
      // Over the limit: answer 503 synchronously (tiny write) and drop the connection.
      const std::string body = error_body(503, "too many connections");
      const std::string msg = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                              "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      error_code wec;
      net::write(socket, net::buffer(msg), wec);
      socket.close(wec);
    } else {
      owner->connections_++;
      // Streamed tokens are small writes: without this, Nagle's algorithm holds each one back
      // until the previous is acknowledged (up to the client's 40 ms delayed ACK).
      error_code nec;
      socket.set_option(tcp::no_delay(true), nec);
      auto s = std::make_shared<Session>(std::move(socket), *this);
      {
        std::lock_guard<std::mutex> lock(mu);
        sessions.insert(s);
      }
      s->Start();
    }
    if (accepting.load()) Accept();
  });
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler, HttpErrorBody error_body)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->error_body = std::move(error_body);
  impl_->owner = this;
}

HttpServer::~HttpServer() { Shutdown(0); }

Status HttpServer::Listen() {
  // Every connection is a descriptor: allow as many as the hard limit permits.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  error_code ec;
  auto address = net::ip::make_address(impl_->options.host == "localhost" ? "127.0.0.1" : impl_->options.host, ec);
  if (ec) return InvalidArgument("bad listen address '" + impl_->options.host + "': " + ec.message());
  tcp::endpoint ep(address, static_cast<unsigned short>(impl_->options.port));
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return Unavailable("cannot listen on " + impl_->options.host + ":" + std::to_string(impl_->options.port) + ": " +
                       ec.message());
  }
  port_ = impl_->acceptor.local_endpoint().port();
  return Status::Ok();
}

void HttpServer::Start() {
  impl_->work.emplace(net::make_work_guard(impl_->ioc));
  impl_->accepting = true;
  impl_->Accept();
  const int n = std::max(1, impl_->options.io_threads);
  for (int i = 0; i < n; ++i) {
    impl_->threads.emplace_back([this, i] {
      const std::string name = "http:" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      impl_->ioc.run();
    });
  }
}

void HttpServer::StopAccepting() {
  if (!impl_->accepting.exchange(false)) return;
  net::post(impl_->ioc, [this] {
    error_code ec;
    impl_->acceptor.close(ec);
    impl_->accept_retry.cancel();
  });
  std::vector<std::shared_ptr<Session>> sessions;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    sessions.assign(impl_->sessions.begin(), impl_->sessions.end());
  }
  for (auto& s : sessions) s->CloseIfIdle();
}

void HttpServer::Shutdown(int64_t timeout_ms) {
  if (impl_->threads.empty()) return;
  StopAccepting();
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return impl_->sessions.empty(); });
    for (auto& s : impl_->sessions) s->ForceClose();
    impl_->cv.wait_for(lock, std::chrono::milliseconds(2000), [this] { return impl_->sessions.empty(); });
  }
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sessions.clear();
}

}  // namespace ferry::serve
