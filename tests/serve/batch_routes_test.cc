// The Batch API in process on the demo models with the local queue: files, validation by
// line, batches of completions and classifications whose results equal the online
// responses, tenancy, cancel mid-batch, the admin view and metrics.
#include "serve/batch_routes.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <thread>

#include "batch/types.h"
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

std::string Config(const std::string& dir, const std::string& queue_extra = "") {
  const std::string root = ferry::testing::SourcePath("");
  return "listener:\n  host: 127.0.0.1\n  port: 0\n  max_body_bytes: 1048576\n"
         "auth:\n  mode: keys\n  admin_keys: [sk-admin-test]\n"
         "tiers:\n  gold: 1\n"
         "tenants:\n  - name: acme\n    tier: gold\n    keys: [sk-acme-test]\n"
         "  - name: beta\n    tier: gold\n    keys: [sk-beta-test]\n"
         "models:\n  - name: m\n    path: " + root + "/models/demo/kjv-decoder\n    threads: 2\n"
         "  - name: c\n    path: " + root + "/models/demo/kjv-classifier\n    threads: 2\n"
         "queue:\n  backend: local\n  path: " + dir + "\n  max_in_flight: 2\n  poll_ms: 20\n"
         "  max_file_bytes: 200000\n  min_file_expiry_s: 2\n" + queue_extra +
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
  // Valid as a line, refused when it runs (min_tokens over max_tokens): a failed request.
  lines.push_back(Request("bad-request", "/v1/completions",
                          {{"model", "m"}, {"prompt", "x"}, {"max_tokens", 2}, {"min_tokens", 5}}));
  const std::string file = UploadOk(Jsonl(lines));
  json b = Create(file, "/v1/completions");
  EXPECT_EQ(b["object"], "batch");
  // Created validating (a worker checks the file against the batch), as OpenAI reports it.
  EXPECT_EQ(b["status"], "validating");
  EXPECT_EQ(b["request_counts"]["total"], 0);
  EXPECT_TRUE(b["in_progress_at"].is_null());
  EXPECT_EQ(b["expires_at"], b["created_at"].get<int64_t>() + 86400);
  EXPECT_EQ(b["metadata"]["job"], "test");
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/batches/" + b["id"].get<std::string>(), "", kBeta).status, 404);
  json done = WaitDone(b["id"]);
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["request_counts"]["total"], 11);
  EXPECT_EQ(done["request_counts"]["completed"], 10);
  EXPECT_EQ(done["request_counts"]["failed"], 1);
  EXPECT_TRUE(done["completed_at"].is_number());
  ASSERT_TRUE(done["in_progress_at"].is_number());
  EXPECT_GE(done["in_progress_at"].get<int64_t>(), done["created_at"].get<int64_t>());
  EXPECT_GE(done["finalizing_at"].get<int64_t>(), done["in_progress_at"].get<int64_t>());
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
  EXPECT_EQ(errors[0]["custom_id"], "bad-request");
  EXPECT_EQ(errors[0]["response"]["status_code"], 400);
  EXPECT_EQ(errors[0]["response"]["body"]["error"]["param"], "min_tokens");
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
  json created = Create(file, "/v1/completions");
  EXPECT_EQ(created["status"], "validating");
  json b = WaitDone(created["id"]);
  EXPECT_EQ(b["status"], "failed");
  EXPECT_TRUE(b["failed_at"].is_number());
  EXPECT_TRUE(b["in_progress_at"].is_null());
  EXPECT_EQ(b["errors"]["object"], "list");
  ASSERT_EQ(b["errors"]["data"].size(), 1u);
  EXPECT_EQ(b["errors"]["data"][0]["line"], 2);
  EXPECT_EQ(b["errors"]["data"][0]["code"], "mismatched_endpoint");
  EXPECT_EQ(b["errors"]["data"][0]["param"], "url");
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

// Every line's model must be served here: a batch naming another fails validation with
// the line's number, and runs nothing.
TEST_F(BatchRoutesTest, ABatchNamingAModelNotServedFailsValidation) {
  const std::string file = UploadOk(Jsonl({Request("a", "/v1/completions", CompletionBody(1)),
                                           Request("b", "/v1/completions", CompletionBody(2)),
                                           Request("c", "/v1/completions", {{"model", "nope"}, {"prompt", "x"}})}));
  json b = WaitDone(Create(file, "/v1/completions")["id"]);
  ASSERT_EQ(b["status"], "failed") << b.dump();
  ASSERT_EQ(b["errors"]["data"].size(), 1u);
  EXPECT_EQ(b["errors"]["data"][0]["code"], "model_not_found");
  EXPECT_EQ(b["errors"]["data"][0]["line"], 3);
  EXPECT_EQ(b["errors"]["data"][0]["param"], "body.model");
  EXPECT_EQ(b["request_counts"]["total"], 0);
  EXPECT_TRUE(b["output_file_id"].is_null());
}

// expires_after on upload (OpenAI's form fields), output_expires_after on batches; an
// expired file is a 404 with an OpenAI error body, and the sweeper deletes it.
TEST_F(BatchRoutesTest, FilesExpireAsAsked) {
  const auto upload = [&](const std::vector<std::pair<std::string, std::string>>& fields) {
    std::string body;
    for (const auto& [k, v] : fields) {
      body += "--BOUNDARY\r\nContent-Disposition: form-data; name=\"" + k + "\"\r\n\r\n" + v + "\r\n";
    }
    body += "--BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n" +
            Jsonl({Request("a", "/v1/completions", CompletionBody(1))}) + "\r\n--BOUNDARY--\r\n";
    return testing::Http(port(), "POST", "/v1/files", body,
                         {{"Authorization", "Bearer sk-acme-test"},
                          {"Content-Type", "multipart/form-data; boundary=BOUNDARY"}});
  };
  using Fields = std::vector<std::pair<std::string, std::string>>;
  const auto bad = [&](const Fields& f, const std::string& param) {
    HttpReply r = upload(f);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.Json()["error"]["param"], param) << r.body;
  };
  bad({{"purpose", "batch"}, {"expires_after[anchor]", "created_at"}, {"expires_after[seconds]", "1"}},
      "expires_after[seconds]");  // under queue.min_file_expiry_s (2 here; 3600 by default)
  bad({{"purpose", "batch"}, {"expires_after[anchor]", "created_at"}, {"expires_after[seconds]", "2592001"}},
      "expires_after[seconds]");
  bad({{"purpose", "batch"}, {"expires_after[anchor]", "created_at"}, {"expires_after[seconds]", "1h"}},
      "expires_after[seconds]");
  bad({{"purpose", "batch"}, {"expires_after[anchor]", "last_active_at"}, {"expires_after[seconds]", "3600"}},
      "expires_after[anchor]");
  bad({{"purpose", "batch"}, {"expires_after[seconds]", "3600"}}, "expires_after[anchor]");
  HttpReply kept = upload({{"purpose", "batch"}});
  ASSERT_EQ(kept.status, 200);
  EXPECT_TRUE(kept.Json()["expires_at"].is_null());
  HttpReply r = upload({{"purpose", "batch"}, {"expires_after[anchor]", "created_at"}, {"expires_after[seconds]", "2"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json f = r.Json();
  EXPECT_EQ(f["expires_at"], f["created_at"].get<int64_t>() + 2);
  EXPECT_EQ(testing::Http(port(), "GET", "/v1/files/" + f["id"].get<std::string>(), "", kAcme).Json()["expires_at"],
            f["expires_at"]);
  // A batch's output files: output_expires_after, checked like an upload's.
  EXPECT_EQ(testing::PostJson(port(), "/v1/batches",
                              {{"input_file_id", kept.Json()["id"]}, {"endpoint", "/v1/completions"},
                               {"completion_window", "24h"},
                               {"output_expires_after", {{"anchor", "created_at"}, {"seconds", 1}}}},
                              kAcme).status, 400);
  EXPECT_EQ(testing::PostJson(port(), "/v1/batches",
                              {{"input_file_id", kept.Json()["id"]}, {"endpoint", "/v1/completions"},
                               {"completion_window", "24h"}, {"output_expires_after", {{"seconds", 60}}}},
                              kAcme).status, 400);
  HttpReply cb = testing::PostJson(port(), "/v1/batches",
                                   {{"input_file_id", kept.Json()["id"]}, {"endpoint", "/v1/completions"},
                                    {"completion_window", "24h"},
                                    {"output_expires_after", {{"anchor", "created_at"}, {"seconds", 2}}}},
                                   kAcme);
  ASSERT_EQ(cb.status, 200) << cb.body;
  json done = WaitDone(cb.Json()["id"]);
  ASSERT_EQ(done["status"], "completed") << done.dump();
  const std::string out_id = done["output_file_id"];
  json out = testing::Http(port(), "GET", "/v1/files/" + out_id, "", kAcme).Json();
  ASSERT_TRUE(out["expires_at"].is_number()) << out.dump();
  EXPECT_EQ(out["expires_at"], out["created_at"].get<int64_t>() + 2);
  // Past their expiry: 404 with OpenAI's error body, not listed; the sweeper deletes them.
  const int64_t last = std::max(f["expires_at"].get<int64_t>(), out["expires_at"].get<int64_t>());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (batch::NowUnix() < last && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  for (const std::string& id : {f["id"].get<std::string>(), out_id}) {
    HttpReply gone = testing::Http(port(), "GET", "/v1/files/" + id, "", kAcme);
    EXPECT_EQ(gone.status, 404) << id;
    EXPECT_EQ(gone.Json()["error"]["type"], "not_found_error") << gone.body;
    EXPECT_EQ(testing::Http(port(), "GET", "/v1/files/" + id + "/content", "", kAcme).status, 404);
  }
  json listed = testing::Http(port(), "GET", "/v1/files", "", kAcme).Json();
  for (const json& l : listed["data"]) EXPECT_NE(l["id"], f["id"]);
  int64_t swept = 0;
  while (swept < 2 && std::chrono::steady_clock::now() < deadline) {  // the worker sweeps every second
    swept = testing::Http(port(), "GET", "/admin/batches", "", kAdmin).Json()["worker"].value("files_expired_total", 0);
    if (swept < 2) std::this_thread::sleep_for(100ms);
  }
  EXPECT_GE(swept, 2);
  EXPECT_TRUE(testing::Http(port(), "GET", "/v1/files/" + kept.Json()["id"].get<std::string>(), "", kAcme).status == 200);
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

// A batch past its window (queue.completion_window_s, 3 s here) ends expired: finished
// results are kept in the output file, the requests never run are batch_expired.
TEST(BatchExpiryTest, ABatchPastItsWindowKeepsFinishedResultsAndExpiresTheRest) {
  char tmpl[] = "/tmp/ferry_batch_expiry_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::unique_ptr<Server> server =
      testing::StartServerFromYaml(Config(dir, "  completion_window_s: 3\n"));
  std::vector<json> lines;
  for (int i = 0; i < 600; ++i) lines.push_back(Request("r" + std::to_string(i), "/v1/completions", CompletionBody(i, 48)));
  const std::string body = Multipart("batch", Jsonl(lines));
  auto headers = kAcme;
  headers["Content-Type"] = "multipart/form-data; boundary=BOUNDARY";
  HttpReply up = testing::Http(server->port(), "POST", "/v1/files", body, headers);
  ASSERT_EQ(up.status, 200) << up.body;
  HttpReply cr = testing::PostJson(server->port(), "/v1/batches",
                                   {{"input_file_id", up.Json()["id"]}, {"endpoint", "/v1/completions"},
                                    {"completion_window", "24h"}},
                                   kAcme);
  ASSERT_EQ(cr.status, 200) << cr.body;
  const json created = cr.Json();
  EXPECT_EQ(created["completion_window"], "24h");
  EXPECT_EQ(created["expires_at"], created["created_at"].get<int64_t>() + 3);
  json b;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    b = testing::Http(server->port(), "GET", "/v1/batches/" + created["id"].get<std::string>(), "", kAcme).Json();
    if (b["status"] == "expired" || b["status"] == "completed" || b["status"] == "failed") break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(b["status"], "expired") << b.dump();
  EXPECT_TRUE(b["expired_at"].is_number());
  EXPECT_GE(b["expired_at"].get<int64_t>(), b["expires_at"].get<int64_t>());
  const int completed = b["request_counts"]["completed"];
  const int skipped = b["ferry"]["cancelled_requests"];
  EXPECT_GE(completed, 1);  // the first requests ran within the window
  EXPECT_GE(skipped, 1);
  EXPECT_EQ(completed + skipped + b["request_counts"]["failed"].get<int>(), 600);
  const auto count_lines = [&](const json& id, const char* code) {
    if (!id.is_string()) return 0;
    HttpReply r = testing::Http(server->port(), "GET", "/v1/files/" + id.get<std::string>() + "/content", "", kAcme);
    EXPECT_EQ(r.status, 200);
    int n = 0;
    for (size_t pos = 0; pos < r.body.size();) {
      const size_t nl = r.body.find('\n', pos);
      const json line = json::parse(r.body.substr(pos, nl - pos));
      if (code != nullptr) {
        EXPECT_EQ(line["error"]["code"], code);
      }
      ++n;
      pos = nl + 1;
    }
    return n;
  };
  EXPECT_EQ(count_lines(b["output_file_id"], nullptr), completed);
  EXPECT_EQ(count_lines(b["error_file_id"], "batch_expired"), skipped);
  server.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::serve
