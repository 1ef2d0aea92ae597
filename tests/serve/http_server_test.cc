// The HTTP layer on its own, with a handler that echoes what it was given: request
// framing limits, refused ambiguous framings, HEAD, Expect, and that no exception thrown
// on an I/O thread ends the process.
#include "serve/http_server.h"

#include <boost/asio/ssl.hpp>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <thread>

#include "test_client.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;
using testing::HttpReply;
using testing::TestConnection;
using namespace std::chrono_literals;

std::string ErrorJson(int status, const std::string& message) {
  return json{{"error", {{"message", message}, {"code", status}}}}.dump();
}

// Echoes the method, path, header names and body size.
void Echo(HttpRequest&& r, std::shared_ptr<ResponseWriter> w) {
  json headers = json::object();
  for (const auto& [k, v] : r.headers) headers[k] = v;
  json body{{"method", r.method}, {"path", r.path}, {"headers", headers}, {"body_bytes", r.body.size()}};
  w->Send(200, "application/json", body.dump());
}

TEST(MaxConnectionsWithinTest, TheOpenFileLimitCapsConnections) {
  EXPECT_EQ(MaxConnectionsWithin(4096, -1, 10), 4096);  // no limit
  EXPECT_EQ(MaxConnectionsWithin(4096, 1048576, 10), 4096);
  EXPECT_EQ(MaxConnectionsWithin(4096, 1024, 9), 1024 - 9 - static_cast<int>(kReservedDescriptors));
  EXPECT_EQ(MaxConnectionsWithin(100, 1024, 9), 100);
  EXPECT_EQ(MaxConnectionsWithin(4096, 50, 10), 1);  // never none
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions o = {}) {
    o.port = 0;
    o.io_threads = 2;
    if (o.header_timeout_ms == HttpServerOptions{}.header_timeout_ms) o.header_timeout_ms = 2000;
    server_ = std::make_unique<HttpServer>(o, Echo, ErrorJson);
    ASSERT_TRUE(server_->Listen().ok());
    server_->Start();
  }
  void TearDown() override {
    if (server_) server_->Shutdown(1000);
  }
  int port() const { return server_->port(); }
  void ExpectServing() {
    HttpReply r = testing::Http(port(), "GET", "/ping");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["path"], "/ping");
  }
  std::unique_ptr<HttpServer> server_;
};

std::string ChunkedHead(const std::string& extra = "") {
  return "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + extra + "\r\n";
}

// A self-signed certificate for localhost and 127.0.0.1, made with the openssl tool.
struct TestCertificate {
  std::string dir, cert, key;
  explicit TestCertificate(const std::string& common_name) {
    char tmpl[] = "/tmp/ferry_tls_XXXXXX";
    dir = mkdtemp(tmpl);
    cert = dir + "/cert.pem";
    key = dir + "/key.pem";
    const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=" + common_name +
                            "' -addext 'subjectAltName=DNS:localhost,IP:127.0.0.1' -keyout " + key + " -out " + cert +
                            " >/dev/null 2>&1";
    ok = std::system(cmd.c_str()) == 0;
  }
  ~TestCertificate() { std::filesystem::remove_all(dir); }
  bool ok = false;
};

// One HTTPS request with a client that trusts `ca` only; "" when the handshake or the
// exchange fails. `subject` gets the server certificate's subject.
std::string HttpsGet(int port, const std::string& ca, const std::string& path, std::string* subject = nullptr) {
  namespace net = boost::asio;
  namespace ssl = net::ssl;
  net::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  ctx.set_verify_mode(ssl::verify_peer);
  boost::system::error_code ec;
  ctx.load_verify_file(ca, ec);
  if (ec) return "";
  ssl::stream<net::ip::tcp::socket> stream(ioc, ctx);
  stream.set_verify_callback(ssl::host_name_verification("localhost"));
  SSL_set_tlsext_host_name(stream.native_handle(), "localhost");
  stream.next_layer().connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  if (ec) return "";
  stream.handshake(ssl::stream_base::client, ec);
  if (ec) return "";
  if (subject != nullptr) {
    X509* peer = SSL_get1_peer_certificate(stream.native_handle());
    char name[256] = {};
    if (peer != nullptr) X509_NAME_oneline(X509_get_subject_name(peer), name, sizeof(name));
    X509_free(peer);
    *subject = name;
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  net::write(stream, net::buffer(req), ec);
  if (ec) return "";
  std::string reply;
  char buf[4096];
  for (;;) {
    const size_t n = stream.read_some(net::buffer(buf), ec);
    reply.append(buf, n);
    if (ec) break;
  }
  return reply;
}

// The request that aborted the process: a trailer field of 65,534 bytes or more makes
// Beast throw std::length_error.
TEST_F(HttpServerTest, OversizedTrailerIsRefusedAndTheServerStaysUp) {
  Start();
  for (size_t n : {size_t{65534}, size_t{70000}, size_t{200000}}) {
    TestConnection c(port());
    c.SendRaw(ChunkedHead() + "5\r\nhello\r\n0\r\nX-T: " + std::string(n, 'a') + "\r\n\r\n");
    HttpReply r = c.ReadReply();
    EXPECT_EQ(r.status, 431) << n;
    EXPECT_TRUE(r.Json().contains("error"));
    EXPECT_TRUE(c.WaitClosed(5s));
  }
  ExpectServing();
  EXPECT_EQ(server_->io_exceptions(), 0);
}

TEST_F(HttpServerTest, SmallTrailersAreAcceptedButNeverBecomeHeaders) {
  Start();
  TestConnection c(port());
  c.SendRaw(ChunkedHead() + "5\r\nhello\r\n6\r\n world\r\n0\r\nAuthorization: Bearer sneaky\r\nX-T: 1\r\n\r\n");
  HttpReply r = c.ReadReply();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["body_bytes"], 11);
  EXPECT_FALSE(r.Json()["headers"].contains("authorization"));
  EXPECT_FALSE(r.Json()["headers"].contains("x-t"));
}

TEST_F(HttpServerTest, ChunkExtensionsAreBounded) {
  HttpServerOptions o;
  o.max_header_bytes = 8 * 1024;
  Start(o);
  {
    // One chunk-size line with a 1 MB extension: refused once it passes the line limit.
    TestConnection c(port());
    c.SendRaw(ChunkedHead() + "5;ext=" + std::string(1 << 20, 'e'));
    HttpReply r = c.ReadReply();
    EXPECT_EQ(r.status, 431);
  }
  {
    // Many small extensions, each under the line limit: the framing overhead in total is
    // bounded by the body limit.
    o.max_body_bytes = 64 * 1024;
    server_->Shutdown(1000);
    Start(o);
    TestConnection c(port());
    std::string req = ChunkedHead();
    const std::string chunk = "1;e=" + std::string(4000, 'x') + "\r\na\r\n";
    while (req.size() < 400 * 1024) req += chunk;
    c.SendRaw(req);
    HttpReply r = c.ReadReply();
    EXPECT_EQ(r.status, 413);
  }
  ExpectServing();
}

TEST_F(HttpServerTest, ASenderThatNeverPausesStillGetsTheDeadline) {
  HttpServerOptions o;
  o.header_timeout_ms = 600;
  o.max_body_bytes = 64 << 20;
  Start(o);
  TestConnection c(port(), 10s);
  c.SendRaw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 60000000\r\n\r\n");
  // Keep bytes flowing well past the deadline; the server answers 408 and closes.
  const auto until = std::chrono::steady_clock::now() + 3s;
  const std::string piece(16 * 1024, 'b');
  size_t sent = 0;
  while (std::chrono::steady_clock::now() < until && sent < 40000000) {
    c.SendRaw(piece);
    sent += piece.size();
    std::this_thread::sleep_for(1ms);
  }
  HttpReply r = c.ReadReply();
  EXPECT_EQ(r.status, 408) << "after " << sent << " bytes";
  ExpectServing();
}

TEST_F(HttpServerTest, AmbiguousFramingIsRefused) {
  Start();
  const std::vector<std::string> requests = {
      // Beast would read this body as a second request (chunked is not the last coding).
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
      "GET /admin/status HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}",
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x",
      "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n"
      "Content-Length: 2\r\n\r\n{}",
      "POST /echo HTTP/1.1\r\nHost: x\r\nHost: y\r\nContent-Length: 0\r\n\r\n",
      "POST /echo HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
  };
  for (const std::string& raw : requests) {
    TestConnection c(port());
    c.SendRaw(raw);
    HttpReply r = c.ReadReply();
    EXPECT_EQ(r.status, 400) << raw;
    EXPECT_TRUE(r.Json().contains("error")) << raw;
    // Nothing after the refused request is answered: the connection is closed.
    EXPECT_TRUE(c.WaitClosed(5s)) << raw;
  }
  ExpectServing();
}

TEST_F(HttpServerTest, RepeatedOrdinaryHeadersAreJoined) {
  Start();
  HttpReply r = [&] {
    TestConnection c(port());
    c.SendRaw("GET /x HTTP/1.1\r\nHost: x\r\nAccept: a\r\nAccept: b\r\n\r\n");
    return c.ReadReply();
  }();
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["headers"]["accept"], "a, b");
}

TEST_F(HttpServerTest, HeadResponsesHaveNoBody) {
  Start();
  TestConnection c(port());
  c.SendRaw("HEAD /x HTTP/1.1\r\nHost: x\r\n\r\n");
  HttpReply head = c.ReadHead();
  ASSERT_EQ(head.status, 200);
  EXPECT_NE(head.headers["content-length"], "0");
  // The next response on the connection starts right away: no body bytes came between.
  HttpReply next = c.Request("GET", "/after");
  EXPECT_EQ(next.status, 200);
  EXPECT_EQ(next.Json()["path"], "/after");
}

TEST_F(HttpServerTest, ExpectContinueIsAnswered) {
  Start();
  TestConnection c(port());
  c.SendRaw("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  HttpReply interim = c.ReadHead();
  EXPECT_EQ(interim.status, 100);
  c.SendRaw("abcd");
  HttpReply r = c.ReadReply();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["body_bytes"], 4);

  TestConnection other(port());
  other.SendRaw("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(other.ReadReply().status, 417);
}

TEST_F(HttpServerTest, AThrowInAConnectionHandlerCostsOnlyThatConnection) {
  // The hook outlives this body (the fixture shuts the server down after it, and the
  // acceptor's last, aborted accept still calls it), so its flags are shared, not locals.
  struct Faults {
    std::atomic<bool> reads{false};
    std::atomic<bool> accepts{false};
  };
  const auto faults = std::make_shared<Faults>();
  std::atomic<bool>& fail_reads = faults->reads;
  std::atomic<bool>& fail_accepts = faults->accepts;
  HttpServerOptions o;
  o.fault_injection = [faults](const char* point) {
    if (std::string(point) == "read" && faults->reads.load()) throw std::runtime_error("injected read fault");
    if (std::string(point) == "accept" && faults->accepts.exchange(false)) throw std::length_error("injected");
  };
  Start(o);
  {
    TestConnection c(port());
    fail_reads = true;
    c.SendRaw("GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(c.WaitClosed(5s));
    fail_reads = false;
  }
  EXPECT_GE(server_->io_exceptions(), 1);
  ExpectServing();
  {
    fail_accepts = true;
    TestConnection dropped(port());
    EXPECT_TRUE(dropped.WaitClosed(5s));
  }
  ExpectServing();
}

// A client that half-closes after sending (Connection: close, then shutdown of its sending
// side) still gets its response.
TEST_F(HttpServerTest, AHalfClosedClientGetsItsResponse) {
  std::shared_ptr<ResponseWriter> held;
  std::mutex mu;
  std::condition_variable cv;
  HttpServerOptions o;
  o.port = 0;
  o.io_threads = 2;
  server_ = std::make_unique<HttpServer>(
      o,
      [&](HttpRequest&&, std::shared_ptr<ResponseWriter> w) {
        std::lock_guard<std::mutex> lock(mu);
        held = std::move(w);
        cv.notify_all();
      },
      ErrorJson);
  ASSERT_TRUE(server_->Listen().ok());
  server_->Start();
  TestConnection c(port());
  c.SendRaw("GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  c.ShutdownSend();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return held != nullptr; }));
  }
  std::this_thread::sleep_for(100ms);  // the server has seen the half-close by now
  EXPECT_FALSE(held->disconnected());
  held->Send(200, "application/json", R"({"late":true})");
  HttpReply r = c.ReadReply();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["late"], true);
}

// A response whose client stops reading is dropped at the write timeout, and the request
// stops counting as in flight exactly once.
TEST_F(HttpServerTest, AWriteTimeoutEndsTheRequestOnce) {
  HttpServerOptions o;
  o.port = 0;
  o.io_threads = 2;
  o.write_timeout_ms = 300;
  server_ = std::make_unique<HttpServer>(
      o,
      [](HttpRequest&&, std::shared_ptr<ResponseWriter> w) {
        w->Send(200, "application/octet-stream", std::string(64 << 20, 'x'));  // far more than socket buffers
      },
      ErrorJson);
  ASSERT_TRUE(server_->Listen().ok());
  server_->Start();
  TestConnection c(port());
  c.SendRaw("GET /big HTTP/1.1\r\nHost: x\r\n\r\n");  // and never read
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server_->active_requests() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(server_->active_requests(), 1);
  while (server_->active_connections() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(server_->active_connections(), 0);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(server_->active_requests(), 0);
}

// At the connection limit, connections that hold a slot without using it make room for new
// ones (a health probe must get through): first the longest-idle keep-alive connection, then
// a client that is still sending its request (slow drip).
TEST_F(HttpServerTest, IdleAndSlowConnectionsMakeRoomAtTheLimit) {
  HttpServerOptions o;
  o.max_connections = 4;
  Start(o);
  auto fill = [&](const std::string& bytes) {
    std::vector<std::unique_ptr<TestConnection>> held;
    for (int i = 0; i < 4; ++i) {
      held.push_back(std::make_unique<TestConnection>(port(), 3s));
      ASSERT_TRUE(held.back()->connected());
      if (!bytes.empty()) held.back()->SendRaw(bytes);
      std::this_thread::sleep_for(20ms);  // distinct ages: the first is the oldest
    }
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (server_->active_connections() < 4 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    ASSERT_EQ(server_->active_connections(), 4);
    const int64_t before = server_->evictions();
    ExpectServing();
    EXPECT_EQ(server_->evictions(), before + 1);
    EXPECT_TRUE(held.front()->WaitClosed(2s)) << "the oldest goes first";
    for (size_t i = 1; i < held.size(); ++i) held[i]->Close();
  };
  fill("");                                  // idle keep-alive connections
  fill("POST /echo HTTP/1.1\r\nHost: x\r\n");  // requests that never finish arriving
}

// HTTPS: a client that trusts the certificate gets its answer; plain HTTP on the TLS port
// and a client that does not trust it fail alone; a reload serves the new certificate to
// new connections.
TEST_F(HttpServerTest, TlsServesAndReloadsItsCertificate) {
  TestCertificate first("ferry-first"), second("ferry-second");
  ASSERT_TRUE(first.ok && second.ok) << "openssl is needed (scripts/install_deps.sh)";
  HttpServerOptions o;
  o.tls.cert_path = first.dir + "/live-cert.pem";
  o.tls.key_path = first.dir + "/live-key.pem";
  std::filesystem::copy_file(first.cert, o.tls.cert_path);
  std::filesystem::copy_file(first.key, o.tls.key_path);
  Start(o);
  std::string subject;
  std::string reply = HttpsGet(port(), first.cert, "/secure", &subject);
  EXPECT_NE(reply.find("HTTP/1.1 200"), std::string::npos) << reply;
  EXPECT_NE(reply.find("/secure"), std::string::npos);
  EXPECT_NE(subject.find("ferry-first"), std::string::npos) << subject;
  EXPECT_EQ(HttpsGet(port(), second.cert, "/untrusted"), "") << "a client that does not trust it refuses";
  {
    TestConnection plain(port(), 3s);
    plain.SendRaw("GET /plain HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_FALSE(plain.ReadReply().ok);
  }
  // The certificate is renewed on disk; a reload swaps it for new connections.
  std::filesystem::copy_file(second.cert, o.tls.cert_path, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(second.key, o.tls.key_path, std::filesystem::copy_options::overwrite_existing);
  ASSERT_TRUE(server_->ReloadTls().ok());
  reply = HttpsGet(port(), second.cert, "/renewed", &subject);
  EXPECT_NE(reply.find("HTTP/1.1 200"), std::string::npos) << reply;
  EXPECT_NE(subject.find("ferry-second"), std::string::npos) << subject;
  // A broken file is refused and the served certificate stays.
  { std::ofstream(o.tls.key_path) << "not a key"; }
  EXPECT_FALSE(server_->ReloadTls().ok());
  EXPECT_NE(HttpsGet(port(), second.cert, "/still").find("HTTP/1.1 200"), std::string::npos);
}

TEST(HttpServerTlsTest, BadCertificateFilesAreRefusedAtListen) {
  HttpServerOptions o;
  o.port = 0;
  o.tls.cert_path = "/nonexistent/cert.pem";
  o.tls.key_path = "/nonexistent/key.pem";
  HttpServer server(o, Echo, ErrorJson);
  Status st = server.Listen();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent/cert.pem"), std::string::npos) << st.message();
}

TEST_F(HttpServerTest, AThrowOutsideAnyConnectionDoesNotEndTheIoThreads) {
  Start();
  // More throws than there are I/O threads: each thread catches, counts and carries on.
  for (int i = 0; i < 5; ++i) server_->PostForTesting([] { throw std::length_error("field value too large"); });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server_->io_exceptions() < 5 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server_->io_exceptions(), 5);
  for (int i = 0; i < 8; ++i) ExpectServing();
}

}  // namespace
}  // namespace ferry::serve
