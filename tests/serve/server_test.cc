// The server end to end, in process, on the demo models: routes, auth, streaming, batching
// equivalence, cancellation, overload, malformed requests, slow clients, shutdown.
#include "serve/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "server_test_util.h"
#include "test_client.h"
#include "test_util.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;
using testing::HttpReply;
using testing::PostJson;
using testing::TestConnection;
using namespace std::chrono_literals;

const std::map<std::string, std::string> kAcme{{"Authorization", "Bearer sk-acme-test"}};
const std::map<std::string, std::string> kBeta{{"Authorization", "Bearer sk-beta-test"}};
const std::map<std::string, std::string> kAdmin{{"Authorization", "Bearer sk-admin-test"}};

std::string Config(const std::string& decoder_batching, const std::string& listener_extra = "") {
  const std::string root = ferry::testing::SourcePath("");
  return "listener:\n  host: 127.0.0.1\n  port: 0\n  header_timeout_ms: 700\n  max_body_bytes: 65536\n"
         "  shutdown_timeout_ms: 20000\n" + listener_extra +
         "auth:\n  mode: keys\n  admin_keys: [sk-admin-test]\n"
         "tiers:\n  gold: 1\n  standard: 2\n"
         "tenants:\n  - name: acme\n    tier: gold\n    keys: [sk-acme-test]\n"
         "  - name: beta\n    tier: standard\n    keys: [sk-beta-test]\n"
         "  - name: solo\n    tier: standard\n    keys: [sk-solo-test]\n    max_concurrent_requests: 1\n"
         "  - name: limited\n    tier: standard\n    keys: [sk-limited-test]\n    requests_per_minute: 2\n"
         "models:\n  - name: kjv-decoder\n    path: " + root + "/models/demo/kjv-decoder\n    threads: 2\n"
         "    batching:\n" + decoder_batching +
         "  - name: kjv-classifier\n    path: " + root + "/models/demo/kjv-classifier\n    threads: 2\n"
         "    dynamic_batching:\n      max_batch_size: 16\n      max_queue_delay_us: 3000\n      priority_levels: 2\n"
         "log:\n  level: warn\n  request_log: false\n";
}

std::unique_ptr<Server> StartServer(const std::string& yaml) { return testing::StartServerFromYaml(yaml); }

json Completion(const std::string& prompt, int max_tokens) {
  return {{"model", "kjv-decoder"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = StartServer(Config("      max_num_seqs: 16\n      max_num_batched_tokens: 64\n"
                                 "      max_queue_requests: 256\n      max_queue_time_ms: 600000\n")).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  int port() const { return server_->port(); }
  // The server is healthy and still answers a normal request.
  void ExpectHealthy() {
    EXPECT_EQ(testing::Http(port(), "GET", "/health/ready").status, 200);
    HttpReply r = PostJson(port(), "/v1/completions", Completion("In the beginning", 2), kAcme);
    EXPECT_EQ(r.status, 200) << r.body;
  }
  static Server* server_;
};

Server* ServerTest::server_ = nullptr;

TEST_F(ServerTest, HealthModelsAndMetricsRoutes) {
  ASSERT_NE(server_, nullptr);
  EXPECT_EQ(testing::Http(port(), "GET", "/health/live").status, 200);
  EXPECT_EQ(testing::Http(port(), "GET", "/health/ready").status, 200);
  HttpReply models = testing::Http(port(), "GET", "/v1/models", "", kAcme);
  ASSERT_EQ(models.status, 200);
  const json m = models.Json();
  ASSERT_EQ(m["data"].size(), 2u);
  EXPECT_EQ(m["data"][0]["id"], "kjv-decoder");
  EXPECT_EQ(m["data"][0]["max_model_len"], 512);
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/models/kjv-classifier", "", kAcme).status, 200);
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/models/nope", "", kAcme).status, 404);
  ASSERT_EQ(PostJson(port(), "/v1/completions", Completion("In the beginning", 3), kBeta).status, 200);
  HttpReply metrics = testing::Http(port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.headers["content-type"].find("text/plain"), std::string::npos);
  for (const char* name : {"ferry:time_to_first_token_seconds_bucket{model_name=\"kjv-decoder\",tier=\"standard\"",
                           "ferry:e2e_request_latency_seconds_count", "ferry:num_requests_running",
                           "ferry:kv_cache_usage_perc", "ferry:generation_tokens_total", "ferry:engine_step_seconds",
                           "ferry:batch_size_bucket", "ferry:request_success_total", "ferry:inter_token_latency_seconds"}) {
    EXPECT_NE(metrics.body.find(name), std::string::npos) << name;
  }
}

TEST_F(ServerTest, AuthKeysTenantsAndAdmin) {
  auto body = Completion("In the beginning", 2).dump();
  HttpReply none = testing::Http(port(), "POST", "/v1/completions", body);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.Json()["error"]["type"], "authentication_error");
  EXPECT_EQ(testing::Http(port(), "POST", "/v1/completions", body, {{"Authorization", "Bearer sk-acme-tesT"}}).status,
            401);
  EXPECT_EQ(testing::Http(port(), "POST", "/v1/completions", body, {{"Authorization", "Basic c2stYWNtZS10ZXN0"}}).status,
            401);
  EXPECT_EQ(testing::Http(port(), "POST", "/v1/completions", body, kAcme).status, 200);
  EXPECT_EQ(testing::Http(port(), "GET", "/admin/status", "", kAcme).status, 403);
  HttpReply admin = testing::Http(port(), "GET", "/admin/status", "", kAdmin);
  ASSERT_EQ(admin.status, 200);
  EXPECT_TRUE(admin.Json()["ready"].get<bool>());
  EXPECT_EQ(admin.Json()["models"].size(), 2u);
}

TEST_F(ServerTest, StreamingGivesTheSameTextAsOneResponse) {
  json req = Completion("And the LORD said unto", 24);
  HttpReply whole = PostJson(port(), "/v1/completions", req, kAcme);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json w = whole.Json();
  EXPECT_EQ(w["object"], "text_completion");
  EXPECT_EQ(w["usage"]["completion_tokens"], 24);
  EXPECT_EQ(w["usage"]["total_tokens"], w["usage"]["prompt_tokens"].get<int>() + 24);

  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  TestConnection c(port());
  c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme-test\r\nContent-Length: " +
            std::to_string(req.dump().size()) + "\r\n\r\n" + req.dump());
  HttpReply head = c.ReadHead();
  ASSERT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-type"], "text/event-stream");
  std::string data, text;
  int events = 0;
  bool done = false, usage = false;
  std::string finish;
  while (c.NextEvent(data)) {
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const json chunk = json::parse(data);
    ++events;
    if (chunk["choices"].empty()) {
      usage = chunk["usage"]["completion_tokens"] == 24;
      continue;
    }
    text += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_TRUE(usage);
  EXPECT_GT(events, 10);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(text, w["choices"][0]["text"].get<std::string>());
}

TEST_F(ServerTest, SixtyFourConcurrentGreedyClientsMatchSequentialRuns) {
  const std::vector<std::string> prompts = {"And the LORD said unto", "In the beginning", "Blessed are the",
                                            "The LORD is my shepherd;", "And it came to pass", "For God so loved",
                                            "Praise ye the LORD.", "Now the serpent was"};
  auto request = [&](int i) {
    json r = Completion(prompts[i % prompts.size()], 8 + (i % 5) * 4);
    if (i % 3 == 0) r["prompt"] = prompts[i % prompts.size()] + " and";
    return r;
  };
  constexpr int kClients = 64;
  std::vector<std::string> sequential(kClients);
  for (int i = 0; i < kClients; ++i) {
    HttpReply r = PostJson(port(), "/v1/completions", request(i), kAcme);
    ASSERT_EQ(r.status, 200) << r.body;
    sequential[i] = r.Json()["choices"][0]["text"];
  }
  std::vector<std::string> concurrent(kClients);
  std::vector<int> status(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      HttpReply r = PostJson(port(), "/v1/completions", request(i), i % 2 ? kAcme : kBeta);
      status[i] = r.status;
      if (r.status == 200) concurrent[i] = r.Json()["choices"][0]["text"];
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(status[i], 200);
    EXPECT_EQ(concurrent[i], sequential[i]) << "client " << i;
  }
}

TEST_F(ServerTest, StopStringsEchoLogprobsAndChoices) {
  json r = Completion("And the LORD said unto", 30);
  HttpReply plain = PostJson(port(), "/v1/completions", r, kAcme);
  const std::string text = plain.Json()["choices"][0]["text"];
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(8, 4);
  r["stop"] = json::array({stop, "zzzz-never"});
  HttpReply stopped = PostJson(port(), "/v1/completions", r, kAcme);
  ASSERT_EQ(stopped.status, 200);
  EXPECT_EQ(stopped.Json()["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped.Json()["choices"][0]["finish_reason"], "stop");

  json e = Completion("And the LORD said unto", 4);
  e["echo"] = true;
  e["logprobs"] = 2;
  HttpReply echoed = PostJson(port(), "/v1/completions", e, kAcme);
  ASSERT_EQ(echoed.status, 200) << echoed.body;
  const json c = echoed.Json()["choices"][0];
  EXPECT_EQ(c["text"].get<std::string>().rfind("And the LORD said unto", 0), 0u);
  const int prompt_tokens = echoed.Json()["usage"]["prompt_tokens"];
  ASSERT_EQ(c["logprobs"]["tokens"].size(), static_cast<size_t>(prompt_tokens + 4));
  EXPECT_TRUE(c["logprobs"]["token_logprobs"][0].is_null());
  EXPECT_LE(c["logprobs"]["token_logprobs"][1].get<double>(), 0.0);
  EXPECT_EQ(c["logprobs"]["top_logprobs"][prompt_tokens].size(), 2u);

  json n = Completion("In the beginning", 6);
  n["n"] = 3;
  n["temperature"] = 1.0;
  n["seed"] = 11;
  n["prompt"] = json::array({"In the beginning", "Blessed are the"});
  HttpReply many = PostJson(port(), "/v1/completions", n, kAcme);
  ASSERT_EQ(many.status, 200) << many.body;
  ASSERT_EQ(many.Json()["choices"].size(), 6u);
  HttpReply again = PostJson(port(), "/v1/completions", n, kAcme);
  EXPECT_EQ(many.Json()["choices"], again.Json()["choices"]);  // seeded: reproducible
}

TEST_F(ServerTest, EncoderRoutesBatchInputsAcrossRequests) {
  std::vector<std::thread> threads;
  std::vector<HttpReply> replies(12);
  for (int i = 0; i < 12; ++i) {
    threads.emplace_back([&, i] {
      json req = {{"model", "kjv-classifier"},
                  {"input", json::array({"Blessed are the meek: for they shall inherit the earth.",
                                         "And Moses went up unto God"})}};
      replies[i] = PostJson(port(), i % 2 ? "/v1/classify" : "/v1/embeddings", req, kAcme);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(replies[i].status, 200) << replies[i].body;
    const json j = replies[i].Json();
    ASSERT_EQ(j["data"].size(), 2u);
    if (i % 2) {
      EXPECT_TRUE(j["data"][0]["label"].is_string());
      EXPECT_GT(j["data"][0]["score"].get<double>(), 0.125);  // the top one of 8 classes
      EXPECT_EQ(j["data"][0]["num_classes"], 8);
    } else {
      EXPECT_EQ(j["data"][0]["embedding"].size(), 256u);
    }
  }
  const std::string metrics = testing::Http(port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:batch_size_count{model_name=\"kjv-classifier\"}"), std::string::npos);
  // The encoder's queue times and batch token counts are recorded; the decoder-only series
  // (KV cache, preemptions, prefix cache, first-token and inter-token latency) are not
  // exported for it.
  auto count_of = [&](const std::string& series) {
    const size_t at = metrics.find(series);
    if (at == std::string::npos) return -1.0;
    return std::stod(metrics.substr(metrics.find(' ', at) + 1));
  };
  EXPECT_GE(count_of("ferry:request_queue_time_seconds_count{model_name=\"kjv-classifier\",tier=\"gold\"}"), 12.0);
  EXPECT_GE(count_of("ferry:iteration_tokens_total_count{model_name=\"kjv-classifier\"}"), 1.0);
  EXPECT_GT(count_of("ferry:iteration_tokens_total_sum{model_name=\"kjv-classifier\"}"), 0.0);
  for (const char* decoder_only : {"ferry:kv_cache_usage_perc{model_name=\"kjv-classifier\"",
                                   "ferry:num_preemptions_total{model_name=\"kjv-classifier\"",
                                   "ferry:prefix_cache_hits_total{model_name=\"kjv-classifier\"",
                                   "ferry:time_to_first_token_seconds_count{model_name=\"kjv-classifier\"",
                                   "ferry:inter_token_latency_seconds_count{model_name=\"kjv-classifier\""}) {
    EXPECT_EQ(metrics.find(decoder_only), std::string::npos) << decoder_only;
  }
  // Same input, same output (to rounding: GEMM blocking depends on the batch's rows)
  // whichever batch it rode in.
  const json a = replies[1].Json()["data"][0]["probs"], b = replies[3].Json()["data"][0]["probs"];
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k].get<double>(), b[k].get<double>(), 1e-5);
}

TEST_F(ServerTest, ClientDisconnectCancelsAndFreesKvBlocks) {
  json req = Completion("And the LORD said unto", 400);
  req["ignore_eos"] = true;
  req["stream"] = true;
  {
    TestConnection c(port());
    c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme-test\r\nContent-Length: " +
              std::to_string(req.dump().size()) + "\r\n\r\n" + req.dump());
    ASSERT_EQ(c.ReadHead().status, 200);
    std::string data;
    ASSERT_TRUE(c.NextEvent(data));
  }  // the client hangs up mid-generation
  // A non-streamed request whose client leaves is cancelled as well.
  {
    TestConnection c(port());
    req["stream"] = false;
    c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme-test\r\nContent-Length: " +
              std::to_string(req.dump().size()) + "\r\n\r\n" + req.dump());
  }
  // Both requests counted as aborted: an idle batcher alone could be one that has not yet
  // admitted the second request (its client already gone), which then runs until it notices.
  const auto aborted = [](const std::string& metrics) {
    int64_t total = 0;
    std::istringstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("ferry:request_success_total{") && line.find("kjv-decoder") != std::string::npos &&
          line.find("finished_reason=\"abort\"") != std::string::npos) {
        total += std::stoll(line.substr(line.rfind(' ') + 1));
      }
    }
    return total;
  };
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  json decoder;
  std::string metrics;
  while (std::chrono::steady_clock::now() < deadline) {
    decoder = testing::Http(port(), "GET", "/admin/status", "", kAdmin).Json()["models"][0]["batcher"];
    metrics = testing::Http(port(), "GET", "/metrics").body;
    if (aborted(metrics) == 2 && decoder["running"] == 0 && decoder["waiting"] == 0 &&
        decoder["kv_free_blocks"] == decoder["kv_blocks"]) {
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(aborted(metrics), 2) << metrics;
  EXPECT_EQ(decoder["running"], 0);
  EXPECT_EQ(decoder["kv_free_blocks"], decoder["kv_blocks"]);
  metrics = testing::Http(port(), "GET", "/metrics").body;
  // The gauges follow the cancellation, not the last step before it.
  EXPECT_NE(metrics.find("ferry:num_requests_running{model_name=\"kjv-decoder\"} 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ferry:kv_cache_usage_perc{model_name=\"kjv-decoder\"} 0"), std::string::npos);
}

TEST_F(ServerTest, HundredsOfIdleConnectionsDoNotBlockService) {
  std::vector<std::unique_ptr<TestConnection>> idle;
  for (int i = 0; i < 400; ++i) {
    idle.push_back(std::make_unique<TestConnection>(port()));
    ASSERT_TRUE(idle.back()->connected()) << i;
  }
  // Half of them send a partial request head and stall; the rest never send anything.
  for (int i = 0; i < 400; i += 2) idle[i]->SendRaw("GET /health/live HTTP/1.1\r\nHo");
  ExpectHealthy();
  HttpReply status = testing::Http(port(), "GET", "/admin/status", "", kAdmin);
  EXPECT_GE(status.Json()["connections"].get<int>(), 400);
  idle.clear();
  ExpectHealthy();
}

TEST_F(ServerTest, TenantConcurrencyLimitAnswers429) {
  json req = Completion("And the LORD said unto", 300);
  req["ignore_eos"] = true;
  req["stream"] = true;
  TestConnection c(port());
  c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-solo-test\r\nContent-Length: " +
            std::to_string(req.dump().size()) + "\r\n\r\n" + req.dump());
  ASSERT_EQ(c.ReadHead().status, 200);
  std::string data;
  ASSERT_TRUE(c.NextEvent(data));  // the tenant's one request is in flight
  HttpReply second = PostJson(port(), "/v1/completions", Completion("In the beginning", 2),
                              {{"Authorization", "Bearer sk-solo-test"}});
  EXPECT_EQ(second.status, 429) << second.body;
  EXPECT_EQ(second.headers.count("retry-after"), 1u);
  // Other tenants are unaffected.
  EXPECT_EQ(PostJson(port(), "/v1/completions", Completion("In the beginning", 2), kBeta).status, 200);
  c.Close();
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline && status != 200) {
    status = PostJson(port(), "/v1/completions", Completion("In the beginning", 2),
                      {{"Authorization", "Bearer sk-solo-test"}}).status;
    if (status != 200) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(status, 200);  // the slot is released when the first request ends
}

struct BadCase {
  std::string name;
  std::string method;
  std::string path;
  std::string body;
  int status;
  std::map<std::string, std::string> headers = kAcme;
};

// A tenant over its requests-per-minute limit gets OpenAI's 429 with Retry-After and the
// x-ratelimit-* headers; other tenants are unaffected.
TEST_F(ServerTest, TenantRateLimitAnswers429WithRateLimitHeaders) {
  const std::map<std::string, std::string> limited{{"Authorization", "Bearer sk-limited-test"}};
  for (int i = 0; i < 2; ++i) {
    HttpReply ok = PostJson(port(), "/v1/completions", Completion("In the beginning", 1), limited);
    ASSERT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(ok.headers["x-ratelimit-limit-requests"], "2");
    EXPECT_EQ(ok.headers["x-ratelimit-remaining-requests"], std::to_string(1 - i));
  }
  HttpReply refused = PostJson(port(), "/v1/completions", Completion("In the beginning", 1), limited);
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(refused.Json()["error"]["type"], "rate_limit_error");
  EXPECT_EQ(refused.Json()["error"]["code"], "rate_limit_exceeded");
  EXPECT_GE(std::stoi(refused.headers["retry-after"]), 1);
  EXPECT_EQ(refused.headers["x-ratelimit-remaining-requests"], "0");
  EXPECT_FALSE(refused.headers["x-ratelimit-reset-requests"].empty());
  EXPECT_EQ(PostJson(port(), "/v1/completions", Completion("In the beginning", 1), kBeta).status, 200);
  const std::string metrics = testing::Http(port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:rate_limited_requests_total{tenant=\"limited\",limit=\"requests\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("ferry:tenant_requests_total{tenant=\"limited\",code=\"200\"} 2"), std::string::npos);
}

TEST_F(ServerTest, MalformedRequestsGetAClearFourHundredAndTheServerStaysUp) {
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "and the word ";
  json too_long = Completion("", 16);
  too_long["prompt"] = std::vector<int>(600, 5);
  const std::vector<BadCase> cases = {
      {"not json", "POST", "/v1/completions", "{not json", 400},
      {"empty body", "POST", "/v1/completions", "", 400},
      {"json array body", "POST", "/v1/completions", "[1,2]", 400},
      {"invalid utf-8", "POST", "/v1/completions", "{\"model\":\"kjv-decoder\",\"prompt\":\"\xff\xfe\"}", 400},
      {"truncated json", "POST", "/v1/completions", "{\"model\":\"kjv-decoder\",\"prompt\":\"a", 400},
      {"missing model", "POST", "/v1/completions", R"({"prompt":"a"})", 400},
      {"model not a string", "POST", "/v1/completions", R"({"model":7,"prompt":"a"})", 400},
      {"unknown model", "POST", "/v1/completions", R"({"model":"gpt-9","prompt":"a"})", 404},
      {"missing prompt", "POST", "/v1/completions", R"({"model":"kjv-decoder"})", 400},
      {"prompt wrong type", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":{"a":1}})", 400},
      {"empty prompt array", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":[]})", 400},
      {"token id out of vocab", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":[1,99999]})", 400},
      {"negative token id", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":[1,-3]})", 400},
      {"max_tokens negative", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","max_tokens":-1})", 400},
      {"max_tokens zero", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","max_tokens":0})", 400},
      {"max_tokens huge", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","max_tokens":100000000000})", 400},
      {"max_tokens string", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","max_tokens":"5"})", 400},
      {"max_tokens float", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","max_tokens":2.5})", 400},
      {"temperature negative", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","temperature":-0.5})", 400},
      {"temperature string", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","temperature":"hot"})", 400},
      {"top_p zero", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","top_p":0})", 400},
      {"top_p above one", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","top_p":1.5})", 400},
      {"min_p negative", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","min_p":-1})", 400},
      {"stream not bool", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","stream":"yes"})", 400},
      {"stop wrong type", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","stop":5})", 400},
      {"too many stops", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","stop":["a","b","c","d","e"]})", 400},
      {"logprobs too many", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","logprobs":50})", 400},
      {"n too large", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","n":1000})", 400},
      {"stream_options without stream", "POST", "/v1/completions",
       R"({"model":"kjv-decoder","prompt":"a","stream_options":{"include_usage":true}})", 400},
      {"prompt longer than context", "POST", "/v1/completions", too_long.dump(), 400},
      {"prompt plus max_tokens over context", "POST", "/v1/completions",
       R"({"model":"kjv-decoder","prompt":"a","max_tokens":600})", 400},
      {"completions on an encoder", "POST", "/v1/completions", R"({"model":"kjv-classifier","prompt":"a"})", 400},
      {"embeddings on a decoder", "POST", "/v1/embeddings", R"({"model":"kjv-decoder","input":"a"})", 400},
      {"embeddings missing input", "POST", "/v1/embeddings", R"({"model":"kjv-classifier"})", 400},
      {"embeddings empty string", "POST", "/v1/embeddings", R"({"model":"kjv-classifier","input":""})", 400},
      {"embeddings bad format", "POST", "/v1/embeddings",
       R"({"model":"kjv-classifier","input":"a","encoding_format":"int8"})", 400},
      {"classify input too long", "POST", "/v1/classify",
       "{\"model\":\"kjv-classifier\",\"input\":[\"" + long_prompt + "\"]}", 400},
      {"classify input wrong type", "POST", "/v1/classify", R"({"model":"kjv-classifier","input":[1.5]})", 400},
      {"classify bad priority", "POST", "/v1/classify", R"({"model":"kjv-classifier","input":"a","priority":9})", 400},
      // Numbers a double cannot hold, and keys that mean two things: a 400, never a 500.
      {"n 1e400", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","n":1e400})", 400},
      {"max_tokens 1e400", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","max_tokens":1e400})", 400},
      {"temperature 1e309", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","temperature":1e309})", 400},
      {"10,000-digit integer", "POST", "/v1/completions",
       R"({"model":"kjv-decoder","prompt":"a","max_tokens":)" + std::string(10000, '7') + "}", 400},
      {"duplicate key", "POST", "/v1/completions", R"({"model":"kjv-decoder","prompt":"a","prompt":"b"})", 400},
      {"deeply nested body", "POST", "/v1/completions", std::string(5000, '[') + std::string(5000, ']'), 400},
      {"oversized body", "POST", "/v1/completions", std::string(70000, ' '), 413},
      {"GET on a POST route", "GET", "/v1/completions", "", 405},
      {"POST on a GET route", "POST", "/v1/models", "{}", 405},
      {"unknown route", "GET", "/v1/nothing", "", 404},
      {"unknown top-level path", "GET", "/favicon.ico", "", 404},
  };
  ASSERT_GE(cases.size(), 29u);
  for (const BadCase& c : cases) {
    HttpReply r = testing::Http(port(), c.method, c.path, c.body, c.headers);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body;
    const json j = r.Json();
    EXPECT_TRUE(j.contains("error") && j["error"].contains("message") && j["error"]["message"].is_string())
        << c.name << ": " << r.body;
  }
  ExpectHealthy();
}

TEST_F(ServerTest, BrokenHttpAndSlowClientsAreAnsweredAndClosed) {
  {
    TestConnection c(port());
    c.SendRaw("THIS IS NOT HTTP\r\n\r\n");
    HttpReply r = c.ReadReply();
    EXPECT_EQ(r.status, 400);
    EXPECT_TRUE(r.Json().contains("error"));
  }
  {
    // Slowloris: a request head that never completes gets a 408 after header_timeout_ms.
    TestConnection c(port());
    c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Len");
    HttpReply r = c.ReadReply();
    EXPECT_EQ(r.status, 408);
    EXPECT_TRUE(r.Json().contains("error"));
    EXPECT_TRUE(c.WaitClosed(5s));
  }
  {
    // A body shorter than its Content-Length.
    TestConnection c(port());
    c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":");
    EXPECT_EQ(c.ReadReply().status, 408);
  }
  {
    // Keep-alive: several requests on one connection.
    TestConnection c(port());
    for (int i = 0; i < 3; ++i) {
      HttpReply r = c.Request("POST", "/v1/completions", Completion("In the beginning", 2).dump(), kAcme);
      EXPECT_EQ(r.status, 200);
    }
  }
  ExpectHealthy();
}

// A prompt whose byte length alone proves it cannot fit is refused before it is tokenized
// (tokenizing megabytes used to hold up an I/O thread), with the same code as a prompt
// found too long after tokenizing.
TEST_F(ServerTest, AHugePromptIsRefusedBeforeTokenizing) {
  const std::string huge(60000, 'a');
  HttpReply r = PostJson(port(), "/v1/completions", Completion(huge, 2), kAcme);
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.Json()["error"]["code"], "context_length_exceeded");
  EXPECT_NE(r.Json()["error"]["message"].get<std::string>().find("60000 bytes"), std::string::npos) << r.body;
  // Long but possibly fitting text is tokenized and judged by its tokens.
  std::string words;
  for (int i = 0; i < 1500; ++i) words += "and ";
  HttpReply t = PostJson(port(), "/v1/completions", Completion(words, 2), kAcme);
  ASSERT_EQ(t.status, 400) << t.body;
  EXPECT_EQ(t.Json()["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(t.Json()["error"]["message"].get<std::string>().find("bytes"), std::string::npos) << t.body;
  ExpectHealthy();
}

TEST(ServerOverloadTest, FullQueueAnswers429WithRetryAfter) {
  auto server = StartServer(Config("      max_num_seqs: 1\n      max_num_batched_tokens: 64\n"
                                   "      max_queue_requests: 2\n"));
  ASSERT_NE(server, nullptr);
  std::vector<std::thread> threads;
  std::vector<HttpReply> replies(16);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      json r = Completion("And the LORD said unto", 60);
      r["ignore_eos"] = true;
      replies[i] = PostJson(server->port(), "/v1/completions", r, kAcme);
    });
  }
  for (auto& t : threads) t.join();
  int ok = 0, limited = 0;
  for (const HttpReply& r : replies) {
    if (r.status == 200) ++ok;
    if (r.status == 429) {
      ++limited;
      EXPECT_EQ(r.headers.count("retry-after"), 1u);
      EXPECT_EQ(r.Json()["error"]["type"], "rate_limit_error");
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(limited, 1);
  EXPECT_EQ(ok + limited, 16);
  const std::string metrics = testing::Http(server->port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("reason=\"rejected_queue_full\""), std::string::npos);
}

TEST(ServerAuthTest, MetricsCanRequireAKey) {
  const std::string root = ferry::testing::SourcePath("");
  auto server = StartServer(
      "listener: {host: 127.0.0.1, port: 0}\n"
      "auth: {mode: keys, admin_keys: [sk-admin-test], metrics_require_key: true}\n"
      "tenants:\n  - {name: acme, keys: [sk-acme-test]}\n"
      "models:\n  - {name: kjv-classifier, path: " + root + "/models/demo/kjv-classifier, threads: 1}\n"
      "log: {level: warn, request_log: false}\n");
  ASSERT_NE(server, nullptr);
  HttpReply anonymous = testing::Http(server->port(), "GET", "/metrics");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_EQ(anonymous.Json()["error"]["type"], "authentication_error");
  EXPECT_EQ(testing::Http(server->port(), "GET", "/metrics", "", {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(testing::Http(server->port(), "GET", "/metrics", "", kAcme).status, 200);
  EXPECT_EQ(testing::Http(server->port(), "GET", "/metrics", "", kAdmin).status, 200);
  EXPECT_EQ(testing::Http(server->port(), "GET", "/health/live").status, 200);  // probes stay open
}

TEST(ServerShutdownTest, GracefulShutdownFinishesInFlightStreams) {
  auto server = StartServer(Config("      max_num_seqs: 4\n      max_num_batched_tokens: 64\n"));
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  json req = Completion("And the LORD said unto", 80);
  req["ignore_eos"] = true;
  req["stream"] = true;
  TestConnection c(port);
  c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme-test\r\nContent-Length: " +
            std::to_string(req.dump().size()) + "\r\n\r\n" + req.dump());
  ASSERT_EQ(c.ReadHead().status, 200);
  std::string data;
  ASSERT_TRUE(c.NextEvent(data));
  TestConnection idle(port);  // an idle keep-alive connection is closed at shutdown
  ASSERT_TRUE(idle.connected());
  auto run = std::async(std::launch::async, [&] { return server->Run(); });
  server->RequestShutdown();
  int chunks = 1;
  bool done = false;
  while (c.NextEvent(data)) {
    if (data == "[DONE]") done = true;
    ++chunks;
  }
  EXPECT_TRUE(done);
  EXPECT_GE(chunks, 80);
  ASSERT_EQ(run.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(run.get(), 0);
  EXPECT_TRUE(idle.WaitClosed(5s));
  TestConnection late(port);
  EXPECT_FALSE(late.connected());
}

// A stream the shutdown budget cuts short ends with an error event and [DONE]: it must not
// look like a complete answer.
TEST(ServerShutdownTest, AStreamCutByShutdownEndsWithAnError) {
  std::string yaml = Config("      max_num_seqs: 4\n      max_num_batched_tokens: 64\n");
  const std::string budget = "shutdown_timeout_ms: 20000";
  // A budget far shorter than the stream: on an idle machine the demo decoder writes a few
  // hundred tokens in well under a second, so a budget of that order lets it finish.
  yaml.replace(yaml.find(budget), budget.size(), "shutdown_timeout_ms: 10");
  auto server = StartServer(yaml);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  json req = Completion("And the LORD said unto", 480);
  req["ignore_eos"] = true;
  req["stream"] = true;
  TestConnection c(port);
  c.SendRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-acme-test\r\nContent-Length: " +
            std::to_string(req.dump().size()) + "\r\n\r\n" + req.dump());
  ASSERT_EQ(c.ReadHead().status, 200);
  std::string data;
  ASSERT_TRUE(c.NextEvent(data));
  auto run = std::async(std::launch::async, [&] { return server->Run(); });
  server->RequestShutdown();
  std::vector<std::string> events;
  while (c.NextEvent(data)) events.push_back(data);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json error = json::parse(events[events.size() - 2], nullptr, false);
  ASSERT_TRUE(error.contains("error")) << events[events.size() - 2];
  EXPECT_TRUE(error["error"]["type"].is_string());
  EXPECT_NE(error["error"]["message"].get<std::string>().find("shutting down"), std::string::npos);
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i], nullptr, false);
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null()) << "no chunk claims a finish: " << events[i];
  }
  ASSERT_EQ(run.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(run.get(), 0);
}

}  // namespace
}  // namespace ferry::serve
