// One HTTP connection: reading and bounding requests, dispatching them, writing responses
// and streams, noticing disconnects, closing (see http_server_impl.h).
#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <chrono>

#include "core/logging.h"
#include "serve/http_server_impl.h"

namespace ferry::serve {

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

void Session::Start() {
  error_code ec;
  auto ep = stream_.tcp().socket().remote_endpoint(ec);
  if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  net::dispatch(stream_.get_executor(),
                [self = shared_from_this()] { self->Guarded("read", [&] { self->Handshake(); }); });
}

void Session::Handshake() {
  if (!stream_.tls()) return WaitForRequest();
  reading_since_ns_ = NowNs();  // a client that never finishes its handshake can be evicted
  stream_.tcp().expires_after(std::chrono::milliseconds(server_.options.header_timeout_ms));
  stream_.AsyncHandshake([self = shared_from_this()](error_code ec) {
    self->Guarded("read", [&] {
      self->stream_.tcp().expires_never();
      if (ec) {
        FERRY_LOG_DEBUG("connection {}: TLS handshake failed: {}", self->remote_, ec.message());
        return self->Close();
      }
      self->WaitForRequest();
    });
  });
}

void Session::WaitForRequest() {
  phase_ = Phase::kIdle;
  in_request_ = false;
  idle_since_ns_ = NowNs();
  reading_since_ns_ = 0;
  if (closing_) return Close();
  if (buffer_.size() > 0) return ReadRequest();
  // Wait for the first byte of the next request, up to the idle timeout.
  stream_.tcp().expires_after(std::chrono::milliseconds(server_.options.idle_timeout_ms));
  stream_.AsyncReadSome(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
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
  stream_.tcp().expires_never();
  read_timed_out_ = false;
  request_deadline_ =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(server_.options.header_timeout_ms);
  read_timer_.expires_at(request_deadline_);
  read_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->phase_ != Phase::kReading) return;
    self->read_timed_out_ = true;
    error_code ignored;
    self->stream_.tcp().socket().cancel(ignored);
  });
  Parse();
}

void Session::ReadMore() {
  stream_.AsyncReadSome(buffer_.prepare(64 * 1024), [self = shared_from_this()](error_code ec, size_t n) {
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
  stream_.tcp().expires_never();
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
  stream_.AsyncReadSome(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
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
        stream_.tcp().socket().cancel();  // the watch read's handler continues with the next request
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
  stream_.AsyncWrite(net::buffer(writes_.front()), [self = shared_from_this()](error_code ec, size_t) {
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
  // The request's job holds this session through its writer: keeping its disconnect
  // callback past the response would keep both alive for as long as the connection (or,
  // once it closes, for ever), and with them the model version the request ran on.
  on_disconnect_ = nullptr;
  if (!writing_) WriteNext();
}

void Session::SendSimple(int status, const std::string& message, bool close_after) {
  phase_ = Phase::kResponding;
  stream_.tcp().expires_never();
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
  on_disconnect_ = nullptr;  // breaks session → callback → job → writer → session
  // Whatever the stage (response half written, handler still working, a write timed out),
  // the request no longer counts once its connection is gone, and only once.
  UncountRequest();
  error_code ec;
  stream_.tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.tcp().socket().close(ec);
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
  stream_.tcp().socket().shutdown(tcp::socket::shutdown_send, ec);
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
  stream_.AsyncReadSome(buffer_.prepare(64 * 1024), [self = shared_from_this()](error_code ec, size_t n) {
    self->Guarded("read", [&] {
      self->linger_bytes_ += n;
      self->buffer_.clear();
      if (ec || self->phase_ != Phase::kLingering || self->linger_bytes_ > kLingerMaxBytes) return self->Close();
      self->Drain();
    });
  });
}


}  // namespace ferry::serve
