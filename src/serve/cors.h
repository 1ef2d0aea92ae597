// Cross-origin resource sharing for browser UIs: the configured origins get
// Access-Control-* headers on every response, and preflight OPTIONS requests are answered
// (204 when the origin, method and headers are allowed, 400 otherwise), before any API key
// is asked for, since browsers send preflights without credentials.
#pragma once

#include <memory>
#include <string>

#include "serve/config.h"
#include "serve/http_server.h"

namespace ferry::serve {

// Immutable; thread-safe.
class CorsPolicy {
 public:
  explicit CorsPolicy(CorsConfig config);

  bool enabled() const { return !config_.allowed_origins.empty(); }
  bool OriginAllowed(const std::string& origin) const;
  // Headers for a response to a request from `origin` (none when the origin is not allowed).
  ResponseWriter::Headers ResponseHeaders(const std::string& origin) const;

  struct Preflight {
    int status = 204;
    ResponseWriter::Headers headers;
    std::string error;  // why it was refused (status 400)
  };
  // The answer to an OPTIONS request.
  Preflight AnswerPreflight(const HttpRequest& request) const;

 private:
  CorsConfig config_;
};

// A writer that adds `headers` to whatever response goes through it.
std::shared_ptr<ResponseWriter> WithHeaders(std::shared_ptr<ResponseWriter> inner, ResponseWriter::Headers headers);

}  // namespace ferry::serve
