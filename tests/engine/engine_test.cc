// Engine::Load on a Hub id: the model comes from a Hugging Face cache built by the test
// (symlinks into blobs/, refs/main), or is downloaded into one from a Hub stand-in on
// 127.0.0.1, and loads exactly as the local folder would.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "io/fake_hub.h"
#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

using ferry::testing::ScopedEnv;

TEST(EngineLoadTest, HubIdLoadsFromTheHuggingFaceCache) {
  testing::TempDir tmp;
  const fs::path src = testing::FixturePath("models/llama3-tiny");
  const std::string commit = "1111111111111111111111111111111111111111";
  const fs::path repo = fs::path(tmp.path()) / "hub" / "models--tiny-org--llama3-tiny";
  const fs::path snapshot = repo / "snapshots" / commit;
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  int n = 0;
  for (const auto& entry : fs::directory_iterator(src)) {
    // Each file as a blob named by a stand-in hash, linked from the snapshot.
    const fs::path blob = repo / "blobs" / ("blob" + std::to_string(n++));
    fs::copy_file(entry.path(), blob);
    fs::create_symlink(fs::relative(blob, snapshot), snapshot / entry.path().filename());
  }
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << commit;

  ScopedEnv cache("HF_HUB_CACHE", (fs::path(tmp.path()) / "hub").string());
  ScopedEnv offline("HF_HUB_OFFLINE", "1");  // a model not in the cache is not looked for online
  auto from_hub = engine::Engine::Load("tiny-org/llama3-tiny");
  auto at_commit = engine::Engine::Load("tiny-org/llama3-tiny@" + commit);
  auto missing = engine::Engine::Load("tiny-org/other");
  ASSERT_TRUE(from_hub.ok()) << from_hub.status().ToString();
  ASSERT_TRUE(at_commit.ok()) << at_commit.status().ToString();
  auto local = engine::Engine::Load(src.string());
  ASSERT_TRUE(local.ok());
  EXPECT_EQ((*from_hub)->config().vocab_size, (*local)->config().vocab_size);
  EXPECT_EQ(*(*from_hub)->EncodePrompt("Hello world"), *(*local)->EncodePrompt("Hello world"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("models--tiny-org--other"), std::string::npos)
      << missing.status().ToString();
}

TEST(EngineLoadTest, HubIdIsDownloadedIntoTheCacheAndLoads) {
  testing::TempDir tmp;
  const fs::path src = testing::FixturePath("models/llama3-tiny");
  testing::FakeHub hub("tiny-org/llama3-tiny");
  // The files a Hub repository of this model has; the weights through LFS.
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "model.safetensors"}) {
    hub.AddFile(name, testing::ReadAll((src / name).string()), std::string(name) == "model.safetensors");
  }
  ScopedEnv home("HOME", tmp.path());
  ScopedEnv hf_home("HF_HOME", tmp.path() + "/hf");
  ScopedEnv cache("HF_HUB_CACHE", tmp.path() + "/hub");
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint());
  ScopedEnv offline("HF_HUB_OFFLINE", std::nullopt);
  ScopedEnv token("HF_TOKEN", std::nullopt);
  auto from_hub = engine::Engine::Load("tiny-org/llama3-tiny");
  ASSERT_TRUE(from_hub.ok()) << from_hub.status().ToString();
  auto local = engine::Engine::Load(src.string());
  ASSERT_TRUE(local.ok());
  EXPECT_EQ((*from_hub)->config().vocab_size, (*local)->config().vocab_size);
  EXPECT_EQ(*(*from_hub)->EncodePrompt("Hello world"), *(*local)->EncodePrompt("Hello world"));
  EXPECT_TRUE(fs::is_symlink(fs::path(tmp.path()) / "hub" / "models--tiny-org--llama3-tiny" / "snapshots" /
                             testing::FakeHub::kCommit / "model.safetensors"));
}

}  // namespace
}  // namespace ferry
