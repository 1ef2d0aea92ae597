// Hub ids resolved offline in a Hugging Face cache laid out as huggingface_hub writes it
// (refs/, snapshots/ with symlinks into blobs/), built by the test in a temporary folder.
#include "io/hf_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry::io {
namespace {

namespace fs = std::filesystem;
using ::ferry::testing::TempDir;
using ::testing::HasSubstr;

constexpr const char* kMain = "0123456789abcdef0123456789abcdef01234567";
constexpr const char* kOld = "fedcba9876543210fedcba9876543210fedcba98";

void WriteFile(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A cache with ORG/REPO at two commits: refs/main -> kMain, refs/v1 -> kOld; the snapshot
// files are symlinks into blobs/, as the Hub client stores them.
void MakeRepo(const fs::path& cache) {
  const fs::path repo = cache / "models--my-org--My.Model_1";
  WriteFile(repo / "blobs" / "aaa", "{\"model_type\": \"llama\"}");
  WriteFile(repo / "blobs" / "bbb", "{\"model_type\": \"qwen2\"}");
  fs::create_directories(repo / "snapshots" / kMain);
  fs::create_directories(repo / "snapshots" / kOld);
  fs::create_symlink("../../blobs/aaa", repo / "snapshots" / kMain / "config.json");
  fs::create_symlink("../../blobs/bbb", repo / "snapshots" / kOld / "config.json");
  WriteFile(repo / "refs" / "main", kMain);  // no newline, as the Hub client writes it
  WriteFile(repo / "refs" / "v1", std::string(kOld) + "\n");
  // huggingface_hub keeps revision "refs/pr/3" at refs/refs/pr/3 (refs/ + the revision).
  WriteFile(repo / "refs" / "refs" / "pr" / "3", kOld);
}

using ferry::testing::ScopedEnv;

TEST(HfCacheTest, ParsesHubIds) {
  auto id = ParseHubModelId("meta-llama/Llama-3.2-1B");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->repo_id, "meta-llama/Llama-3.2-1B");
  EXPECT_EQ(id->revision, "main");
  id = ParseHubModelId("Qwen/Qwen3-0.6B@refs/pr/3");
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->revision, "refs/pr/3");
  for (const char* not_an_id : {"model", "/abs/path", "./org/repo", "a/b/c", "org/", "/repo", "org/..", "org/re po",
                                "org/repo@", "org/repo@../x", "../repo", "org/--x"}) {
    EXPECT_FALSE(ParseHubModelId(not_an_id).has_value()) << not_an_id;
  }
}

TEST(HfCacheTest, ResolvesBranchesTagsAndCommits) {
  TempDir tmp;
  MakeRepo(tmp.path());
  const std::string repo = tmp.path() + "/models--my-org--My.Model_1/snapshots/";
  auto main = ResolveHubSnapshot(*ParseHubModelId("my-org/My.Model_1"), tmp.path());
  ASSERT_TRUE(main.ok()) << main.status().ToString();
  EXPECT_EQ(*main, repo + kMain);
  auto v1 = ResolveHubSnapshot(*ParseHubModelId("my-org/My.Model_1@v1"), tmp.path());
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  EXPECT_EQ(*v1, repo + kOld);
  auto pr = ResolveHubSnapshot(*ParseHubModelId("my-org/My.Model_1@refs/pr/3"), tmp.path());
  ASSERT_TRUE(pr.ok()) << pr.status().ToString();
  EXPECT_EQ(*pr, repo + kOld);
  auto commit = ResolveHubSnapshot(*ParseHubModelId(std::string("my-org/My.Model_1@") + kOld), tmp.path());
  ASSERT_TRUE(commit.ok());
  EXPECT_EQ(*commit, repo + kOld);
  // The symlinked files read through.
  std::ifstream in(*main + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("llama"));
}

TEST(HfCacheTest, MissingRepoRevisionOrSnapshotSaysWhereItLooked) {
  TempDir tmp;
  MakeRepo(tmp.path());
  auto missing = ResolveHubSnapshot(*ParseHubModelId("other/model"), tmp.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("models--other--model"));
  EXPECT_THAT(missing.status().message(), HasSubstr("huggingface-cli download other/model"));
  auto rev = ResolveHubSnapshot(*ParseHubModelId("my-org/My.Model_1@dev"), tmp.path());
  ASSERT_FALSE(rev.ok());
  EXPECT_THAT(rev.status().message(), HasSubstr("revision 'dev'"));
  auto commit =
      ResolveHubSnapshot(*ParseHubModelId("my-org/My.Model_1@1111111111111111111111111111111111111111"), tmp.path());
  ASSERT_FALSE(commit.ok());
  EXPECT_THAT(commit.status().message(), HasSubstr("snapshot 1111111111111111111111111111111111111111"));
  WriteFile(fs::path(tmp.path()) / "models--my-org--My.Model_1" / "refs" / "bad", "not a hash");
  auto bad = ResolveHubSnapshot(*ParseHubModelId("my-org/My.Model_1@bad"), tmp.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("commit hash"));
}

TEST(HfCacheTest, CacheFolderFollowsTheHubVariables) {
  TempDir tmp;
  ScopedEnv home("HOME", tmp.path());
  ScopedEnv a("HF_HUB_CACHE", "");
  ScopedEnv b("HUGGINGFACE_HUB_CACHE", "");
  ScopedEnv c("HF_HOME", "");
  ScopedEnv d("XDG_CACHE_HOME", "");
  EXPECT_EQ(HubCacheDir(), tmp.path() + "/.cache/huggingface/hub");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(HubCacheDir(), "/xdg/huggingface/hub");
  setenv("HF_HOME", "~/hf", 1);
  EXPECT_EQ(HubCacheDir(), tmp.path() + "/hf/hub");
  setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
  EXPECT_EQ(HubCacheDir(), "/legacy");
  setenv("HF_HUB_CACHE", "/hub", 1);
  EXPECT_EQ(HubCacheDir(), "/hub");
}

TEST(HfCacheTest, ResolveModelPathPrefersLocalPaths) {
  TempDir tmp;
  // The snapshot holds config.json only: offline, it is used as it is, not completed.
  ScopedEnv offline("HF_HUB_OFFLINE", "1");
  MakeRepo(tmp.path() + "/cache");
  ScopedEnv cache("HF_HUB_CACHE", tmp.path() + "/cache");
  auto hub = ResolveModelPath("my-org/My.Model_1");
  ASSERT_TRUE(hub.ok()) << hub.status().ToString();
  EXPECT_EQ(*hub, tmp.path() + "/cache/models--my-org--My.Model_1/snapshots/" + kMain);
  // A local folder of the same relative name wins (run from tmp).
  const fs::path cwd = fs::current_path();
  fs::create_directories(fs::path(tmp.path()) / "my-org" / "My.Model_1");
  fs::current_path(tmp.path());
  auto local = ResolveModelPath("my-org/My.Model_1");
  fs::current_path(cwd);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local, "my-org/My.Model_1");
  // Not a Hub id: unchanged, for the loader to report.
  auto other = ResolveModelPath("/no/such/dir");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, "/no/such/dir");
  EXPECT_EQ(ResolveModelPath("nobody/nothing").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ferry::io
