// QoS variant groups end to end, in process: the demo decoder as a bf16 checkpoint and an
// int8 engine built here, under a synthetic burst (down and back up, no request failed,
// gold always on its floor); the admin API, metrics and model cards; an encoder group; a
// variant that produces NaN rolled back; and a group refused for memory.
#include "serve/variant_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "engine/engine_builder.h"
#include "io/temp_dir.h"
#include "serve/server.h"
#include "server_test_util.h"
#include "test_client.h"
#include "test_util.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;
using testing::HttpReply;
using testing::PostJson;
using namespace std::chrono_literals;

const std::map<std::string, std::string> kGold{{"Authorization", "Bearer sk-gold"}};
const std::map<std::string, std::string> kSilver{{"Authorization", "Bearer sk-silver"}};
const std::map<std::string, std::string> kAdmin{{"Authorization", "Bearer sk-admin"}};

std::unique_ptr<Server> StartServer(const std::string& yaml) { return testing::StartServerFromYaml(yaml, 300000); }

const std::string kHead =
    "listener: {host: 127.0.0.1, port: 0, shutdown_timeout_ms: 20000}\n"
    "auth: {mode: keys, admin_keys: [sk-admin]}\n"
    "tiers:\n  gold: {priority: 1, min_variant: bf16}\n  silver: 2\n"
    "tenants:\n  - {name: acme, tier: gold, keys: [sk-gold], requests_per_minute: 100000}\n  - {name: beta, tier: silver, keys: [sk-silver]}\n";

// Polls GET /admin/qos/MODEL until the active variant is `want` (true) or `within` passes.
bool WaitForActive(int port, const std::string& model, const std::string& want, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    HttpReply r = testing::Http(port, "GET", "/admin/qos/" + model, "", kAdmin);
    if (r.status == 200 && r.Json()["active"] == want) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

json Completion(const std::string& prompt, int max_tokens) {
  return {{"model", "kjv"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// One reply as a client saw it.
struct Seen {
  int status = 0;
  std::string variant;
  std::string text;
};

class QosServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ferry::testing::TempDir();
    engine::BuildOptions int8;
    int8.precision = Precision::kInt8;
    int8.calibration_tokens = 2048;
    int8.tune = false;
    int8.threads = 2;
    auto built = engine::BuildEngine(ferry::testing::SourcePath("models/demo/kjv-decoder"), dir_->File("int8.ferry"), int8);
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    engine::BuildOptions wo;
    wo.precision = Precision::kInt8WeightOnly;
    wo.tune = false;
    wo.threads = 2;
    built = engine::BuildEngine(ferry::testing::SourcePath("models/demo/kjv-classifier"), dir_->File("cls-int8wo.ferry"),
                                wo);
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    const std::string root = ferry::testing::SourcePath("");
    server_ = StartServer(
                  kHead +
                  "models:\n"
                  "  - name: kjv\n    threads: 2\n"
                  "    batching: {max_num_seqs: 4, max_num_batched_tokens: 64, max_seq_len: 256, "
                  "max_queue_requests: 1024}\n"
                  "    qos:\n      window_s: 1.5\n      min_dwell_s: 2\n      tick_ms: 50\n      min_samples: 5\n"
                  "      signals: [queue_wait]\n      slo: {ttft_ms: 150}\n"
                  "      rollback: {canary_prompt: \"And God said\", canary_tokens: 8, canary_min_agreement: 0.5}\n"
                  "    variants:\n"
                  "      - {name: bf16, path: " + root + "/models/demo/kjv-decoder}\n"
                  "      - {name: int8, path: " + dir_->File("int8.ferry") + "}\n"
                  "  - name: cls\n    threads: 2\n"
                  "    dynamic_batching: {max_batch_size: 8, max_queue_delay_us: 1000, priority_levels: 2}\n"
                  "    qos: {min_dwell_s: 1, tiers: {gold: {min_variant: f32}}, rollback: {canary_prompt: \"In the beginning\"}}\n"
                  "    variants:\n"
                  "      - {name: f32, path: " + root + "/models/demo/kjv-classifier}\n"
                  "      - {name: int8-wo, path: " + dir_->File("cls-int8wo.ferry") + "}\n"
                  "log: {level: warn, request_log: false}\n")
                  .release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  int port() const { return server_->port(); }

  static ferry::testing::TempDir* dir_;
  static Server* server_;
};

ferry::testing::TempDir* QosServerTest::dir_ = nullptr;
Server* QosServerTest::server_ = nullptr;

TEST_F(QosServerTest, BurstMovesTheGroupDownAndBackUpWithoutFailures) {
  ASSERT_NE(server_, nullptr);
  ASSERT_TRUE(WaitForActive(port(), "kjv", "bf16", 30s));
  // Gold's reference output, from its floor variant.
  const json gold_request = Completion("And the LORD said unto Moses,", 8);
  HttpReply ref = PostJson(port(), "/v1/completions", gold_request, kGold);
  ASSERT_EQ(ref.status, 200) << ref.body;
  ASSERT_EQ(ref.headers["x-ferry-variant"], "bf16");
  // The tenant's rate-limit headers come with the variant's, not instead of them.
  EXPECT_EQ(ref.headers["x-ratelimit-limit-requests"], "100000");
  const std::string gold_text = ref.Json()["choices"][0]["text"];

  std::mutex mu;
  std::vector<Seen> gold, silver;
  std::atomic<bool> stop_gold{false}, stop_burst{false};
  std::thread gold_client([&] {
    while (!stop_gold.load()) {
      HttpReply r = PostJson(port(), "/v1/completions", gold_request, kGold);
      std::lock_guard<std::mutex> lock(mu);
      gold.push_back(Seen{r.status, r.headers["x-ferry-variant"], r.status == 200 ? r.Json()["choices"][0]["text"].get<std::string>() : r.body});
      std::this_thread::sleep_for(20ms);
    }
  });
  // The burst: 16 closed-loop silver clients against 4 sequence slots.
  std::vector<std::thread> burst;
  for (int c = 0; c < 16; ++c) {
    burst.emplace_back([&, c] {
      for (int i = 0; !stop_burst.load(); ++i) {
        json req = Completion("And it came to pass " + std::to_string(c * 1000 + i), 24);
        HttpReply r = PostJson(port(), "/v1/completions", req, kSilver);
        std::lock_guard<std::mutex> lock(mu);
        silver.push_back(Seen{r.status, r.headers["x-ferry-variant"], r.body});
      }
    });
  }
  const bool went_down = WaitForActive(port(), "kjv", "int8", 90s);
  if (went_down) std::this_thread::sleep_for(1500ms);  // silver keeps arriving on int8 for a while
  stop_burst = true;
  for (auto& t : burst) t.join();
  const bool came_back = went_down && WaitForActive(port(), "kjv", "bf16", 90s);
  std::this_thread::sleep_for(300ms);  // a few gold requests after the return, too
  stop_gold = true;
  gold_client.join();

  EXPECT_TRUE(went_down) << "the burst did not move the group down";
  EXPECT_TRUE(came_back) << "the group did not come back up";
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_GT(gold.size(), 5u);
  for (const Seen& g : gold) {
    EXPECT_EQ(g.status, 200) << g.text;
    EXPECT_EQ(g.variant, "bf16");
    EXPECT_EQ(g.text, gold_text);  // the floor variant's own output, not int8's
  }
  int on_int8 = 0, on_bf16 = 0;
  for (const Seen& s : silver) {
    EXPECT_EQ(s.status, 200) << s.text;
    on_int8 += s.variant == "int8";
    on_bf16 += s.variant == "bf16";
  }
  EXPECT_GT(on_int8, 0);
  EXPECT_GT(on_bf16, 0);
  EXPECT_EQ(on_int8 + on_bf16, static_cast<int>(silver.size()));

  // The switches, their reasons, and the decision log.
  const std::string metrics = testing::Http(port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:qos_switches_total{model_name=\"kjv\",from=\"bf16\",to=\"int8\",reason=\"pressure_high\"}"),
            std::string::npos);
  EXPECT_NE(metrics.find("ferry:qos_switches_total{model_name=\"kjv\",from=\"int8\",to=\"bf16\",reason=\"pressure_low\"}"),
            std::string::npos);
  EXPECT_NE(metrics.find("ferry:qos_active_variant{model_name=\"kjv\",variant=\"bf16\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("ferry:qos_active_variant{model_name=\"kjv\",variant=\"int8\"} 0"), std::string::npos);
  EXPECT_NE(metrics.find("ferry:qos_variant_requests_total{model_name=\"kjv\",variant=\"int8\",tier=\"silver\"}"),
            std::string::npos);
  EXPECT_NE(metrics.find("ferry:qos_variant_generation_tokens_total{model_name=\"kjv\",variant=\"int8\"}"),
            std::string::npos);
  EXPECT_NE(metrics.find("ferry:qos_pressure{model_name=\"kjv\",signal=\"queue_wait:silver\"}"), std::string::npos);
  const json qos = testing::Http(port(), "GET", "/admin/qos/kjv", "", kAdmin).Json();
  int downs = 0, ups = 0;
  for (const json& d : qos["decisions"]) {
    if (d["kind"] != "switch") continue;
    downs += d["action"] == "down";
    ups += d["action"] == "up";
    EXPECT_FALSE(d["reason"].get<std::string>().empty());
  }
  EXPECT_GE(downs, 1);
  EXPECT_GE(ups, 1);
}

TEST_F(QosServerTest, AdminPinsClearsAndShowsTheGroup) {
  ASSERT_NE(server_, nullptr);
  // One model to clients, with its variants.
  const json models = testing::Http(port(), "GET", "/v1/models", "", kSilver).Json();
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "kjv");
  ASSERT_EQ(models["data"][0]["ferry"]["variants"].size(), 2u);
  EXPECT_EQ(models["data"][0]["ferry"]["variants"][1]["name"], "int8");
  EXPECT_EQ(models["data"][0]["max_model_len"], 256);
  EXPECT_EQ(models["data"][0]["ferry"]["routes"], json::array({"/v1/completions", "/v1/chat/completions"}));
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/models/kjv", "", kSilver).status, 200);
  const json status = testing::Http(port(), "GET", "/admin/status", "", kAdmin).Json();
  ASSERT_EQ(status["models"].size(), 2u);
  EXPECT_EQ(status["models"][0]["id"], "kjv");
  ASSERT_EQ(status["models"][0]["variant_batchers"].size(), 2u);
  EXPECT_EQ(status["models"][0]["variant_batchers"][1]["variant"], "int8");
  EXPECT_GT(status["models"][0]["variant_batchers"][1]["batcher"]["kv_blocks"].get<int>(), 0);
  // The admin routes are for admins.
  EXPECT_EQ(testing::Http(port(), "GET", "/admin/qos", "", kSilver).status, 403);
  HttpReply all = testing::Http(port(), "GET", "/admin/qos", "", kAdmin);
  ASSERT_EQ(all.status, 200);
  ASSERT_EQ(all.Json()["models"].size(), 2u);
  const json kjv = all.Json()["models"][0];
  EXPECT_EQ(kjv["model"], "kjv");
  EXPECT_EQ(kjv["floors"]["gold"], "bf16");
  EXPECT_EQ(kjv["kind"], "decoder");
  EXPECT_TRUE(kjv["variants"][1]["canary"]["passed"].get<bool>()) << kjv["variants"][1].dump();
  EXPECT_GT(kjv["variants"][1]["probe_seconds"].get<double>(), 0.0);
  EXPECT_TRUE(kjv["signals"].contains("pressures"));
  // Pin int8: silver runs on it at once, gold stays on its floor.
  HttpReply pin = PostJson(port(), "/admin/qos/kjv", {{"pin", "int8"}}, kAdmin);
  ASSERT_EQ(pin.status, 200) << pin.body;
  EXPECT_EQ(pin.Json()["active"], "int8");
  EXPECT_EQ(pin.Json()["pin"], "int8");
  HttpReply s = PostJson(port(), "/v1/completions", Completion("In the beginning", 4), kSilver);
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.headers["x-ferry-variant"], "int8");
  HttpReply g = PostJson(port(), "/v1/completions", Completion("In the beginning", 4), kGold);
  ASSERT_EQ(g.status, 200);
  EXPECT_EQ(g.headers["x-ferry-variant"], "bf16");
  // Chat completions and /tokenize are admitted the same way: rendered with the chosen
  // variant's chat template (the engine file carries the checkpoint's) and run on it.
  const json chat = {{"model", "kjv"},
                     {"messages", {{{"role", "user"}, {"content", "In the beginning"}}}},
                     {"max_tokens", 4},
                     {"temperature", 0}};
  HttpReply cs = PostJson(port(), "/v1/chat/completions", chat, kSilver);
  ASSERT_EQ(cs.status, 200) << cs.body;
  EXPECT_EQ(cs.headers["x-ferry-variant"], "int8");
  EXPECT_EQ(cs.Json()["object"], "chat.completion");
  EXPECT_EQ(cs.Json()["model"], "kjv");
  HttpReply cg = PostJson(port(), "/v1/chat/completions", chat, kGold);
  ASSERT_EQ(cg.status, 200) << cg.body;
  EXPECT_EQ(cg.headers["x-ferry-variant"], "bf16");
  HttpReply tok = PostJson(port(), "/tokenize", {{"model", "kjv"}, {"prompt", "In the beginning"}}, kSilver);
  ASSERT_EQ(tok.status, 200) << tok.body;
  EXPECT_EQ(tok.headers["x-ferry-variant"], "int8");
  EXPECT_GT(tok.Json()["count"].get<int>(), 0);
  // Bad requests fail alone with a clear error.
  HttpReply bad = PostJson(port(), "/admin/qos/kjv", {{"pin", "fp4"}}, kAdmin);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.Json()["error"]["message"].get<std::string>().find("no variant 'fp4'"), std::string::npos);
  EXPECT_EQ(PostJson(port(), "/admin/qos/kjv", {{"pinn", "int8"}}, kAdmin).status, 400);
  EXPECT_EQ(PostJson(port(), "/admin/qos/kjv", {{"pin", 3}}, kAdmin).status, 400);
  EXPECT_EQ(PostJson(port(), "/admin/qos/nope", {{"pin", "auto"}}, kAdmin).status, 404);
  EXPECT_EQ(testing::Http(port(), "DELETE", "/admin/qos/kjv", "", kAdmin).status, 405);
  // Clearing a healthy variant is a no-op; "auto" hands the group back to the controller,
  // which returns to the top once the dwell time has passed.
  EXPECT_EQ(PostJson(port(), "/admin/qos/kjv", {{"clear", "all"}}, kAdmin).status, 200);
  HttpReply back = PostJson(port(), "/admin/qos/kjv", {{"pin", "auto"}}, kAdmin);
  ASSERT_EQ(back.status, 200);
  EXPECT_EQ(back.Json()["pin"], "auto");
  EXPECT_TRUE(WaitForActive(port(), "kjv", "bf16", 30s));
  const json after = testing::Http(port(), "GET", "/admin/qos/kjv", "", kAdmin).Json();
  bool pinned = false;
  for (const json& d : after["decisions"]) pinned = pinned || (d["kind"] == "switch" && d["code"] == "pin");
  EXPECT_TRUE(pinned);
  const std::string metrics = testing::Http(port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:qos_switches_total{model_name=\"kjv\",from=\"bf16\",to=\"int8\",reason=\"pin\"} 1"),
            std::string::npos);
}

// ferry:qos_moved_requests_total for silver requests moved from bf16 to int8.
int MovedCounter(int port) {
  const std::string metrics = testing::Http(port, "GET", "/metrics").body;
  const std::string key = "ferry:qos_moved_requests_total{model_name=\"kjv\",from=\"bf16\",to=\"int8\",tier=\"silver\"} ";
  const size_t at = metrics.find(key);
  return at == std::string::npos ? 0 : std::stoi(metrics.substr(at + key.size()));
}

// A switch moves the requests still waiting for their first step: they finish on the new
// variant (and say so), the running ones finish where they started, nothing fails.
TEST_F(QosServerTest, ASwitchMovesWaitingRequestsToTheNewVariant) {
  ASSERT_NE(server_, nullptr);
  constexpr int kRequests = 12;  // max_num_seqs is 4: 8 of them wait
  const int moved_before = MovedCounter(port());  // the burst test may have moved some already
  std::vector<Seen> seen(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      json req = Completion("In the beginning", 240);
      req["ignore_eos"] = true;
      HttpReply r = PostJson(port(), "/v1/completions", req, kSilver);
      seen[i] = Seen{r.status, r.headers["x-ferry-variant"], r.body};
    });
  }
  // Wait until the top variant runs 4 and holds 8 in its queue, then pin the bottom one.
  bool queued = false;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!queued && std::chrono::steady_clock::now() < deadline) {
    const json st = testing::Http(port(), "GET", "/admin/status", "", kAdmin).Json();
    const json& b = st["models"][0]["variant_batchers"][0]["batcher"];
    queued = b.value("running", 0) == 4 && b.value("waiting", 0) == kRequests - 4;
    if (!queued) std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(queued);
  ASSERT_EQ(PostJson(port(), "/admin/qos/kjv", {{"pin", "int8"}}, kAdmin).status, 200);
  for (auto& t : clients) t.join();
  int on_top = 0, moved = 0;
  for (const Seen& s : seen) {
    EXPECT_EQ(s.status, 200) << s.text;
    on_top += s.variant == "bf16";
    moved += s.variant == "int8";
  }
  EXPECT_EQ(on_top + moved, kRequests);
  EXPECT_GE(on_top, 4);  // the running ones finished where they started
  EXPECT_GE(moved, 1);   // the waiting ones left the busy variant
  EXPECT_EQ(MovedCounter(port()) - moved_before, moved);
  ASSERT_EQ(PostJson(port(), "/admin/qos/kjv", {{"pin", "auto"}}, kAdmin).status, 200);
  EXPECT_TRUE(WaitForActive(port(), "kjv", "bf16", 30s));
}

TEST_F(QosServerTest, EncoderGroupsRouteWholeRequestsPerTier) {
  ASSERT_NE(server_, nullptr);
  const json req = {{"model", "cls"}, {"input", json::array({"In the beginning God created", "Jesus wept."})}};
  HttpReply before = PostJson(port(), "/v1/classify", req, kSilver);
  ASSERT_EQ(before.status, 200) << before.body;
  EXPECT_EQ(before.headers["x-ferry-variant"], "f32");
  ASSERT_EQ(PostJson(port(), "/admin/qos/cls", {{"pin", "int8-wo"}}, kAdmin).status, 200);
  HttpReply s = PostJson(port(), "/v1/classify", req, kSilver);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.headers["x-ferry-variant"], "int8-wo");
  ASSERT_EQ(s.Json()["data"].size(), 2u);
  // The int8-wo classifier agrees with f32 on these labels (quality table: same accuracy).
  EXPECT_EQ(s.Json()["data"][0]["label"], before.Json()["data"][0]["label"]);
  HttpReply g = PostJson(port(), "/v1/classify", req, kGold);
  ASSERT_EQ(g.status, 200);
  EXPECT_EQ(g.headers["x-ferry-variant"], "f32");  // the group's own floor for gold
  const json qos = PostJson(port(), "/admin/qos/cls", {{"pin", "auto"}}, kAdmin).Json();
  EXPECT_EQ(qos["kind"], "encoder");
  // No step pacing: an encoder variant's batches start at once and are its own.
  EXPECT_FALSE(qos.contains("inactive_step_ms"));
  EXPECT_FALSE(qos["variants"][1].contains("step_pacing_ms"));
  EXPECT_TRUE(qos["variants"][1]["canary"]["passed"].get<bool>()) << qos["variants"][1].dump();
  EXPECT_TRUE(WaitForActive(port(), "cls", "f32", 30s));
}

// A copy of the demo decoder whose final norm is NaN: every request on it fails with
// non-finite logits.
std::string BrokenDecoder(const ferry::testing::TempDir& dir) {
  namespace fs = std::filesystem;
  const std::string src = ferry::testing::SourcePath("models/demo/kjv-decoder");
  const std::string dst = dir.File("broken");
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dst + "/" + e.path().filename().string());
  std::fstream f(dst + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const json h = json::parse(header);
  const json& norm = h.at("model.norm.weight");
  EXPECT_EQ(norm["dtype"], "BF16");
  const uint64_t begin = norm["data_offsets"][0].get<uint64_t>();
  const uint64_t end = norm["data_offsets"][1].get<uint64_t>();
  f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
  const uint16_t nan = 0x7FC0;
  for (uint64_t b = begin; b < end; b += 2) f.write(reinterpret_cast<const char*>(&nan), 2);
  EXPECT_TRUE(f.good());
  return dst;
}

TEST(QosRollbackTest, AVariantThatProducesNaNIsLeftUntilAnAdministratorClearsIt) {
  ferry::testing::TempDir dir;
  const std::string broken = BrokenDecoder(dir);
  const std::string root = ferry::testing::SourcePath("");
  std::unique_ptr<Server> server = StartServer(
      kHead +
      "models:\n"
      "  - name: kjv\n    threads: 2\n    batching: {max_num_seqs: 4, max_num_batched_tokens: 64, max_seq_len: 128}\n"
      "    qos: {window_s: 2, min_dwell_s: 1, tick_ms: 50, project_upgrade: false, "
      "rollback: {error_rate: 0.5, min_errors: 3}}\n"
      "    variants:\n"
      "      - {name: bf16, path: " + root + "/models/demo/kjv-decoder}\n"
      "      - {name: broken, path: " + broken + ", warmup: false}\n"
      "log: {level: error, request_log: false}\n");
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  ASSERT_EQ(PostJson(port, "/admin/qos/kjv", {{"pin", "broken"}}, kAdmin).status, 200);
  // Requests on the broken variant fail alone with a 500 naming the cause...
  int failed = 0;
  for (int i = 0; i < 3; ++i) {
    HttpReply r = PostJson(port, "/v1/completions", Completion("In the beginning", 4), kSilver);
    if (r.status == 500) {
      ++failed;
      EXPECT_NE(r.body.find("non-finite"), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(failed, 3);
  // ...until the error window marks it unhealthy and the group rolls back, pin or not.
  ASSERT_TRUE(WaitForActive(port, "kjv", "bf16", 30s));
  json qos = testing::Http(port, "GET", "/admin/qos/kjv", "", kAdmin).Json();
  EXPECT_FALSE(qos["variants"][1]["healthy"].get<bool>());
  EXPECT_NE(qos["variants"][1]["unhealthy_reason"].get<std::string>().find("engine errors: 3 of 3"), std::string::npos)
      << qos["variants"][1].dump();
  EXPECT_EQ(qos["pin"], "auto");
  bool rolled_back = false;
  for (const json& d : qos["decisions"]) rolled_back = rolled_back || d["code"] == "pin_released";
  EXPECT_TRUE(rolled_back) << qos["decisions"].dump();
  HttpReply ok = PostJson(port, "/v1/completions", Completion("In the beginning", 4), kSilver);
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.headers["x-ferry-variant"], "bf16");
  // It stays out, and cannot be pinned, until an administrator clears it.
  std::this_thread::sleep_for(2500ms);  // the errors have left the window
  qos = testing::Http(port, "GET", "/admin/qos/kjv", "", kAdmin).Json();
  EXPECT_FALSE(qos["variants"][1]["healthy"].get<bool>());
  HttpReply refused = PostJson(port, "/admin/qos/kjv", {{"pin", "broken"}}, kAdmin);
  EXPECT_EQ(refused.status, 409);
  EXPECT_NE(testing::Http(port, "GET", "/metrics").body.find(
                "ferry:qos_variant_healthy{model_name=\"kjv\",variant=\"broken\"} 0"),
            std::string::npos);
  HttpReply cleared = PostJson(port, "/admin/qos/kjv", {{"clear", "broken"}}, kAdmin);
  ASSERT_EQ(cleared.status, 200);
  EXPECT_TRUE(cleared.Json()["variants"][1]["healthy"].get<bool>());
}

// Polls GET /admin/qos/kjv until variant `index` is paced to `ms` (0 = unpaced).
bool WaitForPacing(int port, int index, double ms, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    HttpReply r = testing::Http(port, "GET", "/admin/qos/kjv", "", kAdmin);
    if (r.status == 200 && r.Json()["variants"][static_cast<size_t>(index)]["step_pacing_ms"] == ms) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Step pacing of the variants new requests are not steered to: with the group on its bottom
// variant, the top one serves only the gold floor and steps at most every 0.5 x the smallest
// TPOT target; back on the top, the top is unpaced and the bottom (draining only) paced.
// Both variants are the demo checkpoint: what is tested is the routing of the pacing.
TEST(QosPacingTest, TheVariantsNotSteeredToArePacedAndTheActiveOneIsNot) {
  const std::string root = ferry::testing::SourcePath("");
  std::unique_ptr<Server> server = StartServer(
      kHead +
      "models:\n"
      "  - name: kjv\n    threads: 2\n    batching: {max_num_seqs: 4, max_num_batched_tokens: 64, max_seq_len: 128}\n"
      "    qos: {window_s: 1, min_dwell_s: 1, tick_ms: 50, project_upgrade: false, signals: [queue_wait], "
      "slo: {tpot_ms: 1000}, tiers: {gold: {slo: {tpot_ms: 400}}}}\n"
      "    variants:\n"
      "      - {name: bf16, path: " + root + "/models/demo/kjv-decoder}\n"
      "      - {name: lite, path: " + root + "/models/demo/kjv-decoder}\n"
      "log: {level: error, request_log: false}\n");
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  json qos = testing::Http(port, "GET", "/admin/qos/kjv", "", kAdmin).Json();
  EXPECT_DOUBLE_EQ(qos["inactive_step_ms"].get<double>(), 200.0);  // auto: 0.5 x gold's 400 ms
  EXPECT_EQ(qos["active"], "bf16");
  EXPECT_EQ(qos["variants"][0]["step_pacing_ms"], 0.0);
  EXPECT_EQ(qos["variants"][1]["step_pacing_ms"], 200.0);  // nothing is steered to it

  // Pinned to the bottom: gold's floor keeps it on bf16, which is now paced; lite is not.
  HttpReply pin = PostJson(port, "/admin/qos/kjv", {{"pin", "lite"}}, kAdmin);
  ASSERT_EQ(pin.status, 200) << pin.body;
  EXPECT_EQ(pin.Json()["variants"][0]["step_pacing_ms"], 200.0);
  EXPECT_EQ(pin.Json()["variants"][1]["step_pacing_ms"], 0.0);
  json gold = Completion("In the beginning", 6);
  gold["ignore_eos"] = true;
  HttpReply g = PostJson(port, "/v1/completions", gold, kGold);
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(g.headers["x-ferry-variant"], "bf16");
  EXPECT_EQ(g.Json()["usage"]["completion_tokens"], 6);
  HttpReply s = PostJson(port, "/v1/completions", gold, kSilver);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.headers["x-ferry-variant"], "lite");
  qos = testing::Http(port, "GET", "/admin/qos/kjv", "", kAdmin).Json();
  // A wait after each of the first 5 steps, unless the step itself outlasted the pace (a
  // loaded machine): at least one, at most 5.
  const int paced = qos["variants"][0]["paced_waits"].get<int>();
  EXPECT_GE(paced, 1) << qos["variants"][0].dump();
  EXPECT_LE(paced, 5) << qos["variants"][0].dump();
  EXPECT_EQ(qos["variants"][1]["paced_waits"], 0);
  bool logged = false;
  for (const json& d : qos["decisions"]) {
    logged = logged || (d["kind"] == "pacing" && d["code"] == "paced" && d["from"] == "bf16");
  }
  EXPECT_TRUE(logged) << qos["decisions"].dump();
  std::string metrics = testing::Http(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:qos_step_pacing_ms{model_name=\"kjv\",variant=\"bf16\"} 200"), std::string::npos);
  EXPECT_NE(metrics.find("ferry:qos_step_pacing_ms{model_name=\"kjv\",variant=\"lite\"} 0"), std::string::npos);

  // Back to the controller: it returns to the top (no pressure), whose pacing is cleared.
  ASSERT_EQ(PostJson(port, "/admin/qos/kjv", {{"pin", "auto"}}, kAdmin).status, 200);
  ASSERT_TRUE(WaitForActive(port, "kjv", "bf16", 30s));
  ASSERT_TRUE(WaitForPacing(port, 0, 0.0, 10s));
  ASSERT_TRUE(WaitForPacing(port, 1, 200.0, 10s));
  metrics = testing::Http(port, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("ferry:qos_step_pacing_ms{model_name=\"kjv\",variant=\"bf16\"} 0"), std::string::npos);
  EXPECT_NE(metrics.find("ferry:qos_paced_waits_total{model_name=\"kjv\",variant=\"bf16\"} " + std::to_string(paced)),
            std::string::npos);
}

// A group "kjv" of two copies of the demo decoder (bf16, lite), two sequences each, with
// `threads` threads and `qos_keys` added to its qos block (projection off).
std::unique_ptr<Server> StartDemoPair(int threads, const std::string& qos_keys) {
  const std::string root = ferry::testing::SourcePath("");
  return StartServer(kHead + "models:\n  - name: kjv\n    threads: " + std::to_string(threads) +
                     "\n    batching: {max_num_seqs: 2, max_num_batched_tokens: 64, max_seq_len: 64}\n"
                     "    qos: {project_upgrade: false, " + qos_keys + "}\n"
                     "    variants:\n"
                     "      - {name: bf16, path: " + root + "/models/demo/kjv-decoder}\n"
                     "      - {name: lite, path: " + root + "/models/demo/kjv-decoder}\n"
                     "log: {level: error, request_log: false}\n");
}

// qos.inactive_step_ms: off, and auto without any TPOT target, leave every variant unpaced.
TEST(QosPacingTest, OffOrNoTpotTargetLeavesEveryVariantUnpaced) {
  for (const std::string qos_keys : {"inactive_step_ms: off, slo: {tpot_ms: 100}", "slo: {ttft_ms: 500}"}) {
    std::unique_ptr<Server> server = StartDemoPair(2, qos_keys);
    ASSERT_NE(server, nullptr) << qos_keys;
    const int port = server->port();
    HttpReply pin = PostJson(port, "/admin/qos/kjv", {{"pin", "lite"}}, kAdmin);
    ASSERT_EQ(pin.status, 200) << pin.body;
    EXPECT_EQ(pin.Json()["inactive_step_ms"], 0.0) << qos_keys;
    EXPECT_EQ(pin.Json()["variants"][0]["step_pacing_ms"], 0.0) << qos_keys;
    EXPECT_EQ(pin.Json()["variants"][1]["step_pacing_ms"], 0.0) << qos_keys;
  }
}

// Sends `n` completions of `tokens` tokens at once to a demo pair pinned to 'lite',
// alternately as gold and silver: each is a 200 with all its tokens, from the variant its
// tier routes to (gold on its floor, bf16; silver on the pinned lite).
void ServeGoldAndSilver(int port, size_t n, int tokens, const std::string& label) {
  json body = Completion("In the beginning", tokens);
  body["ignore_eos"] = true;
  std::vector<std::thread> clients;
  std::vector<HttpReply> replies(n);
  for (size_t i = 0; i < n; ++i) {
    clients.emplace_back([&, i] { replies[i] = PostJson(port, "/v1/completions", body, i % 2 == 0 ? kGold : kSilver); });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(replies[i].status, 200) << label << " " << replies[i].body;
    EXPECT_EQ(replies[i].headers["x-ferry-variant"], i % 2 == 0 ? "bf16" : "lite") << label;
    EXPECT_EQ(replies[i].Json()["usage"]["completion_tokens"], tokens) << label;
  }
}

// qos.step_turns: auto leaves CPU variants to share the cores as they do; on makes the two
// decoder variants take turns step by step, and /admin/qos shows it. Both serve requests
// while they take turns (gold on its floor, silver on the pinned bottom).
TEST(QosStepTurnsTest, AutoIsOffOnTheCpuAndOnMakesTheVariantsTakeTurns) {
  for (const std::string turns : {"auto", "on"}) {
    std::unique_ptr<Server> server = StartDemoPair(1, "inactive_step_ms: off, step_turns: " + turns);
    ASSERT_NE(server, nullptr) << turns;
    const int port = server->port();
    HttpReply pin = PostJson(port, "/admin/qos/kjv", {{"pin", "lite"}}, kAdmin);
    ASSERT_EQ(pin.status, 200) << pin.body;
    const bool on = turns == "on";
    EXPECT_EQ(pin.Json()["variants"][0]["step_turns"], on) << turns;
    EXPECT_EQ(pin.Json()["variants"][1]["step_turns"], on) << turns;
    // Variants that take turns use every core for each step; the others split the cores.
    EXPECT_EQ(pin.Json()["variants"][0]["share_cores"], !on) << turns;
    EXPECT_EQ(pin.Json()["variants"][1]["share_cores"], !on) << turns;
    ServeGoldAndSilver(port, 6, 24, turns);
    const json qos = testing::Http(port, "GET", "/admin/qos/kjv", "", kAdmin).Json();
    if (!on) {
      EXPECT_EQ(qos["variants"][0]["turn_waits"], 0) << qos["variants"][0].dump();
      EXPECT_EQ(qos["variants"][1]["turn_waits"], 0) << qos["variants"][1].dump();
    }
  }
}

// qos.share_cores (auto: on for CPU variants): while both variants have work each steps on
// half of the group's cores (threads: 4); off leaves every variant on its own threads.
TEST(QosShareCoresTest, CpuVariantsSplitTheCoresWhileBothHaveWork) {
  for (const std::string share : {"auto", "off"}) {
    std::unique_ptr<Server> server = StartDemoPair(4, "inactive_step_ms: off, share_cores: " + share);
    ASSERT_NE(server, nullptr) << share;
    const int port = server->port();
    HttpReply pin = PostJson(port, "/admin/qos/kjv", {{"pin", "lite"}}, kAdmin);
    ASSERT_EQ(pin.status, 200) << pin.body;
    const bool on = share == "auto";
    ServeGoldAndSilver(port, 4, 32, share);
    const json qos = testing::Http(port, "GET", "/admin/qos/kjv", "", kAdmin).Json();
    for (int v = 0; v < 2; ++v) {
      const json& variant = qos["variants"][v];
      EXPECT_EQ(variant["share_cores"], on) << variant.dump();
      if (on) {
        // Its last step ran on half the cores (the other variant still had work) or on all.
        const int threads = variant["compute_threads"].get<int>();
        EXPECT_TRUE(threads == 2 || threads == 4) << variant.dump();
      } else {
        EXPECT_EQ(variant["compute_threads"], 0) << variant.dump();
      }
    }
  }
}

TEST(QosMemoryTest, AGroupThatCannotFitIsRefusedNamingTheSizes) {
  const std::string root = ferry::testing::SourcePath("");
  // 100,000 sequences of 512 tokens: a KV cache of hundreds of GiB per variant.
  Result<ServerConfig> cfg = ParseServerConfig(
      "auth: {mode: none}\nmodels:\n"
      "  - name: kjv\n    batching: {max_num_seqs: 100000, max_num_batched_tokens: 100000}\n"
      "    variants:\n"
      "      - {name: a, path: " + root + "/models/demo/kjv-decoder}\n"
      "      - {name: b, path: " + root + "/models/demo/kjv-decoder}\n");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  ServerMetrics metrics;
  QosMetrics qos_metrics(metrics.registry);
  Result<std::unique_ptr<VariantGroup>> g = VariantGroup::Create(*cfg, cfg->models[0], metrics, qos_metrics, nullptr);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kResourceExhausted);
  const std::string m = g.status().message();
  EXPECT_NE(m.find("the variants of model 'kjv' need"), std::string::npos) << m;
  EXPECT_NE(m.find("a: weights 12.8 MiB + KV 195.31 GiB"), std::string::npos) << m;
  EXPECT_NE(m.find("available of"), std::string::npos) << m;
}

}  // namespace
}  // namespace ferry::serve
