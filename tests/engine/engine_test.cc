// Engine::Load on a Hub id: the model comes from a Hugging Face cache built by the test
// (symlinks into blobs/, refs/main), exactly as the local folder would load.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

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

  const char* old = std::getenv("HF_HUB_CACHE");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  setenv("HF_HUB_CACHE", (fs::path(tmp.path()) / "hub").c_str(), 1);
  auto from_hub = engine::Engine::Load("tiny-org/llama3-tiny");
  auto at_commit = engine::Engine::Load("tiny-org/llama3-tiny@" + commit);
  auto missing = engine::Engine::Load("tiny-org/other");
  if (saved) {
    setenv("HF_HUB_CACHE", saved->c_str(), 1);
  } else {
    unsetenv("HF_HUB_CACHE");
  }
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

}  // namespace
}  // namespace ferry
