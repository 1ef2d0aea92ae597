#include "serve/cors.h"

#include <algorithm>
#include <cctype>

namespace ferry::serve {

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

class HeaderWriter : public ResponseWriter {
 public:
  HeaderWriter(std::shared_ptr<ResponseWriter> inner, Headers extra) : inner_(std::move(inner)), extra_(std::move(extra)) {}
  void Send(int status, std::string content_type, std::string body, Headers headers) override {
    headers.insert(headers.end(), extra_.begin(), extra_.end());
    inner_->Send(status, std::move(content_type), std::move(body), std::move(headers));
  }
  void StartStream(int status, std::string content_type, Headers headers) override {
    headers.insert(headers.end(), extra_.begin(), extra_.end());
    inner_->StartStream(status, std::move(content_type), std::move(headers));
  }
  void Write(std::string data) override { inner_->Write(std::move(data)); }
  void End() override { inner_->End(); }
  void OnDisconnect(std::function<void()> callback) override { inner_->OnDisconnect(std::move(callback)); }
  bool disconnected() const override { return inner_->disconnected(); }

 private:
  std::shared_ptr<ResponseWriter> inner_;
  const Headers extra_;
};

}  // namespace

CorsPolicy::CorsPolicy(CorsConfig config) : config_(std::move(config)) {}

bool CorsPolicy::OriginAllowed(const std::string& origin) const {
  if (origin.empty()) return false;
  for (const std::string& o : config_.allowed_origins) {
    if (o == "*" || o == origin) return true;
  }
  return false;
}

ResponseWriter::Headers CorsPolicy::ResponseHeaders(const std::string& origin) const {
  ResponseWriter::Headers h;
  if (!OriginAllowed(origin)) return h;
  const bool wildcard = std::find(config_.allowed_origins.begin(), config_.allowed_origins.end(), "*") !=
                        config_.allowed_origins.end();
  // A credentialed response must name the origin; "*" is only for anonymous ones.
  h.emplace_back("Access-Control-Allow-Origin", wildcard && !config_.allow_credentials ? "*" : origin);
  if (!wildcard || config_.allow_credentials) h.emplace_back("Vary", "Origin");
  if (config_.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  h.emplace_back("Access-Control-Expose-Headers", "X-Request-Id, Warning, Retry-After");
  return h;
}

CorsPolicy::Preflight CorsPolicy::AnswerPreflight(const HttpRequest& request) const {
  Preflight p;
  const std::string& origin = request.Header("origin");
  const std::string& method = request.Header("access-control-request-method");
  if (!enabled() || origin.empty() || method.empty()) {
    // Not a CORS preflight: a plain OPTIONS, answered with what the server accepts.
    p.headers.emplace_back("Allow", "GET, HEAD, POST, OPTIONS");
    return p;
  }
  if (!OriginAllowed(origin)) {
    p.status = 400;
    p.error = "Disallowed CORS origin";
    return p;
  }
  bool method_ok = false;
  for (const std::string& m : config_.allowed_methods) method_ok = method_ok || m == "*" || m == method;
  if (!method_ok) {
    p.status = 400;
    p.error = "Disallowed CORS method " + method;
    return p;
  }
  // Access-Control-Request-Headers: a comma-separated list, case-insensitive.
  const std::string requested = request.Header("access-control-request-headers");
  size_t pos = 0;
  while (pos < requested.size()) {
    size_t end = requested.find(',', pos);
    if (end == std::string::npos) end = requested.size();
    std::string name = requested.substr(pos, end - pos);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    pos = end + 1;
    if (name.empty()) continue;
    bool ok = false;
    for (const std::string& allowed : config_.allowed_headers) ok = ok || allowed == "*" || Lower(allowed) == Lower(name);
    if (!ok) {
      p.status = 400;
      p.error = "Disallowed CORS header " + name;
      return p;
    }
  }
  p.headers = ResponseHeaders(origin);
  p.headers.emplace_back("Access-Control-Allow-Methods", Join(config_.allowed_methods));
  p.headers.emplace_back("Access-Control-Allow-Headers",
                         requested.empty() ? Join(config_.allowed_headers) : requested);
  p.headers.emplace_back("Access-Control-Max-Age", std::to_string(config_.max_age_s));
  return p;
}

std::shared_ptr<ResponseWriter> WithHeaders(std::shared_ptr<ResponseWriter> inner, ResponseWriter::Headers headers) {
  if (headers.empty()) return inner;
  return std::make_shared<HeaderWriter>(std::move(inner), std::move(headers));
}

}  // namespace ferry::serve
