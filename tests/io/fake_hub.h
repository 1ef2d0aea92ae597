// A Hugging Face Hub stand-in for download tests, on 127.0.0.1 only: the revision API and
// the resolve URLs on one port, LFS contents on a second port standing in for the CDN (the
// Hub answers an LFS resolve with a 302 there). Each port is a thread that serves one
// connection at a time, one request per connection, and records every request.
#pragma once

#include <openssl/evp.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::testing {

inline std::string Sha256Hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

struct RecordedRequest {
  int port = 0;
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // names in lower case

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

struct Reply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::optional<size_t> cut_after;        // send this many body bytes, then close
  std::optional<size_t> content_length;   // announced length when not body.size() (HEAD)
  std::chrono::milliseconds delay{0};     // wait before answering
};

// One listening port and its thread.
class TestHttpServer {
 public:
  using Handler = std::function<Reply(const RecordedRequest&)>;

  explicit TestHttpServer(Handler handler) : handler_(std::move(handler)), acceptor_(ioc_) {
    namespace net = boost::asio;
    const net::ip::tcp::endpoint at(net::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(at.protocol());
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind(at);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Serve(); });
  }
  ~TestHttpServer() { Stop(); }
  TestHttpServer(const TestHttpServer&) = delete;
  TestHttpServer& operator=(const TestHttpServer&) = delete;

  int port() const { return port_; }

  // Closes the port: later connections are refused.
  void Stop() {
    if (stopped_.exchange(true)) return;
    boost::system::error_code ec;
    boost::asio::ip::tcp::socket poke(ioc_);  // wakes the blocked accept
    poke.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)}, ec);
    thread_.join();
    acceptor_.close(ec);
  }

 private:
  void Serve() {
    namespace net = boost::asio;
    namespace http = boost::beast::http;
    while (!stopped_) {
      net::ip::tcp::socket socket(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopped_) break;
      if (ec) continue;
      boost::beast::flat_buffer buffer;
      http::request<http::string_body> req;
      http::read(socket, buffer, req, ec);
      if (ec) continue;
      RecordedRequest rec;
      rec.port = port_;
      rec.method = std::string(req.method_string());
      rec.target = std::string(req.target());
      for (const auto& f : req) {
        std::string name(f.name_string());
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        rec.headers[name] = std::string(f.value());
      }
      Reply reply = handler_(rec);
      if (reply.delay.count() > 0) std::this_thread::sleep_for(reply.delay);
      std::string head = "HTTP/1.1 " + std::to_string(reply.status) + " X\r\n";
      for (const auto& [k, v] : reply.headers) head += k + ": " + v + "\r\n";
      head += "Content-Length: " + std::to_string(reply.content_length.value_or(reply.body.size())) + "\r\n";
      head += "Connection: close\r\n\r\n";
      std::string body = rec.method == "HEAD" ? "" : reply.body;
      if (reply.cut_after && *reply.cut_after < body.size()) body.resize(*reply.cut_after);
      net::write(socket, net::buffer(head + body), ec);
      socket.shutdown(net::ip::tcp::socket::shutdown_both, ec);
      socket.close(ec);
    }
  }

  Handler handler_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

// One repository at one commit, served the way the Hub serves it.
class FakeHub {
 public:
  static constexpr const char* kCommit = "c0ffee0123456789abcdef0123456789abcdef01";

  explicit FakeHub(std::string repo = "test-org/tiny")
      : repo_(std::move(repo)),
        hub_([this](const RecordedRequest& r) { return Record(r, HubReply(r)); }),
        cdn_([this](const RecordedRequest& r) { return Record(r, CdnReply(r)); }) {}

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_.port()); }
  int hub_port() const { return hub_.port(); }
  int cdn_port() const { return cdn_.port(); }
  const std::string& repo() const { return repo_; }

  // Large files go through LFS (SHA-256 ETag, redirect to the CDN port); the others are
  // answered directly with a git-style ETag.
  void AddFile(const std::string& path, std::string content, bool lfs) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path] = File{std::move(content), lfs};
  }
  static std::string GitEtag(const std::string& content) { return Sha256Hex("blob " + content).substr(0, 40); }

  // Knobs, set before the download starts.
  std::string required_token;             // answer 401 unless "Bearer <it>" comes with the request
  std::optional<size_t> cut_first_after;  // the CDN closes each file's first transfer after this many bytes
  bool cut_always = false;                // ... and every later transfer too
  bool ignore_range = false;              // the CDN answers Range requests with the whole file (200)
  bool corrupt = false;                   // the CDN serves bytes that do not match the SHA-256
  int fail_api_times = 0;                 // answer the revision API with 503 this many times first
  // Plain files answered with a relative 307 to /api/resolve-cache/... on the same origin, as
  // the Hub does for them now.
  bool resolve_cache_redirect = false;

  std::vector<RecordedRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  std::vector<RecordedRequest> requests_to(int port) const {
    std::vector<RecordedRequest> out;
    for (const auto& r : requests()) {
      if (r.port == port) out.push_back(r);
    }
    return out;
  }
  void Stop() {
    hub_.Stop();
    cdn_.Stop();
  }

 private:
  struct File {
    std::string content;
    bool lfs = false;
  };

  Reply Record(const RecordedRequest& r, Reply reply) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(r);
    return reply;
  }

  static Reply Error(int status, const std::string& code, const std::string& message) {
    Reply r;
    r.status = status;
    r.headers = {{"X-Error-Code", code}, {"X-Error-Message", message}, {"Content-Type", "application/json"}};
    r.body = "{\"error\":\"" + message + "\"}";
    return r;
  }

  Reply HubReply(const RecordedRequest& r) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!required_token.empty() && r.Header("authorization") != "Bearer " + required_token) {
      return Error(401, "RepoNotFound", "Invalid credentials in Authorization header");
    }
    const std::string api = "/api/models/" + repo_ + "/revision/";
    const std::string resolve = "/" + repo_ + "/resolve/";
    if (r.target.starts_with(api)) {
      const std::string rev = r.target.substr(api.size());
      if (rev != "main" && rev != kCommit) return Error(404, "RevisionNotFound", "Invalid rev id: " + rev);
      if (fail_api_times > 0) {
        --fail_api_times;
        return Error(503, "", "try again");
      }
      std::string siblings;
      for (const auto& [path, f] : files_) siblings += std::string(siblings.empty() ? "" : ",") + "{\"rfilename\":\"" + path + "\"}";
      Reply reply;
      reply.headers = {{"Content-Type", "application/json"}};
      reply.body = "{\"id\":\"" + repo_ + "\",\"sha\":\"" + kCommit + "\",\"siblings\":[" + siblings + "]}";
      return reply;
    }
    const std::string cache_prefix = "/api/resolve-cache/models/" + repo_ + "/";
    const bool from_cache = r.target.starts_with(cache_prefix);
    if (r.target.starts_with(resolve) || from_cache) {
      std::string rest = r.target.substr(from_cache ? cache_prefix.size() : resolve.size());
      rest = rest.substr(0, rest.find('?'));
      const size_t slash = rest.find('/');
      const std::string path = rest.substr(slash + 1);
      auto it = files_.find(path);
      if (rest.substr(0, slash) != kCommit && rest.substr(0, slash) != "main") {
        return Error(404, "RevisionNotFound", "Invalid rev id");
      }
      if (it == files_.end()) return Error(404, "EntryNotFound", path + " does not exist");
      const File& f = it->second;
      Reply reply;
      reply.headers = {{"X-Repo-Commit", kCommit}};
      if (f.lfs) {
        const std::string sha = Sha256Hex(f.content);
        reply.status = 302;
        reply.headers.emplace_back("ETag", "\"" + sha + "\"");
        reply.headers.emplace_back("X-Linked-Etag", "\"" + sha + "\"");
        reply.headers.emplace_back("X-Linked-Size", std::to_string(f.content.size()));
        reply.headers.emplace_back("Location", "http://127.0.0.1:" + std::to_string(cdn_.port()) + "/lfs/" + sha +
                                                   "?signature=abc");
        return reply;
      }
      if (resolve_cache_redirect && !from_cache) {
        reply.status = 307;
        reply.headers.emplace_back("Location", "/api/resolve-cache/models/" + repo_ + "/" + kCommit + "/" + path +
                                                   "?etag=x");
        return reply;
      }
      reply.headers.emplace_back("ETag", "\"" + GitEtag(f.content) + "\"");
      reply.body = f.content;
      return reply;
    }
    return Error(404, "RepoNotFound", "Repository not found");
  }

  Reply CdnReply(const RecordedRequest& r) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string prefix = "/lfs/";
    if (!r.target.starts_with(prefix)) return Error(404, "", "no such object");
    const std::string sha = r.target.substr(prefix.size(), 64);
    for (const auto& [path, f] : files_) {
      if (!f.lfs || Sha256Hex(f.content) != sha) continue;
      std::string content = f.content;
      if (corrupt && !content.empty()) content.back() = static_cast<char>(content.back() ^ 1);
      Reply reply;
      const std::string range = r.Header("range");
      if (!range.empty() && !ignore_range) {
        const size_t from = std::stoul(range.substr(std::string("bytes=").size()));
        if (from >= content.size()) return Error(416, "", "range not satisfiable");
        reply.status = 206;
        reply.headers.emplace_back("Content-Range", "bytes " + std::to_string(from) + "-" +
                                                        std::to_string(content.size() - 1) + "/" +
                                                        std::to_string(content.size()));
        reply.body = content.substr(from);
      } else {
        reply.body = content;
      }
      if (cut_first_after && (transfers_[sha]++ == 0 || cut_always)) reply.cut_after = *cut_first_after;
      return reply;
    }
    return Error(404, "", "no such object");
  }

  const std::string repo_;
  mutable std::mutex mu_;
  std::map<std::string, File> files_;
  std::map<std::string, int> transfers_;
  std::vector<RecordedRequest> requests_;
  TestHttpServer hub_;
  TestHttpServer cdn_;
};

}  // namespace ferry::testing
