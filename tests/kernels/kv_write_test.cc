#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "kernel_test_util.h"

namespace ferry {
namespace {

using backend::KvLayer;
using testing::RandomTensor;
using testing::Values;

TEST(KvWriteTest, ScattersToSlotsInEveryDtype) {
  std::mt19937 rng(61);
  auto be = backend::MakeCpuBackend();
  const int64_t blocks = 6, kv_heads = 3, bt = 4, hd = 10, tokens = 13;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    KvLayer layer;
    layer.block_tokens = static_cast<int>(bt);
    layer.k = Tensor::Zeros({blocks, kv_heads, bt, hd}, dtype);
    layer.v = Tensor::Zeros({blocks, kv_heads, bt, hd}, dtype);
    const Tensor k = RandomTensor({tokens, kv_heads * hd}, rng);
    const Tensor v = RandomTensor({tokens, kv_heads * hd}, rng);
    std::vector<int32_t> all(blocks * bt);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> slots(all.begin(), all.begin() + tokens);
    slots[4] = -1;  // padding row
    ASSERT_TRUE(be->WriteKv(k, v, backend::HostIndices(slots), layer).ok());
    const std::vector<double> kc = Values(layer.k), vc = Values(layer.v);
    const std::vector<double> kr = Values(testing::ConvertTo(k, dtype)), vr = Values(testing::ConvertTo(v, dtype));
    std::vector<bool> written(blocks * bt, false);
    for (int64_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      written[slots[t]] = true;
      const int64_t b = slots[t] / bt, off = slots[t] % bt;
      for (int64_t h = 0; h < kv_heads; ++h) {
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t ci = ((b * kv_heads + h) * bt + off) * hd + d;
          ASSERT_EQ(kc[ci], kr[t * kv_heads * hd + h * hd + d]);
          ASSERT_EQ(vc[ci], vr[t * kv_heads * hd + h * hd + d]);
        }
      }
    }
    // Untouched slots stay zero.
    for (int64_t s = 0; s < blocks * bt; ++s) {
      if (written[s]) continue;
      const int64_t b = s / bt, off = s % bt;
      for (int64_t h = 0; h < kv_heads; ++h) {
        EXPECT_EQ(kc[((b * kv_heads + h) * bt + off) * hd], 0.0);
      }
    }
  }
}

TEST(KvWriteTest, RejectsBadInput) {
  std::mt19937 rng(62);
  auto be = backend::MakeCpuBackend();
  KvLayer layer;
  layer.block_tokens = 4;
  layer.k = Tensor::Zeros({2, 1, 4, 8}, DType::kF32);
  layer.v = Tensor::Zeros({2, 1, 4, 8}, DType::kF32);
  const Tensor k = RandomTensor({2, 8}, rng), v = RandomTensor({2, 8}, rng);
  const std::vector<int32_t> out_of_range = {0, 8};
  EXPECT_FALSE(be->WriteKv(k, v, backend::HostIndices(out_of_range), layer).ok());
  EXPECT_EQ(layer.k.data<float>()[0], 0.0f) << "nothing written on error";
  const std::vector<int32_t> ok = {0, 1};
  const Tensor k_wide = RandomTensor({2, 16}, rng);
  EXPECT_FALSE(be->WriteKv(k_wide, v, backend::HostIndices(ok), layer).ok());
  KvLayer bad = layer;
  bad.block_tokens = 8;
  EXPECT_FALSE(be->WriteKv(k, v, backend::HostIndices(ok), bad).ok());
  bad = layer;
  bad.v = Tensor::Zeros({2, 1, 4, 8}, DType::kBF16);
  EXPECT_FALSE(be->WriteKv(k, v, backend::HostIndices(ok), bad).ok()) << "k/v dtype mismatch";
}

}  // namespace
}  // namespace ferry
