// The routes of an fp8 or W8A8 linear on the GPU: a decode bucket tuned to the small-M kernel
// reads its input unquantized, however the input is formed (as it is, by the norm in front of
// the linear, by the gated MLP's activation).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/linear_weights.h"
#include "backend/cuda_backend.h"
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cuda/gemm.h"

namespace ferry::backend {
namespace {

std::vector<float> RandomValues(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

float Bf16(float v) { return Bf16ToF32(F32ToBf16(v)); }

Tensor HostBf16(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::Empty(shape, DType::kBF16);
  ConvertFromF32(DType::kBF16, v.data(), t.raw(), v.size());
  return t;
}

// A bf16 host matrix on the device: its rows looked up as an embedding table. The backend
// keeps tables by their host address, so every table stays alive in `keep`.
Tensor OnDevice(Backend& be, const Tensor& host, std::vector<Tensor>& keep) {
  keep.push_back(host);
  EXPECT_TRUE(be.PreloadWeight(host).ok());
  std::vector<int32_t> ids(static_cast<size_t>(host.dim(0)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  auto out = be.Allocate(host.shape(), DType::kBF16);
  EXPECT_TRUE(out.ok());
  const Tensor idx = Tensor::FromBorrowed(ids.data(), {host.dim(0)}, DType::kI32, nullptr, Device::Cpu());
  EXPECT_TRUE(be.Embedding(host, idx, *out).ok());
  EXPECT_TRUE(be.Synchronize().ok());
  return *out;
}

// Relative RMS distance of y (device, [m, n]) from x_rows (host, [m, k], the values the
// linear should multiply) times the dequantized weight wd [n, k].
double RelError(Backend& be, const Tensor& y, const std::vector<double>& x_rows, const std::vector<double>& wd,
                int64_t m, int64_t n, int64_t k) {
  auto host = be.ToHost(y);
  EXPECT_TRUE(host.ok());
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double ref = 0.0;
      for (int64_t i = 0; i < k; ++i) ref += x_rows[r * k + i] * wd[c * k + i];
      const double got = host->data<float>()[r * n + c];
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
  }
  return std::sqrt(err2 / ref2);
}

// fp8 (e4m3, per-channel scales) or W8A8 (int8 against x / smooth, per-channel scales).
void CheckUnquantizedRoute(WeightFormat format) {
  CudaBackendOptions o;
  o.activations = DType::kBF16;
  o.kv_cache = DType::kBF16;
  auto made = MakeCudaBackend(o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Backend& be = **made;
  const int64_t n = 384, k = 1024, max_m = 8;
  const float eps = 1e-5f;

  LinearWeight w;
  w.weight = Tensor::Empty({n, k}, DType::kF32);
  const std::vector<float> wf = RandomValues(static_cast<size_t>(n * k), 0.05f, 1);
  std::copy(wf.begin(), wf.end(), w.weight.data<float>());
  w.format = format;
  const bool fp8 = format == WeightFormat::kFp8;
  if (!fp8) {  // SmoothQuant factors from 0.5 to 2
    w.smooth = Tensor::Empty({k}, DType::kF32);
    const std::vector<float> sm = RandomValues(static_cast<size_t>(k), 0.75f, 7);
    for (int64_t i = 0; i < k; ++i) w.smooth.data<float>()[i] = 1.25f + sm[i];
  }
  FERRY_ASSERT_OK(be.PrepareLinear(w));
  FERRY_ASSERT_OK(be.FinishLoading());
  auto* lin = static_cast<CudaLinear*>(w.packed.get());
  ASSERT_NE(lin, nullptr);
  ASSERT_EQ(lin->kind, fp8 ? cuda::GemmKind::kFp8 : cuda::GemmKind::kInt8);
  // The weight as the device holds it (blobs: weight, scales, then smooth), dequantized: e4m3
  // or int8 times the channel's scale, and for W8A8 over the input column's factor.
  auto s = be.SerializeLinear(w);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Tensor& wq = s->blobs.at(0);
  const Tensor& scales = s->blobs.at(1);
  std::vector<double> wd(static_cast<size_t>(n * k));
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t i = 0; i < k; ++i) {
      const size_t at = static_cast<size_t>(c * k + i);
      const double q = fp8 ? static_cast<double>(F8E4M3ToF32(wq.data<uint8_t>()[at])) : wq.data<int8_t>()[at];
      wd[at] = q * scales.data<float>()[c] / (fp8 ? 1.0 : static_cast<double>(s->blobs.at(2).data<float>()[i]));
    }
  }

  // Host inputs: x for the plain form, residual + delta and gamma for the norm, gate | up.
  const std::vector<float> x = RandomValues(static_cast<size_t>(max_m * k), 1.0f, 2);
  const std::vector<float> res = RandomValues(static_cast<size_t>(max_m * k), 1.0f, 3);
  const std::vector<float> delta = RandomValues(static_cast<size_t>(max_m * k), 1.0f, 4);
  const std::vector<float> gate_up = RandomValues(static_cast<size_t>(max_m * 2 * k), 2.0f, 5);
  std::vector<float> gamma = RandomValues(static_cast<size_t>(k), 0.5f, 6);
  for (float& g : gamma) g += 1.0f;
  Tensor gamma_t = Tensor::Empty({k}, DType::kF32);
  std::copy(gamma.begin(), gamma.end(), gamma_t.data<float>());
  const std::vector<float> beta = RandomValues(static_cast<size_t>(k), 0.25f, 8);
  Tensor beta_t = Tensor::Empty({k}, DType::kF32);
  std::copy(beta.begin(), beta.end(), beta_t.data<float>());

  std::vector<Tensor> keep;
  cuda::GemmChoice small;
  small.route = cuda::GemmChoice::Route::kSmallM;
  for (const bool weight_only : {true, false}) {
    // Weight-only: the decode buckets (up to 8 rows) take the small-M kernel; otherwise
    // cuBLASLt's fp8 GEMM on activations quantized per token.
    lin->choices.assign(cuda::kGemmMBuckets, std::nullopt);
    if (weight_only) {
      for (int b = 0; b < cuda::kGemmMBuckets; ++b) {
        if (cuda::GemmBucketTuneM(b) <= cuda::kDenseSmallMMaxM) lin->choices[b] = small;
      }
    }
    // Reference activations are what the weight-only route multiplies: rounded to bf16.
    // The quantized route also rounds them to e4m3 (about 2^-4 relative) or int8.
    const double bound = weight_only ? 6e-3 : (fp8 ? 8e-2 : 3e-2);
    for (const int64_t m : {int64_t{1}, int64_t{5}, max_m}) {
      SCOPED_TRACE(std::string(weight_only ? "weight-only" : "quantized") + ", M=" + std::to_string(m));
      const std::vector<float> xm(x.begin(), x.begin() + m * k);
      std::vector<double> xr(static_cast<size_t>(m * k));
      for (size_t i = 0; i < xr.size(); ++i) xr[i] = Bf16(xm[i]);
      auto y = be.Allocate({m, n}, DType::kBF16);
      ASSERT_TRUE(y.ok());

      // As it is.
      Tensor dx = OnDevice(be, HostBf16(xm, {m, k}), keep);
      FERRY_ASSERT_OK(be.Linear(dx, w, *y));
      EXPECT_LT(RelError(be, *y, xr, wd, m, n, k), bound) << "plain";

      // After the norm, with the residual add: h = RmsNorm(residual + delta) * gamma.
      std::vector<double> hr(static_cast<size_t>(m * k));
      for (int64_t r = 0; r < m; ++r) {
        double ss = 0.0;
        std::vector<float> sum(static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i) {
          sum[i] = Bf16(res[r * k + i]) + Bf16(delta[r * k + i]);
          ss += static_cast<double>(sum[i]) * sum[i];
        }
        const double rs = 1.0 / std::sqrt(ss / static_cast<double>(k) + eps);
        for (int64_t i = 0; i < k; ++i) hr[r * k + i] = Bf16(static_cast<float>(sum[i] * rs * gamma[i]));
      }
      Tensor dres = OnDevice(be, HostBf16(std::vector<float>(res.begin(), res.begin() + m * k), {m, k}), keep);
      Tensor ddelta =
          OnDevice(be, HostBf16(std::vector<float>(delta.begin(), delta.begin() + m * k), {m, k}), keep);
      auto h = be.Allocate({m, k}, DType::kBF16);
      ASSERT_TRUE(h.ok());
      FERRY_ASSERT_OK(be.NormLinear(dres, &ddelta, gamma_t, eps, *h, w, *y));
      EXPECT_LT(RelError(be, *y, hr, wd, m, n, k), bound) << "norm + residual add";
      // The residual now holds the sum; the norm alone (no delta) gives the same h.
      FERRY_ASSERT_OK(be.NormLinear(dres, nullptr, gamma_t, eps, *h, w, *y));
      EXPECT_LT(RelError(be, *y, hr, wd, m, n, k), bound) << "norm";

      // After the gating: silu(gate) * up.
      std::vector<double> gr(static_cast<size_t>(m * k));
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t i = 0; i < k; ++i) {
          const double g = Bf16(gate_up[r * 2 * k + i]), u = Bf16(gate_up[r * 2 * k + k + i]);
          gr[r * k + i] = Bf16(static_cast<float>(g / (1.0 + std::exp(-g)) * u));
        }
      }
      Tensor dgu =
          OnDevice(be, HostBf16(std::vector<float>(gate_up.begin(), gate_up.begin() + m * 2 * k), {m, 2 * k}), keep);
      auto mlp = be.Allocate({m, k}, DType::kBF16);
      ASSERT_TRUE(mlp.ok());
      FERRY_ASSERT_OK(be.GatedLinear(dgu, /*gelu_tanh=*/false, *mlp, w, *y));
      EXPECT_LT(RelError(be, *y, gr, wd, m, n, k), bound) << "gated";

      // After a LayerNorm (a BERT layer's): the fused form stores the norm's output and gives
      // the linear the bytes LayerNorm then Linear give.
      auto ln_out = be.Allocate({m, k}, DType::kBF16), ln_ref = be.Allocate({m, k}, DType::kBF16);
      auto y_ref = be.Allocate({m, n}, DType::kBF16);
      ASSERT_TRUE(ln_out.ok() && ln_ref.ok() && y_ref.ok());
      FERRY_ASSERT_OK(be.LayerNormLinear(dres, ddelta, gamma_t, beta_t, eps, *ln_out, w, *y));
      FERRY_ASSERT_OK(be.LayerNorm(dres, ddelta, gamma_t, beta_t, eps, *ln_ref));
      FERRY_ASSERT_OK(be.Linear(*ln_ref, w, *y_ref));
      const auto host_floats = [&](const Tensor& t) {
        auto h = be.ToHost(t);
        EXPECT_TRUE(h.ok());
        return std::vector<float>(h->data<float>(), h->data<float>() + t.numel());
      };
      EXPECT_EQ(host_floats(*ln_out), host_floats(*ln_ref)) << "LayerNorm output";
      EXPECT_EQ(host_floats(*y), host_floats(*y_ref)) << "linear after the LayerNorm";
    }
  }
}

TEST(CudaLinearRoutesTest, Fp8WeightOnlyRouteTakesEveryInputForm) {
  FERRY_SKIP_WITHOUT_GPU();
  auto gpu = QueryCudaDevice(0);
  ASSERT_TRUE(gpu.ok());
  if (gpu->cc_major * 10 + gpu->cc_minor < 89) GTEST_SKIP() << "fp8 needs sm_89+";
  CheckUnquantizedRoute(WeightFormat::kFp8);
}

// A W8A8 weight on the same route: the input is divided by the SmoothQuant factors in the
// kernel (a reciprocal kept with the weight) instead of in the quantization pass.
TEST(CudaLinearRoutesTest, W8A8UnquantizedRouteAppliesTheSmoothingFactors) {
  FERRY_SKIP_WITHOUT_GPU();
  CheckUnquantizedRoute(WeightFormat::kInt8W8A8);
}


// Engines written when 513-4096 rows were one bucket (ten choices) load with that choice in
// both of the buckets it now spans (513-1024 and 1025-4096); an engine with every bucket
// loads its choices as stored.
TEST(CudaLinearRoutesTest, EnginesWithTenBucketsKeepTheirLastChoiceForBoth) {
  FERRY_SKIP_WITHOUT_GPU();
  CudaBackendOptions o;
  o.activations = DType::kBF16;
  auto made = MakeCudaBackend(o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Backend& be = **made;
  LinearWeight w;
  w.weight = Tensor::Empty({256, 512}, DType::kF32);
  const std::vector<float> wf = RandomValues(256 * 512, 0.05f, 11);
  std::copy(wf.begin(), wf.end(), w.weight.data<float>());
  w.format = WeightFormat::kInt8W8A8;
  w.smooth = Tensor::Empty({512}, DType::kF32);
  for (int64_t i = 0; i < 512; ++i) w.smooth.data<float>()[i] = 1.0f;
  FERRY_ASSERT_OK(be.PrepareLinear(w));
  FERRY_ASSERT_OK(be.FinishLoading());
  auto* lin = static_cast<CudaLinear*>(w.packed.get());
  ASSERT_NE(lin, nullptr);
  auto tile = cuda::GemmChoice::FromString("w8_mma"), wide = cuda::GemmChoice::FromString("w8_mma:t256");
  ASSERT_TRUE(tile.ok() && wide.ok());
  ASSERT_EQ(cuda::kGemmMBuckets, 11);
  lin->choices.assign(cuda::kGemmMBuckets, *tile);
  lin->choices[9] = *wide;  // 513-1024 differs from 1025-4096
  auto s = be.SerializeLinear(w);
  ASSERT_TRUE(s.ok()) << s.status().ToString();

  auto back = be.DeserializeLinear(*s);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto* now = static_cast<const CudaLinear*>(back->packed.get());
  ASSERT_EQ(now->choices.size(), 11u);
  EXPECT_EQ(now->choices[9]->ToString(), "w8_mma:t256");
  EXPECT_EQ(now->choices[10]->ToString(), "w8_mma");

  // The same weight as a ten-bucket engine stored it: the last choice (w8_mma:t256) is 513-4096's.
  nlohmann::json layout = nlohmann::json::parse(s->layout_json);
  layout["gemm_choices"].erase(10);
  ASSERT_EQ(layout["gemm_choices"].size(), 10u);
  kernels::SerializedLinear old = *s;
  old.layout_json = layout.dump();
  auto loaded = be.DeserializeLinear(old);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const auto* ten = static_cast<const CudaLinear*>(loaded->packed.get());
  ASSERT_EQ(ten->choices.size(), 11u);
  EXPECT_EQ(ten->choices[8]->ToString(), "w8_mma");
  EXPECT_EQ(ten->choices[9]->ToString(), "w8_mma:t256");
  EXPECT_EQ(ten->choices[10]->ToString(), "w8_mma:t256");
}

}  // namespace
}  // namespace ferry::backend
