#include "io/http_client.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <vector>

namespace ferry::io {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

bool IsRedirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

// Resolves "." and ".." segments of an absolute path (the query left alone).
std::string NormalizeTarget(const std::string& target) {
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : target.substr(q);
  std::vector<std::string> segments;
  size_t i = 1;  // past the leading '/'
  for (;;) {
    const size_t j = path.find('/', i);
    const std::string seg = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    const bool last = j == std::string::npos;
    if (seg == "..") {
      if (!segments.empty()) segments.pop_back();
      if (last) segments.emplace_back();
    } else if (seg == ".") {
      if (last) segments.emplace_back();
    } else if (!seg.empty() || last) {
      segments.push_back(seg);
    }
    if (last) break;
    i = j + 1;
  }
  std::string result;
  for (const std::string& s : segments) result += "/" + s;
  return (result.empty() ? "/" : result) + query;
}

std::string HostForUrl(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

std::string DefaultPort(const std::string& scheme) { return scheme == "https" ? "443" : "80"; }

Status TransportError(const std::string& what, const std::string& url, const beast::error_code& ec) {
  if (ec == beast::error::timeout || ec == net::error::timed_out) {
    return DeadlineExceeded(what + " " + url + " timed out");
  }
  return Unavailable(what + " " + url + " failed: " + ec.message());
}

// Runs the client's io_context until the one operation started on it has completed (the
// stream's own timer cancels an operation that runs past its deadline).
void Run(net::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

}  // namespace

std::string Url::Origin() const { return scheme + "://" + HostForUrl(host) + ":" + port; }

std::string Url::ToString() const {
  std::string s = scheme + "://" + HostForUrl(host);
  if (port != DefaultPort(scheme)) s += ":" + port;
  return s + target;
}

Result<Url> ParseUrl(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("not a usable URL '" + std::string(text.substr(0, 200)) + "': " + why);
  };
  for (char c : text) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return bad("control character or space");
  }
  const size_t sep = text.find("://");
  if (sep == std::string_view::npos) return bad("no scheme");
  Url url;
  for (char c : text.substr(0, sep)) url.scheme += Lower(c);
  if (url.scheme != "http" && url.scheme != "https") return bad("only http and https are supported");
  std::string_view rest = text.substr(sep + 3);
  const size_t end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, end);
  std::string_view remainder = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  if (const size_t hash = remainder.find('#'); hash != std::string_view::npos) remainder = remainder.substr(0, hash);
  if (authority.empty()) return bad("no host");
  if (authority.find('@') != std::string_view::npos) return bad("user information in URLs is not supported");
  std::string_view port;
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed IPv6 address");
    url.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after the IPv6 address");
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (url.host.empty()) return bad("no host");
  for (char& c : url.host) c = Lower(c);
  if (port.empty()) {
    url.port = DefaultPort(url.scheme);
  } else {
    if (port.size() > 5) return bad("bad port");
    unsigned value = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return bad("bad port");
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value == 0 || value > 65535) return bad("bad port");
    url.port = std::to_string(value);
  }
  url.target = remainder.empty() || remainder.front() == '?' ? "/" + std::string(remainder) : std::string(remainder);
  return url;
}

Result<Url> ResolveLocation(const Url& base, std::string_view location) {
  if (location.find("://") != std::string_view::npos) return ParseUrl(location);
  if (location.starts_with("//")) return ParseUrl(base.scheme + ":" + std::string(location));
  for (char c : location) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return InvalidArgument("bad redirect location: control character or space");
    }
  }
  std::string loc(location);
  if (const size_t hash = loc.find('#'); hash != std::string::npos) loc.resize(hash);
  Url url = base;
  if (loc.empty()) return url;
  if (loc.front() == '/') {
    url.target = NormalizeTarget(loc);
  } else if (loc.front() == '?') {
    url.target = base.target.substr(0, base.target.find('?')) + loc;
  } else {
    const std::string path = base.target.substr(0, base.target.find('?'));
    url.target = NormalizeTarget(path.substr(0, path.rfind('/') + 1) + loc);
  }
  return url;
}

std::string PercentEncode(std::string_view text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                            c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

std::string HttpResponse::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return v;
  }
  return "";
}

bool HttpResponse::HasHeader(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return true;
  }
  return false;
}

struct HttpClient::Impl {
  explicit Impl(HttpOptions o) : options(std::move(o)), tls(ssl::context::tls_client) {}

  HttpOptions options;
  net::io_context ioc;
  ssl::context tls;
  std::optional<Status> tls_ready;  // set once the context has its trust store

  Status PrepareTls() {
    if (tls_ready) return *tls_ready;
    beast::error_code ec;
    SSL_CTX_set_min_proto_version(tls.native_handle(), TLS1_2_VERSION);
    tls.set_verify_mode(ssl::verify_peer, ec);
    if (!options.ca_file.empty()) {
      tls.load_verify_file(options.ca_file, ec);
      tls_ready = ec ? Unavailable("cannot load the CA file " + options.ca_file + ": " + ec.message()) : Status::Ok();
    } else {
      tls.set_default_verify_paths(ec);
      tls_ready = ec ? Unavailable("cannot load the system CA certificates: " + ec.message()) : Status::Ok();
    }
    return *tls_ready;
  }

  Result<tcp::resolver::results_type> Resolve(const Url& url) {
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    tcp::resolver::results_type results;
    bool done = false;
    resolver.async_resolve(url.host, url.port, [&](beast::error_code e, tcp::resolver::results_type r) {
      ec = e;
      results = std::move(r);
      done = true;
    });
    ioc.restart();
    ioc.run_for(options.connect_timeout);
    if (!done) {
      resolver.cancel();
      Run(ioc);
      return DeadlineExceeded("looking up " + url.host + " timed out");
    }
    // A name the resolver says does not exist is not retried by callers; a temporary failure is.
    if (ec == net::error::host_not_found) return NotFound("cannot look up " + url.host + ": " + ec.message());
    if (ec) return Unavailable("cannot look up " + url.host + ": " + ec.message());
    return results;
  }

  Status Connect(beast::tcp_stream& stream, const tcp::resolver::results_type& addresses, const Url& url) {
    beast::error_code ec;
    stream.expires_after(options.connect_timeout);
    stream.async_connect(addresses, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    Run(ioc);
    if (ec) return TransportError("connecting to", url.Origin(), ec);
    return Status::Ok();
  }

  // One request and its answer on a connected (and, for TLS, handshaken) stream.
  template <class Stream>
  Status Exchange(Stream& stream, beast::tcp_stream& tcp_layer, const http::request<http::empty_body>& req,
                  const std::string& url_text, const BodySink& sink, const HeaderCheck& on_headers,
                  HttpResponse& response) {
    beast::error_code ec;
    tcp_layer.expires_after(options.read_timeout);
    http::async_write(stream, req, [&](beast::error_code e, size_t) { ec = e; });
    Run(ioc);
    if (ec) return TransportError("sending the request to", url_text, ec);

    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options.max_header_bytes));
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (req.method() == http::verb::head) parser.skip(true);
    tcp_layer.expires_after(options.read_timeout);
    http::async_read_header(stream, buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    Run(ioc);
    if (ec == http::error::header_limit) {
      return Unavailable("the response header from " + url_text + " is larger than " +
                         std::to_string(options.max_header_bytes) + " bytes");
    }
    if (ec) return TransportError("reading the response from", url_text, ec);

    auto& message = parser.get();
    response.status = static_cast<int>(message.result_int());
    for (const auto& field : message) {
      response.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    const bool to_sink = sink && response.status >= 200 && response.status < 300;
    if (to_sink && on_headers) FERRY_RETURN_IF_ERROR(on_headers(response));
    std::vector<char> chunk(size_t{1} << 16);
    uint64_t received = 0;
    while (!parser.is_done()) {
      message.body().data = chunk.data();
      message.body().size = chunk.size();
      tcp_layer.expires_after(options.read_timeout);
      http::async_read_some(stream, buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
      Run(ioc);
      if (ec == http::error::need_buffer) ec = {};
      const size_t n = chunk.size() - message.body().size;
      received += n;
      if (n > 0) {
        if (to_sink) {
          FERRY_RETURN_IF_ERROR(sink(std::string_view(chunk.data(), n)));
        } else {
          const size_t room = options.max_error_body_bytes - std::min(options.max_error_body_bytes, response.body.size());
          response.body.append(chunk.data(), std::min(n, room));
          if (response.body.size() >= options.max_error_body_bytes) break;  // enough to explain an error
        }
      }
      if (ec == http::error::partial_message || ec == ssl::error::stream_truncated || ec == net::error::eof ||
          ec == net::error::connection_reset) {
        std::string expected;
        if (message.has_content_length()) {
          if (const auto len = parser.content_length_remaining()) {
            expected = " (" + std::to_string(*len) + " more bytes were announced)";
          }
        }
        return Unavailable("the connection to " + url_text + " closed after " + std::to_string(received) +
                           " bytes of the body" + expected);
      }
      if (ec) return TransportError("reading the body from", url_text, ec);
    }
    beast::error_code ignored;
    tcp_layer.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return Status::Ok();
  }

  Status SendOnce(http::verb verb, const Url& url, const HttpRequest& request, bool with_authorization,
                  const BodySink& sink, const HeaderCheck& on_headers, HttpResponse& response) {
    // Messages name the URL without its query: a CDN's signed URL carries credentials there.
    std::string url_text = url.ToString();
    url_text = url_text.substr(0, url_text.find('?'));
    http::request<http::empty_body> req{verb, url.target, 11};
    const bool default_port = url.port == DefaultPort(url.scheme);
    req.set(http::field::host, HostForUrl(url.host) + (default_port ? "" : ":" + url.port));
    req.set(http::field::user_agent, options.user_agent);
    req.set(http::field::connection, "close");
    for (const auto& [name, value] : request.headers) req.set(name, value);
    if (with_authorization) req.set(http::field::authorization, request.authorization);

    FERRY_ASSIGN_OR_RETURN(const tcp::resolver::results_type addresses, Resolve(url));
    if (url.scheme == "http") {
      beast::tcp_stream stream(ioc);
      FERRY_RETURN_IF_ERROR(Connect(stream, addresses, url));
      return Exchange(stream, stream, req, url_text, sink, on_headers, response);
    }
    FERRY_RETURN_IF_ERROR(PrepareTls());
    beast::ssl_stream<beast::tcp_stream> stream(ioc, tls);
    SSL* ssl_handle = stream.native_handle();
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_handle);
    beast::error_code addr_ec;
    net::ip::make_address(url.host, addr_ec);
    if (!addr_ec) {
      X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str());  // no SNI for an address
    } else {
      if (SSL_set_tlsext_host_name(ssl_handle, url.host.c_str()) != 1) {
        return Unavailable("cannot set the TLS server name " + url.host);
      }
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), url.host.size());
    }
    stream.set_verify_mode(ssl::verify_peer);
    FERRY_RETURN_IF_ERROR(Connect(beast::get_lowest_layer(stream), addresses, url));
    beast::error_code ec;
    beast::get_lowest_layer(stream).expires_after(options.connect_timeout);
    stream.async_handshake(ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
    Run(ioc);
    if (ec) {
      const long verify = SSL_get_verify_result(ssl_handle);
      if (verify != X509_V_OK) {
        return Unavailable("the TLS certificate of " + url.Origin() +
                           " is not trusted: " + X509_verify_cert_error_string(verify));
      }
      return TransportError("the TLS handshake with", url.Origin(), ec);
    }
    return Exchange(stream, beast::get_lowest_layer(stream), req, url_text, sink, on_headers, response);
  }
};

HttpClient::HttpClient(HttpOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpClient::~HttpClient() = default;

Result<HttpResponse> HttpClient::Send(const HttpRequest& request, const BodySink& sink,
                                      const HeaderCheck& on_headers) {
  try {
    FERRY_ASSIGN_OR_RETURN(Url url, ParseUrl(request.url));
    http::verb verb = http::string_to_verb(request.method);
    if (verb == http::verb::unknown) return InvalidArgument("unknown HTTP method " + request.method);
    const std::string auth_origin = url.Origin();
    for (int hop = 0;; ++hop) {
      const bool same_origin = url.Origin() == auth_origin;
      if (!request.authorization.empty() && !same_origin) ++withheld_authorizations_;
      HttpResponse response;
      FERRY_RETURN_IF_ERROR(impl_->SendOnce(verb, url, request, !request.authorization.empty() && same_origin, sink,
                                            on_headers, response));
      response.url = url.ToString();
      if (!request.follow_redirects || !IsRedirect(response.status) || !response.HasHeader("location")) {
        return response;
      }
      if (hop >= impl_->options.max_redirects) {
        return Unavailable("more than " + std::to_string(impl_->options.max_redirects) + " redirects from " +
                           request.url);
      }
      FERRY_ASSIGN_OR_RETURN(url, ResolveLocation(url, response.Header("location")));
      if (response.status == 303 && verb != http::verb::head) verb = http::verb::get;
    }
  } catch (const std::exception& e) {
    return Internal(std::string("HTTP request to ") + request.url + " failed: " + e.what());
  }
}

}  // namespace ferry::io
