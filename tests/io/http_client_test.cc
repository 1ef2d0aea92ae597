// The download client against servers on 127.0.0.1: URL handling, redirects (relative,
// absolute, too many), credentials kept to their origin, timeouts, bounded headers, cut
// bodies, and a TLS certificate that the system store does not trust.
#include "io/http_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>

#include <chrono>
#include <cstdio>
#include <string>

#include "io/fake_hub.h"
#include "io/temp_dir.h"

namespace ferry::io {
namespace {

using ::ferry::testing::RecordedRequest;
using ::ferry::testing::Reply;
using ::ferry::testing::TestHttpServer;
using ::testing::HasSubstr;

TEST(HttpClientTest, ParsesUrls) {
  auto u = ParseUrl("https://huggingface.co/api/models/a/b?x=1#frag");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "huggingface.co");
  EXPECT_EQ(u->port, "443");
  EXPECT_EQ(u->target, "/api/models/a/b?x=1");
  EXPECT_EQ(u->Origin(), "https://huggingface.co:443");
  EXPECT_EQ(u->ToString(), "https://huggingface.co/api/models/a/b?x=1");
  u = ParseUrl("HTTP://LocalHost:8080");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, "8080");
  EXPECT_EQ(u->target, "/");
  EXPECT_EQ(u->ToString(), "http://localhost:8080/");
  u = ParseUrl("http://[::1]:9/x");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->Origin(), "http://[::1]:9");
  for (const char* bad : {"huggingface.co/x", "ftp://h/x", "http:///x", "http://user:pw@h/x", "http://h:0/",
                          "http://h:99999/", "http://h:8a/", "http://h/a b", "http://h/a\r\nX: y"}) {
    EXPECT_FALSE(ParseUrl(bad).ok()) << bad;
  }
}

TEST(HttpClientTest, ResolvesRedirectLocations) {
  const Url base = *ParseUrl("https://hub.example/org/repo/resolve/main/dir/file.json?x=1");
  EXPECT_EQ(ResolveLocation(base, "https://cdn.example/blob?sig=2")->ToString(), "https://cdn.example/blob?sig=2");
  EXPECT_EQ(ResolveLocation(base, "//cdn.example/b")->ToString(), "https://cdn.example/b");
  EXPECT_EQ(ResolveLocation(base, "/api/x")->ToString(), "https://hub.example/api/x");
  EXPECT_EQ(ResolveLocation(base, "other.json")->ToString(), "https://hub.example/org/repo/resolve/main/dir/other.json");
  EXPECT_EQ(ResolveLocation(base, "../../v2/f")->ToString(), "https://hub.example/org/repo/resolve/v2/f");
  EXPECT_EQ(ResolveLocation(base, "/a/./b/../c/")->ToString(), "https://hub.example/a/c/");
  EXPECT_EQ(ResolveLocation(base, "/../../x")->ToString(), "https://hub.example/x");
  EXPECT_FALSE(ResolveLocation(base, "/x\r\nEvil: 1").ok());
}

TEST(HttpClientTest, PercentEncodes) {
  EXPECT_EQ(PercentEncode("refs/pr/3", false), "refs%2Fpr%2F3");
  EXPECT_EQ(PercentEncode("dir/a b+c.json", true), "dir/a%20b%2Bc.json");
}

TEST(HttpClientTest, FollowsRedirectsAndKeepsTheTokenToItsOrigin) {
  TestHttpServer other([](const RecordedRequest& r) {
    Reply reply;
    reply.body = "from the other port: " + r.target;
    return reply;
  });
  const std::string other_url = "http://127.0.0.1:" + std::to_string(other.port());
  std::vector<RecordedRequest> seen;
  TestHttpServer main([&](const RecordedRequest& r) {
    seen.push_back(r);
    Reply reply;
    reply.status = 302;
    if (r.target == "/a/b") reply.headers = {{"Location", "c"}};              // relative
    if (r.target == "/a/c") reply.headers = {{"Location", "/d"}};             // absolute path
    if (r.target == "/d") reply.headers = {{"Location", other_url + "/e"}};   // another origin
    return reply;
  });
  HttpClient client;
  HttpRequest request;
  request.url = "http://127.0.0.1:" + std::to_string(main.port()) + "/a/b";
  request.authorization = "Bearer t";
  std::string body;
  auto r = client.Send(request, [&](std::string_view piece) {
    body.append(piece);
    return Status::Ok();
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(body, "from the other port: /e");
  EXPECT_EQ(r->url, other_url + "/e");
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& s : seen) EXPECT_EQ(s.Header("authorization"), "Bearer t");
  EXPECT_EQ(client.withheld_authorizations(), 1);
}

TEST(HttpClientTest, StopsAfterTooManyRedirects) {
  TestHttpServer loop([](const RecordedRequest&) {
    Reply reply;
    reply.status = 307;
    reply.headers = {{"Location", "/again"}};
    return reply;
  });
  HttpOptions options;
  options.max_redirects = 3;
  HttpClient client(options);
  HttpRequest request;
  request.url = "http://127.0.0.1:" + std::to_string(loop.port()) + "/";
  auto r = client.Send(request);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("more than 3 redirects"));
  request.follow_redirects = false;
  r = client.Send(request);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 307);
  EXPECT_EQ(r->Header("LOCATION"), "/again");
}

TEST(HttpClientTest, TimesOutASlowServer) {
  TestHttpServer slow([](const RecordedRequest&) {
    Reply reply;
    reply.delay = std::chrono::milliseconds(1500);
    return reply;
  });
  HttpOptions options;
  options.read_timeout = std::chrono::milliseconds(200);
  HttpClient client(options);
  HttpRequest request;
  request.url = "http://127.0.0.1:" + std::to_string(slow.port()) + "/";
  const auto start = std::chrono::steady_clock::now();
  auto r = client.Send(request);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1200));
}

TEST(HttpClientTest, BoundsTheResponseHeader) {
  TestHttpServer big([](const RecordedRequest&) {
    Reply reply;
    reply.headers = {{"X-Big", std::string(100000, 'a')}};
    return reply;
  });
  HttpClient client;
  HttpRequest request;
  request.url = "http://127.0.0.1:" + std::to_string(big.port()) + "/";
  auto r = client.Send(request);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("larger than 65536"));
}

TEST(HttpClientTest, ReportsABodyCutShort) {
  TestHttpServer cut([](const RecordedRequest&) {
    Reply reply;
    reply.body = std::string(10000, 'x');
    reply.cut_after = 4000;
    return reply;
  });
  HttpClient client;
  HttpRequest request;
  request.url = "http://127.0.0.1:" + std::to_string(cut.port()) + "/";
  size_t got = 0;
  auto r = client.Send(request, [&](std::string_view piece) {
    got += piece.size();
    return Status::Ok();
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("closed after 4000 bytes"));
  EXPECT_EQ(got, 4000u);
}

TEST(HttpClientTest, RefusedConnectionIsUnavailable) {
  int port = 0;
  {
    TestHttpServer gone([](const RecordedRequest&) { return Reply(); });
    port = gone.port();
  }
  HttpClient client;
  HttpRequest request;
  request.url = "http://127.0.0.1:" + std::to_string(port) + "/";
  auto r = client.Send(request);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("127.0.0.1"));
}

// A self-signed certificate for IP 127.0.0.1 (key and certificate as PEM files in `dir`).
void WriteSelfSignedCertificate(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("ferry test"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1"},
                                   std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    ASSERT_NE(ext, nullptr);
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  ASSERT_GT(X509_sign(cert, key, EVP_sha256()), 0);
  std::FILE* c = std::fopen(cert_path.c_str(), "w");
  PEM_write_X509(c, cert);
  std::fclose(c);
  std::FILE* k = std::fopen(key_path.c_str(), "w");
  PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(k);
  X509_free(cert);
  EVP_PKEY_free(key);
}

// Answers every request over TLS with "hello over TLS"; a client that rejects the
// certificate just ends its connection.
class TlsTestServer {
 public:
  TlsTestServer(const std::string& cert_path, const std::string& key_path)
      : tls_(boost::asio::ssl::context::tls_server), acceptor_(ioc_) {
    namespace net = boost::asio;
    tls_.use_certificate_chain_file(cert_path);
    tls_.use_private_key_file(key_path, net::ssl::context::pem);
    const net::ip::tcp::endpoint at(net::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(at.protocol());
    acceptor_.bind(at);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Serve(); });
  }
  ~TlsTestServer() {
    stopped_ = true;
    boost::system::error_code ec;
    boost::asio::ip::tcp::socket poke(ioc_);
    poke.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)}, ec);
    thread_.join();
  }
  int port() const { return port_; }

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
      boost::beast::ssl_stream<net::ip::tcp::socket> stream(std::move(socket), tls_);
      stream.handshake(net::ssl::stream_base::server, ec);
      if (ec) continue;
      boost::beast::flat_buffer buffer;
      http::request<http::string_body> req;
      http::read(stream, buffer, req, ec);
      if (ec) continue;
      http::response<http::string_body> res{http::status::ok, 11};
      res.body() = "hello over TLS";
      res.prepare_payload();
      http::write(stream, res, ec);
      stream.shutdown(ec);
    }
  }

  boost::asio::io_context ioc_;
  boost::asio::ssl::context tls_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

TEST(HttpClientTest, TlsChecksTheChainAndTheHostName) {
  testing::TempDir tmp;
  const std::string cert = tmp.File("cert.pem");
  const std::string key = tmp.File("key.pem");
  WriteSelfSignedCertificate(cert, key);
  TlsTestServer server(cert, key);
  const std::string port = std::to_string(server.port());
  HttpRequest request;
  request.url = "https://127.0.0.1:" + port + "/";

  // The system store does not know the certificate.
  HttpClient system_store;
  auto untrusted = system_store.Send(request);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_THAT(untrusted.status().message(), HasSubstr("not trusted"));

  // Trusted, for the address it names.
  HttpOptions options;
  options.ca_file = cert;
  HttpClient trusting(options);
  std::string body;
  auto ok = trusting.Send(request, [&](std::string_view piece) {
    body.append(piece);
    return Status::Ok();
  });
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(body, "hello over TLS");

  // Trusted, but not for the name "localhost": the host name check refuses it.
  request.url = "https://localhost:" + port + "/";
  HttpClient by_name(options);
  auto mismatch = by_name.Send(request);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(mismatch.status().message(), HasSubstr("not trusted"));
  EXPECT_THAT(mismatch.status().message(), HasSubstr("mismatch"));
}

}  // namespace
}  // namespace ferry::io
