// A small blocking HTTP/1.1 client (Boost.Beast) for downloads: plain TCP or TLS, with the
// certificate chain checked against the system CA store and the host name checked against
// the certificate (SNI sent). Every step is bounded: connect and each read have a timeout,
// the response header has a size limit, redirects a count. One connection per request.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ferry::io {

// An absolute http(s) URL, split as a request needs it.
struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;    // a name or an address (IPv6 without brackets)
  std::string port;    // always set: "80" / "443" when the URL gives none
  std::string target;  // path and query, starting with '/'

  // "https://host:443": what decides where credentials may go.
  std::string Origin() const;
  // The URL as text, the default port left out.
  std::string ToString() const;
};

// "http://host[:port]/path?query" or https; anything else (no scheme, user info, a fragment
// kept out) is InvalidArgument.
Result<Url> ParseUrl(std::string_view text);
// A Location header against the URL that sent it: absolute, scheme-relative ("//host/x"),
// absolute-path ("/x") or relative ("x", "../x").
Result<Url> ResolveLocation(const Url& base, std::string_view location);
// Percent-encodes everything but unreserved characters; '/' kept when `keep_slash`.
std::string PercentEncode(std::string_view text, bool keep_slash);

struct HttpOptions {
  std::chrono::milliseconds connect_timeout{10000};  // name lookup, TCP connect and TLS handshake
  std::chrono::milliseconds read_timeout{10000};     // each read and write
  size_t max_header_bytes = 64 * 1024;
  size_t max_error_body_bytes = 64 * 1024;           // kept of a body no sink takes
  int max_redirects = 10;
  std::string user_agent = "ferry";
  // PEM bundle to trust instead of the system store (tests; SSL_CERT_FILE works too).
  std::string ca_file;
};

struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // a body the sink did not take (non-2xx, or no sink), cut at max_error_body_bytes
  std::string url;   // the URL that gave this answer, after redirects

  // The first header of that name (case-insensitive), or "".
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;  // sent wherever the request goes
  // An "Authorization" value sent only to the origin (scheme, host and port) of `url`: a
  // redirect to any other origin goes without it, so a token never leaves the host it was
  // meant for (the Hub's LFS files redirect to a CDN).
  std::string authorization;
  bool follow_redirects = true;
};

// Takes each piece of a 2xx body as it arrives; a non-ok Status stops the transfer and is
// returned.
using BodySink = std::function<Status(std::string_view)>;
// Sees a 2xx answer's status and headers before its body goes to the sink (a download
// checks there whether its Range request was honoured); a non-ok Status stops the transfer.
using HeaderCheck = std::function<Status(const HttpResponse&)>;

// Thread-compatible: one request at a time per client.
class HttpClient {
 public:
  explicit HttpClient(HttpOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `request` and reads its answer, following redirects when asked. HTTP error
  // statuses are answers, not errors; a failed connection, handshake, certificate check,
  // temporary name-lookup failure or cut-off body is Unavailable (DeadlineExceeded for
  // timeouts, NotFound for a host name that does not exist) naming the URL. A 2xx body goes to `sink` when one is given, after
  // `on_headers` has seen the answer's head.
  Result<HttpResponse> Send(const HttpRequest& request, const BodySink& sink = nullptr,
                            const HeaderCheck& on_headers = nullptr);

  // Requests whose Authorization was withheld because they went to another origin
  // (for tests and logs).
  int withheld_authorizations() const { return withheld_authorizations_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int withheld_authorizations_ = 0;
};

}  // namespace ferry::io
