// PrepareLinear's weight formats (fp32/bf16/fp16 conversion, int8 weight-only, int8 W8A8
// with SmoothQuant factors) against scalar references, on both the decode GEMV and the
// prefill GEMM paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu_backend.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/int8_gemm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/packed_weight.h"
#include "linear_reference.h"

namespace ferry {
namespace {

using backend::LinearWeight;
using backend::WeightFormat;
using testing::ConvertTo;
using testing::ExpectClose;
using testing::Poisoned;
using testing::RandomTensor;

struct Case {
  int64_t m, n, k;
};

// A random [n, k] weight of `format` (and a random bias), prepared by `be`, with the case's
// name for failure messages ("bf16 m=64 n=48 k=2048 bias").
struct PreparedCase {
  LinearWeight w;
  std::string what;
  bool ok = false;
};
PreparedCase PrepareCase(backend::Backend& be, WeightFormat format, const Case& c, bool with_bias,
                         std::mt19937& rng) {
  PreparedCase p;
  p.what = std::string(backend::WeightFormatName(format)) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
           " k=" + std::to_string(c.k) + (with_bias ? " bias" : "");
  p.w.weight = RandomTensor({c.n, c.k}, rng);
  p.w.format = format;
  if (with_bias) p.w.bias = RandomTensor({c.n}, rng);
  p.ok = be.PrepareLinear(p.w).ok();
  return p;
}

// Odd K (not a multiple of 2, 16 or 32), N off the 16-column panels, M across the GEMV /
// GEMM boundary and the 6-row tiles.
const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {1, 33, 45},  {3, 16, 64},  {7, 70, 257},  {17, 40, 100}, {64, 5, 7},     {300, 50, 300},
      {1, 1, 1},    {1, 24, 2049}, {16, 18, 515}, {7, 130, 33},  {64, 100, 1031}, {300, 17, 64}};
  return cases;
}

// The weight as the kernels should see it for a float format.
Tensor ConvertedWeight(const Tensor& w, WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32: return w.ToF32();
    case WeightFormat::kBF16: return ConvertTo(w.ToF32(), DType::kBF16);
    case WeightFormat::kF16: return ConvertTo(w.ToF32(), DType::kF16);
    default: return w;
  }
}

Tensor RandomSmooth(int64_t k, std::mt19937& rng) {
  // Spread over a factor of 4.
  Tensor s = Tensor::Empty({k}, DType::kF32);
  std::uniform_real_distribution<float> e(-1.0f, 1.0f);
  for (int64_t i = 0; i < k; ++i) s.data<float>()[i] = std::exp2(e(rng));
  return s;
}

// Runs y = Linear(x) through the backend and through each kernel path by force.
void CheckAllPaths(backend::Backend& be, const Tensor& x, const LinearWeight& w, const std::vector<double>& ref,
                   double tol, const std::string& what) {
  const int64_t m = x.dim(0), n = w.out;
  Tensor y = Poisoned({m, n});
  ASSERT_TRUE(be.Linear(x, w, y).ok()) << what;
  ExpectClose(y, ref, tol, what + " (backend)");
  const kernels::cpu::PackedWeight* pw = kernels::cpu::AsPackedWeight(w.packed);
  ASSERT_NE(pw, nullptr);
  // W8A8: each integer kernel this CPU runs (AVX2, VNNI).
  std::vector<kernels::cpu::Int8Kernel> int8_kernels = {kernels::cpu::ActiveInt8Kernel()};
  if (w.format == WeightFormat::kInt8W8A8) {
    int8_kernels.clear();
    for (auto kernel : {kernels::cpu::Int8Kernel::kAvx2, kernels::cpu::Int8Kernel::kVnni}) {
      if (kernels::cpu::Int8KernelSupported(kernel)) int8_kernels.push_back(kernel);
    }
  }
  // Float weights: each GEMM register tile and GEMV this CPU runs (AVX2, AVX-512).
  std::vector<kernels::cpu::GemmKernel> gemm_kernels = {kernels::cpu::ActiveGemmKernel()};
  if (w.format != WeightFormat::kInt8W8A8) {
    gemm_kernels.clear();
    for (auto kernel : {kernels::cpu::GemmKernel::kAvx2, kernels::cpu::GemmKernel::kAvx512}) {
      if (kernels::cpu::GemmKernelSupported(kernel)) gemm_kernels.push_back(kernel);
    }
  }
  const kernels::cpu::Int8Kernel saved = kernels::cpu::ActiveInt8Kernel();
  const kernels::cpu::GemmKernel saved_gemm = kernels::cpu::ActiveGemmKernel();
  for (kernels::cpu::GemmKernel gemm_kernel : gemm_kernels) {
    ASSERT_TRUE(kernels::cpu::SetActiveGemmKernel(gemm_kernel));
    for (kernels::cpu::Int8Kernel kernel : int8_kernels) {
      ASSERT_TRUE(kernels::cpu::SetActiveInt8Kernel(kernel));
      const std::string how = what + " " + std::string(kernels::cpu::GemmKernelName(gemm_kernel)) + "/" +
                              std::string(kernels::cpu::Int8KernelName(kernel));
      for (int64_t gemv_max_rows : {int64_t{0}, int64_t{1} << 30}) {
        kernels::cpu::LinearConfig config;
        config.gemv_max_rows = gemv_max_rows;
        y = Poisoned({m, n});
        ASSERT_TRUE(kernels::cpu::Linear(x, *pw, w.bias, y, config).ok()) << how;
        ExpectClose(y, ref, tol, how + (gemv_max_rows == 0 ? " (forced gemm)" : " (forced gemv)"));
      }
    }
  }
  kernels::cpu::SetActiveInt8Kernel(saved);
  kernels::cpu::SetActiveGemmKernel(saved_gemm);
}

// (format, checkpoint dtype, bias, smooth factors)
class WeightFormatTest : public ::testing::TestWithParam<std::tuple<WeightFormat, DType, bool, bool>> {};

TEST_P(WeightFormatTest, MatchesReference) {
  const auto [format, src_dtype, with_bias, with_smooth] = GetParam();
  std::mt19937 rng(4321);
  auto be = backend::MakeCpuBackend();
  for (const Case& c : Cases()) {
    const std::string what = std::string(backend::WeightFormatName(format)) + " m=" + std::to_string(c.m) +
                             " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
    SCOPED_TRACE(what);
    const Tensor x = RandomTensor({c.m, c.k}, rng);
    LinearWeight w;
    w.weight = ConvertTo(RandomTensor({c.n, c.k}, rng), src_dtype);
    w.format = format;
    if (with_bias) w.bias = RandomTensor({c.n}, rng);
    if (with_smooth) w.smooth = RandomSmooth(c.k, rng);
    ASSERT_TRUE(be->PrepareLinear(w).ok());
    EXPECT_EQ(w.out, c.n);
    EXPECT_EQ(w.in, c.k);
    const Tensor source = w.weight;
    // The kernels must work from the pack alone.
    w.weight = Tensor();

    switch (format) {
      case WeightFormat::kInt8: {
        const testing::QuantizedMatrix q = testing::QuantizeWeightRef(source, Tensor());
        CheckAllPaths(*be, x, w, testing::ReferenceInt8WeightOnly(x, q, w.bias), 1e-5, what);
        break;
      }
      case WeightFormat::kInt8W8A8: {
        const testing::QuantizedMatrix qw = testing::QuantizeWeightRef(source, w.smooth);
        const testing::QuantizedMatrix qx = testing::QuantizeActivationsRef(x, w.smooth);
        CheckAllPaths(*be, x, w, testing::ReferenceW8A8(qx, qw, w.bias), 1e-5, what + " exact");
        if (c.k >= 64) {
          // Smoothing or not, the quantized product stays close to the f32 one.
          Tensor y = Poisoned({c.m, c.n});
          ASSERT_TRUE(be->Linear(x, w, y).ok());
          ExpectClose(y, testing::ReferenceLinear(x, source, w.bias), 2e-2, what + " vs f32");
        }
        break;
      }
      default:
        CheckAllPaths(*be, x, w, testing::ReferenceLinear(x, ConvertedWeight(source, format), w.bias), 1e-5, what);
        break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    FloatFormats, WeightFormatTest,
    ::testing::Combine(::testing::Values(WeightFormat::kNative, WeightFormat::kF32, WeightFormat::kBF16,
                                         WeightFormat::kF16),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF16), ::testing::Bool(),
                       ::testing::Values(false)));
INSTANTIATE_TEST_SUITE_P(Int8WeightOnly, WeightFormatTest,
                         ::testing::Combine(::testing::Values(WeightFormat::kInt8),
                                            ::testing::Values(DType::kF32, DType::kBF16), ::testing::Bool(),
                                            ::testing::Values(false)));
INSTANTIATE_TEST_SUITE_P(Int8W8A8, WeightFormatTest,
                         ::testing::Combine(::testing::Values(WeightFormat::kInt8W8A8),
                                            ::testing::Values(DType::kF32, DType::kBF16), ::testing::Bool(),
                                            ::testing::Bool()));

// The int8 element at (row, col) of a packed weight, read through its documented layout.
int8_t PackedInt8(const kernels::cpu::PackedWeight& pw, int64_t row, int64_t col) {
  const auto* panel = static_cast<const int8_t*>(pw.panel(row / kernels::cpu::kPanelCols));
  const int64_t c = row % kernels::cpu::kPanelCols;
  if (pw.layout == kernels::cpu::PanelLayout::kRows) return panel[col * kernels::cpu::kPanelCols + c];
  return panel[(col / 4) * 4 * kernels::cpu::kPanelCols + c * 4 + col % 4];
}

TEST(WeightFormatTest, Int8RoundsHalfToEvenPerOutputChannel) {
  auto be = backend::MakeCpuBackend();
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt8W8A8}) {
    SCOPED_TRACE(backend::WeightFormatName(format));
    // Row 0: amax 254 -> scale 2 exactly, so the quotients are exact: 63.5 -> 64, 0.5 -> 0,
    // 1.5 -> 2, -31.7 -> -32. Row 1 is all zero. Row 2: amax 1 -> scale 1/127.
    const std::vector<float> values = {127, -254, -63.4f, 0, 1, 3, 0, 0, 0, 0, 0, 0, 0.5f, -1, 0, 0, 0, 0};
    LinearWeight w;
    w.weight = Tensor::FromVector(values, {3, 6});
    w.format = format;
    ASSERT_TRUE(be->PrepareLinear(w).ok());
    const kernels::cpu::PackedWeight* pw = kernels::cpu::AsPackedWeight(w.packed);
    ASSERT_NE(pw, nullptr);
    EXPECT_EQ(pw->dtype, DType::kI8);
    const float* scales = pw->scale_data();
    EXPECT_EQ(scales[0], 2.0f);
    EXPECT_EQ(scales[1], 0.0f);
    EXPECT_EQ(scales[2], 1.0f / 127.0f);
    for (int i = 3; i < kernels::cpu::kPanelCols; ++i) EXPECT_EQ(scales[i], 0.0f) << "padding column " << i;
    const std::vector<int> want0 = {64, -127, -32, 0, 0, 2};
    for (int col = 0; col < 6; ++col) {
      EXPECT_EQ(PackedInt8(*pw, 0, col), want0[col]) << "col " << col;
      EXPECT_EQ(PackedInt8(*pw, 1, col), 0) << "col " << col;
    }
    EXPECT_EQ(PackedInt8(*pw, 2, 0), static_cast<int8_t>(std::nearbyint(0.5f / (1.0f / 127.0f))));
    EXPECT_EQ(PackedInt8(*pw, 2, 1), -127);

    // A zero weight row or a zero activation row yields exactly the bias.
    w.bias = Tensor::FromVector({0.25f, -0.5f, 1.5f}, {3});
    Tensor x = Tensor::FromVector({0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6}, {2, 6});
    Tensor y = Poisoned({2, 3});
    ASSERT_TRUE(be->Linear(x, w, y).ok());
    const float* yp = y.data<float>();
    EXPECT_EQ(yp[0], 0.25f);
    EXPECT_EQ(yp[1], -0.5f);
    EXPECT_EQ(yp[2], 1.5f);
    EXPECT_EQ(yp[4], -0.5f);
  }
}

TEST(WeightFormatTest, W8A8DoesNotSaturate) {
  // Every product at +-127 * 127 with matching signs: the largest sums the int32 path can
  // see. An 8-bit multiply-add that saturates at int16 (vpmaddubsw on u8 = q + 128) fails
  // this; the exact reference does not.
  std::mt19937 rng(5);
  auto be = backend::MakeCpuBackend();
  const int64_t m = 9, n = 20, k = 4097;
  Tensor x = Tensor::Empty({m, k}, DType::kF32);
  LinearWeight w;
  w.weight = Tensor::Empty({n, k}, DType::kF32);
  w.format = WeightFormat::kInt8W8A8;
  std::bernoulli_distribution coin(0.5);
  std::vector<float> signs(static_cast<size_t>(k));
  for (auto& s : signs) s = coin(rng) ? 1.0f : -1.0f;
  for (int64_t i = 0; i < m * k; ++i) x.data<float>()[i] = signs[i % k] * (i / k + 1);
  for (int64_t i = 0; i < n * k; ++i) w.weight.data<float>()[i] = signs[i % k] * (i / k % 2 ? 1.0f : -3.0f);
  ASSERT_TRUE(be->PrepareLinear(w).ok());
  const auto ref = testing::ReferenceW8A8(testing::QuantizeActivationsRef(x, Tensor()),
                                          testing::QuantizeWeightRef(w.weight, Tensor()), Tensor());
  CheckAllPaths(*be, x, w, ref, 1e-6, "saturation");
}

TEST(WeightFormatTest, SmoothingTamesActivationOutliers) {
  // A few activation channels 50x larger than the rest dominate the per-token scale; the
  // SmoothQuant factors (alpha 0.5) move that range into the weights and cut the error.
  std::mt19937 rng(6);
  auto be = backend::MakeCpuBackend();
  const int64_t m = 32, n = 64, k = 512;
  Tensor x = RandomTensor({m, k}, rng);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < 4; ++c) x.data<float>()[i * k + c * 97] *= 50.0f;
  }
  const Tensor weight = RandomTensor({n, k}, rng);
  Tensor smooth = Tensor::Empty({k}, DType::kF32);
  for (int64_t c = 0; c < k; ++c) {
    float ax = 0.0f, aw = 0.0f;
    for (int64_t i = 0; i < m; ++i) ax = std::max(ax, std::fabs(x.data<float>()[i * k + c]));
    for (int64_t j = 0; j < n; ++j) aw = std::max(aw, std::fabs(weight.data<float>()[j * k + c]));
    smooth.data<float>()[c] = std::sqrt(ax / aw);
  }
  const std::vector<double> ref = testing::ReferenceLinear(x, weight, Tensor());
  auto max_error = [&](const Tensor& s) {
    LinearWeight w;
    w.weight = weight;
    w.format = WeightFormat::kInt8W8A8;
    w.smooth = s;
    EXPECT_TRUE(be->PrepareLinear(w).ok());
    Tensor y = Poisoned({m, n});
    EXPECT_TRUE(be->Linear(x, w, y).ok());
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(y.data<float>()[i] - ref[i]));
    return worst;
  };
  const double plain = max_error(Tensor()), smoothed = max_error(smooth);
  EXPECT_LT(smoothed, 0.5 * plain) << "plain " << plain << " smoothed " << smoothed;
}

TEST(WeightFormatTest, Int8ResultsDoNotDependOnThreadCount) {
  std::mt19937 rng(13);
  auto be = backend::MakeCpuBackend();
  const int saved = ComputeThreads();
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt8W8A8}) {
    LinearWeight w;
    w.weight = RandomTensor({300, 200}, rng);
    w.format = format;
    w.smooth = RandomSmooth(200, rng);
    ASSERT_TRUE(be->PrepareLinear(w).ok());
    for (int64_t m : {1, 5, 40}) {
      const Tensor x = RandomTensor({m, 200}, rng);
      Tensor y1 = Poisoned({m, 300}), y2 = Poisoned({m, 300});
      SetComputeThreads(1);
      ASSERT_TRUE(be->Linear(x, w, y1).ok());
      SetComputeThreads(2);
      ASSERT_TRUE(be->Linear(x, w, y2).ok());
      EXPECT_EQ(0, std::memcmp(y1.raw(), y2.raw(), y1.nbytes())) << WeightFormatName(format) << " m=" << m;
    }
  }
  SetComputeThreads(saved);
}

// The AVX2 and VNNI kernels compute the same exact int32 sums, so the same bytes, on both
// paths and across K ranges (the prefill GEMM splits K; decode streams it whole).
TEST(WeightFormatTest, Int8KernelsAgreeBitForBit) {
  if (!kernels::cpu::Int8KernelSupported(kernels::cpu::Int8Kernel::kVnni)) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(15);
  auto be = backend::MakeCpuBackend();
  const kernels::cpu::Int8Kernel saved = kernels::cpu::ActiveInt8Kernel();
  for (const Case& c : {Case{1, 40, 4100}, Case{4, 48, 2048}, Case{5, 33, 1001}, Case{300, 50, 1000},
                        Case{64, 130, 8193}}) {
    LinearWeight w;
    w.weight = RandomTensor({c.n, c.k}, rng);
    w.format = WeightFormat::kInt8W8A8;
    w.bias = RandomTensor({c.n}, rng);
    ASSERT_TRUE(be->PrepareLinear(w).ok());
    const Tensor x = RandomTensor({c.m, c.k}, rng);
    Tensor y_avx2 = Poisoned({c.m, c.n}), y_vnni = Poisoned({c.m, c.n});
    ASSERT_TRUE(kernels::cpu::SetActiveInt8Kernel(kernels::cpu::Int8Kernel::kAvx2));
    ASSERT_TRUE(be->Linear(x, w, y_avx2).ok());
    ASSERT_TRUE(kernels::cpu::SetActiveInt8Kernel(kernels::cpu::Int8Kernel::kVnni));
    ASSERT_TRUE(be->Linear(x, w, y_vnni).ok());
    EXPECT_EQ(0, std::memcmp(y_avx2.raw(), y_vnni.raw(), y_avx2.nbytes()))
        << "m=" << c.m << " n=" << c.n << " k=" << c.k;
  }
  kernels::cpu::SetActiveInt8Kernel(saved);
}

// W8A8 prefill through oneDNN's s8 matmul (CPUs where it runs on AMX) gives the kernels' bytes:
// the same quantized rows, exact int32 sums and the same epilogue; with SmoothQuant factors, a
// bias, a partial last panel, odd K, and rows or weights below the thresholds (the kernels run
// those either way).
TEST(WeightFormatTest, Int8OnednnRouteGivesTheKernelsBytes) {
  if (!kernels::cpu::Int8OnednnSupported()) GTEST_SKIP() << "oneDNN's s8 matmul does not run on AMX here";
  std::mt19937 rng(16);
  auto be = backend::MakeCpuBackend();
  const bool saved = kernels::cpu::Int8OnednnEnabled();
  const bool saved_amx = kernels::cpu::AmxEnabled();
  kernels::cpu::SetAmxEnabled(false);  // ferry's own AMX route comes first
  for (const Case& c : {Case{64, 2048, 2048}, Case{129, 1030, 4099}, Case{300, 4096, 1024}, Case{63, 2048, 2048},
                        Case{300, 50, 1000}}) {
    for (const bool smoothed : {false, true}) {
      LinearWeight w;
      w.weight = RandomTensor({c.n, c.k}, rng);
      w.format = WeightFormat::kInt8W8A8;
      w.bias = RandomTensor({c.n}, rng);
      if (smoothed) {
        std::vector<float> f(static_cast<size_t>(c.k));
        std::uniform_real_distribution<float> dist(0.25f, 4.0f);
        for (float& v : f) v = dist(rng);
        w.smooth = Tensor::FromVector(f, {c.k});
      }
      ASSERT_TRUE(be->PrepareLinear(w).ok());
      const Tensor x = RandomTensor({c.m, c.k}, rng);
      Tensor y_kernels = Poisoned({c.m, c.n}), y_onednn = Poisoned({c.m, c.n});
      ASSERT_TRUE(kernels::cpu::SetInt8OnednnEnabled(false));
      ASSERT_TRUE(be->Linear(x, w, y_kernels).ok());
      ASSERT_TRUE(kernels::cpu::SetInt8OnednnEnabled(true));
      ASSERT_TRUE(be->Linear(x, w, y_onednn).ok());
      EXPECT_EQ(0, std::memcmp(y_kernels.raw(), y_onednn.raw(), y_kernels.nbytes()))
          << "m=" << c.m << " n=" << c.n << " k=" << c.k << " smoothed=" << smoothed;
    }
  }
  kernels::cpu::SetInt8OnednnEnabled(saved);
  kernels::cpu::SetAmxEnabled(saved_amx);
}

// bf16 and int8 weight-only prefill on AMX tiles: the activations go in as three bf16 planes
// that sum to them exactly and the weights are exact in bf16, so the products are the f32
// kernels' and only the order of the f32 sums differs. Partial last panels, an odd panel count
// (a block of one panel), K off the tiles' 32 and over several K chunks, row counts off their
// 32 and over several row groups, with and without a bias; below kAmxMinRows the f32 kernels
// run either way.
TEST(WeightFormatTest, AmxRouteMatchesTheF32Kernels) {
  if (!kernels::cpu::AmxSupported()) GTEST_SKIP() << "no AMX here";
  std::mt19937 rng(17);
  auto be = backend::MakeCpuBackend();
  const bool saved = kernels::cpu::AmxEnabled();
  for (const WeightFormat format : {WeightFormat::kBF16, WeightFormat::kInt8}) {
    // 600 x 2016: an output of over 4 MB, written with non-temporal stores.
    for (const Case& c : {Case{64, 48, 2048}, Case{70, 33, 1001}, Case{300, 50, 1000}, Case{257, 290, 1100},
                          Case{64, 16, 32}, Case{40, 64, 512}, Case{96, 2048, 520}, Case{70, 40, 4200},
                          Case{600, 2016, 100}}) {
      for (const bool with_bias : {false, true}) {
        const auto [w, what, ok] = PrepareCase(*be, format, c, with_bias, rng);
        ASSERT_TRUE(ok) << what;
        const Tensor x = RandomTensor({c.m, c.k}, rng, -2.0f, 2.0f);
        Tensor y_amx = Poisoned({c.m, c.n}), y_f32 = Poisoned({c.m, c.n});
        ASSERT_TRUE(kernels::cpu::SetAmxEnabled(false));
        ASSERT_TRUE(be->Linear(x, w, y_f32).ok()) << what;
        ASSERT_TRUE(kernels::cpu::SetAmxEnabled(true));
        ASSERT_TRUE(be->Linear(x, w, y_amx).ok()) << what;
        if (c.m < kernels::cpu::kAmxMinRows) {
          EXPECT_EQ(0, std::memcmp(y_amx.raw(), y_f32.raw(), y_f32.nbytes())) << what << ": below kAmxMinRows";
          continue;
        }
        ExpectClose(y_amx, testing::Values(y_f32), 2e-6 * std::sqrt(static_cast<double>(c.k)),
                    what + ": against the f32 kernels");
      }
    }
  }
  kernels::cpu::SetAmxEnabled(saved);
}

// bf16 activations on vdpbf16ps (LinearConfig::bf16_activations, bf16 and int8-wo weights): the
// products of x rounded to bf16 (to nearest even) and the bf16 weights or the int8 values, exact
// in f32, so the route matches the f32 kernels run on the rounded x up to the order of the f32
// sums (and, for int8-wo, where the column scale is applied: to the sums here, to each widened
// weight there). Odd K (a last
// pair with a zero), K over several chunks, partial and unpaired last panels, row counts off
// the 12-row tile and over two row blocks (on two threads either way they split), one panel
// (rows split across threads), with and without a bias. Decode row counts, and weights of
// other formats, keep the f32 kernels' bytes.
TEST(WeightFormatTest, Bf16ActivationsRouteMatchesTheF32KernelsOnRoundedX) {
  std::mt19937 rng(19);
  auto be = backend::MakeCpuBackend();
  const bool saved_amx = kernels::cpu::AmxEnabled();
  kernels::cpu::SetAmxEnabled(false);  // AMX, where present, would take bf16 weights first
  for (const Case& c : {Case{64, 48, 2048}, Case{70, 33, 1001}, Case{300, 50, 1000}, Case{257, 290, 1100},
                        Case{13, 16, 32}, Case{40, 64, 511}, Case{96, 2048, 520}, Case{25, 40, 4201},
                        Case{600, 96, 100}, Case{9, 17, 3}, Case{1600, 130, 300}}) {
    for (const bool with_bias : {false, true}) {
      for (const WeightFormat format : {WeightFormat::kBF16, WeightFormat::kInt8, WeightFormat::kF32}) {
        const auto [w, what, ok] = PrepareCase(*be, format, c, with_bias, rng);
        ASSERT_TRUE(ok) << what;
        const kernels::cpu::PackedWeight* pw = kernels::cpu::AsPackedWeight(w.packed);
        ASSERT_NE(pw, nullptr);
        const Tensor x = RandomTensor({c.m, c.k}, rng, -2.0f, 2.0f);
        const Tensor x_rounded = ConvertTo(x, DType::kBF16).ToF32();
        kernels::cpu::LinearConfig f32_config, bf16_config;
        f32_config.gemv_max_rows = bf16_config.gemv_max_rows = 8;
        bf16_config.bf16_activations = true;
        Tensor y_dot = Poisoned({c.m, c.n}), y_f32 = Poisoned({c.m, c.n});
        ASSERT_TRUE(kernels::cpu::Linear(x, *pw, w.bias, y_dot, bf16_config).ok()) << what;
        const bool dot = format != WeightFormat::kF32 && c.m > 8 && kernels::cpu::Bf16DotGemmApplies(*pw);
        ASSERT_TRUE(kernels::cpu::Linear(dot ? x_rounded : x, *pw, w.bias, y_f32, f32_config).ok()) << what;
        if (!dot) {
          EXPECT_EQ(0, std::memcmp(y_dot.raw(), y_f32.raw(), y_f32.nbytes())) << what << ": the f32 kernels' bytes";
          continue;
        }
        ExpectClose(y_dot, testing::Values(y_f32), 2e-6 * std::sqrt(static_cast<double>(c.k)),
                    what + ": against the f32 kernels on the rounded x");
      }
    }
  }
  kernels::cpu::SetAmxEnabled(saved_amx);
}

// Backend::RoundsInputToBf16: only where bf16 activations were asked for, and only for the
// weights the vdpbf16ps GEMM takes, bf16 and int8-wo (the encoders then let attention multiply in
// bf16 too).
TEST(WeightFormatTest, RoundsInputToBf16OnlyForTheDotRoutesWeightsWhenAsked) {
  std::mt19937 rng(20);
  for (const bool asked : {false, true}) {
    backend::CpuBackendOptions options;
    options.linear.bf16_activations = asked;
    auto be = backend::MakeCpuBackend(options);
    for (const WeightFormat format :
         {WeightFormat::kBF16, WeightFormat::kInt8, WeightFormat::kF32, WeightFormat::kInt8W8A8}) {
      const std::string what = std::string(backend::WeightFormatName(format)) + (asked ? " asked" : "");
      const bool rounds = asked && (format == WeightFormat::kBF16 || format == WeightFormat::kInt8);
      LinearWeight w;
      w.weight = RandomTensor({32, 64}, rng);
      w.format = format;
      EXPECT_EQ(be->RoundsInputToBf16(w), rounds) << what << ", not prepared";
      ASSERT_TRUE(be->PrepareLinear(w).ok()) << what;
      EXPECT_EQ(be->RoundsInputToBf16(w), rounds) << what;
    }
  }
}

// W8A8 prefill on ferry's own AMX route (tdpbssd on the quad panels) gives the kernels' bytes:
// exact int32 sums and the same epilogue, whether stored or streamed. Odd K (a last K step
// shorter than the tiles' 64), K over several chunks, partial and unpaired last panels, row
// counts off the tiles' 32 and over several row groups, SmoothQuant factors and bias; below
// kAmxMinRows the kernels run either way.
TEST(WeightFormatTest, Int8AmxRouteGivesTheKernelsBytes) {
  if (!kernels::cpu::AmxSupported()) GTEST_SKIP() << "no AMX here";
  std::mt19937 rng(18);
  auto be = backend::MakeCpuBackend();
  const bool saved_amx = kernels::cpu::AmxEnabled(), saved_onednn = kernels::cpu::Int8OnednnEnabled();
  kernels::cpu::SetInt8OnednnEnabled(false);
  // 600 x 2016: an output of over 4 MB, written with non-temporal stores (a last column block
  // of 16).
  for (const Case& c : {Case{64, 2048, 2048}, Case{129, 1030, 4099}, Case{300, 50, 1000}, Case{70, 33, 8200},
                        Case{257, 16, 64}, Case{63, 48, 512}, Case{96, 768, 3072}, Case{600, 2016, 200}}) {
    for (const bool smoothed : {false, true}) {
      LinearWeight w;
      w.weight = RandomTensor({c.n, c.k}, rng);
      w.format = WeightFormat::kInt8W8A8;
      if (smoothed) {
        w.bias = RandomTensor({c.n}, rng);
        w.smooth = RandomTensor({c.k}, rng, 0.25f, 4.0f);
      }
      ASSERT_TRUE(be->PrepareLinear(w).ok());
      const Tensor x = RandomTensor({c.m, c.k}, rng);
      Tensor y_kernels = Poisoned({c.m, c.n}), y_amx = Poisoned({c.m, c.n});
      ASSERT_TRUE(kernels::cpu::SetAmxEnabled(false));
      ASSERT_TRUE(be->Linear(x, w, y_kernels).ok());
      ASSERT_TRUE(kernels::cpu::SetAmxEnabled(true));
      ASSERT_TRUE(be->Linear(x, w, y_amx).ok());
      EXPECT_EQ(0, std::memcmp(y_kernels.raw(), y_amx.raw(), y_kernels.nbytes()))
          << "m=" << c.m << " n=" << c.n << " k=" << c.k << " smoothed=" << smoothed;
    }
  }
  kernels::cpu::SetAmxEnabled(saved_amx);
  kernels::cpu::SetInt8OnednnEnabled(saved_onednn);
}

TEST(WeightFormatTest, RejectsWhatCannotBeQuantized) {
  std::mt19937 rng(14);
  auto be = backend::MakeCpuBackend();
  LinearWeight w;
  w.weight = RandomTensor({8, 12}, rng);
  w.format = WeightFormat::kInt8W8A8;
  w.smooth = RandomTensor({11}, rng, 0.5f, 1.0f);
  EXPECT_FALSE(be->PrepareLinear(w).ok()) << "smooth of the wrong size";
  w.smooth = RandomTensor({12}, rng, 0.5f, 1.0f);
  w.smooth.data<float>()[3] = -1.0f;
  EXPECT_FALSE(be->PrepareLinear(w).ok()) << "negative smooth factor";
  w.smooth.data<float>()[3] = 0.0f;
  EXPECT_FALSE(be->PrepareLinear(w).ok()) << "zero smooth factor";
  w.smooth = Tensor();
  w.weight.data<float>()[17] = std::nanf("");
  EXPECT_FALSE(be->PrepareLinear(w).ok()) << "NaN weight";
  w.format = WeightFormat::kInt8;
  EXPECT_FALSE(be->PrepareLinear(w).ok()) << "NaN weight, weight-only";
  LinearWeight wide;
  wide.weight = Tensor::Zeros({1, kernels::cpu::kMaxInt8K + 1}, DType::kF32);
  wide.format = WeightFormat::kInt8W8A8;
  EXPECT_FALSE(be->PrepareLinear(wide).ok()) << "K too large for int32 sums";
  wide.format = WeightFormat::kInt8;
  EXPECT_TRUE(be->PrepareLinear(wide).ok()) << "weight-only accumulates in f32";
}

TEST(WeightFormatTest, NamesRoundTrip) {
  for (WeightFormat f : {WeightFormat::kNative, WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16,
                         WeightFormat::kInt8, WeightFormat::kInt8W8A8}) {
    auto parsed = backend::ParseWeightFormat(backend::WeightFormatName(f));
    ASSERT_TRUE(parsed.ok()) << backend::WeightFormatName(f);
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_STREQ(backend::WeightFormatName(WeightFormat::kInt8), "int8-wo");
  EXPECT_STREQ(backend::WeightFormatName(WeightFormat::kInt8W8A8), "int8");
  EXPECT_FALSE(backend::ParseWeightFormat("int4").ok());
}


// BERT's feed-forward with the GELU applied as the first GEMM stores its output gives the
// bytes of Linear, Gelu and Linear one after another: every CPU weight format, decode and
// prefill row counts, the AMX routes on and off, and bf16 activations (bf16 and int8-wo weights'
// GEMMs on vdpbf16ps, GELU in that kernel's stores) asked for or not.
TEST(WeightFormatTest, GeluFeedForwardGivesTheSeparatePassesBytes) {
  std::mt19937 rng(19);
  const bool saved_amx = kernels::cpu::AmxEnabled();
  using Routes = std::pair<bool, bool>;  // AMX, bf16 activations
  for (const auto& [amx, bf16_activations] : {Routes{false, false}, Routes{false, true}, Routes{true, false}}) {
    if (amx && !kernels::cpu::AmxSupported()) continue;
    ASSERT_TRUE(kernels::cpu::SetAmxEnabled(amx));
    backend::CpuBackendOptions options;
    options.linear.bf16_activations = bf16_activations;
    auto be = backend::MakeCpuBackend(options);
    for (const WeightFormat format :
         {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kInt8, WeightFormat::kInt8W8A8}) {
      for (const int64_t m : {3, 70, 300}) {
        const int64_t hidden = 96, inter = 200;
        const std::string what = std::string(backend::WeightFormatName(format)) + " m=" + std::to_string(m) +
                                 (amx ? " amx" : "") + (bf16_activations ? " bf16 activations" : "");
        LinearWeight w_in, w_out;
        w_in.weight = RandomTensor({inter, hidden}, rng);
        w_in.bias = RandomTensor({inter}, rng);
        w_out.weight = RandomTensor({hidden, inter}, rng);
        w_out.bias = RandomTensor({hidden}, rng);
        w_in.format = w_out.format = format;
        if (format == WeightFormat::kInt8W8A8) w_in.smooth = RandomTensor({hidden}, rng, 0.5f, 2.0f);
        ASSERT_TRUE(be->PrepareLinear(w_in).ok()) << what;
        ASSERT_TRUE(be->PrepareLinear(w_out).ok()) << what;
        const Tensor x = RandomTensor({m, hidden}, rng, -3.0f, 3.0f);
        Tensor mid = Poisoned({m, inter}), y = Poisoned({m, hidden});
        Tensor mid_ref = Poisoned({m, inter}), y_ref = Poisoned({m, hidden});
        ASSERT_TRUE(be->GeluFeedForward(x, w_in, mid, w_out, y).ok()) << what;
        ASSERT_TRUE(be->Linear(x, w_in, mid_ref).ok()) << what;
        ASSERT_TRUE(be->Gelu(mid_ref).ok()) << what;
        ASSERT_TRUE(be->Linear(mid_ref, w_out, y_ref).ok()) << what;
        EXPECT_EQ(0, std::memcmp(mid.raw(), mid_ref.raw(), mid.nbytes())) << what << ": GELU(x W_in)";
        EXPECT_EQ(0, std::memcmp(y.raw(), y_ref.raw(), y.nbytes())) << what << ": y";
      }
    }
  }
  kernels::cpu::SetAmxEnabled(saved_amx);
}

}  // namespace
}  // namespace ferry
