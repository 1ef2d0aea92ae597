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

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
  Session(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), write_timer_(stream_.get_executor()), read_timer_(stream_.get_executor()),
        server_(server) {}

  void Start() {
    error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this()] { self->Guarded("read", [&] { self->WaitForRequest(); }); });
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

  beast::tcp_stream stream_;
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

template <class F>
void Session::Guarded(const char* point, F&& body) {
  try {
    if (server_.options.fault_injection) server_.options.fault_injection(point);
    body();
  } catch (const std::exception& e) {
    server_.CountException();
    FERRY_LOG_ERROR("connection {}: the {} handler threw ({}); closing the connection", remote_, point, e.what());
    Close();
  } catch (...) {
    server_.CountException();
    FERRY_LOG_ERROR("connection {}: the {} handler threw; closing the connection", remote_, point);
    Close();
  }
}

void Session::WaitForRequest() {
  phase_ = Phase::kIdle;
  in_request_ = false;
  idle_since_ns_ = NowNs();
  reading_since_ns_ = 0;
  if (closing_) return Close();
  if (buffer_.size() > 0) return ReadRequest();
  // Wait for the first byte of the next request, up to the idle timeout.
  stream_.expires_after(std::chrono::milliseconds(server_.options.idle_timeout_ms));
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
    self->Guarded("read", [&] {
      self->buffer_.commit(n);
      if (ec) return self->Close();
      self->ReadRequest();
    });
  });
}

// Requests are parsed here, from bytes this session reads itself, rather than by Beast's
// composed read: every part of a request is then bounded (header, each chunk-size line
// with its extensions, the trailer block, the body, the framing overhead in total, and the
// time to receive it all), and a parser exception stays inside this connection.
void Session::ReadRequest() {
  phase_ = Phase::kReading;
  in_request_ = true;
  idle_since_ns_ = 0;
  reading_since_ns_ = NowNs();
  parser_.emplace();
  parser_->eager(false);  // stop after the header, so that it is checked before the body
  parser_->body_limit(server_.options.max_body_bytes);
  parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header_bytes));
  head_checked_ = false;
  head_request_ = false;
  request_headers_.clear();
  request_wire_bytes_ = 0;
  stream_.expires_never();
  read_timed_out_ = false;
  request_deadline_ =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(server_.options.header_timeout_ms);
  read_timer_.expires_at(request_deadline_);
  read_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->phase_ != Phase::kReading) return;
    self->read_timed_out_ = true;
    error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
  Parse();
}

void Session::ReadMore() {
  stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](error_code ec, size_t n) {
    self->Guarded("read", [&] { self->OnRead(ec, n); });
  });
}

void Session::OnRead(error_code ec, size_t n) {
  buffer_.commit(n);
  if (phase_ != Phase::kReading) return;
  // A sender that never pauses keeps completing reads, so the deadline is checked on every
  // read, not only by the timer (which cancels a read that is waiting).
  if (read_timed_out_ || std::chrono::steady_clock::now() >= request_deadline_) {
    SendSimple(408, "the request did not arrive within " + std::to_string(server_.options.header_timeout_ms) + " ms",
               true);
    return;
  }
  if (ec) return Close();  // the client went away (EOF, reset) before the request was whole
  Parse();
}

void Session::Parse() {
  const HttpServerOptions& o = server_.options;
  try {
    while (!parser_->is_done() && buffer_.size() > 0) {
      // At most one line limit's worth at a time: a chunk-size line or trailer block that
      // does not end within it is refused below, before Beast ever sees a longer one.
      const auto data = buffer_.data();
      const size_t feed = std::min(data.size(), o.max_header_bytes);
      error_code ec;
      const size_t used = parser_->put(net::const_buffer(data.data(), feed), ec);
      buffer_.consume(used);
      request_wire_bytes_ += used;
      if (ec && ec != http::error::need_more) return RejectParse(ec);
      if (!head_checked_ && parser_->is_header_done()) {
        head_checked_ = true;
        if (!CheckHead()) return;
        parser_->eager(true);
        continue;
      }
      // Stop when the parser needs bytes that have not arrived; a slice that ended inside a
      // line gets the next slice (unless nothing was taken: the line is over the limit).
      if (used == 0 || (ec && feed == data.size())) break;
    }
  } catch (const std::exception& e) {
    // Beast reports some limits by throwing (a field longer than 65,533 bytes); the limits
    // below keep those from being reached, and this keeps any other from leaving here.
    SendSimple(400, std::string("malformed HTTP request: ") + e.what(), true);
    return;
  }
  if (parser_->is_done()) {
    read_timer_.cancel();
    return Dispatch();
  }
  // Bytes the parser could not take yet are one incomplete line or block: a header, a
  // chunk-size line with its extensions, or the trailer block.
  if (head_checked_ && buffer_.size() >= o.max_header_bytes) {
    SendSimple(431, "a chunk header or the trailer block exceeds " + std::to_string(o.max_header_bytes) + " bytes",
               true);
    return;
  }
  const size_t max_wire = o.max_header_bytes + 2 * o.max_body_bytes + 64 * 1024;
  if (request_wire_bytes_ > max_wire) {
    SendSimple(413, "the request's chunk framing exceeds the limit of " + std::to_string(max_wire) + " bytes", true);
    return;
  }
  ReadMore();
}

void Session::RejectParse(error_code ec) {
  if (ec == http::error::body_limit) {
    SendSimple(413, "the request body exceeds the limit of " + std::to_string(server_.options.max_body_bytes) +
                        " bytes", true);
  } else if (ec == http::error::header_limit) {
    SendSimple(431, "the request headers exceed " + std::to_string(server_.options.max_header_bytes) + " bytes",
               true);
  } else {
    SendSimple(400, "malformed HTTP request: " + ec.message(), true);
  }
}

// The header is whole. Framing that two parsers could read differently is refused, since
// a proxy in front might read it the other way (request smuggling).
bool Session::CheckHead() {
  const auto& msg = parser_->get();
  head_request_ = msg.method() == http::verb::head;
  int transfer_encodings = 0;
  int content_lengths = 0;
  for (const auto& field : msg) {
    std::string name = Lower(std::string(field.name_string()));
    std::string value(field.value());
    if (name == "transfer-encoding") {
      ++transfer_encodings;
      if (Lower(value) != "chunked") {
        SendSimple(400, "unsupported Transfer-Encoding '" + value + "': only 'chunked' is accepted", true);
        return false;
      }
    } else if (name == "content-length") {
      ++content_lengths;
    }
    auto [it, inserted] = request_headers_.emplace(name, value);
    if (inserted) continue;
    // Headers that decide who is calling or how the body is read must be unambiguous;
    // other repeated headers are joined as RFC 9110 section 5.3 allows.
    if (name == "authorization" || name == "host" || name == "content-type" || name == "content-length" ||
        name == "transfer-encoding" || name == "x-api-key" || name == "expect") {
      SendSimple(400, "duplicate " + std::string(field.name_string()) + " header", true);
      return false;
    }
    it->second += ", " + value;
  }
  if (transfer_encodings > 0 && content_lengths > 0) {
    SendSimple(400, "both Content-Length and Transfer-Encoding were sent", true);
    return false;
  }
  if (transfer_encodings > 0 && msg.version() < 11) {
    SendSimple(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request", true);
    return false;
  }
  auto expect = request_headers_.find("expect");
  if (expect != request_headers_.end()) {
    if (Lower(expect->second) != "100-continue") {
      SendSimple(417, "unsupported Expect value '" + expect->second + "'", true);
      return false;
    }
    // The client waits for this before it sends the body.
    if (msg.version() >= 11 && !parser_->is_done()) Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  return true;
}

void Session::Dispatch() {
  reading_since_ns_ = 0;
  http::request<http::string_body> msg = parser_->release();
  parser_.reset();
  stream_.expires_never();
  phase_ = Phase::kResponding;
  keep_alive_ = msg.keep_alive() && !closing_;
  client_closes_ = !msg.keep_alive();
  response_done_ = false;
  on_disconnect_ = nullptr;
  disconnect_notified_ = false;
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  // Trailer fields are dropped: only the header's fields reach the handler.
  req.headers = std::move(request_headers_);
  request_headers_.clear();
  req.body = std::move(msg.body());
  req.remote = remote_;
  WatchDisconnect();
  CountRequest();
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
    self->Guarded("read", [&] {
      self->watching_ = false;
      self->buffer_.commit(n);
      if (self->phase_ == Phase::kLingering) {
        if (ec) return self->Close();
        self->buffer_.clear();
        return self->Drain();
      }
      if (ec == net::error::operation_aborted && self->phase_ == Phase::kIdle) return self->WaitForRequest();
      if (ec) {
        if (self->phase_ == Phase::kResponding && ec == net::error::eof && self->client_closes_) {
          // A client that said "Connection: close" and then shut its sending side (a
          // half-close) still reads: the response goes on. Had it closed outright, the next
          // write fails and cancels the request then.
          self->keep_alive_ = false;
        } else if (self->phase_ == Phase::kResponding) {
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
    std::string head = self->Head(status, type, headers, false, body.size());
    self->Enqueue(self->head_request_ ? std::move(head) : std::move(head) + body);
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
      UncountRequest();
      response_done_ = false;
      phase_ = Phase::kIdle;
      if (!keep_alive_ || closing_) return LingerThenClose();
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
  net::async_write(stream_.socket(), net::buffer(writes_.front()), [self = shared_from_this()](error_code ec, size_t) {
    self->Guarded("write", [&] {
      if (ec) {
        self->writes_.clear();
        self->writing_ = false;
        self->disconnected = true;
        self->NotifyDisconnect();
        self->UncountRequest();
        self->response_done_ = false;
        return self->Close();
      }
      self->writes_.pop_front();
      self->WriteNext();
    });
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
  CountRequest();
  read_timer_.cancel();
  const std::string body = server_.error_body(status, message);
  std::string head = Head(status, "application/json", {}, false, body.size());
  Enqueue(head_request_ ? std::move(head) : std::move(head) + body);
  ResponseDone();
}

void Session::Close() {
  if (phase_ == Phase::kClosed) return;
  read_timer_.cancel();
  const bool was_responding = phase_ == Phase::kResponding;
  phase_ = Phase::kClosed;
  disconnected = true;
  if (was_responding) NotifyDisconnect();
  // Whatever the stage (response half written, handler still working, a write timed out),
  // the request no longer counts once its connection is gone, and only once.
  UncountRequest();
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  write_timer_.cancel();
  server_.ConnectionClosed();
  server_.Remove(shared_from_this());
}

// After a response that ends the connection, the client may still be sending (the rest of
// a refused body). Closing a socket with unread input sends a reset, and the client's stack
// may drop the response it has not read yet. So the sending side is shut first and input
// is read and discarded for a short while (nginx's "lingering close").
void Session::LingerThenClose() {
  if (phase_ == Phase::kClosed || phase_ == Phase::kLingering) return;
  phase_ = Phase::kLingering;
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return Close();
  buffer_.clear();
  linger_bytes_ = 0;
  read_timer_.expires_after(std::chrono::milliseconds(kLingerMs));
  read_timer_.async_wait([self = shared_from_this()](error_code wait_ec) {
    if (!wait_ec) self->Close();
  });
  if (watching_) return;  // the pending watch read continues the drain
  Drain();
}

void Session::Drain() {
  stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](error_code ec, size_t n) {
    self->Guarded("read", [&] {
      self->linger_bytes_ += n;
      self->buffer_.clear();
      if (ec || self->phase_ != Phase::kLingering || self->linger_bytes_ > kLingerMaxBytes) return self->Close();
      self->Drain();
    });
  });
}

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
    try {
      if (options.fault_injection) options.fault_injection("accept");
      OnAccept(ec, std::move(socket));
    } catch (const std::exception& e) {
      CountException();
      FERRY_LOG_ERROR("the accept handler threw ({}); the connection is dropped", e.what());
    } catch (...) {
      CountException();
      FERRY_LOG_ERROR("the accept handler threw; the connection is dropped");
    }
    if (!ec && accepting.load()) Accept();  // after a failure the retry timer accepts again
  });
}

// At the connection limit a new connection (a health probe, say) takes the place of one that
// holds a slot without using it: the longest-idle keep-alive connection, else the one that
// has been sending its request the longest (a slow-drip client). Connections producing a
// response are never evicted.
bool HttpServer::Impl::EvictOne() {
  std::shared_ptr<Session> victim;
  {
    std::lock_guard<std::mutex> lock(mu);
    int64_t oldest_idle = 0, oldest_reading = 0;
    std::shared_ptr<Session> reading;
    for (const auto& s : sessions) {
      if (s->evicted_.load()) continue;
      const int64_t idle = s->idle_since_ns_.load();
      const int64_t since = s->reading_since_ns_.load();
      if (idle != 0 && (victim == nullptr || idle < oldest_idle)) {
        victim = s;
        oldest_idle = idle;
      } else if (since != 0 && (reading == nullptr || since < oldest_reading)) {
        reading = s;
        oldest_reading = since;
      }
    }
    if (victim == nullptr) victim = reading;
    if (victim == nullptr) return false;
    victim->evicted_ = true;
  }
  ++owner->evictions_;
  victim->ForceClose();
  return true;
}

void HttpServer::Impl::OnAccept(error_code ec, tcp::socket socket) {
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
  if (owner->connections_.load() >= options.max_connections && !EvictOne()) {
    // Over the limit and every connection busy with a response: answer 503 synchronously
    // (tiny write) and drop the connection.
    const std::string body = error_body(503, "too many connections");
    const std::string msg = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                            "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    error_code wec;
    net::write(socket, net::buffer(msg), wec);
    socket.close(wec);
    return;
  }
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
      // Handlers catch their own exceptions; this is the last line, so that nothing thrown
      // on an I/O thread ends the process. run() may be called again after a throw.
      for (;;) {
        try {
          impl_->ioc.run();
          return;
        } catch (const std::exception& e) {
          io_exceptions_++;
          FERRY_LOG_ERROR("an I/O handler threw ({}); the I/O thread carries on", e.what());
        } catch (...) {
          io_exceptions_++;
          FERRY_LOG_ERROR("an I/O handler threw; the I/O thread carries on");
        }
      }
    });
  }
}

void HttpServer::PostForTesting(std::function<void()> fn) { net::post(impl_->ioc, std::move(fn)); }

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
