// The Batch API in process on the demo models with the local queue: files, validation by
// line, batches of completions and classifications whose results equal the online
// responses, tenancy, cancel mid-batch, the admin view and metrics.
#include "serve/batch_routes.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <thread>

#include "server_test_util.h"
#include "test_client.h"
#include "test_util.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;
using testing::HttpReply;
using namespace std::chrono_literals;

const std::map<std::string, std::string> kAcme{{"Authorization", "Bearer sk-acme-test"}};
const std::map<std::string, std::string> kBeta{{"Authorization", "Bearer sk-beta-test"}};
const std::map<std::string, std::string> kAdmin{{"Authorization", "Bearer sk-admin-test"}};

std::string Config(const std::string& dir) {
  const std::string root = ferry::testing::SourcePath("");
  return "listener:\n  host: 127.0.0.1\n  port: 0\n  max_body_bytes: 1048576\n"
         "auth:\n  mode: keys\n  admin_keys: [sk-admin-test]\n"
         "tiers:\n  gold: 1\n"
         "tenants:\n  - name: acme\n    tier: gold\n    keys: [sk-acme-test]\n"
         "  - name: beta\n    tier: gold\n    keys: [sk-beta-test]\n"
         "models:\n  - name: m\n    path: " + root + "/models/demo/kjv-decoder\n    threads: 2\n"
         "  - name: c\n    path: " + root + "/models/demo/kjv-classifier\n    threads: 2\n"
         "queue:\n  backend: local\n  path: " + dir + "\n  max_in_flight: 2\n  poll_ms: 20\n"
         "  max_file_bytes: 200000\n"
         "log:\n  level: warn\n  request_log: false\n";
}

std::string Multipart(const std::string& purpose, const std::string& content, const std::string& filename = "in.jsonl") {
  return "--BOUNDARY\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n" + purpose +
         "\r\n--BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + filename +
         "\"\r\nContent-Type: application/jsonl\r\n\r\n" + content + "\r\n--BOUNDARY--\r\n";
}

std::string Jsonl(const std::vector<json>& lines) {
  std::string out;
  for (const json& l : lines) out += l.dump() + "\n";
  return out;
}

json Request(const std::string& id, const std::string& url, const json& body) {
  return {{"custom_id", id}, {"method", "POST"}, {"url", url}, {"body", body}};
}

json CompletionBody(int i, int max_tokens = 6) {
  return {{"model", "m"}, {"prompt", "And God said " + std::to_string(i)}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

class BatchRoutesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/ferry_batch_routes_XXXXXX";
    dir_ = mkdtemp(tmpl);
    server_ = testing::StartServerFromYaml(Config(dir_)).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    std::filesystem::remove_all(dir_);
  }
  int port() const { return server_->port(); }

  HttpReply Upload(const std::string& content, const std::map<std::string, std::string>& who = kAcme,
                   const std::string& purpose = "batch") {
    auto headers = who;
    headers["Content-Type"] = "multipart/form-data; boundary=BOUNDARY";
    return testing::Http(port(), "POST", "/v1/files", Multipart(purpose, content), headers);
  }
  std::string UploadOk(const std::string& content) {
    HttpReply r = Upload(content);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.Json().value("id", "");
  }
  json Create(const std::string& file_id, const std::string& endpoint,
              const std::map<std::string, std::string>& who = kAcme) {
    HttpReply r = testing::PostJson(port(), "/v1/batches",
                                    {{"input_file_id", file_id}, {"endpoint", endpoint}, {"completion_window", "24h"},
                                     {"metadata", {{"job", "test"}}}},
                                    who);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.Json();
  }
  // Polls until the batch reaches a final status (or the deadline).
  json WaitDone(const std::string& id, std::chrono::seconds within = 120s) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    json b;
    while (std::chrono::steady_clock::now() < deadline) {
      b = testing::Http(port(), "GET", "/v1/batches/" + id, "", kAcme).Json();
      const std::string s = b.value("status", "");
      if (s == "completed" || s == "failed" || s == "cancelled" || s == "expired") return b;
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "batch " << id << " did not finish: " << b.dump();
    return b;
  }
  std::vector<json> Lines(const json& file_id) {
    std::vector<json> out;
    if (!file_id.is_string()) return out;
    HttpReply r = testing::Http(port(), "GET", "/v1/files/" + file_id.get<std::string>() + "/content", "", kAcme);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["content-type"], "application/jsonl");
    size_t pos = 0;
    while (pos < r.body.size()) {
      const size_t nl = r.body.find('\n', pos);
      out.push_back(json::parse(r.body.substr(pos, nl - pos)));
      pos = nl + 1;
    }
    return out;
  }

  static std::string dir_;
  static Server* server_;
};

std::string BatchRoutesTest::dir_;
Server* BatchRoutesTest::server_ = nullptr;

TEST_F(BatchRoutesTest, UploadsAreValidatedLineByLine) {
  HttpReply bad = Upload(Jsonl({Request("a", "/v1/completions", CompletionBody(1))}) + "{oops\n" +
                         Jsonl({Request("a", "/v1/completions", CompletionBody(2))}));
  ASSERT_EQ(bad.status, 400);
  const std::string msg = bad.Json()["error"]["message"];
  EXPECT_NE(msg.find("line 2: not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 3: custom_id"), std::string::npos) << msg;
  EXPECT_EQ(Upload("x", kAcme, "fine-tune").status, 400);
  EXPECT_EQ(testing::Http(port(), "POST", "/v1/files", "plain", {{"Authorization", "Bearer sk-acme-test"},
                                                                  {"Content-Type", "text/plain"}}).status, 400);
  HttpReply big = Upload(std::string(300000, 'x'));
  EXPECT_EQ(big.status, 413) << big.body;
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/files", "").status, 401);
  // A file lists, reads back, and deletes.
  const std::string content = Jsonl({Request("a", "/v1/completions", CompletionBody(1))});
  const std::string id = UploadOk(content);
  json f = testing::Http(port(), "GET", "/v1/files/" + id, "", kAcme).Json();
  EXPECT_EQ(f["object"], "file");
  EXPECT_EQ(f["purpose"], "batch");
  EXPECT_EQ(f["filename"], "in.jsonl");
  EXPECT_EQ(f["bytes"], content.size());
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/files/" + id + "/content", "", kAcme).body, content);
  json list = testing::Http(port(), "GET", "/v1/files?purpose=batch", "", kAcme).Json();
  EXPECT_EQ(list["object"], "list");
  EXPECT_GE(list["data"].size(), 1u);
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/files/" + id, "", kBeta).status, 404);  // another tenant's
  EXPECT_EQ(testing::Http(port(), "DELETE", "/v1/files/" + id, "", kBeta).status, 404);
  HttpReply del = testing::Http(port(), "DELETE", "/v1/files/" + id, "", kAcme);
  EXPECT_EQ(del.status, 200);
  EXPECT_TRUE(del.Json()["deleted"].get<bool>());
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/files/" + id, "", kAcme).status, 404);
}

TEST_F(BatchRoutesTest, CompletionsBatchEqualsOnlineResponses) {
  std::vector<json> lines;
  for (int i = 0; i < 10; ++i) lines.push_back(Request("req-" + std::to_string(i), "/v1/completions", CompletionBody(i)));
  lines.push_back(Request("bad-model", "/v1/completions", {{"model", "nope"}, {"prompt", "x"}}));
  const std::string file = UploadOk(Jsonl(lines));
  json b = Create(file, "/v1/completions");
  EXPECT_EQ(b["object"], "batch");
  EXPECT_EQ(b["status"], "in_progress");
  EXPECT_EQ(b["request_counts"]["total"], 11);
  EXPECT_EQ(b["metadata"]["job"], "test");
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/batches/" + b["id"].get<std::string>(), "", kBeta).status, 404);
  json done = WaitDone(b["id"]);
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["request_counts"]["completed"], 10);
  EXPECT_EQ(done["request_counts"]["failed"], 1);
  EXPECT_TRUE(done["completed_at"].is_number());
  std::set<std::string> seen;
  for (const json& line : Lines(done["output_file_id"])) {
    const std::string id = line["custom_id"];
    EXPECT_TRUE(seen.insert(id).second) << id;
    EXPECT_EQ(line["response"]["status_code"], 200);
    EXPECT_TRUE(line["error"].is_null());
    const int i = std::stoi(id.substr(4));
    HttpReply online = testing::PostJson(port(), "/v1/completions", CompletionBody(i), kAcme);
    ASSERT_EQ(online.status, 200);
    EXPECT_EQ(line["response"]["body"]["choices"][0]["text"], online.Json()["choices"][0]["text"]) << id;
  }
  EXPECT_EQ(seen.size(), 10u);
  std::vector<json> errors = Lines(done["error_file_id"]);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0]["custom_id"], "bad-model");
  EXPECT_EQ(errors[0]["response"]["status_code"], 404);
  EXPECT_EQ(errors[0]["response"]["body"]["error"]["code"], "model_not_found");
  // The output files belong to the tenant.
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/files/" + done["output_file_id"].get<std::string>() + "/content", "",
                          kBeta).status, 404);
}

TEST_F(BatchRoutesTest, ClassifyBatchEqualsOnlineResponses) {
  const std::vector<std::string> texts = {"In the beginning God created", "Jesus wept", "And the LORD spake"};
  std::vector<json> lines;
  for (size_t i = 0; i < texts.size(); ++i) {
    lines.push_back(Request("t" + std::to_string(i), "/v1/classify", {{"model", "c"}, {"input", texts[i]}}));
  }
  json done = WaitDone(Create(UploadOk(Jsonl(lines)), "/v1/classify")["id"]);
  ASSERT_EQ(done["status"], "completed") << done.dump();
  std::vector<json> out = Lines(done["output_file_id"]);
  ASSERT_EQ(out.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(out[i]["custom_id"], "t" + std::to_string(i));
    HttpReply online = testing::PostJson(port(), "/v1/classify", {{"model", "c"}, {"input", texts[i]}}, kAcme);
    ASSERT_EQ(online.status, 200);
    EXPECT_EQ(out[i]["response"]["body"]["data"][0]["label"], online.Json()["data"][0]["label"]);
    EXPECT_NEAR(out[i]["response"]["body"]["data"][0]["probs"][0].get<double>(),
                online.Json()["data"][0]["probs"][0].get<double>(), 1e-6);
  }
}

TEST_F(BatchRoutesTest, ABatchWhoseLinesDoNotFitTheEndpointFails) {
  const std::string file = UploadOk(Jsonl({Request("a", "/v1/completions", CompletionBody(1)),
                                           Request("b", "/v1/embeddings", {{"model", "c"}, {"input", "x"}})}));
  json b = Create(file, "/v1/completions");
  EXPECT_EQ(b["status"], "failed");
  ASSERT_EQ(b["errors"]["data"].size(), 1u);
  EXPECT_EQ(b["errors"]["data"][0]["line"], 2);
  EXPECT_EQ(b["errors"]["data"][0]["code"], "mismatched_endpoint");
  EXPECT_EQ(testing::PostJson(port(), "/v1/batches", {{"input_file_id", file}, {"endpoint", "/v1/score"}}, kAcme).status,
            400);
  EXPECT_EQ(testing::PostJson(port(), "/v1/batches", {{"input_file_id", "file-nope"}, {"endpoint", "/v1/completions"}},
                              kAcme).status, 404);
  EXPECT_EQ(testing::PostJson(port(), "/v1/batches", {{"input_file_id", file}, {"endpoint", "/v1/completions"}}, kBeta)
                .status, 404);  // another tenant's file
  EXPECT_EQ(testing::PostJson(port(), "/v1/batches",
                              {{"input_file_id", file}, {"endpoint", "/v1/completions"}, {"completion_window", "1h"}},
                              kAcme).status, 400);
  EXPECT_EQ(testing::Http(port(), "POST", "/v1/batches/" + b["id"].get<std::string>() + "/cancel", "", kAcme).status,
            409);  // already finished
}

TEST_F(BatchRoutesTest, CancelMidBatchKeepsFinishedResults) {
  std::vector<json> lines;
  for (int i = 0; i < 40; ++i) lines.push_back(Request("r" + std::to_string(i), "/v1/completions", CompletionBody(i, 24)));
  json b = Create(UploadOk(Jsonl(lines)), "/v1/completions");
  const std::string id = b["id"];
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline &&
         testing::Http(port(), "GET", "/v1/batches/" + id, "", kAcme).Json()["request_counts"]["completed"] < 2) {
    std::this_thread::sleep_for(20ms);
  }
  HttpReply c = testing::Http(port(), "POST", "/v1/batches/" + id + "/cancel", "", kAcme);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_TRUE(c.Json()["status"] == "cancelling" || c.Json()["status"] == "cancelled");
  json done = WaitDone(id);
  ASSERT_EQ(done["status"], "cancelled") << done.dump();
  const int completed = done["request_counts"]["completed"];
  const int cancelled = done["ferry"]["cancelled_requests"];
  EXPECT_GE(completed, 2);
  EXPECT_GE(cancelled, 1);
  EXPECT_EQ(completed + cancelled, 40);
  EXPECT_EQ(Lines(done["output_file_id"]).size(), static_cast<size_t>(completed));
  std::vector<json> errors = Lines(done["error_file_id"]);
  ASSERT_EQ(errors.size(), static_cast<size_t>(cancelled));
  for (const json& e : errors) EXPECT_EQ(e["error"]["code"], "batch_cancelled");
}

TEST_F(BatchRoutesTest, ListsAdminViewAndMetrics) {
  const std::string file = UploadOk(Jsonl({Request("a", "/v1/completions", CompletionBody(1))}));
  json first = Create(file, "/v1/completions");
  json second = Create(file, "/v1/completions");
  json page = testing::Http(port(), "GET", "/v1/batches?limit=1", "", kAcme).Json();
  ASSERT_EQ(page["data"].size(), 1u);
  EXPECT_EQ(page["data"][0]["id"], second["id"]);
  EXPECT_TRUE(page["has_more"].get<bool>());
  json next = testing::Http(port(), "GET", "/v1/batches?limit=1&after=" + page["last_id"].get<std::string>(), "", kAcme)
                  .Json();
  EXPECT_EQ(next["data"][0]["id"], first["id"]);
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/batches?limit=0", "", kAcme).status, 400);
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/batches", "", kBeta).Json()["data"].size(), 0u);
  EXPECT_EQ(testing::Http(port(), "GET", "/admin/batches", "", kAcme).status, 403);
  WaitDone(second["id"]);
  HttpReply admin = testing::Http(port(), "GET", "/admin/batches", "", kAdmin);
  ASSERT_EQ(admin.status, 200);
  EXPECT_GE(admin.Json()["data"].size(), 2u);
  EXPECT_EQ(admin.Json()["worker"]["backend"], "local");
  EXPECT_EQ(admin.Json()["worker"]["max_in_flight"], 2);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string metrics;
  while (std::chrono::steady_clock::now() < deadline) {  // the gauges refresh every second
    metrics = testing::Http(port(), "GET", "/metrics").body;
    if (metrics.find("ferry:batch_jobs{state=\"completed\"} 0") == std::string::npos &&
        metrics.find("ferry:batch_jobs{state=\"completed\"}") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(metrics.find("ferry:batch_requests{state=\"completed\"}"), std::string::npos);
  EXPECT_NE(metrics.find("ferry:batch_jobs{state=\"in_progress\"}"), std::string::npos);
  EXPECT_EQ(metrics.find("ferry:batch_jobs{state=\"completed\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("ferry:http_requests_total{route=\"/v1/batches/{id}\""), std::string::npos);
}

}  // namespace
}  // namespace ferry::serve
