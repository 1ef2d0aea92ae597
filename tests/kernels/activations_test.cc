#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernel_test_util.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/gemm.h"

namespace ferry {
namespace {

using testing::ExpectClose;
using testing::Poisoned;
using testing::RandomTensor;
using testing::Values;

// |got - ref| <= abs_tol + rel_tol * |ref| element-wise (activations span many magnitudes).
void ExpectElementwise(const Tensor& got, const std::vector<double>& ref, double abs_tol, double rel_tol,
                       const char* what) {
  const std::vector<double> g = Values(got);
  ASSERT_EQ(g.size(), ref.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], ref[i], abs_tol + rel_tol * std::abs(ref[i])) << what << " element " << i;
  }
}

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 5}, {3, 64}, {17, 1000}, {64, 257}};

TEST(ActivationsTest, SiluMul) {
  std::mt19937 rng(41);
  auto be = backend::MakeCpuBackend();
  for (auto [rows, inter] : kShapes) {
    const Tensor gu = RandomTensor({rows, 2 * inter}, rng, -12, 12);
    const std::vector<double> v = Values(gu);
    std::vector<double> ref(static_cast<size_t>(rows * inter));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const double g = v[r * 2 * inter + i], u = v[r * 2 * inter + inter + i];
        ref[r * inter + i] = g / (1.0 + std::exp(-g)) * u;
      }
    }
    Tensor out = Poisoned({rows, inter});
    ASSERT_TRUE(be->SiluMul(gu, out).ok());
    ExpectElementwise(out, ref, 1e-6, 1e-6, "silu_mul");
  }
  Tensor bad = Tensor::Empty({3, 4}, DType::kF32);
  EXPECT_FALSE(be->SiluMul(RandomTensor({3, 9}, rng), bad).ok()) << "odd width";
  EXPECT_FALSE(be->SiluMul(RandomTensor({3, 10}, rng), bad).ok()) << "wrong out width";
}

TEST(ActivationsTest, GeluExactErf) {
  std::mt19937 rng(42);
  auto be = backend::MakeCpuBackend();
  for (auto [rows, cols] : kShapes) {
    Tensor x = RandomTensor({rows, cols}, rng, -9, 9);
    x.data<float>()[0] = 0.0f;
    std::vector<double> ref = Values(x);
    for (double& v : ref) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    ASSERT_TRUE(be->Gelu(x).ok());
    ExpectElementwise(x, ref, 1e-7, 2e-6, "gelu");
  }
}

TEST(ActivationsTest, Tanh) {
  std::mt19937 rng(43);
  auto be = backend::MakeCpuBackend();
  for (auto [rows, cols] : kShapes) {
    Tensor x = RandomTensor({rows, cols}, rng, -6, 6);
    // Small magnitudes exercise the series branch.
    for (int64_t i = 0; i < x.numel(); i += 3) x.data<float>()[i] *= 0.03f;
    std::vector<double> ref = Values(x);
    for (double& v : ref) v = std::tanh(v);
    ASSERT_TRUE(be->Tanh(x).ok());
    ExpectElementwise(x, ref, 1e-7, 1e-6, "tanh");
  }
}

TEST(ActivationsTest, Add) {
  std::mt19937 rng(44);
  auto be = backend::MakeCpuBackend();
  for (auto [rows, cols] : kShapes) {
    Tensor x = RandomTensor({rows, cols}, rng);
    const Tensor y = RandomTensor({rows, cols}, rng);
    std::vector<double> ref = Values(x);
    const std::vector<double> yv = Values(y);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = static_cast<float>(ref[i] + yv[i]);
    ASSERT_TRUE(be->Add(x, y).ok());
    ExpectClose(x, ref, 0.0, "add");
  }
  Tensor x = RandomTensor({2, 3}, rng);
  EXPECT_FALSE(be->Add(x, RandomTensor({3, 2}, rng)).ok());
}

TEST(ActivationsTest, GeluTanhMul) {
  std::mt19937 rng(45);
  auto be = backend::MakeCpuBackend();
  for (auto [rows, inter] : kShapes) {
    const Tensor gu = RandomTensor({rows, 2 * inter}, rng, -9, 9);
    const std::vector<double> v = Values(gu);
    std::vector<double> ref(static_cast<size_t>(rows * inter));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const double g = v[r * 2 * inter + i], u = v[r * 2 * inter + inter + i];
        const double gelu = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
        ref[r * inter + i] = gelu * u;
      }
    }
    Tensor out = Poisoned({rows, inter});
    ASSERT_TRUE(be->GeluTanhMul(gu, out).ok());
    ExpectElementwise(out, ref, 1e-6, 2e-6, "gelu_tanh_mul");
  }
  Tensor bad = Tensor::Empty({3, 4}, DType::kF32);
  EXPECT_FALSE(be->GeluTanhMul(RandomTensor({3, 9}, rng), bad).ok()) << "odd width";
}

TEST(ActivationsTest, GeluMul) {
  std::mt19937 rng(47);
  auto be = backend::MakeCpuBackend();
  for (auto [rows, inter] : kShapes) {
    const Tensor gu = RandomTensor({rows, 2 * inter}, rng, -9, 9);
    const std::vector<double> v = Values(gu);
    std::vector<double> ref(static_cast<size_t>(rows * inter));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const double g = v[r * 2 * inter + i], u = v[r * 2 * inter + inter + i];
        ref[r * inter + i] = 0.5 * g * std::erfc(-g / std::sqrt(2.0)) * u;
      }
    }
    Tensor out = Poisoned({rows, inter});
    ASSERT_TRUE(be->GeluMul(gu, out).ok());
    ExpectElementwise(out, ref, 1e-6, 2e-6, "gelu_mul");
  }
  Tensor bad = Tensor::Empty({3, 4}, DType::kF32);
  EXPECT_FALSE(be->GeluMul(RandomTensor({3, 9}, rng), bad).ok()) << "odd width";
}

TEST(ActivationsTest, ScaleAndSoftCap) {
  std::mt19937 rng(46);
  auto be = backend::MakeCpuBackend();
  for (auto [rows, cols] : kShapes) {
    Tensor x = RandomTensor({rows, cols}, rng, -80, 80);
    std::vector<double> ref = Values(x);
    ASSERT_TRUE(be->Scale(x, 0.25f).ok());
    for (double& v : ref) v *= 0.25;
    ExpectElementwise(x, ref, 0.0, 1e-7, "scale");
    ASSERT_TRUE(be->SoftCap(x, 5.0f).ok());
    for (double& v : ref) v = 5.0 * std::tanh(v / 5.0);
    ExpectElementwise(x, ref, 1e-6, 2e-6, "softcap");
    for (double v : Values(x)) ASSERT_LE(std::abs(v), 5.0);
  }
  Tensor x = RandomTensor({2, 3}, rng);
  EXPECT_FALSE(be->SoftCap(x, 0.0f).ok());
}


// The AVX-512 forms of the element-wise passes give the AVX2 forms' bytes lane for lane, over
// the whole range (tails, underflow, overflow, zeros of both signs, denormals, infinities)
// and row widths off the vector widths.
TEST(ActivationsTest, Avx512FormsGiveTheAvx2Bytes) {
  using kernels::cpu::GemmKernel;
  if (!kernels::cpu::GemmKernelSupported(GemmKernel::kAvx512)) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(44);
  auto be = backend::MakeCpuBackend();
  const GemmKernel saved = kernels::cpu::ActiveGemmKernel();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {0.0f,    -0.0f,   1e-40f, -1e-40f, 1e-30f, -1e-30f, 88.5f,  -88.5f, 100.0f,
                                       -100.0f, -20.0f,  20.0f,  0.25f,   -0.25f, 0.2499f, 5.0f,  -5.0f,  inf,
                                       -inf,    3.4e38f, -3.4e38f};
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 5}, {3, 64}, {17, 1000}, {5, 2 * 257}}) {
    Tensor x = RandomTensor({rows, cols}, rng, -30, 30);
    for (size_t i = 0; i < specials.size() && i < static_cast<size_t>(x.numel()); ++i) x.data<float>()[i] = specials[i];
    using Pass = std::function<Status(const Tensor&, Tensor&)>;
    const std::vector<std::pair<const char*, Pass>> passes = {
        {"gelu", [&](const Tensor& in, Tensor& out) { out = in.Clone(); return be->Gelu(out); }},
        {"tanh", [&](const Tensor& in, Tensor& out) { out = in.Clone(); return be->Tanh(out); }},
        {"softcap", [&](const Tensor& in, Tensor& out) { out = in.Clone(); return be->SoftCap(out, 30.0f); }},
        {"scale", [&](const Tensor& in, Tensor& out) { out = in.Clone(); return be->Scale(out, 0.37f); }},
        {"silu_mul", [&](const Tensor& in, Tensor& out) { out = Poisoned({rows, cols / 2}); return be->SiluMul(in, out); }},
        {"gelu_mul", [&](const Tensor& in, Tensor& out) { out = Poisoned({rows, cols / 2}); return be->GeluMul(in, out); }},
        {"gelu_tanh_mul",
         [&](const Tensor& in, Tensor& out) { out = Poisoned({rows, cols / 2}); return be->GeluTanhMul(in, out); }},
    };
    for (const auto& [name, pass] : passes) {
      if (std::string(name).find("mul") != std::string::npos && cols % 2 != 0) continue;
      Tensor narrow, wide;
      ASSERT_TRUE(kernels::cpu::SetActiveGemmKernel(GemmKernel::kAvx2));
      ASSERT_TRUE(pass(x, narrow).ok()) << name;
      ASSERT_TRUE(kernels::cpu::SetActiveGemmKernel(GemmKernel::kAvx512));
      ASSERT_TRUE(pass(x, wide).ok()) << name;
      EXPECT_EQ(0, std::memcmp(narrow.raw(), wide.raw(), narrow.nbytes())) << name << " " << rows << "x" << cols;
    }
  }
  kernels::cpu::SetActiveGemmKernel(saved);
}

}  // namespace
}  // namespace ferry
