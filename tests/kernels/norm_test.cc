#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "kernel_test_util.h"

namespace ferry {
namespace {

using testing::ConvertTo;
using testing::ExpectClose;
using testing::Poisoned;
using testing::RandomTensor;
using testing::Values;

std::vector<double> ReferenceRmsNorm(const std::vector<double>& x, int64_t rows, int64_t cols,
                                     const std::vector<double>& g, double eps) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x[r * cols + c] * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(ss / cols + eps);
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = x[r * cols + c] * inv * g[c];
  }
  return out;
}

std::vector<double> ReferenceLayerNorm(const std::vector<double>& x, int64_t rows, int64_t cols,
                                       const std::vector<double>& g, const std::vector<double>& b, double eps) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    const double inv = 1.0 / std::sqrt(var / cols + eps);
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = (x[r * cols + c] - mean) * inv * g[c] + b[c];
  }
  return out;
}

struct Shape2 {
  int64_t rows, cols;
};
const std::vector<Shape2> kShapes = {{1, 7}, {3, 64}, {17, 2051}, {64, 2048}, {2, 1}};

TEST(NormTest, RmsNormMatchesReference) {
  std::mt19937 rng(21);
  auto be = backend::MakeCpuBackend();
  for (const Shape2& s : kShapes) {
    for (DType gdt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE("rows=" + std::to_string(s.rows) + " cols=" + std::to_string(s.cols));
      const Tensor x = RandomTensor({s.rows, s.cols}, rng, -3, 3);
      const Tensor g = ConvertTo(RandomTensor({s.cols}, rng, 0.5, 1.5), gdt);
      Tensor out = Poisoned({s.rows, s.cols});
      ASSERT_TRUE(be->RmsNorm(x, g, 1e-5f, out).ok());
      const std::vector<double> ref = ReferenceRmsNorm(Values(x), s.rows, s.cols, Values(g), 1e-5);
      ExpectClose(out, ref, 1e-5, "rmsnorm");
      // In place.
      Tensor inplace = x.Clone();
      ASSERT_TRUE(be->RmsNorm(inplace, g, 1e-5f, inplace).ok());
      ExpectClose(inplace, ref, 1e-5, "rmsnorm in place");
    }
  }
}

TEST(NormTest, AddRmsNormUpdatesResidual) {
  std::mt19937 rng(22);
  auto be = backend::MakeCpuBackend();
  for (const Shape2& s : kShapes) {
    SCOPED_TRACE("rows=" + std::to_string(s.rows) + " cols=" + std::to_string(s.cols));
    Tensor residual = RandomTensor({s.rows, s.cols}, rng, -2, 2);
    const Tensor delta = RandomTensor({s.rows, s.cols}, rng, -2, 2);
    const Tensor g = RandomTensor({s.cols}, rng, 0.5, 1.5);
    std::vector<double> sum = Values(residual);
    const std::vector<double> d = Values(delta);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<float>(sum[i] + d[i]);
    Tensor out = Poisoned({s.rows, s.cols});
    ASSERT_TRUE(be->AddRmsNorm(residual, delta, g, 1e-6f, out).ok());
    ExpectClose(residual, sum, 1e-7, "residual");
    ExpectClose(out, ReferenceRmsNorm(sum, s.rows, s.cols, Values(g), 1e-6), 1e-5, "out");
  }
}

TEST(NormTest, LayerNormWithAndWithoutDelta) {
  std::mt19937 rng(23);
  auto be = backend::MakeCpuBackend();
  for (const Shape2& s : kShapes) {
    SCOPED_TRACE("rows=" + std::to_string(s.rows) + " cols=" + std::to_string(s.cols));
    // A large common offset checks the centred variance.
    const Tensor x = RandomTensor({s.rows, s.cols}, rng, 99, 101);
    const Tensor delta = RandomTensor({s.rows, s.cols}, rng, -1, 1);
    const Tensor g = ConvertTo(RandomTensor({s.cols}, rng, 0.5, 1.5), DType::kBF16);
    const Tensor b = RandomTensor({s.cols}, rng, -0.5, 0.5);
    const std::vector<double> xv = Values(x);
    Tensor out = Poisoned({s.rows, s.cols});
    ASSERT_TRUE(be->LayerNorm(x, Tensor(), g, b, 1e-12f, out).ok());
    if (s.cols > 1) ExpectClose(out, ReferenceLayerNorm(xv, s.rows, s.cols, Values(g), Values(b), 1e-12), 2e-5, "ln");

    std::vector<double> sum = xv;
    const std::vector<double> d = Values(delta);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<float>(sum[i] + d[i]);
    out = Poisoned({s.rows, s.cols});
    ASSERT_TRUE(be->LayerNorm(x, delta, g, b, 1e-5f, out).ok());
    ExpectClose(out, ReferenceLayerNorm(sum, s.rows, s.cols, Values(g), Values(b), 1e-5), 2e-5, "ln + delta");
  }
}

// Qwen3's q/k norms on a fused QKV row: each head of the chosen columns normalized on its own,
// the other columns untouched.
TEST(NormTest, HeadRmsNormNormalizesEachHead) {
  std::mt19937 rng(23);
  auto be = backend::MakeCpuBackend();
  const int64_t rows = 5, heads = 4, kv_heads = 2, hd = 32;
  const int64_t cols = (heads + 2 * kv_heads) * hd;
  Tensor qkv = RandomTensor({rows, cols}, rng, -3, 3);
  const Tensor gq = RandomTensor({hd}, rng, 0.5, 1.5);
  const Tensor gk = RandomTensor({hd}, rng, 0.5, 1.5);
  const std::vector<double> before = Values(qkv);
  ASSERT_TRUE(be->HeadRmsNorm(qkv, 0, static_cast<int>(heads), static_cast<int>(hd), gq, 1e-6f).ok());
  ASSERT_TRUE(be->HeadRmsNorm(qkv, heads * hd, static_cast<int>(kv_heads), static_cast<int>(hd), gk, 1e-6f).ok());
  std::vector<double> ref = before;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads + kv_heads; ++h) {
      const std::vector<double> g = Values(h < heads ? gq : gk);
      std::vector<double> head(before.begin() + r * cols + h * hd, before.begin() + r * cols + (h + 1) * hd);
      const std::vector<double> normed = ReferenceRmsNorm(head, 1, hd, g, 1e-6);
      std::copy(normed.begin(), normed.end(), ref.begin() + r * cols + h * hd);
    }
  }
  ExpectClose(qkv, ref, 1e-5, "head rmsnorm");
  EXPECT_FALSE(be->HeadRmsNorm(qkv, cols - hd, 2, static_cast<int>(hd), gq, 1e-6f).ok()) << "past the row";
  EXPECT_FALSE(be->HeadRmsNorm(qkv, 0, 2, static_cast<int>(hd) / 2, gq, 1e-6f).ok()) << "gamma size";
}

TEST(NormTest, RejectsBadShapes) {
  std::mt19937 rng(24);
  auto be = backend::MakeCpuBackend();
  const Tensor x = RandomTensor({4, 16}, rng);
  Tensor out = Tensor::Empty({4, 16}, DType::kF32);
  EXPECT_FALSE(be->RmsNorm(x, RandomTensor({15}, rng), 1e-5f, out).ok());
  Tensor out_bad = Tensor::Empty({4, 15}, DType::kF32);
  EXPECT_FALSE(be->RmsNorm(x, RandomTensor({16}, rng), 1e-5f, out_bad).ok());
  Tensor residual = RandomTensor({4, 16}, rng);
  EXPECT_FALSE(be->AddRmsNorm(residual, RandomTensor({3, 16}, rng), RandomTensor({16}, rng), 1e-5f, out).ok());
  EXPECT_FALSE(be->AddRmsNorm(residual, RandomTensor({4, 16}, rng), RandomTensor({16}, rng), 1e-5f, residual).ok())
      << "out aliasing residual";
  EXPECT_FALSE(be->LayerNorm(x, RandomTensor({4, 8}, rng), RandomTensor({16}, rng), RandomTensor({16}, rng), 1e-5f,
                             out)
                   .ok());
  EXPECT_FALSE(be->LayerNorm(x, Tensor(), RandomTensor({16}, rng), Tensor(), 1e-5f, out).ok()) << "missing beta";
  EXPECT_FALSE(be->RmsNorm(Tensor::Zeros({4, 16}, DType::kI32), RandomTensor({16}, rng), 1e-5f, out).ok());
}

}  // namespace
}  // namespace ferry
