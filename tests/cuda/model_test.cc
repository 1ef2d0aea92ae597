// Every fixture model through the CUDA backend against its Hugging Face references, with
// f32 activations (the CPU's tolerance) and bf16 activations (a bf16 tolerance), plus the
// demo models on the GPU against the CPU engine.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "backend/cuda_backend.h"
#include "engine/engine.h"
#include "decoder_test_util.h"
#include "engine/encoder_runner.h"
#include "io/safetensors.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace ferry {
namespace {

using testing::MaxAbs;
using testing::MaxDiff;
using testing::ToFloats;
using testing::ToIds;

struct Case {
  std::string model;
  DType activations;
  double tolerance;  // max |ours - ref| <= tolerance * max |ref|
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.model + "_" + std::string(DTypeName(info.param.activations));
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

engine::EngineOptions Cuda(DType activations) {
  engine::EngineOptions o;
  o.device = DeviceSpec::Cuda();
  o.cuda_activations = activations;
  return o;
}

// "arch/NAME" is tests/fixtures/architectures/NAME (tools/fixtures/architectures.py), any
// other name ../shared/fixtures/models/NAME.
std::string DecoderDir(const std::string& model) {
  if (model.starts_with("arch/")) return testing::SourcePath("tests/fixtures/architectures/" + model.substr(5));
  return testing::FixturePath("models/" + model);
}

class CudaDecoderFixtureTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(DecoderDir(GetParam().model) + "/reference.safetensors")) {
      GTEST_SKIP() << GetParam().model << " is not there yet (tools/fixtures/architectures.py)";
    }
  }
};

TEST_P(CudaDecoderFixtureTest, LogitsMatchReference) {
  FERRY_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const std::string dir = DecoderDir(c.model);
  auto e = engine::Engine::Load(dir, Cuda(c.activations));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto runner = testing::DecoderHarness::Create(*e, 8, 256, /*graphs=*/true);
  ASSERT_NE(runner, nullptr);
  auto ref = io::SafetensorsFile::Open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok());
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const int vocab = (*e)->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> expected;
  for (const auto& p : j["prompts"]) {
    const std::string key = "p" + std::to_string(p["index"].get<int>());
    prompts.push_back(ToIds((*ref)->Get(key + ".input_ids").value()));
    expected.push_back(ToFloats((*ref)->Get(key + ".last_logits").value()));
  }
  // Each prompt alone, then all of them as one ragged batch.
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto logits = runner->Step({{static_cast<int64_t>(i), prompts[i], 0, false}});
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    runner->cache().Free(static_cast<int64_t>(i));
    EXPECT_LE(MaxDiff(logits->data<float>(), expected[i].data(), vocab), c.tolerance * MaxAbs(expected[i]))
        << c.model << " prompt " << i;
  }
  std::vector<testing::RawStep> steps;
  for (size_t i = 0; i < prompts.size(); ++i) steps.push_back({static_cast<int64_t>(i), prompts[i], 0, false});
  auto batched = runner->Step(steps);
  ASSERT_TRUE(batched.ok()) << batched.status().ToString();
  for (size_t i = 0; i < prompts.size(); ++i) {
    runner->cache().Free(static_cast<int64_t>(i));
    EXPECT_LE(MaxDiff(batched->data<float>() + i * vocab, expected[i].data(), vocab), c.tolerance * MaxAbs(expected[i]))
        << c.model << " prompt " << i << " in the ragged batch";
  }
}

TEST_P(CudaDecoderFixtureTest, DecodeWithKvCacheMatchesFullRecompute) {
  FERRY_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  auto e = engine::Engine::Load(DecoderDir(c.model), Cuda(c.activations));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto runner = testing::DecoderHarness::Create(*e, 4, 128, /*graphs=*/true);
  ASSERT_NE(runner, nullptr);
  const int vocab = (*e)->config().vocab_size;
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % vocab);
  // Prefill 30 in chunks of 7, then decode 10 one by one; compare the last logits.
  auto& ex = *runner;
  Result<Tensor> last = InvalidArgument("unset");
  for (int pos = 0; pos < 40;) {
    const int n = pos < 30 ? std::min(7, 30 - pos) : 1;
    last = ex.Step({{1, std::span<const int32_t>(ids.data() + pos, n), pos, false}});
    ASSERT_TRUE(last.ok()) << last.status().ToString();
    pos += n;
  }
  runner->cache().Free(1);
  auto full = ex.Step({{2, ids, 0, false}});
  ASSERT_TRUE(full.ok());
  runner->cache().Free(2);
  const std::vector<float> ref(full->data<float>(), full->data<float>() + vocab);
  EXPECT_LE(MaxDiff(last->data<float>(), ref.data(), vocab), c.tolerance * MaxAbs(ref));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaDecoderFixtureTest,
                         ::testing::Values(Case{"llama-tiny", DType::kF32, 1e-3}, Case{"llama3-tiny", DType::kF32, 1e-3},
                                           Case{"qwen2-tiny", DType::kF32, 1e-3},
                                           Case{"llama-tiny", DType::kBF16, 3e-2},
                                           Case{"llama3-tiny", DType::kBF16, 3e-2},
                                           Case{"qwen2-tiny", DType::kBF16, 3e-2},
                                           Case{"llama3-tiny", DType::kF16, 1e-2},
                                           // Qwen3 (q/k norms), Gemma 2 (soft-capping, windows, GeGLU),
                                           // Phi-3 (longrope), Mistral's window: f32 and bf16.
                                           Case{"arch/qwen3-tiny", DType::kF32, 1e-3},
                                           Case{"arch/gemma2-tiny", DType::kF32, 1e-3},
                                           Case{"arch/phi3-tiny", DType::kF32, 1e-3},
                                           Case{"arch/mistral-swa-tiny", DType::kF32, 1e-3},
                                           Case{"arch/qwen3-tiny", DType::kBF16, 3e-2},
                                           Case{"arch/gemma2-tiny", DType::kBF16, 3e-2},
                                           Case{"arch/phi3-tiny", DType::kBF16, 3e-2},
                                           Case{"arch/mistral-swa-tiny", DType::kBF16, 3e-2}),
                         Name);

// An encoder on the GPU (f32 and bf16 activations) against the same checkpoint on the CPU:
// pooled embeddings (mean and CLS, pooled on the device) and the classifier's logits.
void ExpectEncoderMatchesCpu(const std::string& dir) {
  for (DType act : {DType::kF32, DType::kBF16}) {
    auto gpu = engine::Engine::Load(dir, Cuda(act));
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    auto cpu = engine::Engine::Load(dir);
    ASSERT_TRUE(cpu.ok());
    std::vector<engine::EncodedInput> inputs;
    for (const char* text : {"The movie was wonderful!", "I did not like it at all, not one bit.", "ok"}) {
      auto enc = (*cpu)->tokenizer()->EncodeWithSpecial(text);
      ASSERT_TRUE(enc.ok());
      inputs.push_back({enc->ids, enc->type_ids});
    }
    // Pooling runs on the device (the CLS row gathered, or the mean of each input's rows).
    for (engine::Pooling pooling : {engine::Pooling::kMean, engine::Pooling::kCls}) {
      auto want = engine::Embed(**cpu, inputs, pooling, true);
      auto got = engine::Embed(**gpu, inputs, pooling, true);
      ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
      ASSERT_EQ(got->shape(), (Shape{3, (*cpu)->config().hidden_size}));
      const std::vector<float> w = ToFloats(*want), g = ToFloats(*got);
      const double tol = (act == DType::kF32 ? 1e-4 : 3e-2) * MaxAbs(w);
      EXPECT_LE(MaxDiff(g.data(), w.data(), w.size()), tol)
          << std::string(DTypeName(act)) << (pooling == engine::Pooling::kMean ? " mean" : " cls");
    }
    if ((*cpu)->encoder()->has_classifier()) {
      auto lw = engine::Classify(**cpu, inputs);
      auto lg = engine::Classify(**gpu, inputs);
      ASSERT_TRUE(lw.ok() && lg.ok());
      const std::vector<float> a = ToFloats(*lw), b = ToFloats(*lg);
      EXPECT_LE(MaxDiff(a.data(), b.data(), a.size()), (act == DType::kF32 ? 1e-4 : 3e-2) * MaxAbs(a));
    }
  }
}

TEST(CudaEncoderFixtureTest, BertMatchesReference) {
  FERRY_SKIP_WITHOUT_GPU();
  ExpectEncoderMatchesCpu(testing::FixturePath("models/bert-tiny"));
}

// ModernBERT: alternating global and bidirectional sliding-window layers, GeGLU, bias-free
// LayerNorm; and XLM-R.
TEST(CudaEncoderFixtureTest, ArchitecturesMatchTheCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  for (const char* name : {"modernbert-tiny", "xlmr-tiny", "xlmr-reranker-tiny"}) {
    const std::string dir = testing::SourcePath(std::string("tests/fixtures/architectures/") + name);
    if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << name << " is not there";
    SCOPED_TRACE(name);
    ExpectEncoderMatchesCpu(dir);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaDemoModelTest, KjvDecoderOnTheGpuAgreesWithTheCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  const std::string dir = testing::SourcePath("models/demo/kjv-decoder");
  auto cpu = engine::Engine::Load(dir);
  auto gpu = engine::Engine::Load(dir, Cuda(DType::kBF16));
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status().ToString();
  auto prompt = (*cpu)->EncodePrompt("And the LORD said unto Moses,");
  ASSERT_TRUE(prompt.ok());
  auto rc = testing::DecoderHarness::Create(*cpu, 2, 512, /*graphs=*/true);
  auto rg = testing::DecoderHarness::Create(*gpu, 2, 512, /*graphs=*/true);
  ASSERT_TRUE(rc != nullptr && rg != nullptr);
  auto lc = rc->Step({{1, *prompt, 0, false}});
  auto lg = rg->Step({{1, *prompt, 0, false}});
  ASSERT_TRUE(lc.ok() && lg.ok()) << lg.status().ToString();
  const std::vector<float> a = ToFloats(*lc), b = ToFloats(*lg);
  EXPECT_LE(MaxDiff(a.data(), b.data(), a.size()), 3e-2 * MaxAbs(a));
}

// A GGUF file (written by llama.cpp's own gguf package: F16, Q8_0, BF16 and F32 tensors,
// interleaved q/k rows, rope_freqs; heads of 16) on the GPU, with f32 activations, against
// its safetensors twin on the CPU.
TEST(CudaGgufTest, GgufFileOnTheGpuAgreesWithTheCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  const std::string path = testing::SourcePath("tests/fixtures/gguf/tiny-llama-hd16.gguf");
  auto cpu = engine::Engine::Load(testing::SourcePath("tests/fixtures/gguf/tiny-llama-hd16"));
  auto gpu = engine::Engine::Load(path, Cuda(DType::kF32));
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << (cpu.ok() ? gpu.status().ToString() : cpu.status().ToString());
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 29 + 3) % (*cpu)->config().vocab_size);
  auto rc = testing::DecoderHarness::Create(*cpu, 1, 64);
  auto rg = testing::DecoderHarness::Create(*gpu, 1, 64, /*graphs=*/true);
  ASSERT_TRUE(rc != nullptr && rg != nullptr);
  auto lc = rc->Step({{1, ids, 0, false}});
  auto lg = rg->Step({{1, ids, 0, false}});
  ASSERT_TRUE(lc.ok() && lg.ok()) << lg.status().ToString();
  const std::vector<float> a = ToFloats(*lc), b = ToFloats(*lg);
  EXPECT_LE(MaxDiff(a.data(), b.data(), a.size()), 1e-4 * MaxAbs(a));
}

}  // namespace
}  // namespace ferry
