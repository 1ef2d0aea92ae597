// int8 weights with one scale per block of inputs (a GGUF Q8_0 matrix run as it is): the CPU
// kernels give the bytes of the f32 matrix the blocks stand for, on every route and row count;
// packing and engine-file layouts refuse what does not fit; the weight serializes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu_backend.h"
#include "core/dtype.h"
#include "io/int8_blocks.h"
#include "kernel_test_util.h"
#include "layout_edit.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_weight.h"

namespace ferry {
namespace {

using backend::LinearWeight;
using backend::SerializedLinear;
using backend::WeightFormat;
using testing::Poisoned;
using testing::RandomTensor;

// Random blocks: every int8 value (-128 included), scales that f16 holds (as Q8_0's are), of
// both signs and a few zero.
std::shared_ptr<io::Int8Blocks> RandomBlocks(int64_t n, int64_t k, int64_t block, std::mt19937& rng) {
  auto b = std::make_shared<io::Int8Blocks>();
  b->block_size = block;
  b->q = Tensor::Empty({n, k}, DType::kI8);
  b->scales = Tensor::Empty({n, k / block}, DType::kF16);
  std::uniform_int_distribution<int> qd(-128, 127);
  for (int64_t i = 0; i < b->q.numel(); ++i) b->q.data<int8_t>()[i] = static_cast<int8_t>(qd(rng));
  std::uniform_real_distribution<float> sd(-0.02f, 0.02f);
  auto* scales = static_cast<uint16_t*>(b->scales.raw());
  for (int64_t i = 0; i < b->scales.numel(); ++i) scales[i] = F32ToF16(i % 17 == 5 ? 0.0f : sd(rng));
  return b;
}

// The f32 matrix the blocks stand for: q * scale, one f32 product each.
Tensor Dequantized(const io::Int8Blocks& b) {
  const int64_t n = b.out(), k = b.in();
  Tensor w = Tensor::Empty({n, k}, DType::kF32);
  const auto* scales = static_cast<const uint16_t*>(b.scales.raw());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const float scale = F16ToF32(scales[r * (k / b.block_size) + c / b.block_size]);
      w.data<float>()[r * k + c] = static_cast<float>(b.q.data<int8_t>()[r * k + c]) * scale;
    }
  }
  return w;
}

struct BlockCase {
  int64_t n, k, block;
};

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Every row count through the GEMV (1-8 rows, and up to 40 when the GEMV is asked to take them,
// in K chunks of 256 that a block of 96 straddles) and the blocked GEMM, on both tiles, with and
// without bias and bf16 activations (which int8 blocks do not take): the f32 matrix's bytes.
TEST(Int8BlocksTest, KernelsGiveTheF32MatrixBytes) {
  std::mt19937 rng(41);
  auto be = backend::MakeCpuBackend();
  const kernels::cpu::GemmKernel saved = kernels::cpu::ActiveGemmKernel();
  for (const BlockCase& c : {BlockCase{33, 64, 32}, BlockCase{70, 2048, 32}, BlockCase{16, 96 * 7, 96},
                             BlockCase{130, 1024, 8}, BlockCase{5, 32, 32}, BlockCase{48, 4096, 128}}) {
    for (const bool with_bias : {false, true}) {
      const auto blocks = RandomBlocks(c.n, c.k, c.block, rng);
      LinearWeight wb;
      wb.format = WeightFormat::kInt8;
      wb.int8_blocks = blocks;
      if (with_bias) wb.bias = RandomTensor({c.n}, rng);
      ASSERT_TRUE(be->PrepareLinear(wb).ok());
      EXPECT_EQ(wb.int8_blocks, nullptr);  // dropped once packed
      LinearWeight wf;
      wf.format = WeightFormat::kF32;
      wf.weight = Dequantized(*blocks);
      wf.bias = wb.bias;
      ASSERT_TRUE(be->PrepareLinear(wf).ok());
      const auto* pb = kernels::cpu::AsPackedWeight(wb.packed);
      const auto* pf = kernels::cpu::AsPackedWeight(wf.packed);
      ASSERT_TRUE(pb != nullptr && pf != nullptr);
      EXPECT_EQ(pb->block_size, c.block);
      EXPECT_FALSE(pb->scales.defined());
      EXPECT_EQ(pb->panels.nbytes(), static_cast<size_t>(pb->num_panels * 16 * c.k));  // a byte a weight
      EXPECT_FALSE(kernels::cpu::Bf16DotTakesWeight(*pb));
      for (const kernels::cpu::GemmKernel kernel :
           {kernels::cpu::GemmKernel::kAvx2, kernels::cpu::GemmKernel::kAvx512}) {
        if (!kernels::cpu::SetActiveGemmKernel(kernel)) continue;
        for (const int64_t m : {1, 2, 3, 5, 8, 9, 17, 40, 64, 300}) {
          for (const int64_t gemv_max : {int64_t{8}, int64_t{64}}) {
            for (const bool bf16 : {false, true}) {
              const std::string what = "n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " block=" +
                                       std::to_string(c.block) + " m=" + std::to_string(m) + " gemv_max=" +
                                       std::to_string(gemv_max) + (bf16 ? " bf16 activations" : "") +
                                       (with_bias ? " bias" : "") + " " +
                                       std::string(kernels::cpu::GemmKernelName(kernel));
              const Tensor x = RandomTensor({m, c.k}, rng, -2.0f, 2.0f);
              kernels::cpu::LinearConfig config;
              config.gemv_max_rows = gemv_max;
              config.bf16_activations = bf16;
              Tensor yb = Poisoned({m, c.n}), yf = Poisoned({m, c.n});
              ASSERT_TRUE(kernels::cpu::Linear(x, *pb, wb.bias, yb, config).ok()) << what;
              ASSERT_TRUE(kernels::cpu::Linear(x, *pf, wf.bias, yf, config).ok()) << what;
              ASSERT_TRUE(SameBits(yb, yf)) << what;
            }
          }
        }
      }
      kernels::cpu::SetActiveGemmKernel(saved);
    }
  }
}

// The backend reports the blocks' layers as f32 arithmetic (no bf16 rounding of the input),
// prepared or not, even with bf16 activations asked for.
TEST(Int8BlocksTest, NeverRoundTheInputToBf16) {
  std::mt19937 rng(42);
  backend::CpuBackendOptions options;
  options.linear.bf16_activations = true;
  auto be = backend::MakeCpuBackend(options);
  EXPECT_TRUE(be->TakesInt8Blocks());
  LinearWeight w;
  w.format = WeightFormat::kInt8;
  w.int8_blocks = RandomBlocks(32, 64, 32, rng);
  EXPECT_FALSE(be->RoundsInputToBf16(w));
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  EXPECT_FALSE(be->RoundsInputToBf16(w));
}

TEST(Int8BlocksTest, PackingRefusesWhatDoesNotFit) {
  std::mt19937 rng(43);
  auto be = backend::MakeCpuBackend();
  const auto good = RandomBlocks(20, 96, 32, rng);
  auto prepared = [&](std::shared_ptr<io::Int8Blocks> b, WeightFormat format = WeightFormat::kInt8) {
    LinearWeight w;
    w.format = format;
    w.int8_blocks = std::move(b);
    return be->PrepareLinear(w);
  };
  EXPECT_TRUE(prepared(good).ok());
  EXPECT_FALSE(prepared(good, WeightFormat::kInt8W8A8).ok());
  EXPECT_FALSE(prepared(good, WeightFormat::kF32).ok());
  auto edited = [&](auto edit) {
    auto b = std::make_shared<io::Int8Blocks>(*good);
    b->scales = good->scales.Clone();
    edit(*b);
    return b;
  };
  const std::vector<std::pair<std::string, std::shared_ptr<io::Int8Blocks>>> bad = {
      {"block of 12", edited([](io::Int8Blocks& b) { b.block_size = 12; })},
      {"block of 0", edited([](io::Int8Blocks& b) { b.block_size = 0; })},
      {"block not dividing k", edited([](io::Int8Blocks& b) { b.block_size = 64; })},
      {"scales of another shape", edited([](io::Int8Blocks& b) { b.scales = Tensor::Zeros({20, 4}, DType::kF16); })},
      {"scales as f32", edited([](io::Int8Blocks& b) { b.scales = Tensor::Zeros({20, 3}, DType::kF32); })},
      {"q as f32", edited([](io::Int8Blocks& b) { b.q = Tensor::Zeros({20, 96}, DType::kF32); })},
      {"q of rank 1", edited([](io::Int8Blocks& b) { b.q = Tensor::Zeros({20 * 96}, DType::kI8); })},
      {"NaN scale", edited([](io::Int8Blocks& b) { static_cast<uint16_t*>(b.scales.raw())[7] = 0x7e00; })},
      {"infinite scale", edited([](io::Int8Blocks& b) { static_cast<uint16_t*>(b.scales.raw())[0] = 0x7c00; })},
  };
  for (const auto& [what, b] : bad) {
    const Status s = prepared(b);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what << ": " << s.ToString();
  }
}

// An engine file keeps the blocks (their block size in the layout, the scales as a blob) and
// gives the same bytes back; layouts and blobs that do not fit are refused.
TEST(Int8BlocksTest, SerializesAndRefusesCorruptLayouts) {
  std::mt19937 rng(44);
  auto be = backend::MakeCpuBackend();
  LinearWeight w;
  w.format = WeightFormat::kInt8;
  w.int8_blocks = RandomBlocks(40, 96, 32, rng);
  w.bias = RandomTensor({40}, rng);
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  auto s = be->SerializeLinear(w);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const nlohmann::json layout = nlohmann::json::parse(s->layout_json);
  EXPECT_EQ(layout["format"], "int8-wo");
  EXPECT_EQ(layout["block_size"], 32);
  EXPECT_EQ(layout["blobs"], nlohmann::json::array({"panels", "block_scales", "bias"}));
  auto back = be->DeserializeLinear(*s);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(kernels::cpu::AsPackedWeight(back->packed)->block_size, 32);
  const Tensor x = RandomTensor({5, 96}, rng);
  Tensor y0 = Poisoned({5, 40}), y1 = Poisoned({5, 40});
  ASSERT_TRUE(be->Linear(x, w, y0).ok());
  ASSERT_TRUE(be->Linear(x, *back, y1).ok());
  EXPECT_TRUE(SameBits(y0, y1));

  auto edited = [&](const std::string& key, const nlohmann::json& value) {
    return testing::EditedLayout(layout, key, value, s->blobs);
  };
  const std::vector<std::pair<std::string, SerializedLinear>> bad = {
      {"block_size 12", edited("block_size", 12)},
      {"block_size 64 (does not divide k)", edited("block_size", 64)},
      {"block_size 0", edited("block_size", 0)},
      {"block_size as string", edited("block_size", "32")},
      {"no block_size", edited("block_size", nullptr)},
      {"block scales on an f32 layout", edited("format", "fp32")},
      {"block scales named scales", edited("blobs", nlohmann::json::array({"panels", "scales", "bias"}))},
      {"no block scales", edited("blobs", nlohmann::json::array({"panels", "bias"}))},
      {"both kinds of scales", edited("blobs", nlohmann::json::array({"panels", "scales", "block_scales", "bias"}))},
  };
  for (const auto& [what, b] : bad) EXPECT_FALSE(be->DeserializeLinear(b).ok()) << what;

  std::vector<Tensor> blobs = s->blobs;
  blobs[1] = blobs[1].Clone();
  static_cast<uint16_t*>(blobs[1].raw())[9] = 0xfe00;  // a NaN
  auto r = be->DeserializeLinear(SerializedLinear{s->layout_json, blobs});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  blobs = s->blobs;
  blobs[1] = blobs[1].Slice(0, blobs[1].dim(0) - 1);
  r = be->DeserializeLinear(SerializedLinear{s->layout_json, blobs});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ferry
