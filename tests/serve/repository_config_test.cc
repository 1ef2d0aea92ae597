// The model repository's files: version policies, a model's config.yaml, which directories
// count as versions (never a temporary one being filled), the server config's keys.
#include "serve/repository_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace ferry::serve {
namespace {

namespace fs = std::filesystem;

fs::path TempRepo(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ferry_repo_cfg_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(VersionPolicyTest, LatestSkipsFailedVersionsSoTheOneBeforeKeepsServing) {
  VersionPolicy p;
  EXPECT_EQ(p.Select({1, 2, 3}, {}), (std::vector<int64_t>{3}));
  EXPECT_EQ(p.Select({1, 2, 3}, {3}), (std::vector<int64_t>{2}));
  p.latest = 2;
  EXPECT_EQ(p.Select({1, 2, 3}, {}), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p.Select({}, {}), (std::vector<int64_t>{}));
  p.kind = VersionPolicy::Kind::kAll;
  EXPECT_EQ(p.Select({1, 4}, {4}), (std::vector<int64_t>{1, 4}));
  p.kind = VersionPolicy::Kind::kSpecific;
  p.specific = {1, 3};
  EXPECT_EQ(p.Select({1, 2}, {}), (std::vector<int64_t>{1}));
  EXPECT_EQ(p.ToString(), "specific: [1, 3]");
}

TEST(RepositoryConfigTest, ModelConfigReadsServingOptionsAndPolicy) {
  const fs::path repo = TempRepo("model");
  Write(repo / "m" / "config.yaml", "threads: 2\nversion_policy: {latest: 2}\nbatching:\n  max_num_seqs: 3\n");
  auto c = LoadRepositoryModelConfig(repo.string(), "m");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.name, "m");
  EXPECT_EQ(c->model.threads, 2);
  EXPECT_EQ(c->model.batching.max_num_seqs, 3);
  EXPECT_EQ(c->policy.kind, VersionPolicy::Kind::kLatest);
  EXPECT_EQ(c->policy.latest, 2);

  Write(repo / "a" / "config.yaml", "version_policy: all\n");
  EXPECT_EQ(LoadRepositoryModelConfig(repo.string(), "a")->policy.kind, VersionPolicy::Kind::kAll);
  Write(repo / "s" / "config.yaml", "version_policy:\n  specific: [2, 5]\n");
  EXPECT_EQ(LoadRepositoryModelConfig(repo.string(), "s")->policy.specific, (std::vector<int64_t>{2, 5}));
  // No config.yaml: every default.
  fs::create_directories(repo / "d");
  EXPECT_EQ(LoadRepositoryModelConfig(repo.string(), "d")->policy.latest, 1);

  for (const std::string bad : {"path: x\n", "version_policy: {latest: 0}\n", "version_policy: newest\n",
                                "version_policy: {latest: 1, all: true}\n", "threads: [1\n"}) {
    Write(repo / "bad" / "config.yaml", bad);
    auto r = LoadRepositoryModelConfig(repo.string(), "bad");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  fs::remove_all(repo);
}

TEST(RepositoryConfigTest, OnlyPositiveIntegerDirectoriesAreVersions) {
  const fs::path repo = TempRepo("versions");
  for (const std::string d : {"1", "2", "10", "0", "01", "-3", "3.tmp", ".incoming-4", "x"}) {
    Write(repo / "m" / d / "config.json", "{}");
  }
  Write(repo / "m" / "7", "not a directory");
  Write(repo / "m" / "10" / "model.engine", "engine bytes");
  Write(repo / ".hidden" / "1" / "config.json", "{}");
  const std::vector<VersionOnDisk> v = ListVersions(repo.string(), "m");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].version, 1);
  EXPECT_EQ(v[1].version, 2);
  EXPECT_EQ(v[2].version, 10);
  EXPECT_EQ(v[0].load_path, (repo / "m" / "1").string());       // a checkpoint directory
  EXPECT_EQ(v[2].load_path, (repo / "m" / "10" / "model.engine").string());  // the engine file in it
  EXPECT_NE(v[0].signature.find("config.json:2:"), std::string::npos);
  // A file growing changes the signature (what "settled" compares).
  const std::string before = v[0].signature;
  Write(repo / "m" / "1" / "config.json", "{\"a\": 1}");
  EXPECT_NE(ListVersions(repo.string(), "m")[0].signature, before);
  EXPECT_EQ(ListRepositoryModels(repo.string()), (std::vector<std::string>{"m"}));
  fs::remove_all(repo);
}

TEST(RepositoryConfigTest, AVersionHoldingOnlyAGgufFileLoadsIt) {
  const fs::path repo = TempRepo("gguf");
  Write(repo / "m" / "1" / "model.gguf", "GGUF");
  Write(repo / "m" / "2" / "a.gguf", "GGUF");
  Write(repo / "m" / "2" / "config.json", "{}");  // a checkpoint beside it is what loads
  Write(repo / "m" / "3" / "a.gguf", "GGUF");
  Write(repo / "m" / "3" / "model.engine", "engine bytes");  // an engine file wins
  const std::vector<VersionOnDisk> v = ListVersions(repo.string(), "m");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].load_path, (repo / "m" / "1" / "model.gguf").string());
  EXPECT_EQ(v[1].load_path, (repo / "m" / "2").string());
  EXPECT_EQ(v[2].load_path, (repo / "m" / "3" / "model.engine").string());
  fs::remove_all(repo);
}

TEST(RepositoryConfigTest, ServerConfigKeysAndFlag) {
  auto c = ParseServerConfig("auth: {mode: none}\nmodel_repository: /srv/models\nrepository_poll_s: 2.5\n"
                             "host_memory_budget_bytes: 1000000\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_repository.path, "/srv/models");
  EXPECT_DOUBLE_EQ(c->model_repository.poll_s, 2.5);
  EXPECT_EQ(c->host_memory_budget_bytes, 1000000);
  c = ParseServerConfig("auth: {mode: none}\nmodel_repository: {path: r, poll_s: 0, watch: false, settle_ms: 50, "
                        "drain_timeout_ms: 100}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->model_repository.watch);
  EXPECT_EQ(c->model_repository.settle_ms, 50);
  EXPECT_EQ(c->model_repository.drain_timeout_ms, 100);
  EXPECT_FALSE(ParseServerConfig("auth: {mode: none}\nmodel_repository: {path: r, poll_s: -1}\n").ok());
  EXPECT_FALSE(ParseServerConfig("auth: {mode: none}\nmodel_repository: {poll_s: 1}\n").ok());
  EXPECT_FALSE(ParseServerConfig("auth: {mode: none}\nmodel_repository: {path: r, polls: 1}\n").ok());
  ServerConfigOverrides o;
  o.model_repository = "/x";
  c = ParseServerConfig("auth: {mode: none}\n", o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->model_repository.path, "/x");
}

}  // namespace
}  // namespace ferry::serve
