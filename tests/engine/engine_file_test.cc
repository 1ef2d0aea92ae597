// Engine files: build -> load round trips, every precision within its tolerance on the
// fixtures, and every kind of bad file refused with a clear error.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda_backend.h"
#include "engine/engine.h"
#include "engine/engine_builder.h"
#include "decoder_test_util.h"
#include "engine/encoder_runner.h"
#include "io/engine_file.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/gemv.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry {
namespace {

using testing::MaxAbs;
using testing::MaxDiff;
using testing::ToFloats;
using testing::ToIds;

namespace fs = std::filesystem;

using testing::TempDir;

std::vector<float> LastLogits(const std::shared_ptr<engine::Engine>& e, const std::vector<int32_t>& ids) {
  auto runner = testing::DecoderHarness::Create(e, 1, 256);
  EXPECT_NE(runner, nullptr);
  auto logits = runner->Step({{1, ids, 0, false}});
  EXPECT_TRUE(logits.ok()) << logits.status().ToString();
  return std::vector<float>(logits->data<float>(), logits->data<float>() + logits->numel());
}

std::vector<int32_t> ReferenceIds(const std::string& model, int prompt) {
  auto ref = io::SafetensorsFile::Open(testing::FixturePath("models/" + model + "/reference.safetensors"));
  EXPECT_TRUE(ref.ok());
  Tensor t = (*ref)->Get("p" + std::to_string(prompt) + ".input_ids").value();
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

std::vector<float> ReferenceLogits(const std::string& model, int prompt) {
  auto ref = io::SafetensorsFile::Open(testing::FixturePath("models/" + model + "/reference.safetensors"));
  Tensor t = (*ref)->Get("p" + std::to_string(prompt) + ".last_logits").value().ToF32();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Kernel tuning times real kernels; most tests do not need it (one test checks it).
engine::BuildOptions Untuned() {
  engine::BuildOptions bo;
  bo.tune = false;
  return bo;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

TEST(EngineFileTest, Fp32RoundTripGivesTheCheckpointsLogitsExactly) {
  TempDir tmp;
  for (const std::string model : {"llama-tiny", "llama3-tiny", "qwen2-tiny"}) {
    const std::string dir = testing::FixturePath("models/" + model);
    const std::string path = tmp.File(model + ".ferry");
    engine::BuildOptions bo = Untuned();
    bo.precision = Precision::kFp32;
    auto built = engine::BuildEngine(dir, path, bo);
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    auto from_ckpt = engine::Engine::Load(dir);
    auto from_engine = engine::Engine::Load(path);
    ASSERT_TRUE(from_ckpt.ok() && from_engine.ok()) << from_engine.status().ToString();
    EXPECT_NE((*from_engine)->build_info(), nullptr);
    const std::vector<int32_t> ids = ReferenceIds(model, 1);
    // fp32 weights from a bf16/f16/f32 checkpoint are exact, so the logits are identical.
    EXPECT_EQ(LastLogits(*from_ckpt, ids), LastLogits(*from_engine, ids)) << model;
    // The embedded tokenizer and stop ids survive.
    EXPECT_EQ((*from_ckpt)->StopIds(), (*from_engine)->StopIds()) << model;
    if ((*from_ckpt)->tokenizer() != nullptr) {
      ASSERT_NE((*from_engine)->tokenizer(), nullptr);
      EXPECT_EQ(*(*from_ckpt)->EncodePrompt("Hello world, 1905!"), *(*from_engine)->EncodePrompt("Hello world, 1905!"));
    }
  }
}

TEST(EngineFileTest, EncoderRoundTrip) {
  TempDir tmp;
  const std::string dir = testing::FixturePath("models/bert-tiny");
  const std::string path = tmp.File("bert.ferry");
  engine::BuildOptions bo = Untuned();
  ASSERT_TRUE(engine::BuildEngine(dir, path, bo).ok());
  auto a = engine::Engine::Load(dir);
  auto b = engine::Engine::Load(path);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  auto enc = (*a)->tokenizer()->EncodeWithSpecial("The movie was wonderful!");
  ASSERT_TRUE(enc.ok());
  engine::EncodedInput in{enc->ids, enc->type_ids};
  auto la = engine::Classify(**a, {in});
  auto lb = engine::Classify(**b, {in});
  ASSERT_TRUE(la.ok() && lb.ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(la->data<float>()[i], lb->data<float>()[i]);
}

// Each precision against the float64 reference, within a bound for that precision.
TEST(EngineFileTest, EveryPrecisionWithinTolerance) {
  TempDir tmp;
  const std::vector<std::pair<std::string, double>> precisions = {
      {"fp32", 1e-3}, {"bf16", 4e-2}, {"fp16", 1e-2}, {"int8-wo", 6e-2}, {"int8", 1.5e-1}, {"int4-wo", 3e-1}};
  for (const std::string model : {"llama-tiny", "llama3-tiny"}) {
    const std::vector<int32_t> ids = ReferenceIds(model, 1);
    const std::vector<float> ref = ReferenceLogits(model, 1);
    for (const auto& [precision, rel] : precisions) {
      const std::string path = tmp.File(model + "-" + precision + ".ferry");
      engine::BuildOptions bo = Untuned();
      bo.precision = *ParsePrecision(precision);
      auto built = engine::BuildEngine(testing::FixturePath("models/" + model), path, bo);
      ASSERT_TRUE(built.ok()) << precision << ": " << built.status().ToString();
      auto e = engine::Engine::Load(path);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      const double err = MaxDiff(LastLogits(*e, ids), ref);
      EXPECT_LE(err, rel * MaxAbs(ref)) << model << " " << precision;
      EXPECT_GT(err, 0.0) << model << " " << precision << " should differ a little unless fp32";
    }
  }
}

// bf16 and int8-wo engines loaded with bf16 CPU activations (EngineOptions::cpu_activations):
// their prefill GEMMs round x to bf16 on vdpbf16ps where the CPU has AVX512-BF16 (the int8
// values are exact in bf16), so the logits move a little from the f32-activation ones and stay
// within the engine's bound of the float64 reference plus the bf16 engine's; elsewhere they are
// the same bytes. Other dtypes are refused.
TEST(EngineFileTest, Bf16CpuActivationsStayWithinTheBf16Bound) {
  TempDir tmp;
  const std::string model = "llama3-tiny";
  // 64 tokens: a prefill past the decode kernel's rows.
  const std::vector<int32_t> ids = ReferenceIds(model, 6);
  const std::vector<float> ref = ReferenceLogits(model, 6);
  for (const auto& [precision, bound] : std::vector<std::pair<std::string, double>>{{"bf16", 4e-2},
                                                                                    {"int8-wo", 6e-2 + 4e-2}}) {
    const std::string path = tmp.File(model + "-" + precision + ".ferry");
    engine::BuildOptions bo = Untuned();
    bo.precision = *ParsePrecision(precision);
    ASSERT_TRUE(engine::BuildEngine(testing::FixturePath("models/" + model), path, bo).ok()) << precision;
    auto f32 = engine::Engine::Load(path);
    ASSERT_TRUE(f32.ok()) << f32.status().ToString();
    engine::EngineOptions eo;
    eo.cpu_activations = DType::kBF16;
    auto bf16 = engine::Engine::Load(path, eo);
    ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
    const std::vector<float> got = LastLogits(*bf16, ids);
    EXPECT_LE(MaxDiff(got, ref), bound * MaxAbs(ref)) << precision;
    const bool dot = kernels::cpu::Bf16DotSupported() && !kernels::cpu::AmxEnabled() &&
                     static_cast<int64_t>(ids.size()) > kernels::cpu::kGemvMaxRows;
    if (dot) {
      EXPECT_NE(got, LastLogits(*f32, ids)) << precision << ": the vdpbf16ps route did not run";
    } else {
      EXPECT_EQ(got, LastLogits(*f32, ids)) << precision;
    }
    eo.cpu_activations = DType::kF16;
    auto bad = engine::Engine::Load(path, eo);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("CPU activation dtype must be f32 or bf16"), std::string::npos)
        << bad.status().ToString();
  }
}

// The architectures of tools/fixtures/architectures.py (when their fixtures are in the
// repository): an fp32 engine gives the checkpoint's logits exactly, and every precision
// stays within its bound of the float64 reference on a prompt longer than the sliding
// windows.
TEST(EngineFileTest, NewArchitecturesInEveryPrecision) {
  TempDir tmp;
  const std::vector<std::pair<std::string, double>> precisions = {
      {"fp32", 1e-3}, {"bf16", 4e-2}, {"fp16", 1e-2}, {"int8-wo", 6e-2}, {"int8", 1.5e-1}, {"int4-wo", 3e-1}};
  int found = 0;
  for (const std::string model : {"qwen3-tiny", "gemma2-tiny", "phi3-tiny", "mistral-swa-tiny"}) {
    const std::string dir = testing::SourcePath("tests/fixtures/architectures/" + model);
    if (!fs::exists(dir + "/reference.safetensors")) continue;
    ++found;
    auto ref_file = io::SafetensorsFile::Open(dir + "/reference.safetensors");
    ASSERT_TRUE(ref_file.ok());
    const std::vector<int32_t> ids = ToIds((*ref_file)->Get("p2.input_ids").value());
    const std::vector<float> ref = ToFloats((*ref_file)->Get("p2.last_logits").value());
    auto from_ckpt = engine::Engine::Load(dir);
    ASSERT_TRUE(from_ckpt.ok()) << model << ": " << from_ckpt.status().ToString();
    const std::vector<float> ckpt_logits = LastLogits(*from_ckpt, ids);
    for (const auto& [precision, rel] : precisions) {
      const std::string path = tmp.File(model + "-" + precision + ".ferry");
      engine::BuildOptions bo = Untuned();
      bo.precision = *ParsePrecision(precision);
      auto built = engine::BuildEngine(dir, path, bo);
      ASSERT_TRUE(built.ok()) << model << " " << precision << ": " << built.status().ToString();
      auto e = engine::Engine::Load(path);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      const std::vector<float> got = LastLogits(*e, ids);
      if (precision == "fp32") {
        EXPECT_EQ(got, ckpt_logits) << model;
      }
      EXPECT_LE(MaxDiff(got, ref), rel * MaxAbs(ref)) << model << " " << precision;
    }
  }
  if (found == 0) GTEST_SKIP() << "tests/fixtures/architectures is not there yet (tools/fixtures/architectures.py)";
}

// int8 calibration runs exactly its token budget: the built-in text has far more, so the
// last document is cut where the budget ends. A budget below one token is refused.
TEST(EngineFileTest, CalibrationRunsExactlyItsTokenBudget) {
  TempDir tmp;
  engine::BuildOptions bo = Untuned();
  bo.precision = Precision::kInt8;
  bo.calibration_tokens = 300;
  auto built = engine::BuildEngine(testing::FixturePath("models/llama3-tiny"), tmp.File("a.ferry"), bo);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ASSERT_TRUE(built->calibration.has_value());
  EXPECT_EQ(built->calibration->tokens, 300);
  EXPECT_GE(built->calibration->documents, 1);
  EXPECT_GT(built->calibration->layers, 0);
  bo.calibration_tokens = 0;
  auto refused = engine::BuildEngine(testing::FixturePath("models/llama3-tiny"), tmp.File("b.ferry"), bo);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("calibration tokens"), std::string::npos) << refused.status().ToString();
  EXPECT_FALSE(fs::exists(tmp.File("b.ferry")));
}

TEST(EngineFileTest, Fp8IsRefusedOnTheCpuAndUnknownPrecisionsToo) {
  TempDir tmp;
  engine::BuildOptions bo = Untuned();
  bo.precision = Precision::kFp8;
  auto r = engine::BuildEngine(testing::FixturePath("models/qwen2-tiny"), tmp.File("x.ferry"), bo);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--device cuda"), std::string::npos) << r.status().ToString();
  // An unknown precision never becomes a BuildOptions: it is refused where it is parsed.
  EXPECT_EQ(ParsePrecision("int4").status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(tmp.File("x.ferry")));
}

TEST(EngineFileTest, GpuBuildsNeedAGpuAndAKnownDevice) {
  TempDir tmp;
  engine::BuildOptions bo = Untuned();
  bo.precision = Precision::kBf16;
  // An unknown device never becomes a BuildOptions: it is refused where it is parsed.
  EXPECT_EQ(ParseDevice("tpu").status().code(), StatusCode::kInvalidArgument);
  if (!backend::CudaAvailable()) {
    bo.device = DeviceSpec::Cuda();
    const Status s = engine::BuildEngine(testing::FixturePath("models/qwen2-tiny"), tmp.File("x.ferry"), bo).status();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  }
  EXPECT_FALSE(fs::exists(tmp.File("x.ferry")));
}

class BadEngineFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tmp_.File("good.ferry");
    engine::BuildOptions bo = Untuned();
    bo.precision = Precision::kBf16;
    ASSERT_TRUE(engine::BuildEngine(testing::FixturePath("models/qwen2-tiny"), path_, bo).ok());
    std::ifstream in(path_, std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string p = tmp_.File(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  Status LoadStatus(const std::string& p) { return engine::Engine::Load(p).status(); }
  // The file with its manifest replaced by `manifest` (header sizes and checksum updated,
  // so only the manifest's content is wrong).
  std::string WithManifest(const std::string& name, const std::string& manifest) {
    uint64_t offset = 0;
    std::memcpy(&offset, bytes_.data() + 16, 8);
    std::string b = bytes_.substr(0, offset) + manifest;
    const uint64_t manifest_bytes = manifest.size(), file_bytes = b.size();
    const uint32_t crc = io::Crc32c(manifest.data(), manifest.size());
    std::memcpy(b.data() + 24, &manifest_bytes, 8);
    std::memcpy(b.data() + 32, &crc, 4);
    std::memcpy(b.data() + 40, &file_bytes, 8);
    return Write(name, b);
  }
  nlohmann::json ManifestJson() {
    auto f = io::EngineFile::Open(path_);
    return (*f)->manifest().ToJson();
  }
  // Offset of the first linear weight's first blob.
  uint64_t FirstBlobOffset() {
    auto f = io::EngineFile::Open(path_);
    return (*f)->manifest().blobs_index[0].blob.offset;
  }

  TempDir tmp_;
  std::string path_;
  std::string bytes_;
};

TEST_F(BadEngineFileTest, GoodFileLoadsAndVerifies) {
  EXPECT_TRUE(LoadStatus(path_).ok());
  auto f = io::EngineFile::Open(path_);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE((*f)->VerifyAll().ok());
}

TEST_F(BadEngineFileTest, TruncatedFile) {
  const Status s = LoadStatus(Write("t.ferry", bytes_.substr(0, bytes_.size() / 2)));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();
  EXPECT_EQ(LoadStatus(Write("h.ferry", bytes_.substr(0, 100))).code(), StatusCode::kDataLoss);
}

TEST_F(BadEngineFileTest, CorruptedBlobIsCaughtByItsChecksum) {
  std::string b = bytes_;
  b[FirstBlobOffset() + 5] ^= 0x55;
  const std::string p = Write("c.ferry", b);
  const Status s = LoadStatus(p);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.message();
  auto f = io::EngineFile::Open(p);
  ASSERT_TRUE(f.ok());  // header and manifest are intact
  EXPECT_FALSE((*f)->VerifyAll().ok());
  // Without verification it loads (the user chose speed over the check).
  EXPECT_TRUE(engine::Engine::Load(p, {.verify = false}).ok());
}

TEST_F(BadEngineFileTest, CorruptedManifest) {
  std::string b = bytes_;
  b[b.size() - 10] ^= 0x20;
  const Status s = LoadStatus(Write("m.ferry", b));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("manifest"), std::string::npos) << s.message();
}

TEST_F(BadEngineFileTest, NewerFormatVersion) {
  std::string b = bytes_;
  const uint32_t v = io::kEngineFormatVersion + 1;
  std::memcpy(b.data() + 8, &v, 4);
  const Status s = LoadStatus(Write("v.ferry", b));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("format version"), std::string::npos) << s.message();
}

TEST_F(BadEngineFileTest, BadMagicIsNotTakenForAnEngine) {
  std::string b = bytes_;
  b[0] = 'X';
  const Status s = LoadStatus(Write("x.ferry", b));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("neither"), std::string::npos) << s.message();
}

TEST_F(BadEngineFileTest, MismatchedFingerprint) {
  // Rewrite the fingerprint in the header to claim another device / ISA.
  for (const std::string& replacement :
       {std::string("{\"device\":\"cuda\",\"gpu_arch\":\"sm_90\",\"weight_layout_version\":1}"),
        std::string("{\"device\":\"cpu\",\"cpu_isa\":\"avx1024\",\"weight_layout_version\":1}"),
        std::string("{\"device\":\"cpu\",\"cpu_isa\":\"avx2\",\"weight_layout_version\":7}")}) {
    std::string b = bytes_;
    const uint32_t n = static_cast<uint32_t>(replacement.size());
    std::memcpy(b.data() + 36, &n, 4);
    std::memset(b.data() + 64, 0, 4096 - 64);
    std::memcpy(b.data() + 64, replacement.data(), n);
    const Status s = LoadStatus(Write("f.ferry", b));
    if (replacement.find("cuda") != std::string::npos) {
      EXPECT_NE(s.message().find("--device cuda"), std::string::npos) << s.ToString();
    }
    if (replacement.find("avx1024") != std::string::npos) {
      // An unknown ISA name ranks below what we have: accepted. Only known, stronger ISAs fail.
      continue;
    }
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << replacement;
  }
  std::string b = bytes_;
  const std::string avx512 = "{\"device\":\"cpu\",\"cpu_isa\":\"avx512\",\"weight_layout_version\":1}";
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) {
    const uint32_t n = static_cast<uint32_t>(avx512.size());
    std::memcpy(b.data() + 36, &n, 4);
    std::memset(b.data() + 64, 0, 4096 - 64);
    std::memcpy(b.data() + 64, avx512.data(), n);
    const Status s = LoadStatus(Write("i.ferry", b));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("avx512"), std::string::npos) << s.message();
  }
}

TEST_F(BadEngineFileTest, RewrittenButValidManifestStillLoads) {
  // The baseline for the tests below: the rewrite itself does not break the file.
  const std::string p = WithManifest("same.ferry", ManifestJson().dump());
  EXPECT_TRUE(LoadStatus(p).ok()) << LoadStatus(p).ToString();
  auto f = io::EngineFile::Open(p);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE((*f)->VerifyAll().ok());
}

// A tensor pointing past the end of the file used to pass `inspect --verify` (which only
// read the blob index) and was only caught, if at all, when the model asked for it.
TEST_F(BadEngineFileTest, TensorPastTheEndOfTheFileIsRefusedOnOpen) {
  nlohmann::json m = ManifestJson();
  const std::string key = m["tensors"].begin().key();
  for (const uint64_t offset : {uint64_t{1} << 40, static_cast<uint64_t>(bytes_.size()) / 4096 * 4096 + 4096}) {
    m["tensors"][key]["blob"]["offset"] = offset;
    const std::string p = WithManifest("past.ferry", m.dump());
    auto f = io::EngineFile::Open(p);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(f.status().message().find("'" + key + "'"), std::string::npos) << f.status().message();
    EXPECT_NE(f.status().message().find("outside the data section"), std::string::npos) << f.status().message();
    const Status s = engine::Engine::Load(p, {.verify = false}).status();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  }
  // So is a blob whose offset plus size wraps around.
  m = ManifestJson();
  m["tensors"][key]["blob"]["bytes"] = ~uint64_t{0} - 4095;
  EXPECT_EQ(io::EngineFile::Open(WithManifest("wrap.ferry", m.dump())).status().code(), StatusCode::kDataLoss);
}

TEST_F(BadEngineFileTest, LinearBlobInTheManifestIsRefusedOnOpen) {
  nlohmann::json m = ManifestJson();
  const std::string key = m["linears"].begin().key();
  m["linears"][key]["blobs"][0]["blob"]["offset"] = 0;  // the header
  auto f = io::EngineFile::Open(WithManifest("header.ferry", m.dump()));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("'" + key + "#0'"), std::string::npos) << f.status().message();
}

TEST_F(BadEngineFileTest, DeeplyNestedManifestIsRefusedWithoutCrashing) {
  nlohmann::json m = ManifestJson();
  // Nested where the loader, inspect and error messages all look: a tensor's shape.
  std::string text = m.dump();
  const std::string shape = "\"shape\":[";
  const size_t at = text.find(shape);
  ASSERT_NE(at, std::string::npos);
  text.insert(at + shape.size(), std::string(100000, '[') + std::string(100000, ']') + ",");
  const std::string p = WithManifest("deep.ferry", text);
  auto f = io::EngineFile::Open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("nested deeper than"), std::string::npos) << f.status().message();
  EXPECT_EQ(LoadStatus(p).code(), StatusCode::kDataLoss);
}

TEST_F(BadEngineFileTest, DeeplyNestedFingerprintIsRefused) {
  std::string b = bytes_;
  const std::string deep = std::string(2000, '[') + std::string(2000, ']');
  const uint32_t n = static_cast<uint32_t>(deep.size());
  std::memcpy(b.data() + 36, &n, 4);
  std::memcpy(b.data() + 64, deep.data(), n);
  const Status s = LoadStatus(Write("deepfp.ferry", b));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("fingerprint"), std::string::npos) << s.message();
}

TEST_F(BadEngineFileTest, MalformedManifestFieldsAreNamed) {
  nlohmann::json m = ManifestJson();
  m["build"]["max_seq_len"] = "long";
  const Status s = LoadStatus(WithManifest("field.ferry", m.dump()));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("build.max_seq_len"), std::string::npos) << s.message();
  m = ManifestJson();
  m["format_version"] = io::kEngineFormatVersion + 1;
  EXPECT_EQ(LoadStatus(WithManifest("ver.ferry", m.dump())).code(), StatusCode::kDataLoss);
}

TEST(EngineFileTest, TunedKernelChoicesAreRecordedAndApplied) {
  TempDir tmp;
  const std::string path = tmp.File("tuned.ferry");
  engine::BuildOptions bo;  // tuning on
  bo.precision = Precision::kBf16;
  ASSERT_TRUE(engine::BuildEngine(testing::FixturePath("models/qwen2-tiny"), path, bo).ok());
  auto f = io::EngineFile::Open(path);
  ASSERT_TRUE(f.ok());
  const io::EngineManifest& m = (*f)->manifest();
  ASSERT_TRUE(m.tuned.is_object());
  // qwen2-tiny has four distinct linear shapes (qkv, o, gate_up, down) plus the LM head.
  const nlohmann::json& shapes = m.tuned["linear_shapes"];
  EXPECT_EQ(shapes.size(), 5u);
  for (const auto& s : shapes) {
    EXPECT_EQ(s["m"].size(), s["small_m_us"].size());
    EXPECT_EQ(s["m"].size(), s["gemm_us"].size());
    for (const auto& t : s["small_m_us"]) EXPECT_GT(t.get<double>(), 0.0);
  }
  for (const auto& [key, l] : m.linears) EXPECT_TRUE(l.small_m_max.has_value()) << key;
  // The engine still computes the same logits as an untuned one (the choice changes speed only).
  const std::string plain = tmp.File("plain.ferry");
  bo.tune = false;
  ASSERT_TRUE(engine::BuildEngine(testing::FixturePath("models/qwen2-tiny"), plain, bo).ok());
  const std::vector<int32_t> ids = ReferenceIds("qwen2-tiny", 1);
  const std::vector<float> a = LastLogits(*engine::Engine::Load(path), ids);
  const std::vector<float> b = LastLogits(*engine::Engine::Load(plain), ids);
  EXPECT_LE(MaxDiff(a, b), 1e-4 * MaxAbs(b));
}

}  // namespace
}  // namespace ferry
