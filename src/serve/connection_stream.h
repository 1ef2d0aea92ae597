// A connection's byte stream: plain TCP, or TLS over TCP. Reads, writes and timeouts go
// through it whichever it is, so the HTTP session is written once for both.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>

#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "core/status.h"

namespace ferry::serve {

// The certificate and key of a TLS listener (PEM files) and the oldest protocol accepted.
struct TlsOptions {
  std::string cert_path;        // certificate chain, leaf first
  std::string key_path;         // its private key (unencrypted)
  std::string min_version = "1.2";  // "1.2" or "1.3"
  bool enabled() const { return !cert_path.empty(); }
};

// A server-side TLS context with the certificate, key and minimum version, or a clear
// error naming the file and what is wrong with it.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(const TlsOptions& options);

// Thread-compatible: used on its connection's strand only.
class ConnectionStream {
 public:
  using Tcp = boost::beast::tcp_stream;
  using Tls = boost::beast::ssl_stream<Tcp>;

  explicit ConnectionStream(boost::asio::ip::tcp::socket socket) : stream_(std::in_place_type<Tcp>, std::move(socket)) {}
  // TLS over `socket`; `context` stays alive with the connection (a reload swaps the
  // server's context for new connections only).
  ConnectionStream(boost::asio::ip::tcp::socket socket, std::shared_ptr<boost::asio::ssl::context> context)
      : context_(std::move(context)), stream_(std::in_place_type<Tls>, std::move(socket), *context_) {}

  bool tls() const { return std::holds_alternative<Tls>(stream_); }
  // The TCP layer: timeouts and the socket (cancel, shutdown, close, peer address).
  Tcp& tcp() { return tls() ? std::get<Tls>(stream_).next_layer() : std::get<Tcp>(stream_); }
  auto get_executor() { return tcp().get_executor(); }

  template <class Buffers, class Handler>
  void AsyncReadSome(const Buffers& buffers, Handler&& handler) {
    std::visit([&](auto& s) { s.async_read_some(buffers, std::forward<Handler>(handler)); }, stream_);
  }
  template <class Buffers, class Handler>
  void AsyncWrite(const Buffers& buffers, Handler&& handler) {
    std::visit([&](auto& s) { boost::asio::async_write(s, buffers, std::forward<Handler>(handler)); }, stream_);
  }
  // TLS only: the server side of the handshake.
  template <class Handler>
  void AsyncHandshake(Handler&& handler) {
    std::get<Tls>(stream_).async_handshake(boost::asio::ssl::stream_base::server, std::forward<Handler>(handler));
  }

 private:
  std::shared_ptr<boost::asio::ssl::context> context_;
  std::variant<Tcp, Tls> stream_;
};

}  // namespace ferry::serve
