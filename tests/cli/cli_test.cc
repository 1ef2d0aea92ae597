// The `ferry` binary end to end: the documented outputs, and bad input of every kind
// answered with one clear error line and exit code 1, never a crash or a hang.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/version.h"
#include "io/engine_file.h"
#include "io/fake_hub.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;
  std::string err;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

// Runs `binary` (by default the built ferry) with `args`, in `cwd` when one is given.
RunResult RunBinary(const std::string& binary, const std::vector<std::string>& args, const std::string& cwd = "") {
  static int counter = 0;
  // Built with a stream: GCC 12's -Wrestrict misfires on chained string concatenation here.
  std::ostringstream err_name;
  err_name << "/tmp/ferry_cli_test_err_" << getpid() << "_" << counter++;
  const std::string err_path = err_name.str();
  std::string cmd = cwd.empty() ? "" : "cd " + Quote(cwd) + " && ";
  cmd += "timeout 120 " + Quote(binary);
  for (const std::string& a : args) {
    cmd += ' ';
    cmd += Quote(a);
  }
  cmd += " 2>" + err_path;
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  fs::remove(err_path);
  return r;
}

RunResult RunFerry(const std::vector<std::string>& args) { return RunBinary(testing::FerryBinary(), args); }

// Bad input: exit code 1 (not a signal, not the timeout's 124) and exactly one error line.
void ExpectCleanError(const RunResult& r, const std::string& fragment) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << r.err;
}

// A writable copy of a fixture model in a fresh temporary directory.
std::string CopyFixture(const std::string& name) {
  std::string tmpl = "/tmp/ferry_cli_model_XXXXXX";
  const std::string dir = mkdtemp(tmpl.data());
  for (const auto& entry : fs::directory_iterator(testing::FixturePath("models/" + name))) {
    fs::copy_file(entry.path(), dir + "/" + entry.path().filename().string());
    fs::permissions(dir + "/" + entry.path().filename().string(), fs::perms::owner_read | fs::perms::owner_write);
  }
  return dir;
}

TEST(CliTest, GenerateGreedyPrintsFixtureText) {
  const std::string model = testing::FixturePath("models/llama3-tiny");
  std::ifstream in(model + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const RunResult r = RunFerry({"generate", "--model", model, "--prompt", "Once upon a time", "--max-tokens", "24",
                          "--temperature", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ref["prompts"][0]["greedy_text"].get<std::string>() + "\n");
}

TEST(CliTest, GenerateJsonWithLogits) {
  const std::string model = testing::FixturePath("models/llama-tiny");
  const RunResult r = RunFerry({"generate", "--model", model, "--prompt", "Hello", "--max-tokens", "3", "--temperature",
                          "0", "--json", "--dump-logits"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_token_ids"][0], 1);  // BOS from the tokenizer's post-processor
  EXPECT_EQ(j["token_ids"].size(), 3u);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["first_logits"].size(), 32000u);
  EXPECT_TRUE(j["text"].is_string());
}

TEST(CliTest, GeneratePromptIdsAreUsedExactly) {
  const RunResult r = RunFerry({"generate", "--model", testing::FixturePath("models/qwen2-tiny"), "--prompt-ids",
                          "5,17,300", "--max-tokens", "4", "--temperature", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_token_ids"], nlohmann::json({5, 17, 300}));
  EXPECT_EQ(j["token_ids"].size(), 4u);
}

TEST(CliTest, TokenizeWorksOnATokenizerOnlyFolder) {
  const RunResult r = RunFerry({"tokenize", "--model", testing::FixturePath("tokenizers/gpt2"), "--text", "Hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], nlohmann::json({15496, 995}));
  const RunResult s = RunFerry({"tokenize", "--model", testing::FixturePath("tokenizers/bert"), "--text", "Hello", "--special"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const nlohmann::json ids = nlohmann::json::parse(s.out)["ids"];
  EXPECT_EQ(ids.front(), 101);
  EXPECT_EQ(ids.back(), 102);
}

TEST(CliTest, ClassifyAndEmbed) {
  const std::string model = testing::FixturePath("models/bert-tiny");
  const RunResult c = RunFerry({"classify", "--model", model, "--text", "The movie was wonderful!"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const nlohmann::json j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["logits"].size(), 3u);
  EXPECT_EQ(j["scores"].size(), 3u);
  EXPECT_TRUE(j["label"].get<std::string>().rfind("LABEL_", 0) == 0);
  double sum = 0;
  for (auto& [k, v] : j["scores"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, 1.0, 1e-5);

  const RunResult e = RunFerry({"embed", "--model", model, "--text", "hello there", "--pooling", "mean", "--normalize"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json emb = nlohmann::json::parse(e.out)["embedding"];
  ASSERT_EQ(emb.size(), 64u);
  double norm = 0;
  for (const auto& v : emb) norm += v.get<double>() * v.get<double>();
  EXPECT_NEAR(norm, 1.0, 1e-4);
}

// `ferry download` against a Hub stand-in on 127.0.0.1: the snapshot folder on stdout, files
// in place; a repository the Hub does not have is one clean error line.
TEST(CliTest, DownloadPrintsTheSnapshotFolder) {
  testing::FakeHub hub("tiny-org/llama3-tiny");
  const std::string src = testing::FixturePath("models/llama3-tiny");
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}) {
    std::ifstream in(src + "/" + name, std::ios::binary);
    hub.AddFile(name, std::string(std::istreambuf_iterator<char>(in), {}), std::string(name) == "model.safetensors");
  }
  std::string tmpl = "/tmp/ferry_cli_hub_XXXXXX";
  const std::string cache = mkdtemp(tmpl.data());
  const char* old_offline = std::getenv("HF_HUB_OFFLINE");
  const std::string saved_offline = old_offline ? old_offline : "";
  unsetenv("HF_HUB_OFFLINE");
  setenv("HF_ENDPOINT", hub.endpoint().c_str(), 1);
  setenv("HF_TOKEN_PATH", (cache + "/no-token").c_str(), 1);
  const RunResult r = RunFerry({"download", "tiny-org/llama3-tiny", "--cache-dir", cache});
  const RunResult missing = RunFerry({"download", "tiny-org/none", "--cache-dir", cache});
  unsetenv("HF_ENDPOINT");
  unsetenv("HF_TOKEN_PATH");
  if (old_offline) setenv("HF_HUB_OFFLINE", saved_offline.c_str(), 1);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string snapshot = cache + "/models--tiny-org--llama3-tiny/snapshots/" + testing::FakeHub::kCommit;
  EXPECT_EQ(r.out, snapshot + "\n");
  EXPECT_EQ(fs::file_size(snapshot + "/model.safetensors"), fs::file_size(src + "/model.safetensors"));
  ExpectCleanError(missing, "404");
  fs::remove_all(cache);
}

TEST(CliBadInputTest, MissingModelDirectory) {
  ExpectCleanError(RunFerry({"generate", "--model", "/nonexistent/model", "--prompt", "hi"}), "does not exist");
}

TEST(CliBadInputTest, MissingWeightsFile) {
  const std::string dir = CopyFixture("qwen2-tiny");
  fs::remove(dir + "/model.safetensors");
  ExpectCleanError(RunFerry({"generate", "--model", dir, "--prompt-ids", "1,2"}), "safetensors");
  fs::remove_all(dir);
}

TEST(CliBadInputTest, TruncatedWeights) {
  const std::string dir = CopyFixture("qwen2-tiny");
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") / 2);
  ExpectCleanError(RunFerry({"generate", "--model", dir, "--prompt-ids", "1,2"}), "model.safetensors");
  fs::remove_all(dir);
}

TEST(CliBadInputTest, CorruptSafetensorsHeader) {
  const std::string dir = CopyFixture("qwen2-tiny");
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("#garbage#", 9);
  }
  ExpectCleanError(RunFerry({"generate", "--model", dir, "--prompt-ids", "1,2"}), "model.safetensors");
  fs::remove_all(dir);
}

TEST(CliBadInputTest, CorruptConfig) {
  const std::string dir = CopyFixture("qwen2-tiny");
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"qwen2\", \"hidden_size\": ";
  ExpectCleanError(RunFerry({"generate", "--model", dir, "--prompt-ids", "1,2"}), "config");
  fs::remove_all(dir);
}

TEST(CliBadInputTest, UnsupportedArchitecture) {
  const std::string dir = CopyFixture("qwen2-tiny");
  std::ifstream in(dir + "/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  c["model_type"] = "gpt_neox";
  std::ofstream(dir + "/config.json") << c.dump();
  ExpectCleanError(RunFerry({"generate", "--model", dir, "--prompt-ids", "1,2"}), "gpt_neox");
  fs::remove_all(dir);
}

TEST(CliBadInputTest, TensorWithWrongShape) {
  const std::string dir = CopyFixture("bert-tiny");
  std::ifstream in(dir + "/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  c["intermediate_size"] = 256;
  std::ofstream(dir + "/config.json") << c.dump();
  ExpectCleanError(RunFerry({"classify", "--model", dir, "--text", "hello"}), "expected shape");
  fs::remove_all(dir);
}

TEST(CliBadInputTest, TensorWithWrongDtype) {
  const std::string dir = CopyFixture("qwen2-tiny");
  {
    auto file = io::SafetensorsFile::Open(dir + "/model.safetensors");
    ASSERT_TRUE(file.ok());
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : (*file)->Names()) {
      Tensor t = (*file)->Get(name).value().Clone();
      if (name == "model.layers.0.mlp.up_proj.weight") {
        Tensor i = Tensor::Empty(t.shape(), DType::kI32);
        tensors.emplace_back(name, i);
      } else {
        tensors.emplace_back(name, t);
      }
    }
    file->reset();
    ASSERT_TRUE(io::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  }
  ExpectCleanError(RunFerry({"generate", "--model", dir, "--prompt-ids", "1,2"}), "dtype");
  fs::remove_all(dir);
}

TEST(CliBadInputTest, InvalidUtf8Prompt) {
  ExpectCleanError(RunFerry({"generate", "--model", testing::FixturePath("models/llama3-tiny"), "--prompt",
                             "abc\xff\xfe"}),
                   "UTF-8");
}

TEST(CliBadInputTest, EmptyPrompt) {
  ExpectCleanError(RunFerry({"generate", "--model", testing::FixturePath("models/llama3-tiny"), "--prompt", ""}),
                   "prompt");
}

TEST(CliBadInputTest, PromptIdsOutsideVocabulary) {
  ExpectCleanError(RunFerry({"generate", "--model", testing::FixturePath("models/qwen2-tiny"), "--prompt-ids",
                             "1,99999"}),
                   "vocabulary");
  ExpectCleanError(RunFerry({"generate", "--model", testing::FixturePath("models/qwen2-tiny"), "--prompt-ids",
                             "1,x"}),
                   "prompt-ids");
}

TEST(CliBadInputTest, TextPromptWithoutTokenizer) {
  ExpectCleanError(RunFerry({"generate", "--model", testing::FixturePath("models/qwen2-tiny"), "--prompt", "hi"}),
                   "tokenizer");
}

TEST(CliBadInputTest, WrongModelKindForCommand) {
  ExpectCleanError(RunFerry({"classify", "--model", testing::FixturePath("models/llama3-tiny"), "--text", "hi"}),
                   "not an encoder");
  ExpectCleanError(RunFerry({"generate", "--model", testing::FixturePath("models/bert-tiny"), "--prompt", "hi"}),
                   "not a decoder");
}

TEST(CliBadInputTest, UnknownCheckpointPreset) {
  ExpectCleanError(RunFerry({"make-checkpoint", "--preset", "gpt-5", "-o", "/tmp/ferry_never_written"}),
                   "unknown preset");
}

TEST(CliTest, MakeCheckpointRoundTrips) {
  std::string tmpl = "/tmp/ferry_ckpt_XXXXXX";
  const std::string dir = mkdtemp(tmpl.data());
  const RunResult w = RunFerry({"make-checkpoint", "--arch", "llama", "--preset", "llama-test", "--dtype", "bf16", "-o", dir});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const RunResult g = RunFerry({"generate", "--model", dir, "--prompt-ids", "1,2,3", "--max-tokens", "5", "--temperature",
                          "0", "--json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(nlohmann::json::parse(g.out)["token_ids"].size(), 5u);
  const RunResult b = RunFerry({"make-checkpoint", "--arch", "bert", "--preset", "bert-test", "--dtype", "fp32", "-o",
                          dir + "/bert"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(fs::exists(dir + "/bert/config.json"));
  fs::remove_all(dir);
}

TEST(CliBadInputTest, ServeRefusesBadConfigurations) {
  ExpectCleanError(RunFerry({"serve", "--config", "/nonexistent/ferry.yaml"}), "ferry.yaml");
  ExpectCleanError(RunFerry({"serve"}), "no models to serve");
  ExpectCleanError(RunFerry({"serve", "--model", "=no-name"}), "NAME=PATH");
  ExpectCleanError(RunFerry({"serve", "--model", "m=" + testing::SourcePath("models/demo/kjv-decoder"), "--host",
                             "0.0.0.0", "--no-auth"}),
                   "loopback");
  ExpectCleanError(RunFerry({"serve", "--model", "m=" + testing::SourcePath("models/demo/kjv-decoder")}),
                   "auth mode 'keys' needs at least one tenant key");
  std::string tmpl = "/tmp/ferry_serve_cfg_XXXXXX";
  const std::string dir = mkdtemp(tmpl.data());
  std::ofstream(dir + "/bad.yaml") << "listener:\n  port: 8000\n  max_conections: 5\n";
  ExpectCleanError(RunFerry({"serve", "--config", dir + "/bad.yaml"}), "max_conections");
  fs::remove_all(dir);
}

TEST(CliTest, VersionPrintsTheProjectVersion) {
  const RunResult r = RunFerry({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("ferry ") + kVersion + "\n");
  EXPECT_TRUE(r.err.empty()) << r.err;
}

// `ferry render-chat --template FILE --input CASE.json`, the contract other tools rely on:
// every case of every fixture template prints {"prompt": output}, or, where the template
// raises, exits 1 with one `error: ` line and prints nothing.
TEST(CliTest, RenderChatReproducesEveryFixtureCase) {
  const fs::path dir = testing::FixturePath("chat_templates");
  std::string tmpl = "/tmp/ferry_render_chat_XXXXXX";
  const std::string tmp = mkdtemp(tmpl.data());
  int rendered = 0, refused = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    const std::string suffix = ".cases.json";
    if (file.size() <= suffix.size() || file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string stem = file.substr(0, file.size() - suffix.size());
    std::ifstream in(entry.path());
    const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(in);  // keys keep their order
    for (const nlohmann::ordered_json& c : doc["cases"]) {
      nlohmann::ordered_json input = c;
      input.erase("output");
      input.erase("error");
      input.erase("name");
      if (doc.contains("now") && !input.contains("now")) input["now"] = doc["now"];
      const std::string case_path = tmp + "/case.json";
      std::ofstream(case_path) << input.dump();
      const RunResult r = RunFerry({"render-chat", "--template", (dir / (stem + ".jinja")).string(), "--input", case_path});
      const std::string where = stem + " / " + c["name"].get<std::string>();
      if (c.contains("output")) {
        ASSERT_EQ(r.exit_code, 0) << where << ": " << r.err;
        const nlohmann::json out = nlohmann::json::parse(r.out, nullptr, false);
        ASSERT_TRUE(out.is_object()) << where << ": " << r.out;
        EXPECT_EQ(out["prompt"], c["output"]) << where;
        ++rendered;
      } else {
        EXPECT_EQ(r.exit_code, 1) << where;
        EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << where << ": " << r.err;
        EXPECT_TRUE(r.out.empty()) << where << ": " << r.out;
        ++refused;
      }
    }
  }
  fs::remove_all(tmp);
  EXPECT_GE(rendered, 10);
  EXPECT_GE(refused, 1);
}

// The server gets past its configuration only if the flags took effect: it then starts,
// fails to load the missing model, and says so ("error: model 'm' ...").
void ExpectServeGetsToModelLoading(const std::vector<std::string>& args) {
  const RunResult r = RunFerry(args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("error: model 'm'"), std::string::npos) << r.err;
}

TEST(CliTest, ServeFlagsOverrideTheConfigFile) {
  std::string tmpl = "/tmp/ferry_serve_cfg_XXXXXX";
  const std::string dir = mkdtemp(tmpl.data());
  const std::string model = "models: [{name: m, path: /nonexistent/model}]\n";
  std::ofstream(dir + "/keys.yaml") << "listener: {port: 0}\nauth: {mode: keys}\n" << model;
  std::ofstream(dir + "/open.yaml") << "listener: {host: 0.0.0.0, port: 0}\nauth: {mode: none}\n" << model;
  std::ofstream(dir + "/port.yaml") << "listener: {port: 99999}\nauth: {mode: none}\n" << model;
  std::ofstream(dir + "/level.yaml") << "listener: {port: 0}\nauth: {mode: none}\nlog: {level: loud}\n" << model;

  // Each file is refused on its own...
  ExpectCleanError(RunFerry({"serve", "--config", dir + "/keys.yaml"}), "needs at least one tenant key");
  ExpectCleanError(RunFerry({"serve", "--config", dir + "/open.yaml"}), "loopback");
  ExpectCleanError(RunFerry({"serve", "--config", dir + "/port.yaml"}), "listener.port");
  // ...and served once the flag that fixes it is given.
  ExpectServeGetsToModelLoading({"serve", "--config", dir + "/keys.yaml", "--no-auth"});
  ExpectServeGetsToModelLoading({"serve", "--config", dir + "/open.yaml", "--host", "127.0.0.1"});
  ExpectServeGetsToModelLoading({"serve", "--config", dir + "/port.yaml", "--port", "0"});
  ExpectServeGetsToModelLoading({"serve", "--config", dir + "/keys.yaml", "--no-auth", "--no-request-log",
                                 "--log-level", "error"});
  // A flag can also make a valid file invalid, and the message says why.
  ExpectCleanError(RunFerry({"serve", "--config", dir + "/keys.yaml", "--no-auth", "--host", "0.0.0.0"}),
                   "loopback");
  // A bad value in the file is still reported even when a flag would replace it: the file
  // is parsed (types, names, enums) before flags apply.
  ExpectCleanError(RunFerry({"serve", "--config", dir + "/level.yaml", "--log-level", "warn"}), "log.level");
  fs::remove_all(dir);
}

TEST(CliTest, ServeAcceptsEveryLogLevel) {
  for (const char* level : {"trace", "debug", "info", "warn", "error"}) {
    SCOPED_TRACE(level);
    ExpectServeGetsToModelLoading({"serve", "--model", "m=/nonexistent/model", "--no-auth", "--port", "0",
                                   "--log-level", level});
  }
  ExpectCleanError(RunFerry({"serve", "--model", "m=/nonexistent/model", "--no-auth", "--port", "0", "--log-level",
                             "loud"}),
                   "--log-level: log level must be trace, debug, info, warn or error, got 'loud'");
}

// An installed ferry (cmake --install to a fresh prefix) reads nothing from the source
// tree: `build --precision int8` without --calibration uses the calibration text compiled
// into the binary, and the binary holds no path to the checkout's data.
TEST(CliTest, InstalledBinaryBuildsInt8WithoutCalibrationFile) {
  std::string tmpl = "/tmp/ferry_install_XXXXXX";
  const std::string prefix = mkdtemp(tmpl.data());
  const std::string build_dir = fs::path(testing::FerryBinary()).parent_path().string();
  const std::string install = Quote(FERRY_CMAKE_COMMAND) + " --install " + Quote(build_dir) + " --prefix " +
                              Quote(prefix) + " >/dev/null";
  ASSERT_EQ(std::system(install.c_str()), 0) << install;
  const std::string ferry = prefix + "/bin/ferry";
  ASSERT_TRUE(fs::exists(ferry));
  EXPECT_TRUE(fs::exists(prefix + "/share/ferry/configs/demo.yaml"));
  EXPECT_TRUE(fs::exists(prefix + "/share/ferry/models/demo/kjv-decoder/config.json"));
  EXPECT_TRUE(fs::exists(prefix + "/share/ferry/models/demo/kjv-classifier/config.json"));

  std::ifstream binary(ferry, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(binary)), {});
  for (const char* dir : {"/data", "/models", "/configs"}) {
    const std::string source_path = std::string(FERRY_SOURCE_DIR) + dir;
    EXPECT_EQ(bytes.find(source_path), std::string::npos) << "the binary names " << source_path;
  }

  const std::string model = CopyFixture("llama-tiny");
  const RunResult r = RunBinary(ferry,
                                {"build", "--model", model, "--precision", "int8", "--calibration-tokens", "256",
                                 "--no-tune", "--max-seq-len", "128", "-o", prefix + "/llama-int8.ferry"},
                                prefix);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["calibration"]["path"], "built-in:kjv_calibration.jsonl");
  EXPECT_GT(report["calibration"]["documents"].get<int>(), 0);
  EXPECT_FALSE(report["calibration"]["synthetic_token_ids"].get<bool>());
  const RunResult g = RunBinary(ferry,
                                {"generate", "--model", prefix + "/llama-int8.ferry", "--prompt", "Hello",
                                 "--max-tokens", "4", "--temperature", "0"},
                                prefix);
  EXPECT_EQ(g.exit_code, 0) << g.err;

  const RunResult v = RunBinary(ferry, {"--version"}, "/");
  EXPECT_EQ(v.out, std::string("ferry ") + kVersion + "\n");
  fs::remove_all(model);
  fs::remove_all(prefix);
}

TEST(CliBadInputTest, ServeExitsWhenAModelCannotLoad) {
  const RunResult r = RunFerry({"serve", "--model", "m=/nonexistent/model", "--no-auth", "--port", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("error: model 'm'"), std::string::npos) << r.err;
}

// --- engine files and deeply nested JSON -------------------------------------------------

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces an engine file's manifest with `manifest`, updating the header's sizes and
// checksum, so that only the manifest's content is wrong.
void ReplaceManifest(const std::string& path, const std::string& manifest) {
  std::string b = ReadFile(path);
  uint64_t offset = 0;
  std::memcpy(&offset, b.data() + 16, 8);
  b = b.substr(0, offset) + manifest;
  const uint64_t manifest_bytes = manifest.size(), file_bytes = b.size();
  const uint32_t crc = io::Crc32c(manifest.data(), manifest.size());
  std::memcpy(b.data() + 24, &manifest_bytes, 8);
  std::memcpy(b.data() + 32, &crc, 4);
  std::memcpy(b.data() + 40, &file_bytes, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
}

// A bf16 engine of qwen2-tiny in a fresh directory (removed by the caller).
std::string BuildEngineFile(const std::string& dir) {
  const std::string path = dir + "/q.ferry";
  const RunResult r = RunFerry({"build", "--model", testing::FixturePath("models/qwen2-tiny"), "--precision", "bf16",
                                "--no-tune", "-o", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

std::string TempDirectory() {
  std::string tmpl = "/tmp/ferry_cli_engine_XXXXXX";
  return mkdtemp(tmpl.data());
}

TEST(CliTest, BuildThenInspectDescribesTheEngine) {
  const std::string dir = TempDirectory();
  const std::string path = BuildEngineFile(dir);
  const RunResult r = RunFerry({"inspect", path, "--verify", "--full"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["fingerprint"]["device"], "cpu");
  EXPECT_EQ(j["compatible_here"], true);
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["build"]["precision"], "bf16");
  EXPECT_EQ(j["build"]["device"], "cpu");
  EXPECT_EQ(j["model"]["family"], "decoder");
  EXPECT_EQ(j["config"]["model_type"], "qwen2");
  EXPECT_NE(std::find(j["embedded_files"].begin(), j["embedded_files"].end(), "config.json"),
            j["embedded_files"].end());
  EXPECT_GT(j["counts"]["linears"].get<int>(), 0);
  EXPECT_GT(j["sizes"]["linear_bytes_by_format"]["bf16"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["manifest"]["build"], j["build"]);
  fs::remove_all(dir);
}

TEST(CliTest, GgufFileBuildsAndGeneratesLikeItsCheckpoint) {
  // tests/fixtures/gguf: a GGUF file written by llama.cpp's gguf-py and its safetensors twin.
  const std::string dir = TempDirectory();
  const std::string gguf = testing::SourcePath("tests/fixtures/gguf/tiny-llama.gguf");
  const std::string twin = testing::SourcePath("tests/fixtures/gguf/tiny-llama");
  const std::string engine = dir + "/tiny.ferry";
  const RunResult built = RunFerry({"build", "--model", gguf, "-o", engine});
  ASSERT_EQ(built.exit_code, 0) << built.err;
  const RunResult inspected = RunFerry({"inspect", engine});
  ASSERT_EQ(inspected.exit_code, 0) << inspected.err;
  const nlohmann::json files = nlohmann::json::parse(inspected.out)["embedded_files"];
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_NE(std::find(files.begin(), files.end(), name), files.end()) << name;
  }
  auto generate = [](const std::string& model) {
    const RunResult r = RunFerry({"generate", "--model", model, "--prompt", "the world", "--max-tokens", "8",
                                  "--temperature", "0", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_object() ? j["prompt_token_ids"].dump() + j["token_ids"].dump() : std::string("?");
  };
  const std::string want = generate(twin);
  EXPECT_EQ(generate(gguf), want);
  EXPECT_EQ(generate(engine), want);
  fs::remove_all(dir);
}

TEST(CliBadInputTest, BadDeviceOrPrecisionIsRefusedWhereItIsParsed) {
  const std::string model = testing::FixturePath("models/qwen2-tiny");
  ExpectCleanError(RunFerry({"build", "--model", model, "--device", "tpu", "-o", "/tmp/never.ferry"}),
                   "device must be cpu, cuda or cuda:N, got 'tpu'");
  ExpectCleanError(RunFerry({"build", "--model", model, "--precision", "int4", "-o", "/tmp/never.ferry"}),
                   "unknown precision 'int4' (fp32, bf16, fp16, int8-wo, int8, fp8, int4-wo)");
  ExpectCleanError(RunFerry({"build", "--model", model, "--precision", "fp8", "-o", "/tmp/never.ferry"}),
                   "--device cuda");
  ExpectCleanError(RunFerry({"generate", "--model", model, "--prompt-ids", "1", "--device", "cuda:x"}),
                   "device must be cpu, cuda or cuda:N, got 'cuda:x'");
  const std::string encoder = testing::FixturePath("models/bert-tiny");
  ExpectCleanError(RunFerry({"embed", "--model", encoder, "--text", "hi", "--device", "gpu"}),
                   "device must be cpu, cuda or cuda:N, got 'gpu'");
  ExpectCleanError(RunFerry({"classify", "--model", encoder, "--text", "hi", "--device", "cuda:-1"}),
                   "device must be cpu, cuda or cuda:N");
  EXPECT_FALSE(fs::exists("/tmp/never.ferry"));
}

// `inspect --verify` used to answer "verified": true for an engine whose tensors point past
// the end of the file: it read only the blob index.
TEST(CliBadInputTest, InspectVerifyRefusesTensorsPastTheEnd) {
  const std::string dir = TempDirectory();
  const std::string path = BuildEngineFile(dir);
  nlohmann::json m = (*io::EngineFile::Open(path))->manifest().ToJson();
  const std::string key = m["tensors"].begin().key();
  m["tensors"][key]["blob"]["offset"] = uint64_t{1} << 40;
  ReplaceManifest(path, m.dump());
  const RunResult r = RunFerry({"inspect", path, "--verify"});
  ExpectCleanError(r, "outside the data section");
  EXPECT_EQ(r.out.find("\"verified\": true"), std::string::npos) << r.out;
  ExpectCleanError(RunFerry({"generate", "--model", path, "--prompt-ids", "1,2"}), "'" + key + "'");
  fs::remove_all(dir);
}

TEST(CliBadInputTest, InspectRefusesADeeplyNestedManifest) {
  const std::string dir = TempDirectory();
  const std::string path = BuildEngineFile(dir);
  std::string text = (*io::EngineFile::Open(path))->manifest().ToJson().dump();
  text.insert(text.size() - 1, ",\"tuned\":" + std::string(100000, '[') + std::string(100000, ']'));
  ReplaceManifest(path, text);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"inspect", path, "--full"},
                                               {"generate", "--model", path, "--prompt-ids", "1,2"}}) {
    ExpectCleanError(RunFerry(args), "nested deeper than");
  }
  fs::remove_all(dir);
}

// A safetensors header nested 100,000 deep used to crash generate, build and serve through a
// recursive dump in the error message.
TEST(CliBadInputTest, DeeplyNestedSafetensorsHeader) {
  const std::string dir = CopyFixture("qwen2-tiny");
  const std::string header = "{\"w\":{\"dtype\":\"F32\",\"shape\":" + std::string(100000, '[') + "1" +
                             std::string(100000, ']') + ",\"data_offsets\":[0,4]}}";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  std::ofstream(dir + "/model.safetensors", std::ios::binary | std::ios::trunc)
      << file << header << std::string(4, '\0');
  ExpectCleanError(RunFerry({"generate", "--model", dir, "--prompt-ids", "1,2"}), "nested deeper than");
  ExpectCleanError(RunFerry({"build", "--model", dir, "--no-tune", "-o", dir + "/x.ferry"}), "nested deeper than");
  const RunResult serve = RunFerry({"serve", "--model", "m=" + dir, "--no-auth", "--port", "0"});
  EXPECT_EQ(serve.exit_code, 1) << serve.err;
  EXPECT_NE(serve.err.find("nested deeper than"), std::string::npos) << serve.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ferry
