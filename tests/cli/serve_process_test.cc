// `ferry serve` as a process, for what only a process shows: signals (SIGPIPE on a closed
// stdout, SIGTERM with a shutdown budget) and what clients see while it stops.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "serve/test_client.h"
#include "serve_process.h"
#include "test_util.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::ServeProcess;

std::string Demo(const std::string& name) { return testing::SourcePath("models/demo/" + name); }

const char* kCompletion = R"({"model":"m","prompt":"In the beginning","max_tokens":4,"temperature":0})";

// A closed stdout used to end the server on the next request-log line (SIGPIPE).
TEST(ServeProcessTest, AClosedStdoutDoesNotEndTheServer) {
  ServeProcess p({"serve", "--model", "m=" + Demo("kjv-decoder"), "--no-auth", "--port", "0"},
                 /*close_stdout_reader=*/true);
  const int port = p.WaitReady();
  ASSERT_NE(port, 0) << p.Stderr();
  for (int i = 0; i < 3; ++i) {
    auto r = serve::testing::Http(port, "POST", "/v1/completions", kCompletion);
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_TRUE(p.Alive()) << p.Stderr();
  EXPECT_NE(p.Stderr().find("request log disabled"), std::string::npos) << p.Stderr();
  EXPECT_EQ(p.Terminate(20s), 0) << p.Stderr();
}

// At the open-file limit the server used to accept until accept() failed (EMFILE), and later
// clients waited unanswered in the listen backlog until a connection closed (60 s for idle
// ones). It now holds no more connections than the descriptors left allow, so a new client
// is still accepted and the connection-limit policy applies: an idle connection gives its
// place, else a 503.
TEST(ServeProcessTest, AtTheOpenFileLimitIdleConnectionsGiveWayToNewOnes) {
  ServeProcess p({"serve", "--model", "m=" + Demo("kjv-decoder"), "--no-auth", "--port", "0"},
                 /*close_stdout_reader=*/false, /*max_open_files=*/128);
  const int port = p.WaitReady();
  ASSERT_NE(port, 0) << p.Stderr();
  EXPECT_NE(p.Stderr().find("may open only 128 files"), std::string::npos) << p.Stderr();
  std::vector<std::unique_ptr<serve::testing::TestConnection>> idle;
  for (int i = 0; i < 150; ++i) idle.push_back(std::make_unique<serve::testing::TestConnection>(port, 5s));
  const auto start = Clock::now();
  auto r = serve::testing::Http(port, "POST", "/v1/completions", kCompletion);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_TRUE(p.Alive()) << p.Stderr();
  idle.clear();
  EXPECT_EQ(p.Terminate(20s), 0) << p.Stderr();
}

std::string WriteConfig(const std::string& yaml) {
  char tmpl[] = "/tmp/ferry_serve_cfg_XXXXXX.yaml";
  const int fd = mkstemps(tmpl, 5);
  close(fd);
  std::ofstream(tmpl) << yaml;
  return tmpl;
}

// An encoder's queue used to drain in full at SIGTERM whatever the budget (98 s with 1 s):
// batches start only within shutdown_timeout_ms, the rest are refused with a 503.
TEST(ServeProcessTest, EncoderShutdownKeepsItsBudget) {
  const std::string config = WriteConfig(
      "listener: {host: 127.0.0.1, port: 0, shutdown_timeout_ms: 1000}\nauth: {mode: none}\n"
      "models:\n  - name: m\n    path: " + Demo("kjv-classifier") + "\n    threads: 1\n"
      "    dynamic_batching: {max_batch_size: 1, max_queue_delay_us: 0}\n"
      "log: {level: info, request_log: false}\n");
  ServeProcess p({"serve", "--config", config});
  const int port = p.WaitReady();
  ASSERT_NE(port, 0) << p.Stderr();
  // Far more work than the budget (tens of seconds on two cores): 32 requests of 64 long
  // inputs, one input per batch.
  std::string text;
  for (int w = 0; w < 6; ++w) text += "And it came to pass in those days, that there went out a decree. ";
  std::string inputs;
  for (int i = 0; i < 64; ++i) inputs += std::string(i ? "," : "") + "\"" + text + std::to_string(i) + "\"";
  const std::string body = R"({"model":"m","input":[)" + inputs + "]}";
  std::vector<int> statuses(32, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < 32; ++i) {
    clients.emplace_back([&, i] { statuses[i] = serve::testing::Http(port, "POST", "/v1/classify", body).status; });
  }
  std::this_thread::sleep_for(500ms);  // the queue fills
  double seconds = 0;
  EXPECT_EQ(p.Terminate(30s, &seconds), 0) << p.Stderr();
  for (auto& c : clients) c.join();
  EXPECT_LT(seconds, 4.0) << "the 1 s budget was not kept";
  int refused = 0;
  for (int s : statuses) {
    EXPECT_TRUE(s == 200 || s == 503) << s;
    refused += s == 503;
  }
  EXPECT_GT(refused, 0);
  std::remove(config.c_str());
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// With auth mode none the server is reachable only on loopback, but a web page can still
// reach it through a name of its own resolving to 127.0.0.1 (DNS rebinding): such a Host is
// refused. The request log keeps a hash of the user field, never the value.
TEST(ServeProcessTest, ModeNoneAnswersLoopbackHostsOnlyAndTheLogHashesTheUser) {
  const std::string cfg = WriteConfig(
      "listener: {host: 127.0.0.1, port: 0}\n"
      "auth: {mode: none, allowed_hosts: [ferry.internal]}\n"
      "models:\n  - {name: m, path: " + Demo("kjv-decoder") + ", threads: 1}\n"
      "log: {level: info, request_log: true}\n");
  ServeProcess p({"serve", "--config", cfg});
  const int port = p.WaitReady();
  ASSERT_NE(port, 0) << p.Stderr();
  auto evil = serve::testing::Http(port, "GET", "/health/live", "", {{"Host", "attacker.example:" + std::to_string(port)}});
  EXPECT_EQ(evil.status, 403) << evil.body;
  EXPECT_EQ(evil.Json()["error"]["type"], "permission_error");
  for (const std::string& host : {"localhost:" + std::to_string(port), std::string("127.0.0.1"), std::string("[::1]:80"),
                                 std::string("ferry.internal"), std::string("LOCALHOST")}) {
    EXPECT_EQ(serve::testing::Http(port, "GET", "/health/live", "", {{"Host", host}}).status, 200) << host;
  }
  const std::string secret = "alice@example.com";
  auto r = serve::testing::Http(
      port, "POST", "/v1/completions",
      R"({"model":"m","prompt":"In the beginning","max_tokens":2,"temperature":0,"user":")" + secret + "\"}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(p.Terminate(20s), 0) << p.Stderr();
  const std::string log = p.ReadStdout();
  EXPECT_NE(log.find("\"user_sha256\""), std::string::npos) << log;
  EXPECT_EQ(log.find(secret), std::string::npos) << log;
  std::remove(cfg.c_str());
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// Keys never reach the logs (stdout request log, stderr at debug level) or error bodies,
// whether they are valid, wrong, or sent where they do not belong.
TEST(ServeProcessTest, KeysNeverAppearInLogsOrErrors) {
  const std::string tenant_key = "sk-tenant-7f3a9c1e";
  const std::string admin_key = "sk-admin-b52d04aa";
  const std::string wrong_key = "sk-wrong-e91c77d0";
  const std::string cfg = WriteConfig(
      "listener: {host: 127.0.0.1, port: 0}\n"
      "auth: {mode: keys, admin_keys: [" + admin_key + "]}\n"
      "tenants:\n  - {name: acme, keys: [" + tenant_key + "]}\n"
      "models:\n  - {name: m, path: " + Demo("kjv-decoder") + ", threads: 1}\n"
      "log: {level: debug, request_log: true}\n");
  ServeProcess p({"serve", "--config", cfg});
  const int port = p.WaitReady();
  ASSERT_NE(port, 0) << p.Stderr();
  std::string bodies;
  auto call = [&](const std::string& method, const std::string& path, const std::string& body,
                  const std::map<std::string, std::string>& headers) {
    auto r = serve::testing::Http(port, method, path, body, headers);
    bodies += r.body;
    return r.status;
  };
  EXPECT_EQ(call("POST", "/v1/completions", kCompletion, {{"Authorization", "Bearer " + tenant_key}}), 200);
  EXPECT_EQ(call("POST", "/v1/completions", kCompletion, {{"Authorization", "Bearer " + wrong_key}}), 401);
  EXPECT_EQ(call("GET", "/admin/status", "", {{"Authorization", "Bearer " + tenant_key}}), 403);
  EXPECT_EQ(call("GET", "/admin/status", "", {{"Authorization", "Bearer " + admin_key}}), 200);
  EXPECT_EQ(call("POST", "/v1/completions", R"({"model":"m","prompt":")" + wrong_key + R"(","max_tokens":0})",
                 {{"Authorization", "Bearer " + tenant_key}}), 400);
  EXPECT_EQ(call("POST", "/v1/completions", kCompletion, {{"Authorization", "Basic " + wrong_key}}), 401);
  EXPECT_EQ(p.Terminate(20s), 0) << p.Stderr();
  const std::string logs = p.ReadStdout() + p.Stderr();
  for (const std::string& key : {tenant_key, admin_key}) {
    EXPECT_EQ(logs.find(key), std::string::npos) << key << " in the logs:\n" << logs;
    EXPECT_EQ(bodies.find(key), std::string::npos) << key << " in an error body";
  }
  // A wrong key is a secret too (often a real key for another service): only the prompt
  // that carried it as text may show it, and the request log does not hold prompts.
  EXPECT_EQ(logs.find(wrong_key), std::string::npos) << logs;
  std::remove(cfg.c_str());
}

}  // namespace
}  // namespace ferry
