// Downloads from a Hub stand-in on 127.0.0.1 (fake_hub.h) into a temporary cache: the
// layout huggingface_hub writes, offline reuse, resuming, SHA-256 checks, where the token
// goes, the Hub's errors and which files are fetched. Nothing leaves the machine.
#include "io/hf_download.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "io/fake_hub.h"
#include "io/hf_cache.h"
#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry::io {
namespace {

namespace fs = std::filesystem;
using ::ferry::testing::FakeHub;
using ::ferry::testing::ReadAll;
using ::ferry::testing::Sha256Hex;
using ::ferry::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using ferry::testing::ScopedEnv;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// The environment of one download test: a temporary cache and home (no token file is
// found by accident), the endpoint of `hub`, online.
class HubEnv {
 public:
  explicit HubEnv(const FakeHub& hub)
      : home_("HOME", tmp_.path()),
        hf_home_("HF_HOME", tmp_.path() + "/hf"),
        cache_("HF_HUB_CACHE", tmp_.path() + "/hub"),
        legacy_cache_("HUGGINGFACE_HUB_CACHE", std::nullopt),
        endpoint_("HF_ENDPOINT", hub.endpoint()),
        offline_("HF_HUB_OFFLINE", std::nullopt),
        token_("HF_TOKEN", std::nullopt),
        legacy_token_("HUGGING_FACE_HUB_TOKEN", std::nullopt),
        token_path_("HF_TOKEN_PATH", std::nullopt) {}

  std::string cache() const { return tmp_.path() + "/hub"; }
  fs::path repo_dir(const std::string& repo = "test-org/tiny") const {
    std::string folder = "models--" + repo;
    folder.replace(folder.find('/'), 1, "--");
    return fs::path(cache()) / folder;
  }
  const TempDir& tmp() const { return tmp_; }
  // Fast retries for tests that provoke them.
  HubOptions Options() const {
    HubOptions o = HubOptionsFromEnv();
    o.first_backoff = std::chrono::milliseconds(10);
    o.http.read_timeout = std::chrono::milliseconds(2000);
    return o;
  }

 private:
  TempDir tmp_;
  ScopedEnv home_, hf_home_, cache_, legacy_cache_, endpoint_, offline_, token_, legacy_token_, token_path_;
};

// A small model repository: two plain files, LFS weights, and what ferry must leave alone.
void AddModel(FakeHub& hub) {
  hub.AddFile("config.json", "{\"model_type\": \"llama\"}", false);
  hub.AddFile("tokenizer.json", "{\"model\": {}}", false);
  hub.AddFile("1_Pooling/config.json", "{\"pooling_mode_mean_tokens\": true}", false);
  hub.AddFile("model.safetensors", RandomBytes(300000, 1), true);
  hub.AddFile("pytorch_model.bin", RandomBytes(1000, 2), true);
  hub.AddFile("original/consolidated.pth", RandomBytes(1000, 3), true);
  hub.AddFile("README.md", "# tiny", false);
  hub.AddFile(".gitattributes", "*.safetensors filter=lfs", false);
}

TEST(HfDownloadTest, FreshDownloadLandsInTheStandardLayout) {
  FakeHub hub;
  AddModel(hub);
  HubEnv env(hub);
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const fs::path repo = env.repo_dir();
  EXPECT_EQ(*path, (repo / "snapshots" / FakeHub::kCommit).string());
  EXPECT_EQ(ReadAll((repo / "refs" / "main").string()), FakeHub::kCommit);

  const std::string weights = RandomBytes(300000, 1);
  const fs::path snapshot(*path);
  // Plain files are named by their git ETag, LFS files by their SHA-256; links are relative.
  EXPECT_EQ(fs::read_symlink(snapshot / "model.safetensors").string(), "../../blobs/" + Sha256Hex(weights));
  EXPECT_EQ(fs::read_symlink(snapshot / "config.json").string(),
            "../../blobs/" + FakeHub::GitEtag("{\"model_type\": \"llama\"}"));
  EXPECT_EQ(fs::read_symlink(snapshot / "1_Pooling" / "config.json").string(),
            "../../../blobs/" + FakeHub::GitEtag("{\"pooling_mode_mean_tokens\": true}"));
  EXPECT_EQ(ReadAll((snapshot / "model.safetensors").string()), weights);
  EXPECT_EQ(ReadAll((snapshot / "config.json").string()), "{\"model_type\": \"llama\"}");
  EXPECT_EQ(ReadAll((snapshot / "tokenizer.json").string()), "{\"model\": {}}");
  // Only what the model needs: no .bin beside safetensors, no original/, no README.
  EXPECT_FALSE(fs::exists(snapshot / "pytorch_model.bin"));
  for (const auto& r : hub.requests()) {
    EXPECT_THAT(r.target, Not(HasSubstr("pytorch_model.bin")));
    EXPECT_THAT(r.target, Not(HasSubstr("original")));
    EXPECT_THAT(r.target, Not(HasSubstr("README")));
  }
  for (const auto& entry : fs::directory_iterator(repo / "blobs")) {
    EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr(".incomplete")));
  }
  EXPECT_EQ(hub.requests_to(hub.cdn_port()).size(), 1u);
}

TEST(HfDownloadTest, CachedModelResolvesWithTheServerStopped) {
  FakeHub hub;
  AddModel(hub);
  HubEnv env(hub);
  auto first = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const size_t requests = hub.requests().size();
  auto again = ResolveModelPath("test-org/tiny");  // from the cache: no request at all
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(hub.requests().size(), requests);
  hub.Stop();
  auto offline = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(offline.ok()) << offline.status().ToString();
  EXPECT_EQ(*offline, *first);
  auto at_commit = ResolveModelPath(std::string("test-org/tiny@") + FakeHub::kCommit);
  ASSERT_TRUE(at_commit.ok()) << at_commit.status().ToString();
  EXPECT_EQ(*at_commit, *first);
  // `ferry download` always asks the Hub: with it gone, that is a clear error.
  HubOptions o = env.Options();
  o.max_attempts = 1;
  auto refresh = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), o);
  ASSERT_FALSE(refresh.ok());
  EXPECT_THAT(refresh.status().message(), HasSubstr(hub.endpoint()));
}

TEST(HfDownloadTest, OfflineModeTouchesNoNetwork) {
  FakeHub hub;
  AddModel(hub);
  HubEnv env(hub);
  ScopedEnv offline("HF_HUB_OFFLINE", "1");
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(path.status().message(), HasSubstr("HF_HUB_OFFLINE"));
  EXPECT_THAT(path.status().message(), HasSubstr("models--test-org--tiny"));
  auto download = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), HubOptionsFromEnv());
  ASSERT_FALSE(download.ok());
  EXPECT_THAT(download.status().message(), HasSubstr("HF_HUB_OFFLINE"));
  EXPECT_TRUE(hub.requests().empty());
}

TEST(HfDownloadTest, ResumesATransferCutMidway) {
  FakeHub hub;
  AddModel(hub);
  hub.cut_first_after = 100000;
  HubEnv env(hub);
  auto path = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), env.Options());
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const auto cdn = hub.requests_to(hub.cdn_port());
  ASSERT_EQ(cdn.size(), 2u);
  EXPECT_EQ(cdn[0].Header("range"), "");
  EXPECT_EQ(cdn[1].Header("range"), "bytes=100000-");
  EXPECT_EQ(ReadAll(*path + "/model.safetensors"), RandomBytes(300000, 1));
}

TEST(HfDownloadTest, ResumesAPartialBlobLeftByAnEarlierRun) {
  FakeHub hub;
  AddModel(hub);
  HubEnv env(hub);
  const std::string weights = RandomBytes(300000, 1);
  const fs::path blobs = env.repo_dir() / "blobs";
  fs::create_directories(blobs);
  std::ofstream(blobs / (Sha256Hex(weights) + ".incomplete"), std::ios::binary) << weights.substr(0, 123456);
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const auto cdn = hub.requests_to(hub.cdn_port());
  ASSERT_EQ(cdn.size(), 1u);
  EXPECT_EQ(cdn[0].Header("range"), "bytes=123456-");
  EXPECT_EQ(ReadAll(*path + "/model.safetensors"), weights);
  EXPECT_FALSE(fs::exists(blobs / (Sha256Hex(weights) + ".incomplete")));
}

TEST(HfDownloadTest, ServerIgnoringTheRangeStartsOver) {
  FakeHub hub;
  AddModel(hub);
  hub.cut_first_after = 100000;
  hub.ignore_range = true;
  HubEnv env(hub);
  auto path = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), env.Options());
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const auto cdn = hub.requests_to(hub.cdn_port());
  ASSERT_EQ(cdn.size(), 2u);
  EXPECT_EQ(cdn[1].Header("range"), "bytes=100000-");  // answered with 200 and the whole file
  EXPECT_EQ(ReadAll(*path + "/model.safetensors"), RandomBytes(300000, 1));
}

TEST(HfDownloadTest, ServerThatNeverLetsATransferFinishIsGivenUpOn) {
  FakeHub hub;
  AddModel(hub);
  hub.cut_first_after = 100000;
  hub.cut_always = true;
  hub.ignore_range = true;  // so no attempt gets further than the last
  HubEnv env(hub);
  HubOptions o = env.Options();
  o.max_attempts = 3;
  auto path = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), o);
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(path.status().message(), HasSubstr("closed after 100000 bytes"));
  EXPECT_LE(hub.requests_to(hub.cdn_port()).size(), 4u);
}

TEST(HfDownloadTest, Sha256MismatchFailsAndPlacesNothing) {
  FakeHub hub;
  AddModel(hub);
  hub.corrupt = true;
  HubEnv env(hub);
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kDataLoss);
  const std::string expected = Sha256Hex(RandomBytes(300000, 1));
  std::string corrupted = RandomBytes(300000, 1);
  corrupted.back() = static_cast<char>(corrupted.back() ^ 1);
  EXPECT_THAT(path.status().message(), HasSubstr("model.safetensors"));
  EXPECT_THAT(path.status().message(), HasSubstr(expected));
  EXPECT_THAT(path.status().message(), HasSubstr(Sha256Hex(corrupted)));
  std::error_code ec;
  EXPECT_FALSE(fs::exists(env.repo_dir() / "snapshots", ec));
  EXPECT_FALSE(fs::exists(env.repo_dir() / "refs", ec));
  EXPECT_FALSE(fs::exists(env.repo_dir() / "blobs" / expected, ec));
  EXPECT_FALSE(fs::exists(env.repo_dir() / "blobs" / (expected + ".incomplete"), ec));
}

TEST(HfDownloadTest, TokenGoesToTheEndpointOnlyNotToTheCdn) {
  FakeHub hub;
  AddModel(hub);
  hub.required_token = "hf_secret";
  HubEnv env(hub);
  ScopedEnv token("HF_TOKEN", "hf_secret");
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const auto to_hub = hub.requests_to(hub.hub_port());
  const auto to_cdn = hub.requests_to(hub.cdn_port());
  ASSERT_FALSE(to_hub.empty());
  ASSERT_EQ(to_cdn.size(), 1u);
  for (const auto& r : to_hub) EXPECT_EQ(r.Header("authorization"), "Bearer hf_secret") << r.target;
  // Same host (127.0.0.1), another port: another origin, so no token.
  EXPECT_EQ(to_cdn[0].Header("authorization"), "");
}

TEST(HfDownloadTest, FollowsTheHubsOwnRedirectsWithTheToken) {
  FakeHub hub;
  AddModel(hub);
  hub.resolve_cache_redirect = true;
  hub.required_token = "hf_secret";
  HubEnv env(hub);
  ScopedEnv token("HF_TOKEN", "hf_secret");
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(ReadAll(*path + "/config.json"), "{\"model_type\": \"llama\"}");
  int cached = 0;
  for (const auto& r : hub.requests_to(hub.hub_port())) {
    if (r.target.starts_with("/api/resolve-cache/")) ++cached;
  }
  EXPECT_GE(cached, 3);  // config.json, tokenizer.json, 1_Pooling/config.json (HEAD and GET)
}

TEST(HfDownloadTest, TokenIsReadFromTheTokenFile) {
  FakeHub hub;
  AddModel(hub);
  hub.required_token = "hf_from_file";
  HubEnv env(hub);
  fs::create_directories(env.tmp().path() + "/hf");
  std::ofstream(env.tmp().path() + "/hf/token") << "hf_from_file\n";
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(path.ok()) << path.status().ToString();
}

TEST(HfDownloadTest, UnauthorizedSaysToSetTheTokenAndAcceptTheLicense) {
  FakeHub hub;
  AddModel(hub);
  hub.required_token = "hf_good";
  HubEnv env(hub);
  auto anonymous = ResolveModelPath("test-org/tiny");
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(anonymous.status().message(), HasSubstr("401"));
  EXPECT_THAT(anonymous.status().message(), HasSubstr("set HF_TOKEN"));
  EXPECT_THAT(anonymous.status().message(), HasSubstr("license"));
  ScopedEnv token("HF_TOKEN", "hf_bad");
  auto refused = ResolveModelPath("test-org/tiny");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("token was sent"));
  EXPECT_EQ(hub.requests().size(), 2u);  // not retried
}

TEST(HfDownloadTest, NotFoundNamesWhatIsMissing) {
  FakeHub hub;
  AddModel(hub);
  HubEnv env(hub);
  auto repo = ResolveModelPath("test-org/other");
  ASSERT_FALSE(repo.ok());
  EXPECT_EQ(repo.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(repo.status().message(), HasSubstr("404"));
  EXPECT_THAT(repo.status().message(), HasSubstr("repository 'test-org/other'"));
  EXPECT_THAT(repo.status().message(), HasSubstr("models--test-org--other"));
  auto rev = ResolveModelPath("test-org/tiny@v9");
  ASSERT_FALSE(rev.ok());
  EXPECT_EQ(rev.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(rev.status().message(), HasSubstr("revision"));
}

TEST(HfDownloadTest, RetriesServerErrors) {
  FakeHub hub;
  AddModel(hub);
  hub.fail_api_times = 2;
  HubEnv env(hub);
  auto path = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), env.Options());
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  hub.fail_api_times = 5;
  HubOptions o = env.Options();
  o.max_attempts = 3;
  auto gave_up = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), o);
  ASSERT_FALSE(gave_up.ok());
  EXPECT_THAT(gave_up.status().message(), HasSubstr("503"));
}

TEST(HfDownloadTest, RepositoryWithoutSafetensorsIsRefused) {
  FakeHub hub;
  hub.AddFile("config.json", "{}", false);
  hub.AddFile("pytorch_model.bin", RandomBytes(100, 4), true);
  HubEnv env(hub);
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(path.status().message(), HasSubstr("no safetensors"));
  EXPECT_THAT(path.status().message(), HasSubstr("pytorch_model.bin"));
}

TEST(HfDownloadTest, ShardedCheckpointFetchesTheShardsItsIndexNames) {
  FakeHub hub;
  hub.AddFile("config.json", "{}", false);
  hub.AddFile("model.safetensors.index.json",
              "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
              "\"b\": \"model-00002-of-00002.safetensors\"}}",
              false);
  hub.AddFile("model-00001-of-00002.safetensors", RandomBytes(5000, 5), true);
  hub.AddFile("model-00002-of-00002.safetensors", RandomBytes(5000, 6), true);
  hub.AddFile("consolidated.safetensors", RandomBytes(5000, 7), true);  // another format's copy
  HubEnv env(hub);
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(ReadAll(*path + "/model-00002-of-00002.safetensors"), RandomBytes(5000, 6));
  EXPECT_TRUE(fs::exists(*path + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(*path + "/consolidated.safetensors"));
  for (const auto& r : hub.requests()) EXPECT_THAT(r.target, Not(HasSubstr("consolidated")));
}

TEST(HfDownloadTest, TwoConcurrentDownloadsOfOneRepositoryAgree) {
  FakeHub hub;
  AddModel(hub);
  HubEnv env(hub);
  const HubOptions o = env.Options();
  Result<std::string> a = NotFound(""), b = NotFound("");
  std::thread other([&] { b = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), o); });
  a = DownloadHubSnapshot(*ParseHubModelId("test-org/tiny"), o);
  other.join();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(ReadAll(*a + "/model.safetensors"), RandomBytes(300000, 1));
}

// What an interrupted huggingface_hub download leaves: refs/main and a snapshot with some
// of the files linked (it links each file as it arrives).
void MakePartialSnapshot(const fs::path& repo, const std::string& config) {
  const fs::path snapshot = repo / "snapshots" / FakeHub::kCommit;
  fs::create_directories(repo / "blobs");
  fs::create_directories(snapshot);
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "blobs" / FakeHub::GitEtag(config)) << config;
  fs::create_symlink("../../blobs/" + FakeHub::GitEtag(config), snapshot / "config.json");
  std::ofstream(repo / "refs" / "main") << FakeHub::kCommit;
}

TEST(HfDownloadTest, CachedSnapshotWithoutItsWeightsIsCompleted) {
  FakeHub hub;
  AddModel(hub);
  HubEnv env(hub);
  MakePartialSnapshot(env.repo_dir(), "{\"model_type\": \"llama\"}");
  auto path = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(ReadAll(*path + "/model.safetensors"), RandomBytes(300000, 1));
  for (const auto& r : hub.requests()) {
    EXPECT_FALSE(r.target.ends_with(std::string(FakeHub::kCommit) + "/config.json")) << "already there";
  }
  // Offline, the partial snapshot is used as it is.
  fs::remove(*path + "/model.safetensors");
  ScopedEnv offline("HF_HUB_OFFLINE", "1");
  const size_t requests = hub.requests().size();
  auto as_is = ResolveModelPath("test-org/tiny");
  ASSERT_TRUE(as_is.ok());
  EXPECT_EQ(hub.requests().size(), requests);
}

TEST(HfDownloadTest, CachedTokenizerOnlyRepositoryIsUsedAsItIs) {
  FakeHub hub;
  hub.AddFile("config.json", "{}", false);
  hub.AddFile("tokenizer.json", "{}", false);
  HubEnv env(hub);
  MakePartialSnapshot(env.repo_dir(), "{}");
  auto path = ResolveModelPath("test-org/tiny");  // cannot be completed: no safetensors on the Hub
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(*path, (env.repo_dir() / "snapshots" / FakeHub::kCommit).string());
}

TEST(HfDownloadTest, SelectsWhatTheModelNeeds) {
  auto files = SelectModelFiles(
      "o/r", {"config.json", "generation_config.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json",
              "special_tokens_map.json", "vocab.txt", "merges.txt", "chat_template.jinja", "modules.json",
              "sentence_bert_config.json", "1_Pooling/config.json", "model.safetensors", "pytorch_model.bin",
              "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack", "model.onnx", "onnx/model.onnx",
              "original/params.json", "original/consolidated.00.pth", "README.md", ".gitattributes",
              "model.gguf", "rust_model.ot", "openvino/openvino_model.xml"});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_THAT(files->files,
              ElementsAre("config.json", "generation_config.json", "tokenizer.json", "tokenizer.model",
                          "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "merges.txt",
                          "chat_template.jinja", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"));
  EXPECT_THAT(files->weights, ElementsAre("model.safetensors"));
  EXPECT_FALSE(files->has_index);
  EXPECT_EQ(SelectModelFiles("o/r", {"config.json", "../evil.safetensors"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectModelFiles("o/r", {"config.json", "/abs.safetensors"}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry::io
