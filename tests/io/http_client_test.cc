// The download client against servers on 127.0.0.1: URL handling, redirects (relative,
// absolute, too many), credentials kept to their origin, timeouts, bounded headers, cut
// bodies, and a TLS certificate that the system store does not trust.
#include "io/http_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "io/fake_hub.h"

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

}  // namespace
}  // namespace ferry::io
