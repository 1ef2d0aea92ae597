// Float8 checkpoints (quantization_config fp8, fbgemm_fp8, compressed-tensors float): the
// e4m3 weights and their scales are dequantized at load, so the model computes exactly what
// the same checkpoint with the dequantized weights written out in f32 computes; engines
// built from it too. Other quantization methods are refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "decoder_test_util.h"
#include "engine/engine.h"
#include "backend/cuda_backend.h"
#include "engine/engine_builder.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "tools/checkpoint_maker.h"
#include "tools/quantized_checkpoint_test_util.h"

namespace ferry::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

enum class ScaleLayout { kPerRow, kPerTensor, kBlocks };

class Fp8CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ferry_fp8_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    CheckpointSpec spec;
    spec.preset = "llama-test";
    spec.dtype = DType::kF32;
    spec.seed = 3;
    ASSERT_TRUE(MakeCheckpoint(spec, (dir_ / "src").string()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `fp8` (the linear weights of every layer in e4m3 with scales in `layout`, and
  // `quant` as quantization_config) and `ref` (the same weights dequantized, in f32).
  void WriteFp8(ScaleLayout layout, const json& quant, int64_t block_rows = 16, int64_t block_cols = 32) {
    auto src = io::Checkpoint::Open((dir_ / "src").string());
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    std::vector<std::pair<std::string, Tensor>> fp8, ref;
    for (const std::string& name : (*src)->Names()) {
      auto t = (*src)->Get(name);
      ASSERT_TRUE(t.ok());
      const bool linear = name.starts_with("model.layers.") && name.ends_with("_proj.weight");
      if (!linear) {
        fp8.emplace_back(name, t->Clone());
        ref.emplace_back(name, t->Clone());
        continue;
      }
      const int64_t n = t->dim(0), k = t->dim(1);
      const float* w = t->data<float>();
      int64_t br = n, bc = k;
      if (layout == ScaleLayout::kPerRow) br = 1;
      if (layout == ScaleLayout::kBlocks) br = block_rows, bc = block_cols;
      const int64_t gr = (n + br - 1) / br, gc = (k + bc - 1) / bc;
      Tensor scale = Tensor::Empty(layout == ScaleLayout::kPerRow    ? Shape{n, 1}
                                   : layout == ScaleLayout::kPerTensor ? Shape{}
                                                                       : Shape{gr, gc},
                                   DType::kF32);
      std::vector<float> s(static_cast<size_t>(gr * gc), 0.0f);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          float& m = s[static_cast<size_t>((r / br) * gc + c / bc)];
          m = std::max(m, std::fabs(w[r * k + c]) / 448.0f);
        }
      }
      for (float& v : s) v = v > 0 ? v : 1.0f;
      std::copy(s.begin(), s.end(), scale.data<float>());
      Tensor q = Tensor::Empty({n, k}, DType::kF8E4M3);
      Tensor deq = Tensor::Empty({n, k}, DType::kF32);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const float sc = s[static_cast<size_t>((r / br) * gc + c / bc)];
          const uint8_t b = F32ToF8E4M3(w[r * k + c] / sc);
          q.data<uint8_t>()[r * k + c] = b;
          deq.data<float>()[r * k + c] = F8E4M3ToF32(b) * sc;
        }
      }
      fp8.emplace_back(name, q);
      fp8.emplace_back(name + (layout == ScaleLayout::kBlocks ? "_scale_inv" : "_scale"), scale);
      ref.emplace_back(name, deq);
    }
    json config = json::parse(ReadText(dir_ / "src" / "config.json"));
    for (const char* d : {"fp8", "ref"}) fs::create_directories(dir_ / d);
    ASSERT_TRUE(io::WriteSafetensors((dir_ / "ref" / "model.safetensors").string(), ref).ok());
    ASSERT_TRUE(io::WriteSafetensors((dir_ / "fp8" / "model.safetensors").string(), fp8).ok());
    WriteText(dir_ / "ref" / "config.json", config.dump(2));
    config["quantization_config"] = quant;
    WriteText(dir_ / "fp8" / "config.json", config.dump(2));
  }


  fs::path dir_;
};

TEST_F(Fp8CheckpointTest, CompressedTensorsPerChannelMatchesItsDequantizedWeights) {
  WriteFp8(ScaleLayout::kPerRow, json::parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"type": "float", "num_bits": 8, "strategy": "channel", "symmetric": true},
        "input_activations": {"type": "float", "num_bits": 8, "strategy": "token", "dynamic": true}}},
      "ignore": ["lm_head"]})"));
  ExpectSameLogits(LastLogits((dir_ / "fp8").string()), LastLogits((dir_ / "ref").string()));
}

// On a GPU with fp8 GEMMs (sm_89+) a float8 checkpoint loads as e4m3 weights with
// per-channel scales (no `ferry build`); the layer it left in floats (lm_head) stays so.
// Per-channel scales come back exactly; the fp8 activations cost some accuracy.
TEST_F(Fp8CheckpointTest, OnTheGpuItRunsTheFp8Gemms) {
  auto gpu = backend::QueryCudaDevice(0);
  if (!gpu.ok()) GTEST_SKIP() << "no CUDA device present";
  if (gpu->cc_major * 10 + gpu->cc_minor < 89) GTEST_SKIP() << "no fp8 GEMMs on " << gpu->arch();
  WriteFp8(ScaleLayout::kPerRow, json::parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"type": "float", "num_bits": 8, "strategy": "channel", "symmetric": true}}},
      "ignore": ["lm_head"]})"));
  std::map<std::string, backend::WeightFormat> formats;
  const std::vector<float> got = LastLogits((dir_ / "fp8").string(), GpuBf16(), &formats);
  ExpectQuantizedExceptHead(formats, backend::WeightFormat::kFp8);
  EXPECT_LE(RelativeMaxError(got, LastLogits((dir_ / "ref").string())), 1e-1);
}

TEST_F(Fp8CheckpointTest, FbgemmPerTensorMatchesAndAnEngineBuiltFromItToo) {
  WriteFp8(ScaleLayout::kPerTensor, json::parse(R"({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0})"));
  const std::vector<float> want = LastLogits((dir_ / "ref").string());
  ExpectSameLogits(LastLogits((dir_ / "fp8").string()), want);
  engine::BuildOptions bo;
  bo.precision = Precision::kFp32;
  bo.tune = false;
  const std::string path = (dir_ / "fp8.ferry").string();
  auto built = engine::BuildEngine((dir_ / "fp8").string(), path, bo);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ExpectSameLogits(LastLogits(path), want);
}

TEST_F(Fp8CheckpointTest, BlockScalesOfTheFp8MethodMatch) {
  WriteFp8(ScaleLayout::kBlocks, json::parse(R"({"quant_method": "fp8", "weight_block_size": [16, 32]})"));
  ExpectSameLogits(LastLogits((dir_ / "fp8").string()), LastLogits((dir_ / "ref").string()));
}

TEST_F(Fp8CheckpointTest, OtherMethodsAndMissingScalesAreRefusedByName) {
  WriteFp8(ScaleLayout::kPerRow, json::parse(R"({"quant_method": "bitsandbytes", "load_in_4bit": true})"));
  auto bnb = engine::Engine::Load((dir_ / "fp8").string());
  ASSERT_FALSE(bnb.ok());
  EXPECT_EQ(bnb.status().code(), StatusCode::kUnimplemented) << bnb.status().ToString();
  EXPECT_NE(bnb.status().message().find("'bitsandbytes'"), std::string::npos) << bnb.status().ToString();
  // An e4m3 weight without its scale.
  WriteFp8(ScaleLayout::kPerRow, json::parse(R"({"quant_method": "fbgemm_fp8"})"));
  std::vector<std::pair<std::string, Tensor>> kept;
  {
    auto ckpt = io::Checkpoint::Open((dir_ / "fp8").string());
    ASSERT_TRUE(ckpt.ok());
    for (const std::string& name : (*ckpt)->Names()) {
      if (name == "model.layers.0.mlp.up_proj.weight_scale") continue;
      kept.emplace_back(name, (*ckpt)->Get(name)->Clone());
    }
  }  // the mapping is closed before the file is rewritten
  ASSERT_TRUE(io::WriteSafetensors((dir_ / "fp8" / "model.safetensors").string(), kept).ok());
  auto missing = engine::Engine::Load((dir_ / "fp8").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("model.layers.0.mlp.up_proj.weight"), std::string::npos)
      << missing.status().ToString();
}

}  // namespace
}  // namespace ferry::tools
