// Helpers of the model repository tests: a temporary repository, publishing a version by
// rename, a server on it, and waiting for a version's state through GET /admin/models.
#pragma once

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "serve/server.h"
#include "server_test_util.h"
#include "test_client.h"
#include "test_util.h"

namespace ferry::serve::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

// Two decoders whose greedy outputs differ: the demo model and the tiny llama fixture.
inline std::string V1Source() { return ::ferry::testing::SourcePath("models/demo/kjv-decoder"); }
inline std::string V2Source() { return ::ferry::testing::FixturePath("models/llama-tiny"); }

inline fs::path TempRepo(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ferry_repo_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// The safe way to publish: fill a hidden directory, then rename it to its version number.
inline void Publish(const fs::path& model_dir, int64_t version, const std::string& source) {
  const fs::path tmp = model_dir / (".incoming-" + std::to_string(version));
  fs::create_directories(tmp);
  for (const auto& e : fs::directory_iterator(source)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), tmp / e.path().filename());
  }
  fs::rename(tmp, model_dir / std::to_string(version));
}

inline std::unique_ptr<Server> StartRepoServer(const fs::path& repo, const std::string& extra = "") {
  const std::string yaml = "listener:\n  host: 127.0.0.1\n  port: 0\n  shutdown_timeout_ms: 20000\n"
                           "auth:\n  mode: none\n"
                           "model_repository:\n  path: " + repo.string() +
                           "\n  poll_s: 1\n  settle_ms: 200\n  drain_timeout_ms: 30000\n" + extra +
                           "log:\n  level: warn\n  request_log: false\n";
  return StartServerFromYaml(yaml);
}

inline json Greedy(const std::string& model, int max_tokens = 6) {
  return {{"model", model}, {"prompt", "In the beginning"}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// The state of `version` of `model` in GET /admin/models ("" when absent).
inline json VersionStatus(int port, const std::string& model, int64_t version) {
  const json s = Http(port, "GET", "/admin/models").Json();
  for (const json& m : s.value("models", json::array())) {
    if (m.value("name", "") != model) continue;
    for (const json& v : m["versions"]) {
      if (v.value("version", 0) == version) return v;
    }
  }
  return json::object();
}

// Waits (with a deadline) until `version` reaches `state`.
inline bool WaitForState(int port, const std::string& model, int64_t version, const std::string& state,
                  std::chrono::milliseconds within = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (VersionStatus(port, model, version).value("state", "") == state) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

}  // namespace ferry::serve::testing
