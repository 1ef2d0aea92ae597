// LoadLinear with a source that stores int8 blocks (a GGUF Q8_0 file): the blocks of every part
// of a fused layer become one block-scaled int8-wo weight whose products are the f32 weights'
// bytes; a layer whose parts are not all blocks of one size loads from its floats.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "io/int8_blocks.h"
#include "kernels/cpu/packed_weight.h"
#include "model/weights.h"

namespace ferry {
namespace {

io::Int8Blocks RandomBlocks(int64_t n, int64_t k, int64_t block, std::mt19937& rng) {
  io::Int8Blocks b;
  b.block_size = block;
  b.q = Tensor::Empty({n, k}, DType::kI8);
  b.scales = Tensor::Empty({n, k / block}, DType::kF16);
  std::uniform_int_distribution<int> qd(-128, 127);
  for (int64_t i = 0; i < b.q.numel(); ++i) b.q.data<int8_t>()[i] = static_cast<int8_t>(qd(rng));
  std::uniform_real_distribution<float> sd(0.001f, 0.02f);
  for (int64_t i = 0; i < b.scales.numel(); ++i) static_cast<uint16_t*>(b.scales.raw())[i] = F32ToF16(sd(rng));
  b.stored_bytes = b.q.nbytes() + b.scales.numel() * 2;
  return b;
}

Tensor Dequantized(const io::Int8Blocks& b) {
  Tensor w = Tensor::Empty(b.q.shape(), DType::kF32);
  const int64_t k = b.in(), per_row = k / b.block_size;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float scale = F16ToF32(static_cast<const uint16_t*>(b.scales.raw())[i / k * per_row + i % k / b.block_size]);
    w.data<float>()[i] = static_cast<float>(b.q.data<int8_t>()[i]) * scale;
  }
  return w;
}

// A file of named matrices, some stored as blocks.
struct FakeFile {
  std::map<std::string, io::Int8Blocks> blocks;
  std::map<std::string, Tensor> floats;  // everything, blocks included, as f32

  model::WeightSource Source(bool with_blocks) const {
    model::WeightSource src{[this](const std::string& n) -> Result<Tensor> {
                              auto it = floats.find(n);
                              if (it == floats.end()) return NotFound(n);
                              return it->second;
                            },
                            [this](const std::string& n) { return floats.count(n) > 0; }};
    if (with_blocks) {
      src.int8_blocks = [this](const std::string& n) -> Result<std::optional<io::Int8Blocks>> {
        auto it = blocks.find(n);
        if (it == blocks.end()) return std::optional<io::Int8Blocks>();
        return std::optional<io::Int8Blocks>(it->second);
      };
    }
    return src;
  }
  void AddBlocks(const std::string& name, io::Int8Blocks b) {
    floats[name] = Dequantized(b);
    blocks[name] = std::move(b);
  }
};

Tensor RunLinear(backend::Backend& be, const backend::LinearWeight& w, const Tensor& x) {
  Tensor y = Tensor::Empty({x.dim(0), w.out_features()}, DType::kF32);
  EXPECT_TRUE(be.Linear(x, w, y).ok());
  return y;
}

TEST(Int8BlocksLoadTest, FusedPartsLoadAsOneBlockWeightWithTheFloatsBytes) {
  std::mt19937 rng(51);
  FakeFile file;
  file.AddBlocks("gate", RandomBlocks(48, 128, 32, rng));
  file.AddBlocks("up", RandomBlocks(40, 128, 32, rng));
  auto be = backend::MakeCpuBackend();
  model::LoadOptions native;
  auto blocks = model::LoadLinear(file.Source(true), *be, native, "gate_up", {"gate", "up"}, {}, {48, 40}, 128);
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  EXPECT_EQ(blocks->format, backend::WeightFormat::kInt8);
  const kernels::cpu::PackedWeight* pw = kernels::cpu::AsPackedWeight(blocks->packed);
  ASSERT_NE(pw, nullptr);
  EXPECT_EQ(pw->block_size, 32);
  EXPECT_EQ(pw->n, 88);
  auto floats = model::LoadLinear(file.Source(false), *be, native, "gate_up", {"gate", "up"}, {}, {48, 40}, 128);
  ASSERT_TRUE(floats.ok());
  EXPECT_EQ(kernels::cpu::AsPackedWeight(floats->packed)->dtype, DType::kF32);
  Tensor x = Tensor::Empty({3, 128}, DType::kF32);
  std::uniform_real_distribution<float> xd(-1.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = xd(rng);
  const Tensor a = RunLinear(*be, *blocks, x), b = RunLinear(*be, *floats, x);
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));

  // Asked for another precision, the blocks are not used: the floats are quantized as asked.
  model::LoadOptions int8;
  int8.linear_format = backend::WeightFormat::kInt8;
  auto requantized = model::LoadLinear(file.Source(true), *be, int8, "gate_up", {"gate", "up"}, {}, {48, 40}, 128);
  ASSERT_TRUE(requantized.ok());
  EXPECT_EQ(kernels::cpu::AsPackedWeight(requantized->packed)->block_size, 0);
}

TEST(Int8BlocksLoadTest, PartsThatAreNotAllBlocksOfOneSizeLoadFromFloats) {
  std::mt19937 rng(52);
  FakeFile file;
  file.AddBlocks("a32", RandomBlocks(16, 64, 32, rng));
  file.AddBlocks("b64", RandomBlocks(16, 64, 64, rng));
  file.floats["plain"] = Dequantized(RandomBlocks(16, 64, 32, rng));
  auto be = backend::MakeCpuBackend();
  const model::LoadOptions native;
  for (const std::vector<std::string>& parts :
       {std::vector<std::string>{"a32", "plain"}, std::vector<std::string>{"plain", "a32"},
        std::vector<std::string>{"a32", "b64"}}) {
    auto w = model::LoadLinear(file.Source(true), *be, native, "fused", parts, {}, {16, 16}, 64);
    ASSERT_TRUE(w.ok()) << parts[0] << "+" << parts[1] << ": " << w.status().ToString();
    EXPECT_EQ(w->format, backend::WeightFormat::kNative) << parts[0] << "+" << parts[1];
    EXPECT_EQ(kernels::cpu::AsPackedWeight(w->packed)->block_size, 0);
  }
  // Blocks of another shape than the layer's are an error naming the tensor.
  auto wrong = model::LoadLinear(file.Source(true), *be, native, "a", {"a32"}, {}, {17}, 64);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("'a32'"), std::string::npos) << wrong.status().ToString();
}

}  // namespace
}  // namespace ferry
