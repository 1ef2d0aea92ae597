// GPU engine files: `ferry build --device cuda` for every precision, with GEMM choices tuned
// on this GPU and stored, a GPU fingerprint, loading onto the device, and the refusals
// around them (a GPU engine on the CPU, a CPU engine on the GPU).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "backend/cuda_backend.h"
#include "engine/engine.h"
#include "engine/engine_builder.h"
#include "decoder_test_util.h"
#include "engine/encoder_runner.h"
#include "io/engine_file.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace ferry {
namespace {

using testing::MaxAbs;
using testing::MaxDiff;
using testing::ToFloats;
using testing::ToIds;

using testing::TempDir;

std::vector<float> LastLogits(const std::shared_ptr<engine::Engine>& e, const std::vector<int32_t>& ids) {
  auto runner = testing::DecoderHarness::Create(e, 1, 256, /*graphs=*/true);
  EXPECT_NE(runner, nullptr);
  auto logits = runner->Step({{1, ids, 0, false}});
  EXPECT_TRUE(logits.ok()) << logits.status().ToString();
  return ToFloats(*logits);
}

// Builds a GPU engine of `precision` (tuned, calibrated briefly for int8) at `path`.
Result<engine::BuildReport> BuildOnGpu(const std::string& dir, const std::string& precision,
                                       const std::string& path) {
  engine::BuildOptions bo;
  bo.device = DeviceSpec::Cuda();
  bo.precision = *ParsePrecision(precision);
  bo.calibration_tokens = 512;
  return engine::BuildEngine(dir, path, bo);
}

engine::EngineOptions OnGpu() {
  engine::EngineOptions o;
  o.device = DeviceSpec::Cuda();
  return o;
}

// Each precision against the float64 reference, within a bound for that precision (the
// CPU engines' bounds; fp8 keeps three mantissa bits, so it gets the widest).
TEST(CudaEngineBuildTest, EveryPrecisionBuildsTunesLoadsAndMatchesTheReference) {
  FERRY_SKIP_WITHOUT_GPU();
  TempDir tmp;
  const std::string model = "llama3-tiny";
  const std::string dir = testing::FixturePath("models/" + model);
  auto ref = io::SafetensorsFile::Open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok());
  const std::vector<int32_t> ids = ToIds((*ref)->Get("p1.input_ids").value());
  const std::vector<float> expected = ToFloats((*ref)->Get("p1.last_logits").value());
  auto gpu = backend::QueryCudaDevice(0);
  ASSERT_TRUE(gpu.ok());
  const std::vector<std::pair<std::string, double>> precisions = {
      {"fp32", 1e-3}, {"bf16", 4e-2}, {"fp16", 1e-2}, {"int8-wo", 6e-2}, {"int8", 1.5e-1}, {"fp8", 2e-1}, {"int4-wo", 3e-1}};
  for (const auto& [precision, rel] : precisions) {
    SCOPED_TRACE(precision);
    const std::string path = tmp.File(precision + ".ferry");
    auto built = BuildOnGpu(dir, precision, path);
    ASSERT_TRUE(built.ok()) << built.status().ToString();

    auto file = io::EngineFile::Open(path);
    ASSERT_TRUE(file.ok());
    const io::EngineFingerprint& fp = (*file)->fingerprint();
    EXPECT_EQ(fp.device, "cuda");
    EXPECT_EQ(fp.arch, gpu->arch());
    EXPECT_EQ(fp.cublaslt_version, gpu->cublaslt_version);
    const io::EngineManifest& m = (*file)->manifest();
    EXPECT_EQ(m.build.device.ToString(), "cuda");
    int tuned = 0;
    for (const auto& [key, l] : m.linears) {
      EXPECT_EQ(l.layout.value("backend", ""), "cuda") << key;
      for (const auto& c : l.layout["gemm_choices"]) tuned += c.is_string();
    }
    EXPECT_GT(tuned, 0) << "no tuned GEMM choice stored";
    EXPECT_FALSE(m.tuned["linear_shapes"].empty());

    auto e = engine::Engine::Load(path, OnGpu());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const std::vector<float> got = LastLogits(*e, ids);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_LE(MaxDiff(got.data(), expected.data(), got.size()), rel * MaxAbs(expected));

    const Status on_cpu = engine::Engine::Load(path).status();
    EXPECT_EQ(on_cpu.code(), StatusCode::kFailedPrecondition) << on_cpu.ToString();
    EXPECT_NE(on_cpu.message().find("--device cuda"), std::string::npos) << on_cpu.ToString();
  }
}

// fp8 engines record how their GEMMs accumulate (fast by default, exact on request), in the
// build section and in every fp8 linear, load with it, and both match the reference; the
// two differ from each other by far less than fp8 differs from the reference.
TEST(CudaEngineBuildTest, Fp8AccumulationIsRecordedAndEitherMatchesTheReference) {
  FERRY_SKIP_WITHOUT_GPU();
  auto gpu = backend::QueryCudaDevice(0);
  ASSERT_TRUE(gpu.ok());
  if (gpu->cc_major * 10 + gpu->cc_minor < 89) GTEST_SKIP() << "fp8 needs sm_89+";
  TempDir tmp;
  const std::string dir = testing::FixturePath("models/llama3-tiny");
  auto ref = io::SafetensorsFile::Open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok());
  const std::vector<int32_t> ids = ToIds((*ref)->Get("p1.input_ids").value());
  const std::vector<float> expected = ToFloats((*ref)->Get("p1.last_logits").value());
  std::vector<float> logits[2];
  for (const bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "exact");
    engine::BuildOptions bo;
    bo.device = DeviceSpec::Cuda();
    bo.precision = Precision::kFp8;
    if (!fast) bo.fp8_fast_accumulation = false;
    const std::string path = tmp.File(fast ? "fast.ferry" : "exact.ferry");
    auto built = engine::BuildEngine(dir, path, bo);
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    auto file = io::EngineFile::Open(path);
    ASSERT_TRUE(file.ok());
    const io::EngineManifest& m = (*file)->manifest();
    const std::string want = fast ? "fast" : "exact";
    EXPECT_EQ(m.build.fp8_accumulation.value_or("(none)"), want);
    int fp8_linears = 0;
    for (const auto& [key, l] : m.linears) {
      if (l.layout.value("kind", "") != "fp8") continue;
      ++fp8_linears;
      EXPECT_EQ(l.layout.value("fp8_accumulation", ""), want) << key;
    }
    EXPECT_GT(fp8_linears, 0);
    auto e = engine::Engine::Load(path, OnGpu());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    logits[fast ? 0 : 1] = LastLogits(*e, ids);
    ASSERT_EQ(logits[fast ? 0 : 1].size(), expected.size());
    EXPECT_LE(MaxDiff(logits[fast ? 0 : 1].data(), expected.data(), expected.size()), 2e-1 * MaxAbs(expected));
  }
  const double fp8_error = MaxDiff(logits[1].data(), expected.data(), expected.size());
  EXPECT_LE(MaxDiff(logits[0].data(), logits[1].data(), expected.size()), 0.5 * fp8_error + 1e-3 * MaxAbs(expected));
}

TEST(CudaEngineBuildTest, EncoderEngineOnTheGpu) {
  FERRY_SKIP_WITHOUT_GPU();
  TempDir tmp;
  const std::string dir = testing::FixturePath("models/bert-tiny");
  for (const std::string precision : {"fp16", "int8"}) {
    const std::string path = tmp.File(precision + ".ferry");
    auto built = BuildOnGpu(dir, precision, path);
    ASSERT_TRUE(built.ok()) << precision << ": " << built.status().ToString();
    auto cpu = engine::Engine::Load(dir);
    auto gpu = engine::Engine::Load(path, OnGpu());
    ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status().ToString();
    auto enc = (*cpu)->tokenizer()->EncodeWithSpecial("The movie was wonderful!");
    ASSERT_TRUE(enc.ok());
    auto a = engine::Embed(**cpu, {engine::EncodedInput{enc->ids, enc->type_ids}}, engine::Pooling::kCls, false);
    auto b = engine::Embed(**gpu, {engine::EncodedInput{enc->ids, enc->type_ids}}, engine::Pooling::kCls, false);
    ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
    const std::vector<float> fa = ToFloats(*a), fb = ToFloats(*b);
    EXPECT_LE(MaxDiff(fa.data(), fb.data(), fa.size()), (precision == "fp16" ? 1e-2 : 1e-1) * MaxAbs(fa)) << precision;
  }
}

TEST(CudaEngineBuildTest, CpuEnginesAreRefusedOnTheGpu) {
  FERRY_SKIP_WITHOUT_GPU();
  TempDir tmp;
  engine::BuildOptions bo;
  bo.tune = false;
  bo.precision = Precision::kBf16;
  ASSERT_TRUE(engine::BuildEngine(testing::FixturePath("models/qwen2-tiny"), tmp.File("cpu.ferry"), bo).ok());
  const Status s = engine::Engine::Load(tmp.File("cpu.ferry"), OnGpu()).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("ferry build --device cuda"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ferry
