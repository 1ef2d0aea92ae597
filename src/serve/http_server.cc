#include "serve/http_server.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <system_error>

#include "core/file_limit.h"
#include "core/logging.h"
#include "serve/http_server_impl.h"

namespace ferry::serve {

const std::string& HttpRequest::Header(const std::string& lower_name) const {
  static const std::string kEmpty;
  auto it = headers.find(lower_name);
  return it == headers.end() ? kEmpty : it->second;
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
  if (owner->connections_.load() >= owner->max_connections_ && !EvictOne()) {
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
  std::shared_ptr<boost::asio::ssl::context> context;
  {
    std::lock_guard<std::mutex> lock(tls_mu);
    context = tls;
  }
  auto s = std::make_shared<Session>(std::move(socket), std::move(context), *this);
  {
    std::lock_guard<std::mutex> lock(mu);
    sessions.insert(s);
  }
  s->Start();
}

int MaxConnectionsWithin(int configured, int64_t file_limit, int64_t open_now) {
  if (file_limit < 0) return configured;
  const int64_t left = file_limit - open_now - kReservedDescriptors;
  return static_cast<int>(std::clamp<int64_t>(left, 1, configured));
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler, HttpErrorBody error_body)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  max_connections_ = impl_->options.max_connections;
  impl_->handler = std::move(handler);
  impl_->error_body = std::move(error_body);
  impl_->owner = this;
}

HttpServer::~HttpServer() { Shutdown(0); }

Status HttpServer::ReloadTls() {
  if (!impl_->options.tls.enabled()) return FailedPrecondition("the listener has no TLS certificate");
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<boost::asio::ssl::context> context, MakeTlsContext(impl_->options.tls));
  std::lock_guard<std::mutex> lock(impl_->tls_mu);
  impl_->tls = std::move(context);
  return Status::Ok();
}

Status HttpServer::Listen() {
  if (impl_->options.tls.enabled()) {
    FERRY_RETURN_IF_ERROR(ReloadTls());
    tls_ = true;
  }
  // Every connection is a descriptor: allow as many as the hard limit permits, and accept
  // no more connections than the descriptors left allow.
  const int64_t file_limit = RaiseFileLimit();
  const int64_t open_now = std::max<int64_t>(OpenFileCount(), 0);
  max_connections_ = MaxConnectionsWithin(impl_->options.max_connections, file_limit, open_now);
  if (max_connections_ < impl_->options.max_connections) {
    FERRY_LOG_WARN(
        "listener.max_connections is {}, but this process may open only {} files ({} open now, {} kept in "
        "reserve): at most {} connections at once; raise the limit (ulimit -n, systemd LimitNOFILE=) to hold more",
        impl_->options.max_connections, file_limit, open_now, kReservedDescriptors, max_connections_);
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
  // spdlog builds its logger registry on first use. Build it here, before the I/O threads
  // log: built by one of them while another reads it, the construction's synchronization
  // is inside libspdlog, where ThreadSanitizer does not see it, and it reports a race.
  (void)spdlog::default_logger_raw();
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
