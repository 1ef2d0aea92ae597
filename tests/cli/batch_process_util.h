// Batch API fault tests on real `ferry serve` processes: configs, uploads, polling, and
// the checks every fault test ends with (each custom_id once, greedy outputs equal to the
// same requests served online).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "serve/test_client.h"
#include "serve_process.h"
#include "test_util.h"

namespace ferry::testing {

using json = nlohmann::json;

// A config file for one replica: the demo decoder, no auth, no request log, `queue` as given.
inline std::string WriteBatchConfig(const std::string& dir, const std::string& name, const std::string& queue_yaml) {
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << "listener: {host: 127.0.0.1, port: 0, shutdown_timeout_ms: 2000}\n"
                         "auth: {mode: none}\n"
                         "models:\n  - name: m\n    path: " + SourcePath("models/demo/kjv-decoder") +
                             "\n    threads: 1\n"
                             "log: {level: info, request_log: false}\n"
                             "queue:\n" + queue_yaml;
  return path;
}

inline json BatchCompletion(int i, int max_tokens) {
  static const char* kStarts[] = {"In the beginning", "And God said", "Blessed are", "The LORD is", "And it came to pass"};
  return {{"model", "m"}, {"prompt", std::string(kStarts[i % 5]) + " " + std::to_string(i)},
          {"max_tokens", max_tokens}, {"temperature", 0}};
}

// Uploads `n` greedy completions and creates their batch; returns the batch id ("" on failure).
inline std::string SubmitBatch(int port, int n, int max_tokens) {
  std::string jsonl;
  for (int i = 0; i < n; ++i) {
    jsonl += json{{"custom_id", "req-" + std::to_string(i)}, {"method", "POST"}, {"url", "/v1/completions"},
                  {"body", BatchCompletion(i, max_tokens)}}.dump() + "\n";
  }
  const std::string body = "--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                           "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n" +
                           jsonl + "\r\n--B--\r\n";
  auto up = serve::testing::Http(port, "POST", "/v1/files", body, {{"Content-Type", "multipart/form-data; boundary=B"}});
  EXPECT_EQ(up.status, 200) << up.body;
  if (up.status != 200) return "";
  auto b = serve::testing::PostJson(port, "/v1/batches",
                                    {{"input_file_id", up.Json()["id"]}, {"endpoint", "/v1/completions"},
                                     {"completion_window", "24h"}});
  EXPECT_EQ(b.status, 200) << b.body;
  return b.Json().value("id", "");
}

inline json GetBatch(int port, const std::string& id) {
  return serve::testing::Http(port, "GET", "/v1/batches/" + id).Json();
}

inline int64_t Finished(const json& b) {
  if (!b.contains("request_counts")) return -1;
  return b["request_counts"]["completed"].get<int64_t>() + b["request_counts"]["failed"].get<int64_t>();
}

// Polls `port` until the batch has at least `count` finished requests or is done.
inline json WaitFinished(int port, const std::string& id, int64_t count, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  json b;
  while (std::chrono::steady_clock::now() < deadline) {
    b = GetBatch(port, id);
    const std::string s = b.value("status", "");
    if (s == "completed" || s == "cancelled" || s == "failed" || s == "expired" || Finished(b) >= count) return b;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "batch " << id << " did not reach " << count << " within the deadline: " << b.dump();
  return b;
}

inline json WaitCompleted(int port, const std::string& id, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  json b;
  while (std::chrono::steady_clock::now() < deadline) {
    b = GetBatch(port, id);
    if (b.value("status", "") == "completed") return b;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "batch " << id << " did not complete: " << b.dump();
  return b;
}

// The batch's output: every custom_id req-0..req-{n-1} exactly once, status 200, no error
// file; the texts equal what `port` answers online for the same requests (`threads`
// clients at once).
inline void ExpectExactlyOnceAndOnlineEqual(int port, const json& batch, int n, int max_tokens, int threads = 4) {
  ASSERT_EQ(batch.value("status", ""), "completed") << batch.dump();
  EXPECT_EQ(batch["request_counts"]["completed"], n);
  EXPECT_EQ(batch["request_counts"]["failed"], 0);
  EXPECT_TRUE(batch["error_file_id"].is_null()) << batch.dump();
  auto out = serve::testing::Http(port, "GET", "/v1/files/" + batch["output_file_id"].get<std::string>() + "/content");
  ASSERT_EQ(out.status, 200);
  std::map<int, std::string> texts;
  size_t pos = 0, lines = 0;
  while (pos < out.body.size()) {
    const size_t nl = out.body.find('\n', pos);
    const json line = json::parse(out.body.substr(pos, nl - pos));
    pos = nl + 1;
    ++lines;
    const std::string id = line["custom_id"];
    ASSERT_EQ(line["response"]["status_code"], 200) << line.dump();
    const int i = std::stoi(id.substr(4));
    EXPECT_TRUE(texts.emplace(i, line["response"]["body"]["choices"][0]["text"].get<std::string>()).second)
        << id << " appears twice";
  }
  EXPECT_EQ(lines, static_cast<size_t>(n));
  ASSERT_EQ(texts.size(), static_cast<size_t>(n));
  EXPECT_EQ(texts.begin()->first, 0);
  EXPECT_EQ(texts.rbegin()->first, n - 1);
  std::atomic<int> next{0}, mismatches{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&] {
      for (int i; (i = next++) < n;) {
        auto r = serve::testing::PostJson(port, "/v1/completions", BatchCompletion(i, max_tokens));
        if (r.status != 200 || r.Json()["choices"][0]["text"] != texts.at(i)) ++mismatches;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(mismatches.load(), 0) << "batch outputs that differ from the online response";
}

inline std::string TempDirectory() {
  char tmpl[] = "/tmp/ferry_batch_proc_XXXXXX";
  return mkdtemp(tmpl);
}

}  // namespace ferry::testing
