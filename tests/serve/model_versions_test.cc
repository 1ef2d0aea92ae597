// The model repository end to end, in process: a new version published by rename under
// load (no failed request, every response attributed to the version that made it), a
// corrupt version (the old one keeps serving, the status says why), unloading while
// streams run, a version too big for the memory budget, and 50 load/unload cycles that
// give their memory back (RSS).
#include "serve/model_versions.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "serve/server.h"
#include "repository_test_util.h"
#include "test_client.h"
#include "test_util.h"

namespace ferry::serve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::HttpReply;
using testing::PostJson;
using testing::TestConnection;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using namespace ferry::serve::testing;  // NOLINT: the repository helpers

struct Sample {
  Clock::time_point sent, received;
  int status = 0;
  std::string version;
  std::string text;
};

TEST(ModelVersionsTest, PublishUnderLoadThenCorruptVersionKeepsTheLastGoodOne) {
  const fs::path repo = TempRepo("publish");
  Publish(repo / "kjv", 1, V1Source());
  std::unique_ptr<Server> server = StartRepoServer(repo);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  HttpReply first = PostJson(port, "/v1/completions", Greedy("kjv"));
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.headers["x-ferry-model-version"], "1");
  const std::string v1_text = first.Json()["choices"][0]["text"];

  // Load: 4 clients, each sending greedy requests back to back.
  std::atomic<bool> done{false};
  std::vector<std::vector<Sample>> samples(4);
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      while (!done.load()) {
        Sample s;
        s.sent = Clock::now();
        HttpReply r = PostJson(port, "/v1/completions", Greedy("kjv"));
        s.received = Clock::now();
        s.status = r.status;
        s.version = r.headers["x-ferry-model-version"];
        if (r.status == 200) s.text = r.Json()["choices"][0]["text"];
        samples[c].push_back(std::move(s));
      }
    });
  }
  std::this_thread::sleep_for(500ms);
  Publish(repo / "kjv", 2, V2Source());
  EXPECT_TRUE(WaitForState(port, "kjv", 2, "ready"));
  EXPECT_TRUE(WaitForState(port, "kjv", 1, "unloaded"));
  std::this_thread::sleep_for(500ms);
  done = true;
  for (auto& t : clients) t.join();

  HttpReply after = PostJson(port, "/v1/completions", Greedy("kjv"));
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(after.headers["x-ferry-model-version"], "2");
  const std::string v2_text = after.Json()["choices"][0]["text"];
  ASSERT_NE(v1_text, v2_text) << "the two versions must differ for the attribution to mean anything";

  // 0 failed requests; each response is the greedy output of the version that says it made
  // it; once a client has seen v2 it never sees v1 again, and nothing sent after the first
  // v2 response was answered comes from v1.
  size_t n1 = 0, n2 = 0;
  Clock::time_point first_v2 = Clock::time_point::max();
  for (const auto& per_client : samples) {
    for (const Sample& s : per_client) {
      if (s.version == "2") first_v2 = std::min(first_v2, s.received);
    }
  }
  for (const auto& per_client : samples) {
    bool seen_v2 = false;
    for (const Sample& s : per_client) {
      ASSERT_EQ(s.status, 200);
      if (s.version == "1") {
        ++n1;
        EXPECT_EQ(s.text, v1_text);
        EXPECT_FALSE(seen_v2) << "a v1 response after this client saw v2";
        EXPECT_LT(s.sent, first_v2) << "a request sent after the switch was served by v1";
      } else {
        ASSERT_EQ(s.version, "2");
        ++n2;
        EXPECT_EQ(s.text, v2_text);
        seen_v2 = true;
      }
    }
  }
  EXPECT_GT(n1, 0u);
  EXPECT_GT(n2, 0u);
  // A pinned version: v2 is ready, v1 is not served any more.
  EXPECT_EQ(PostJson(port, "/v1/completions", Greedy("kjv@2")).status, 200);
  HttpReply gone = PostJson(port, "/v1/completions", Greedy("kjv@1"));
  EXPECT_EQ(gone.status, 404);
  EXPECT_NE(gone.body.find("unloaded"), std::string::npos) << gone.body;
  // /v1/models lists what is ready.
  const json models = testing::Http(port, "GET", "/v1/models").Json();
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "kjv");
  EXPECT_EQ(models["data"][0]["ferry"]["versions"], json::array({2}));

  // A corrupt v3 (its weights cut short): marked failed with the reason, v2 keeps serving.
  {
    const fs::path tmp = repo / "kjv" / ".incoming-3";
    fs::create_directories(tmp);
    for (const auto& e : fs::directory_iterator(V1Source())) fs::copy_file(e.path(), tmp / e.path().filename());
    fs::resize_file(tmp / "model.safetensors", fs::file_size(tmp / "model.safetensors") / 2);
    fs::rename(tmp, repo / "kjv" / "3");
  }
  ASSERT_TRUE(WaitForState(port, "kjv", 3, "failed"));
  const json v3 = VersionStatus(port, "kjv", 3);
  EXPECT_FALSE(v3.value("reason", "").empty()) << v3.dump();
  EXPECT_NE(v3.value("reason", "").find("model.safetensors"), std::string::npos) << v3.dump();
  EXPECT_EQ(VersionStatus(port, "kjv", 2).value("state", ""), "ready");
  HttpReply still = PostJson(port, "/v1/completions", Greedy("kjv"));
  EXPECT_EQ(still.status, 200);
  EXPECT_EQ(still.headers["x-ferry-model-version"], "2");
  EXPECT_EQ(still.Json()["choices"][0]["text"], v2_text);
  HttpReply pinned = PostJson(port, "/v1/completions", Greedy("kjv@3"));
  EXPECT_EQ(pinned.status, 404);
  EXPECT_NE(pinned.body.find("failed"), std::string::npos) << pinned.body;
  const std::string metrics = testing::Http(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:model_loads_total{model_name=\"kjv\",version=\"3\",result=\"failure\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("ferry:model_ready{model_name=\"kjv\",version=\"2\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("ferry:model_ready{model_name=\"kjv\",version=\"1\"} 0"), std::string::npos);
  server.reset();
  fs::remove_all(repo);
}

TEST(ModelVersionsTest, UnloadWhileStreamingFinishesStreamsAndRefusesNewRequests) {
  const fs::path repo = TempRepo("unload");
  Publish(repo / "kjv", 1, V1Source());
  std::unique_ptr<Server> server = StartRepoServer(repo);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  std::vector<std::unique_ptr<TestConnection>> streams;
  for (int i = 0; i < 3; ++i) {
    auto c = std::make_unique<TestConnection>(port);
    json body = Greedy("kjv", 120);
    body["stream"] = true;
    body["ignore_eos"] = true;
    const std::string text = body.dump();
    c->SendRaw("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text);
    HttpReply head = c->ReadHead();
    ASSERT_EQ(head.status, 200);
    std::string event;
    ASSERT_TRUE(c->NextEvent(event));  // streaming has begun
    streams.push_back(std::move(c));
  }
  HttpReply unload = testing::Http(port, "POST", "/admin/models/kjv/unload");
  ASSERT_EQ(unload.status, 202) << unload.body;
  // New requests are refused at once; the status shows the version draining.
  HttpReply refused = PostJson(port, "/v1/completions", Greedy("kjv"));
  EXPECT_EQ(refused.status, 404) << refused.body;
  EXPECT_EQ(refused.Json()["error"]["code"], "model_not_found");
  // Every stream runs to its end.
  for (auto& c : streams) {
    std::string event, last;
    int tokens = 0;
    while (c->NextEvent(event)) {
      if (event == "[DONE]") break;
      last = event;
      ++tokens;
    }
    EXPECT_EQ(event, "[DONE]");
    EXPECT_EQ(json::parse(last)["choices"][0]["finish_reason"], "length") << last;
  }
  EXPECT_TRUE(WaitForState(port, "kjv", 1, "unloaded"));
  // Loaded again through the admin API.
  ASSERT_EQ(testing::Http(port, "POST", "/admin/models/kjv/load").status, 202);
  EXPECT_TRUE(WaitForState(port, "kjv", 1, "ready"));
  EXPECT_EQ(PostJson(port, "/v1/completions", Greedy("kjv")).status, 200);
  // Unknown models and actions.
  EXPECT_EQ(testing::Http(port, "POST", "/admin/models/nope/load").status, 404);
  EXPECT_EQ(testing::Http(port, "POST", "/admin/models/kjv/reload").status, 404);
  EXPECT_EQ(testing::Http(port, "GET", "/admin/models/kjv/load").status, 405);
  EXPECT_EQ(testing::Http(port, "POST", "/admin/models/kjv/load", "{\"version\": 0}").status, 400);
  EXPECT_EQ(testing::Http(port, "POST", "/admin/models/kjv/load", "{\"version\": 9}").status, 404);
  server.reset();
  fs::remove_all(repo);
}

TEST(ModelVersionsTest, VersionThatDoesNotFitTheHostBudgetIsRefusedBeforeLoading) {
  const fs::path repo = TempRepo("budget");
  Publish(repo / "kjv", 1, V1Source());
  std::unique_ptr<Server> server = StartRepoServer(repo, "host_memory_budget_bytes: 1048576\n");
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const json v1 = VersionStatus(port, "kjv", 1);
  EXPECT_EQ(v1.value("state", ""), "failed") << v1.dump();
  const std::string reason = v1.value("reason", "");
  EXPECT_NE(reason.find("host_memory_budget_bytes"), std::string::npos) << reason;
  EXPECT_NE(reason.find("weights"), std::string::npos) << reason;
  HttpReply r = PostJson(port, "/v1/completions", Greedy("kjv"));
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("no ready version"), std::string::npos) << r.body;
  const std::string metrics = testing::Http(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:model_loads_total{model_name=\"kjv\",version=\"1\",result=\"failure\"} 1"),
            std::string::npos);
  server.reset();
  fs::remove_all(repo);
}

int64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

TEST(ModelVersionsTest, FiftyLoadUnloadCyclesReturnMemory) {
  const fs::path repo = TempRepo("cycles");
  Publish(repo / "kjv", 1, V1Source());
  std::ofstream(repo / "kjv" / "config.yaml") << "threads: 2\n";
  std::unique_ptr<Server> server = StartRepoServer(repo);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  auto cycle = [&] {
    ASSERT_EQ(testing::Http(port, "POST", "/admin/models/kjv/unload").status, 202);
    ASSERT_TRUE(WaitForState(port, "kjv", 1, "unloaded"));
    ASSERT_EQ(testing::Http(port, "POST", "/admin/models/kjv/load").status, 202);
    ASSERT_TRUE(WaitForState(port, "kjv", 1, "ready"));
    ASSERT_EQ(PostJson(port, "/v1/completions", Greedy("kjv", 2)).status, 200);
  };
  for (int i = 0; i < 5; ++i) cycle();  // allocator pools and caches reach their steady size
  const int64_t baseline = ResidentBytes();
  for (int i = 0; i < 50; ++i) {
    cycle();
    if (::testing::Test::HasFatalFailure()) return;
  }
  const int64_t after = ResidentBytes();
  // One loaded demo model is ~20 MB of weights, KV cache and scratch: a leak of one version
  // per cycle would add 1 GB; allow a few MB of allocator noise (and, under ASan, its
  // quarantine of freed blocks, 256 MiB by default).
  const int64_t allowed = (int64_t{16} << 20) + (ferry::testing::kAddressSanitizer ? int64_t{256} << 20 : 0);
  EXPECT_LT(after - baseline, allowed) << "RSS " << baseline << " -> " << after;
  const std::string metrics = testing::Http(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:model_loads_total{model_name=\"kjv\",version=\"1\",result=\"success\"} 56"),
            std::string::npos);
  server.reset();
  fs::remove_all(repo);
}

}  // namespace
}  // namespace ferry::serve
