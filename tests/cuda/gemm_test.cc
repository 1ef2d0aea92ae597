// LtGemm against a host reference: every kind, several shapes (M = 1, 7, 64, 513; LLaMA-like
// N x K), bias and GELU epilogues, tuned choices, strided rows and the errors for problems
// cuBLASLt cannot run. References accumulate in double over the same rounded (or quantized)
// inputs the GPU reads; outputs are poisoned with NaN before every call.
#include "kernels/cuda/gemm.h"
#include "cuda_test_util.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/int4_groups.h"

namespace ferry::cuda {
namespace {

int ComputeCapability() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major * 10 + minor;
}

#define FERRY_ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

using testing::DeviceBuffer;
using testing::HaveGpu;
using testing::Upload;

// Host bytes of `values` in a float dtype (bf16, f16, f32, e4m3).
std::vector<uint8_t> Encode(DType dtype, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
  ConvertFromF32(dtype, values.data(), bytes.data(), values.size());
  return bytes;
}

float RoundTo(DType dtype, float v) {
  switch (dtype) {
    case DType::kBF16: return Bf16ToF32(F32ToBf16(v));
    case DType::kF16: return F16ToF32(F32ToF16(v));
    case DType::kF8E4M3: return F8E4M3ToF32(F32ToF8E4M3(v));
    default: return v;
  }
}

std::vector<float> RandomUniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

template <typename Fn>
void ParallelFor(int64_t count, Fn fn) {
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}

double ActivateHost(double v, GemmActivation act) {
  switch (act) {
    case GemmActivation::kGeluTanh:
      return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case GemmActivation::kGeluErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    default: return v;
  }
}

// What the GPU multiplies, on the host: x [max_m, K] and w [N, K] as the values the kernels
// read (rounded to bf16/f16, or the raw fp8/int8 values), with the scales applied outside.
struct HostOperands {
  int64_t n = 0, k = 0;
  std::vector<float> x, w;
  std::vector<float> row_scale;  // [max_m] or empty
  std::vector<float> col_scale;  // [N] or empty
  std::vector<float> bias;       // [N] rounded to the bias dtype, or empty
};

// ref[i * N + c] for each sampled row: act(sum_k x w * row_scale * col_scale + bias).
std::vector<double> ReferenceRows(const HostOperands& h, const std::vector<int64_t>& rows, GemmActivation act,
                                  bool apply_epilogue = true) {
  const int64_t n = h.n, k = h.k;
  std::vector<double> ref(rows.size() * n);
  constexpr int64_t kColBlock = 64;
  const int64_t col_blocks = (n + kColBlock - 1) / kColBlock;
  ParallelFor(static_cast<int64_t>(rows.size()) * col_blocks, [&](int64_t task) {
    const int64_t ri = task / col_blocks;
    const int64_t c0 = (task % col_blocks) * kColBlock;
    const float* xr = h.x.data() + rows[ri] * k;
    for (int64_t c = c0; c < std::min(n, c0 + kColBlock); ++c) {
      const float* wr = h.w.data() + c * k;
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = 0;
      for (; i + 4 <= k; i += 4) {
        s0 += static_cast<double>(xr[i]) * wr[i];
        s1 += static_cast<double>(xr[i + 1]) * wr[i + 1];
        s2 += static_cast<double>(xr[i + 2]) * wr[i + 2];
        s3 += static_cast<double>(xr[i + 3]) * wr[i + 3];
      }
      for (; i < k; ++i) s0 += static_cast<double>(xr[i]) * wr[i];
      double v = (s0 + s1) + (s2 + s3);
      if (apply_epilogue) {
        if (!h.row_scale.empty()) v *= h.row_scale[rows[ri]];
        if (!h.col_scale.empty()) v *= h.col_scale[c];
        if (!h.bias.empty()) v += h.bias[c];
        v = ActivateHost(v, act);
      }
      ref[ri * n + c] = v;
    }
  });
  return ref;
}

// Every row for small M; else the ends, the middle and random rows.
std::vector<int64_t> SampleRows(int64_t m, uint32_t seed) {
  std::set<int64_t> rows;
  if (m <= 64) {
    for (int64_t r = 0; r < m; ++r) rows.insert(r);
  } else {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int64_t> dist(0, m - 1);
    for (int64_t r : {int64_t{0}, int64_t{1}, m / 2, m - 2, m - 1}) rows.insert(r);
    while (rows.size() < 32) rows.insert(dist(rng));
  }
  return {rows.begin(), rows.end()};
}

// The device side of one (kind, N, K) operand set, rows for the largest M.
struct DeviceOperands {
  DeviceBuffer x, w, bias, x_scale, w_scale, w_zero;
};

struct OperandSpec {
  GemmKind kind = GemmKind::kBF16;
  DType act_dtype = DType::kBF16;  // the activation dtype (int8 weight-only: X's dtype)
  int64_t max_m = 0, n = 0, k = 0;
  bool bias = false;
  DType bias_dtype = DType::kF32;
  Fp8Scaling fp8_scaling = Fp8Scaling::kPerTensor;
  uint32_t seed = 1;
  int64_t group_size = 128;  // int4 weight-only
};

// Symmetric int8 per row of a [rows, cols] matrix: q = round(v / s), s = amax / 127.
void QuantizeRowsInt8Host(const std::vector<float>& v, int64_t rows, int64_t cols, std::vector<int8_t>& q,
                          std::vector<float>& scale) {
  q.resize(v.size());
  scale.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(v[r * cols + c]));
    const float s = amax > 0 ? amax / 127.0f : 1.0f;
    scale[r] = s;
    for (int64_t c = 0; c < cols; ++c) {
      q[r * cols + c] = static_cast<int8_t>(std::clamp(std::nearbyint(v[r * cols + c] / s), -127.0f, 127.0f));
    }
  }
}

// Round-to-nearest-even e4m3 by binary search over the 127 finite non-negative codes (core's
// F32ToF8E4M3 scans them all, too slow for the millions of weights here). Saturates at 448.
uint8_t EncodeE4M3(float f) {
  static const std::vector<float> kCodes = [] {
    std::vector<float> v(0x7f);
    for (int c = 0; c < 0x7f; ++c) v[c] = F8E4M3ToF32(static_cast<uint8_t>(c));
    return v;
  }();
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  const auto it = std::lower_bound(kCodes.begin(), kCodes.end(), a);
  if (it == kCodes.end()) return sign | 0x7e;
  uint8_t code = static_cast<uint8_t>(it - kCodes.begin());
  if (code > 0) {
    const float above = kCodes[code] - a, below = a - kCodes[code - 1];
    if (below < above || (below == above && (code & 1) != 0)) --code;
  }
  return sign | code;
}

// e4m3 with a scale per row (rows x cols) or one for the whole matrix (per_tensor).
void QuantizeFp8Host(const std::vector<float>& v, int64_t rows, int64_t cols, bool per_tensor,
                     std::vector<uint8_t>& q, std::vector<float>& q_values, std::vector<float>& scale) {
  q.resize(v.size());
  q_values.resize(v.size());
  const auto amax_of = [&](int64_t r0, int64_t r1) {
    float amax = 0.0f;
    for (int64_t i = r0 * cols; i < r1 * cols; ++i) amax = std::max(amax, std::fabs(v[i]));
    return amax > 0 ? amax / 448.0f : 1.0f;
  };
  scale.assign(per_tensor ? 1 : rows, 0.0f);
  if (per_tensor) scale[0] = amax_of(0, rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = per_tensor ? scale[0] : (scale[r] = amax_of(r, r + 1));
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = r * cols + c;
      q[i] = EncodeE4M3(v[i] / s);
      q_values[i] = F8E4M3ToF32(q[i]);
    }
  }
}

// Random operands with O(1) outputs (x ~ U(-1, 1), w ~ U(-1, 1) * sqrt(3 / K)), so GELU's
// curved part is exercised. Rows of x and of w get different magnitudes (x0.5 to x1.5), so
// per-row and per-column scales that land on the wrong index show.
void MakeOperands(const OperandSpec& s, HostOperands& h, DeviceOperands& d) {
  h.n = s.n;
  h.k = s.k;
  const float w_range = std::sqrt(3.0f / static_cast<float>(s.k));
  std::vector<float> x = RandomUniform(s.max_m * s.k, -1.0f, 1.0f, s.seed);
  std::vector<float> w = RandomUniform(s.n * s.k, -w_range, w_range, s.seed + 1);
  for (int64_t r = 0; r < s.max_m; ++r) {
    for (int64_t i = 0; i < s.k; ++i) x[r * s.k + i] *= 0.5f + 0.25f * static_cast<float>(r % 4);
  }
  for (int64_t c = 0; c < s.n; ++c) {
    for (int64_t i = 0; i < s.k; ++i) w[c * s.k + i] *= 0.5f + 0.5f * static_cast<float>(c % 3);
  }
  h.row_scale.clear();
  h.col_scale.clear();
  switch (s.kind) {
    case GemmKind::kF32:
    case GemmKind::kBF16:
    case GemmKind::kF16: {
      for (float& v : x) v = RoundTo(s.act_dtype, v);
      for (float& v : w) v = RoundTo(s.act_dtype, v);
      d.x = Upload(Encode(s.act_dtype, x));
      d.w = Upload(Encode(s.act_dtype, w));
      h.x = std::move(x);
      h.w = std::move(w);
      break;
    }
    case GemmKind::kFp8: {
      const bool per_tensor = s.fp8_scaling == Fp8Scaling::kPerTensor;
      std::vector<uint8_t> xq, wq;
      std::vector<float> xs, ws;
      QuantizeFp8Host(x, s.max_m, s.k, per_tensor, xq, h.x, xs);
      QuantizeFp8Host(w, s.n, s.k, per_tensor, wq, h.w, ws);
      d.x = Upload(xq);
      d.w = Upload(wq);
      d.x_scale = Upload(xs);
      d.w_scale = Upload(ws);
      h.row_scale = per_tensor ? std::vector<float>(s.max_m, xs[0]) : xs;
      h.col_scale = per_tensor ? std::vector<float>(s.n, ws[0]) : ws;
      break;
    }
    case GemmKind::kInt8: {
      std::vector<int8_t> xq, wq;
      std::vector<float> xs, ws;
      QuantizeRowsInt8Host(x, s.max_m, s.k, xq, xs);
      QuantizeRowsInt8Host(w, s.n, s.k, wq, ws);
      d.x = Upload(xq);
      d.w = Upload(wq);
      d.x_scale = Upload(xs);
      d.w_scale = Upload(ws);
      h.x.assign(xq.begin(), xq.end());
      h.w.assign(wq.begin(), wq.end());
      h.row_scale = xs;
      h.col_scale = ws;
      break;
    }
    case GemmKind::kInt4WeightOnly: {
      // The reference multiplies by exactly the matrix the groups stand for.
      for (float& v : x) v = RoundTo(s.act_dtype, v);
      Result<::ferry::kernels::Int4Groups> g = ::ferry::kernels::QuantizeInt4(w.data(), s.n, s.k, s.group_size);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      h.w.assign(static_cast<size_t>(s.n * s.k), 0.0f);
      ::ferry::kernels::DequantizeInt4(*g, h.w.data());
      d.x = Upload(Encode(s.act_dtype, x));
      d.w = Upload(::ferry::kernels::PackInt4Rows(*g));
      d.w_scale = Upload(g->scales);
      d.w_zero = Upload(g->zeros);
      h.x = std::move(x);
      break;
    }
    case GemmKind::kInt8WeightOnly: {
      for (float& v : x) v = RoundTo(s.act_dtype, v);
      std::vector<int8_t> wq;
      std::vector<float> ws;
      QuantizeRowsInt8Host(w, s.n, s.k, wq, ws);
      d.x = Upload(Encode(s.act_dtype, x));
      d.w = Upload(wq);
      d.w_scale = Upload(ws);
      h.x = std::move(x);
      h.w.assign(wq.begin(), wq.end());
      h.col_scale = ws;
      break;
    }
  }
  h.bias.clear();
  d.bias = DeviceBuffer();
  if (s.bias) {
    std::vector<float> b = RandomUniform(s.n, -0.5f, 0.5f, s.seed + 2);
    for (float& v : b) v = RoundTo(s.bias_dtype, v);
    d.bias = Upload(Encode(s.bias_dtype, b));
    h.bias = std::move(b);
  }
}

GemmArgs ArgsFor(const DeviceOperands& d, void* y) {
  GemmArgs a;
  a.x = d.x.get();
  a.w = d.w.get();
  a.y = y;
  a.bias = d.bias.get();
  a.x_scale = d.x_scale.as<float>();
  a.w_scale = d.w_scale.as<float>();
  a.w_zero = static_cast<const uint8_t*>(d.w_zero.get());
  return a;
}

struct CheckResult {
  double rel_err = 0.0;
  int64_t unwritten = 0;  // NaN/inf anywhere in the M x N output
  std::string route;
};

// Poisons y, runs, and compares the sampled rows with the reference.
void RunAndCheck(LtGemm& gemm, const GemmProblem& p, const HostOperands& h, const DeviceOperands& d,
                 cudaStream_t stream, CheckResult& out, const GemmChoice* choice = nullptr) {
  const int64_t ldy = p.y_stride();
  const size_t y_bytes = static_cast<size_t>(p.m * ldy) * DTypeSize(p.out_dtype);
  DeviceBuffer y(y_bytes);
  ASSERT_NE(y.get(), nullptr);
  FERRY_ASSERT_CUDA(cudaMemset(y.get(), 0xff, y_bytes));
  const GemmArgs args = ArgsFor(d, y.get());
  FERRY_ASSERT_OK(gemm.Run(p, args, stream, choice));
  FERRY_ASSERT_CUDA(cudaStreamSynchronize(stream));
  FERRY_ASSERT_CUDA(cudaGetLastError());
  std::vector<uint8_t> raw(y_bytes);
  FERRY_ASSERT_CUDA(cudaMemcpy(raw.data(), y.get(), y_bytes, cudaMemcpyDeviceToHost));
  std::vector<float> got(p.m * ldy);
  ConvertToF32(p.out_dtype, raw.data(), got.data(), got.size());
  out.unwritten = 0;
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) out.unwritten += std::isfinite(got[r * ldy + c]) ? 0 : 1;
  }
  const std::vector<int64_t> rows = SampleRows(p.m, static_cast<uint32_t>(p.m * 31 + p.n));
  const std::vector<double> ref = ReferenceRows(h, rows, p.activation);
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t c = 0; c < p.n; ++c) {
      const double g = got[rows[i] * ldy + c];
      const double e = ref[i * p.n + c];
      err2 += (g - e) * (g - e);
      ref2 += e * e;
    }
  }
  out.rel_err = std::sqrt(err2 / std::max(ref2, 1e-300));
  if (!std::isfinite(out.rel_err)) out.rel_err = 1e30;
  Result<std::string> route = gemm.DescribeRoute(p, args);
  out.route = route.ok() ? *route : route.status().ToString();
}

std::string Describe(const GemmProblem& p) {
  std::string s = std::string(GemmKindName(p.kind)) + " M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) +
                  " K=" + std::to_string(p.k) + " out=" + std::string(DTypeName(p.out_dtype));
  if (p.has_bias) s += " bias=" + std::string(DTypeName(p.bias_dtype));
  if (p.activation == GemmActivation::kGeluTanh) s += " gelu_tanh";
  if (p.activation == GemmActivation::kGeluErf) s += " gelu_erf";
  return s;
}

// One test's GPU state: a stream and an LtGemm.
class GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    Result<std::unique_ptr<LtGemm>> g = LtGemm::Create();
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gemm_ = std::move(*g);
    cc_ = ComputeCapability();
  }
  void TearDown() override {
    gemm_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Runs every M of `ms` for one operand set and checks against `tol`.
  void CheckShapes(const OperandSpec& spec, GemmProblem base, const std::vector<int64_t>& ms, double tol,
                   LtGemm* gemm = nullptr) {
    HostOperands h;
    DeviceOperands d;
    MakeOperands(spec, h, d);
    ASSERT_NE(d.x.get(), nullptr);
    for (int64_t m : ms) {
      GemmProblem p = base;
      p.m = m;
      p.n = spec.n;
      p.k = spec.k;
      CheckResult r;
      RunAndCheck(gemm != nullptr ? *gemm : *gemm_, p, h, d, stream_, r);
      if (HasFatalFailure()) return;
      std::cout << "  " << std::left << std::setw(58) << Describe(p) << " rel_err " << std::scientific
                << std::setprecision(2) << r.rel_err << std::defaultfloat << "  " << r.route << "\n";
      EXPECT_LT(r.rel_err, tol) << Describe(p) << " via " << r.route;
      EXPECT_EQ(r.unwritten, 0) << Describe(p) << " via " << r.route;
    }
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LtGemm> gemm_;
  int cc_ = 0;
};

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{2048, 2048}, {5632, 2048}, {2048, 8192}};
const std::vector<int64_t> kMs = {1, 7, 64, 513};

GemmProblem FloatProblem(GemmKind kind, DType dtype) {
  GemmProblem p;
  p.kind = kind;
  p.out_dtype = dtype;
  return p;
}

TEST_F(GemmTest, F32MatchesReference) {
  for (const auto& [n, k] : kShapes) {
    CheckShapes({GemmKind::kF32, DType::kF32, 513, n, k}, FloatProblem(GemmKind::kF32, DType::kF32), kMs, 1e-5);
  }
  CheckShapes({GemmKind::kF32, DType::kF32, 64, 4098, 1024}, FloatProblem(GemmKind::kF32, DType::kF32), {1, 7, 64},
              1e-5);
}

TEST_F(GemmTest, Bf16MatchesReference) {
  for (const auto& [n, k] : kShapes) {
    CheckShapes({GemmKind::kBF16, DType::kBF16, 513, n, k}, FloatProblem(GemmKind::kBF16, DType::kBF16), kMs, 1e-2);
  }
  // Odd N: rows of Y are only 4-byte aligned.
  CheckShapes({GemmKind::kBF16, DType::kBF16, 513, 4098, 2048}, FloatProblem(GemmKind::kBF16, DType::kBF16), kMs,
              1e-2);
  CheckShapes({GemmKind::kBF16, DType::kBF16, 64, 1000, 1000}, FloatProblem(GemmKind::kBF16, DType::kBF16), {3, 64},
              1e-2);
}

TEST_F(GemmTest, F16MatchesReference) {
  for (const auto& [n, k] : kShapes) {
    CheckShapes({GemmKind::kF16, DType::kF16, 513, n, k}, FloatProblem(GemmKind::kF16, DType::kF16), kMs, 1e-2);
  }
}

TEST_F(GemmTest, Tf32WhenAsked) {
  GemmProblem p = FloatProblem(GemmKind::kF32, DType::kF32);
  p.allow_tf32 = true;
  CheckShapes({GemmKind::kF32, DType::kF32, 64, 2048, 2048}, p, {64}, 5e-3);
}

TEST_F(GemmTest, BiasAndGeluEpilogues) {
  const GemmActivation acts[] = {GemmActivation::kNone, GemmActivation::kGeluTanh, GemmActivation::kGeluErf};
  struct Case {
    GemmKind kind;
    DType dtype;
    double tol;
  };
  for (const Case& c : {Case{GemmKind::kF32, DType::kF32, 1e-5}, Case{GemmKind::kBF16, DType::kBF16, 1e-2},
                        Case{GemmKind::kF16, DType::kF16, 1e-2}}) {
    for (DType bias_dtype : {c.dtype, DType::kF32}) {
      for (GemmActivation act : acts) {
        GemmProblem p = FloatProblem(c.kind, c.dtype);
        p.has_bias = true;
        p.bias_dtype = bias_dtype;
        p.activation = act;
        OperandSpec spec{c.kind, c.dtype, 64, 1024, 1024, true, bias_dtype};
        CheckShapes(spec, p, {7, 64}, c.tol);
      }
    }
    // GELU without a bias.
    for (GemmActivation act : {GemmActivation::kGeluTanh, GemmActivation::kGeluErf}) {
      GemmProblem p = FloatProblem(c.kind, c.dtype);
      p.activation = act;
      CheckShapes({c.kind, c.dtype, 64, 1024, 1024}, p, {5}, c.tol);
    }
  }
}

// f32 tells the two GELUs apart (their difference is ~1e-3 relative on O(1) outputs): a
// result within 1e-5 of one reference is far from the other.
TEST_F(GemmTest, GeluVariantsAreDistinct) {
  OperandSpec spec{GemmKind::kF32, DType::kF32, 64, 1024, 1024, true, DType::kF32};
  HostOperands h;
  DeviceOperands d;
  MakeOperands(spec, h, d);
  GemmProblem p = FloatProblem(GemmKind::kF32, DType::kF32);
  p.m = 64;
  p.n = 1024;
  p.k = 1024;
  p.has_bias = true;
  p.bias_dtype = DType::kF32;
  p.activation = GemmActivation::kGeluTanh;
  CheckResult tanh_result;
  RunAndCheck(*gemm_, p, h, d, stream_, tanh_result);
  EXPECT_LT(tanh_result.rel_err, 1e-5);
  // The tanh output against the erf reference.
  const std::vector<int64_t> rows = SampleRows(p.m, 5);
  const std::vector<double> erf_ref = ReferenceRows(h, rows, GemmActivation::kGeluErf);
  const std::vector<double> tanh_ref = ReferenceRows(h, rows, GemmActivation::kGeluTanh);
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < erf_ref.size(); ++i) {
    diff2 += (erf_ref[i] - tanh_ref[i]) * (erf_ref[i] - tanh_ref[i]);
    ref2 += erf_ref[i] * erf_ref[i];
  }
  EXPECT_GT(std::sqrt(diff2 / ref2), 5e-5) << "the test inputs do not separate the GELU variants";
}

TEST_F(GemmTest, Fp8PerTensorMatchesReference) {
  GemmProblem p;
  p.kind = GemmKind::kFp8;
  p.out_dtype = DType::kBF16;
  p.fp8_scaling = Fp8Scaling::kPerTensor;
  if (cc_ < 89) {
    p.m = 16, p.n = 64, p.k = 64;
    EXPECT_EQ(gemm_->CheckProblem(p).code(), StatusCode::kUnimplemented);
    GTEST_SKIP() << "fp8 needs sm_89+";
  }
  for (const auto& [n, k] : kShapes) {
    OperandSpec spec{GemmKind::kFp8, DType::kBF16, 513, n, k};
    CheckShapes(spec, p, kMs, 2e-2);
  }
  // Bias + GELU (fused for bf16 output), and f32 output with the epilogue kernel's bias.
  GemmProblem pb = p;
  pb.has_bias = true;
  pb.bias_dtype = DType::kBF16;
  pb.activation = GemmActivation::kGeluTanh;
  CheckShapes({GemmKind::kFp8, DType::kBF16, 64, 2048, 2048, true, DType::kBF16}, pb, {1, 64}, 2e-2);
  GemmProblem pf = p;
  pf.out_dtype = DType::kF32;
  pf.has_bias = true;
  pf.bias_dtype = DType::kF32;
  pf.activation = GemmActivation::kGeluErf;
  CheckShapes({GemmKind::kFp8, DType::kF32, 64, 2048, 2048, true, DType::kF32}, pf, {7, 64}, 2e-2);
}

TEST_F(GemmTest, Fp8PerRowColMatchesReferenceOnBothRoutes) {
  if (cc_ < 89) GTEST_SKIP() << "fp8 needs sm_89+";
  LtGemmOptions epilogue_only;
  epilogue_only.fp8_outer_vector_scales = false;
  Result<std::unique_ptr<LtGemm>> forced = LtGemm::Create(epilogue_only);
  ASSERT_TRUE(forced.ok()) << forced.status().ToString();
  GemmProblem p;
  p.kind = GemmKind::kFp8;
  p.out_dtype = DType::kBF16;
  p.fp8_scaling = Fp8Scaling::kPerRowCol;
  for (LtGemm* g : {gemm_.get(), forced->get()}) {
    for (const auto& [n, k] : kShapes) {
      OperandSpec spec{GemmKind::kFp8, DType::kBF16, 513, n, k};
      spec.fp8_scaling = Fp8Scaling::kPerRowCol;
      CheckShapes(spec, p, kMs, 2e-2, g);
    }
    GemmProblem pb = p;
    pb.has_bias = true;
    pb.bias_dtype = DType::kF32;
    pb.activation = GemmActivation::kGeluErf;
    OperandSpec spec{GemmKind::kFp8, DType::kBF16, 64, 2048, 2048, true, DType::kF32};
    spec.fp8_scaling = Fp8Scaling::kPerRowCol;
    CheckShapes(spec, pb, {7, 64}, 2e-2, g);
  }
}

TEST_F(GemmTest, Int8AccumulatorIsExact) {
  for (const auto& [n, k] : kShapes) {
    OperandSpec spec{GemmKind::kInt8, DType::kI32, 513, n, k};
    HostOperands h;
    DeviceOperands d;
    MakeOperands(spec, h, d);
    for (int64_t m : kMs) {
      GemmProblem p;
      p.kind = GemmKind::kInt8;
      p.out_dtype = DType::kI32;
      p.m = m;
      p.n = n;
      p.k = k;
      const size_t y_bytes = static_cast<size_t>(m * n) * 4;
      DeviceBuffer y(y_bytes);
      FERRY_ASSERT_CUDA(cudaMemset(y.get(), 0xff, y_bytes));
      FERRY_ASSERT_OK(gemm_->Run(p, ArgsFor(d, y.get()), stream_));
      FERRY_ASSERT_CUDA(cudaStreamSynchronize(stream_));
      std::vector<int32_t> got(m * n);
      FERRY_ASSERT_CUDA(cudaMemcpy(got.data(), y.get(), y_bytes, cudaMemcpyDeviceToHost));
      const std::vector<int64_t> rows = SampleRows(m, 11);
      const std::vector<double> ref = ReferenceRows(h, rows, GemmActivation::kNone, /*apply_epilogue=*/false);
      int64_t mismatches = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        for (int64_t c = 0; c < n; ++c) mismatches += got[rows[i] * n + c] != static_cast<int32_t>(ref[i * n + c]);
      }
      EXPECT_EQ(mismatches, 0) << Describe(p);
    }
  }
}

TEST_F(GemmTest, Int8W8A8MatchesReference) {
  GemmProblem p;
  p.kind = GemmKind::kInt8;
  p.out_dtype = DType::kF32;
  for (const auto& [n, k] : kShapes) {
    CheckShapes({GemmKind::kInt8, DType::kF32, 513, n, k}, p, kMs, 1e-3);
  }
  GemmProblem pb = p;
  pb.out_dtype = DType::kBF16;
  pb.has_bias = true;
  pb.bias_dtype = DType::kBF16;
  pb.activation = GemmActivation::kGeluErf;
  CheckShapes({GemmKind::kInt8, DType::kBF16, 513, 2048, 2048, true, DType::kBF16}, pb, kMs, 1e-2);
  GemmProblem pf = p;
  pf.out_dtype = DType::kF16;
  pf.has_bias = true;
  pf.bias_dtype = DType::kF32;
  pf.activation = GemmActivation::kGeluTanh;
  CheckShapes({GemmKind::kInt8, DType::kF16, 64, 5632, 2048, true, DType::kF32}, pf, {7, 64}, 1e-2);
}

// Operands of an int8 (W8A8) or fp8 (per-token x per-channel) GEMM with an f32 bias or none.
OperandSpec W8Spec(bool int8, DType out, int64_t max_m, int64_t n, int64_t k, bool bias) {
  OperandSpec spec{int8 ? GemmKind::kInt8 : GemmKind::kFp8, out, max_m, n, k, bias, DType::kF32};
  spec.fp8_scaling = Fp8Scaling::kPerRowCol;
  return spec;
}

// An fp8 (per-token x per-channel, fast accumulation) or int8 problem of m rows on spec's operands.
GemmProblem W8Problem(const OperandSpec& spec, int64_t m) {
  GemmProblem p;
  p.kind = spec.kind;
  p.out_dtype = spec.act_dtype;
  p.fp8_scaling = Fp8Scaling::kPerRowCol;
  p.fp8_fast_accum = true;
  p.m = m;
  p.n = spec.n;
  p.k = spec.k;
  p.has_bias = spec.bias;
  p.bias_dtype = spec.bias_dtype;
  return p;
}

// ferry's 8-bit tensor-core kernel (GemmChoice::Route::kW8Mma) for decode batches: every row
// count up to kW8MmaMaxM (token tiles of 8, 16, 32, 64 and their remainders), N with and without
// a partial 128-channel tile, K split across blocks or not, bias, activations and output types.
// Both are held to the reference like cuBLASLt's routes; repeated calls must give the same bytes
// (the split-K counters reset themselves), and the padding of strided rows stays untouched.
TEST_F(GemmTest, W8MmaKernelMatchesReferenceAndIsDeterministic) {
  if (cc_ != 90) GTEST_SKIP() << "the 8-bit tensor-core kernel needs compute capability 9.0";
  GemmChoice w8;
  w8.route = GemmChoice::Route::kW8Mma;
  const std::vector<int64_t> ms = {1, 7, 8, 9, 16, 17, 32, 33, 64};
  // (N, K): K split across a cluster of 8 and of 2 blocks, a partial last tile (N = 1008) and
  // one tile (N = 96) with K = 384, and a wide unsplit one.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {2048, 2048}, {2048, 8192}, {1008, 1024}, {96, 384}, {28672, 512}};
  for (const bool int8 : {true, false}) {
    for (const auto& [n, k] : shapes) {
      for (const DType out : {DType::kBF16, DType::kF32, DType::kF16}) {
        const OperandSpec spec = W8Spec(int8, out, 64, n, k, out != DType::kF16);
        HostOperands h;
        DeviceOperands d;
        MakeOperands(spec, h, d);
        if (HasFatalFailure()) return;
        for (int64_t m : ms) {
          GemmProblem p = W8Problem(spec, m);
          p.activation = out == DType::kF32 ? GemmActivation::kGeluErf : GemmActivation::kNone;
          p.ldy = out == DType::kF16 ? n + 8 : 0;  // strided rows: padding must stay untouched
          CheckResult r;
          RunAndCheck(*gemm_, p, h, d, stream_, r, &w8);
          if (HasFatalFailure()) return;
          EXPECT_LT(r.rel_err, int8 ? 1e-2 : 2e-2) << Describe(p);
          EXPECT_EQ(r.unwritten, 0) << Describe(p);

          // Two more calls: the same bytes each time, and the padding of strided rows left alone.
          const int64_t ldy = p.y_stride();
          const size_t y_bytes = static_cast<size_t>(m * ldy) * DTypeSize(out);
          std::vector<std::vector<uint8_t>> got;
          for (int call = 0; call < 2; ++call) {
            DeviceBuffer y(y_bytes);
            FERRY_ASSERT_CUDA(cudaMemset(y.get(), 0x5a, y_bytes));
            FERRY_ASSERT_OK(gemm_->Run(p, ArgsFor(d, y.get()), stream_, &w8));
            FERRY_ASSERT_CUDA(cudaStreamSynchronize(stream_));
            got.emplace_back(y_bytes);
            FERRY_ASSERT_CUDA(cudaMemcpy(got.back().data(), y.get(), y_bytes, cudaMemcpyDeviceToHost));
          }
          EXPECT_EQ(got[0], got[1]) << "not deterministic: " << Describe(p);
          int64_t padding_changed = 0;
          for (int64_t row = 0; row < m; ++row) {
            for (int64_t i = n * static_cast<int64_t>(DTypeSize(out)); i < ldy * static_cast<int64_t>(DTypeSize(out));
                 ++i) {
              padding_changed += got[0][row * ldy * DTypeSize(out) + i] != 0x5a;
            }
          }
          EXPECT_EQ(padding_changed, 0) << Describe(p);
        }
      }
    }
  }
  EXPECT_EQ(gemm_->choice_fallbacks(), 0);
}

// int8 through the kernels is the exact int32 accumulator times the two scales: f32 outputs
// equal float(acc) * x_scale * w_scale computed on the host, for K split across blocks or not,
// and past kW8MmaMaxM rows (the tile kernel).
TEST_F(GemmTest, W8MmaInt8IsTheExactAccumulatorScaled) {
  if (cc_ != 90) GTEST_SKIP() << "the 8-bit tensor-core kernel needs compute capability 9.0";
  GemmChoice w8;
  w8.route = GemmChoice::Route::kW8Mma;
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{2048, 8192}, {28672, 512}}) {
    OperandSpec spec{GemmKind::kInt8, DType::kF32, 200, n, k};
    HostOperands h;
    DeviceOperands d;
    MakeOperands(spec, h, d);
    for (int64_t m : {3, 32, 64, 200}) {  // 200: the 128 x 128 tile kernel
      GemmProblem p;
      p.kind = GemmKind::kInt8;
      p.out_dtype = DType::kF32;
      p.m = m;
      p.n = n;
      p.k = k;
      DeviceBuffer y(static_cast<size_t>(m * n) * 4);
      FERRY_ASSERT_OK(gemm_->Run(p, ArgsFor(d, y.get()), stream_, &w8));
      FERRY_ASSERT_CUDA(cudaStreamSynchronize(stream_));
      std::vector<float> got(static_cast<size_t>(m * n));
      FERRY_ASSERT_CUDA(cudaMemcpy(got.data(), y.get(), got.size() * 4, cudaMemcpyDeviceToHost));
      const std::vector<int64_t> rows = SampleRows(m, 5);
      const std::vector<double> acc = ReferenceRows(h, rows, GemmActivation::kNone, /*apply_epilogue=*/false);
      int64_t mismatches = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        for (int64_t c = 0; c < n; ++c) {
          const float scaled = static_cast<float>(acc[i * n + c]) * h.row_scale[rows[i]];
          mismatches += got[rows[i] * n + c] != scaled * h.col_scale[c];
        }
      }
      EXPECT_EQ(mismatches, 0) << Describe(p);
    }
  }
  EXPECT_EQ(gemm_->choice_fallbacks(), 0);
}

// Past kW8MmaMaxM rows the route runs the 128 x 128 tile kernel: row counts with and without a
// partial token tile, N with a partial channel tile and under one tile, K of 3 to 64 stages,
// bias, activations, three output types, and strided output rows whose stride allows 16-byte
// stores or not (the padding stays untouched). int8 results are cuBLASLt's IMMA route's bytes
// (the same exact accumulator and epilogue arithmetic); both kinds give the same bytes each call.
TEST_F(GemmTest, W8MmaTileKernelMatchesReferenceAndCublasLt) {
  if (cc_ != 90) GTEST_SKIP() << "the 8-bit tensor-core kernel needs compute capability 9.0";
  GemmChoice w8;
  w8.route = GemmChoice::Route::kW8Mma;
  const std::vector<int64_t> ms = {65, 128, 129, 300, 1000};
  // N = 1004 (int8 only: fp8 needs N a multiple of 16) ends in a partial 16-byte chunk.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{2048, 2048}, {1008, 1024}, {96, 384}, {2304, 768},
                                                          {512, 8192},   {1004, 512}};
  for (const bool int8 : {true, false}) {
    for (const auto& [n, k] : shapes) {
      if (!int8 && n % 16 != 0) continue;
      for (const DType out : {DType::kBF16, DType::kF32, DType::kF16}) {
        const OperandSpec spec = W8Spec(int8, out, 1000, n, k, out != DType::kF32);
        HostOperands h;
        DeviceOperands d;
        MakeOperands(spec, h, d);
        if (HasFatalFailure()) return;
        for (int64_t m : ms) {
          GemmProblem p = W8Problem(spec, m);
          p.activation = out == DType::kF32 ? GemmActivation::kGeluErf
                         : out == DType::kF16 ? GemmActivation::kGeluTanh
                                              : GemmActivation::kNone;
          // f16: rows of n + 8 (16-byte stores) or, for int8 (fp8 needs 16-byte rows), n + 3
          // (element stores), with padding to keep.
          p.ldy = out == DType::kF16 ? n + (int8 && m % 2 != 0 ? 3 : 8) : 0;
          CheckResult r;
          RunAndCheck(*gemm_, p, h, d, stream_, r, &w8);
          if (HasFatalFailure()) return;
          EXPECT_LT(r.rel_err, int8 ? 1e-2 : 2e-2) << Describe(p);
          EXPECT_EQ(r.unwritten, 0) << Describe(p);

          const int64_t ldy = p.y_stride();
          const size_t y_bytes = static_cast<size_t>(m * ldy) * DTypeSize(out);
          const auto run = [&](const GemmChoice* choice) {
            DeviceBuffer y(y_bytes);
            EXPECT_EQ(cudaMemset(y.get(), 0x5a, y_bytes), cudaSuccess);
            EXPECT_TRUE(gemm_->Run(p, ArgsFor(d, y.get()), stream_, choice).ok()) << Describe(p);
            EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
            std::vector<uint8_t> bytes(y_bytes);
            EXPECT_EQ(cudaMemcpy(bytes.data(), y.get(), y_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
            return bytes;
          };
          const std::vector<uint8_t> first = run(&w8);
          EXPECT_EQ(first, run(&w8)) << "not deterministic: " << Describe(p);
          if (int8) {
            EXPECT_EQ(first, run(nullptr)) << "not cuBLASLt's bytes: " << Describe(p);
          }
          int64_t padding_changed = 0;
          const int64_t row_bytes = n * static_cast<int64_t>(DTypeSize(out));
          const int64_t stride_bytes = ldy * static_cast<int64_t>(DTypeSize(out));
          for (int64_t row = 0; row < m; ++row) {
            for (int64_t i = row_bytes; i < stride_bytes; ++i) padding_changed += first[row * stride_bytes + i] != 0x5a;
          }
          EXPECT_EQ(padding_changed, 0) << Describe(p);
        }
      }
    }
  }
  EXPECT_EQ(gemm_->choice_fallbacks(), 0);
}

// The TMA tile kernels (128 tokens with three stages and two blocks a multiprocessor, or six
// stages and one block; 256 tokens with four stages, which a wide_tile choice runs by default)
// issue the cp.async tile kernel's MMAs in its order: the same bytes for int8 and e4m3, with a
// bias and an activation, partial tiles in both directions and strided outputs.
TEST_F(GemmTest, W8TmaTileKernelsGiveTheCpAsyncKernelsBytes) {
  if (cc_ != 90) GTEST_SKIP() << "the 8-bit tensor-core kernel needs compute capability 9.0";
  GemmChoice w8;
  w8.route = GemmChoice::Route::kW8Mma;
  GemmChoice wide = w8;
  wide.wide_tile = true;
  const std::vector<int64_t> ms = {65, 200, 1000};
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{2304, 768}, {96, 384}, {1008, 2048}, {512, 8192}};
  struct Restore {
    ~Restore() { gemm_kernels::SetW8TileKernelVariant(-2); }
  } restore;
  for (const bool int8 : {true, false}) {
    for (const auto& [n, k] : shapes) {
      for (const DType out : {DType::kBF16, DType::kF32}) {
        const OperandSpec spec = W8Spec(int8, out, 1000, n, k, /*bias=*/true);
        HostOperands h;
        DeviceOperands d;
        MakeOperands(spec, h, d);
        if (HasFatalFailure()) return;
        for (int64_t m : ms) {
          GemmProblem p = W8Problem(spec, m);
          p.activation = out == DType::kF32 ? GemmActivation::kGeluErf : GemmActivation::kNone;
          p.ldy = out == DType::kBF16 ? n + 8 : 0;
          const size_t y_bytes = static_cast<size_t>(m * p.y_stride()) * DTypeSize(out);
          const auto run = [&](int variant, const GemmChoice* choice = nullptr) {
            gemm_kernels::SetW8TileKernelVariant(variant);
            DeviceBuffer y(y_bytes);
            EXPECT_EQ(cudaMemset(y.get(), 0x5a, y_bytes), cudaSuccess);
            EXPECT_TRUE(gemm_->Run(p, ArgsFor(d, y.get()), stream_, choice != nullptr ? choice : &w8).ok())
                << Describe(p);
            EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
            std::vector<uint8_t> bytes(y_bytes);
            EXPECT_EQ(cudaMemcpy(bytes.data(), y.get(), y_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
            return bytes;
          };
          const std::vector<uint8_t> cp_async = run(0);
          EXPECT_EQ(run(1), cp_async) << "TMA, three stages: " << Describe(p);
          EXPECT_EQ(run(2), cp_async) << "TMA, six stages: " << Describe(p);
          EXPECT_EQ(run(3), cp_async) << "TMA, 256 tokens: " << Describe(p);
          // By default a choice names the tile width.
          EXPECT_EQ(run(-1, &w8), cp_async) << "default, 128 tokens: " << Describe(p);
          EXPECT_EQ(run(-1, &wide), cp_async) << "default, wide_tile: " << Describe(p);
        }
      }
    }
  }
  EXPECT_EQ(gemm_->choice_fallbacks(), 0);
}

// The TMA decode kernel (the default up to kW8MmaMaxM rows) issues the cp.async decode kernel's
// MMAs in its order. int8 gives the same bytes whatever the split (the partials are exact
// integers); e4m3 the same bytes where neither splits K (the wide and the one-tile shapes),
// since each kernel lowers its split until its own clusters all fit. Bias, an activation, row
// counts on and off the token tiles, a partial channel tile and strided outputs.
TEST_F(GemmTest, W8TmaDecodeKernelGivesTheCpAsyncKernelsBytes) {
  if (cc_ != 90) GTEST_SKIP() << "the 8-bit tensor-core kernel needs compute capability 9.0";
  GemmChoice w8;
  w8.route = GemmChoice::Route::kW8Mma;
  const std::vector<int64_t> ms = {1, 5, 8, 13, 16, 31, 32, 47, 64};
  // (N, K, splits in neither kernel): split across clusters of 8 and of 4, one tile, a partial
  // last tile, and the 8B gate_up's width unsplit.
  struct Shape {
    int64_t n, k;
    bool unsplit;
  };
  const std::vector<Shape> shapes = {
      {4096, 4096, false}, {1008, 1024, false}, {96, 384, true}, {28672, 512, true}, {6144, 4096, false}};
  struct Restore {
    ~Restore() { gemm_kernels::SetW8DecodeKernelVariant(-2); }
  } restore;
  for (const bool int8 : {true, false}) {
    for (const Shape& shape : shapes) {
      for (const DType out : {DType::kBF16, DType::kF32}) {
        const OperandSpec spec = W8Spec(int8, out, 64, shape.n, shape.k, /*bias=*/true);
        HostOperands h;
        DeviceOperands d;
        MakeOperands(spec, h, d);
        if (HasFatalFailure()) return;
        for (int64_t m : ms) {
          GemmProblem p = W8Problem(spec, m);
          p.activation = out == DType::kF32 ? GemmActivation::kGeluErf : GemmActivation::kNone;
          p.ldy = out == DType::kBF16 ? shape.n + 8 : 0;
          const size_t y_bytes = static_cast<size_t>(m * p.y_stride()) * DTypeSize(out);
          const auto run = [&](int variant) {
            gemm_kernels::SetW8DecodeKernelVariant(variant);
            DeviceBuffer y(y_bytes);
            EXPECT_EQ(cudaMemset(y.get(), 0x5a, y_bytes), cudaSuccess);
            EXPECT_TRUE(gemm_->Run(p, ArgsFor(d, y.get()), stream_, &w8).ok()) << Describe(p);
            EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
            std::vector<uint8_t> bytes(y_bytes);
            EXPECT_EQ(cudaMemcpy(bytes.data(), y.get(), y_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
            return bytes;
          };
          const std::vector<uint8_t> cp_async = run(0);
          const std::vector<uint8_t> tma = run(1);
          EXPECT_EQ(tma, run(-1)) << "the default is not the TMA kernel: " << Describe(p);
          if (int8 || shape.unsplit) {
            EXPECT_EQ(tma, cp_async) << "TMA decode kernel: " << Describe(p);
          } else {
            gemm_kernels::SetW8DecodeKernelVariant(1);
            CheckResult r;
            RunAndCheck(*gemm_, p, h, d, stream_, r, &w8);
            if (HasFatalFailure()) return;
            EXPECT_LT(r.rel_err, 2e-2) << Describe(p);
            EXPECT_EQ(r.unwritten, 0) << Describe(p);
          }
          int64_t padding_changed = 0;
          const int64_t row_bytes = shape.n * static_cast<int64_t>(DTypeSize(out));
          const int64_t stride_bytes = p.y_stride() * static_cast<int64_t>(DTypeSize(out));
          for (int64_t row = 0; row < m; ++row) {
            for (int64_t i = row_bytes; i < stride_bytes; ++i) padding_changed += tma[row * stride_bytes + i] != 0x5a;
          }
          EXPECT_EQ(padding_changed, 0) << Describe(p);
        }
      }
    }
  }
  EXPECT_EQ(gemm_->choice_fallbacks(), 0);
}

// Where the kernel cannot run, its choice falls back to cuBLASLt (counted) or is refused.
TEST_F(GemmTest, W8MmaChoiceOutsideItsRangeFallsBack) {
  GemmChoice w8;
  w8.route = GemmChoice::Route::kW8Mma;
  OperandSpec spec{GemmKind::kInt8, DType::kBF16, 80, 256, 544};
  HostOperands h;
  DeviceOperands d;
  MakeOperands(spec, h, d);
  GemmProblem p;
  p.kind = GemmKind::kInt8;
  p.out_dtype = DType::kBF16;
  p.m = 80;
  p.n = 256;
  p.k = 544;  // not a multiple of 128: the kernels cannot take it
  CheckResult r;
  RunAndCheck(*gemm_, p, h, d, stream_, r, &w8);
  EXPECT_LT(r.rel_err, 1e-2);
  EXPECT_EQ(gemm_->choice_fallbacks(), 1);
  // Not an 8-bit problem: refused.
  GemmProblem bf = p;
  bf.kind = GemmKind::kBF16;
  DeviceBuffer y(static_cast<size_t>(80 * 256) * 2);
  EXPECT_EQ(gemm_->Run(bf, ArgsFor(d, y.get()), stream_, &w8).code(), StatusCode::kInvalidArgument);
  // i32 output (the raw accumulator) is cuBLASLt's only.
  GemmProblem i32 = p;
  i32.m = 16;
  i32.out_dtype = DType::kI32;
  DeviceBuffer y32(static_cast<size_t>(16 * 256) * 4);
  EXPECT_EQ(gemm_->Run(i32, ArgsFor(d, y32.get()), stream_, &w8).code(), StatusCode::kInvalidArgument);
}

TEST_F(GemmTest, Int8WeightOnlyBothRoutes) {
  for (DType act : {DType::kBF16, DType::kF16, DType::kF32}) {
    GemmProblem p;
    p.kind = GemmKind::kInt8WeightOnly;
    p.out_dtype = act;
    const double tol = act == DType::kF32 ? 1e-3 : 1e-2;  // the large-M route rounds W*scale to f32 only
    for (const auto& [n, k] : kShapes) {
      // Default: M <= 8 on the small-M kernel, larger M dequantizes.
      CheckShapes({GemmKind::kInt8WeightOnly, act, 513, n, k}, p, kMs, tol);
    }
    GemmProblem never_small = p;
    never_small.small_m_max = -1;
    CheckShapes({GemmKind::kInt8WeightOnly, act, 64, 2048, 2048}, never_small, {1, 7}, tol);
    GemmProblem always_small = p;
    always_small.small_m_max = 64;
    CheckShapes({GemmKind::kInt8WeightOnly, act, 64, 2048, 2048}, always_small, {13, 64}, tol);
    // K past whole unrolled iterations of the small-M kernel (one piece of tail), odd N.
    CheckShapes({GemmKind::kInt8WeightOnly, act, 8, 1001, 4112}, p, {1, 2, 3, 8}, tol);
  }
  // Bias and GELU on both routes; K not a multiple of 16 leaves the small-M kernel out.
  GemmProblem pb;
  pb.kind = GemmKind::kInt8WeightOnly;
  pb.out_dtype = DType::kBF16;
  pb.has_bias = true;
  pb.bias_dtype = DType::kF32;
  pb.activation = GemmActivation::kGeluErf;
  CheckShapes({GemmKind::kInt8WeightOnly, DType::kBF16, 64, 2048, 2048, true, DType::kF32}, pb, {1, 7, 64}, 1e-2);
  pb.activation = GemmActivation::kGeluTanh;
  pb.bias_dtype = DType::kBF16;
  CheckShapes({GemmKind::kInt8WeightOnly, DType::kBF16, 64, 1000, 1000, true, DType::kBF16}, pb, {1, 64}, 1e-2);
}

// An fp8 linear's weight-only small-M kernel: e4m3 weights with per-channel scales against
// unquantized bf16 / f16 activations, 1 to 8 rows (one launch) and 13 (two), with an f32 bias;
// an odd N and a K past whole unrolled iterations included. The reference multiplies the same
// activations by the e4m3 values and applies the scales and bias outside.
TEST_F(GemmTest, Fp8WeightOnlySmallMMatchesReference) {
  constexpr int64_t kMaxM = 13;
  uint32_t seed = 700;
  for (DType act : {DType::kBF16, DType::kF16}) {
    for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{1001, 4112}, {2048, 2048}, {64, 8192}}) {
      HostOperands h;
      h.n = n;
      h.k = k;
      h.x = RandomUniform(static_cast<size_t>(kMaxM * k), -1.0f, 1.0f, ++seed);
      for (float& v : h.x) v = RoundTo(act, v);
      const float w_range = std::sqrt(3.0f / static_cast<float>(k));
      std::vector<float> w = RandomUniform(static_cast<size_t>(n * k), -w_range, w_range, ++seed);
      for (int64_t c = 0; c < n; ++c) {  // channels of different magnitudes: a misplaced scale shows
        for (int64_t i = 0; i < k; ++i) w[c * k + i] *= 0.5f + 0.5f * static_cast<float>(c % 3);
      }
      std::vector<uint8_t> q;
      QuantizeFp8Host(w, n, k, /*per_tensor=*/false, q, h.w, h.col_scale);
      h.bias = RandomUniform(static_cast<size_t>(n), -0.5f, 0.5f, ++seed);
      DeviceBuffer dx = Upload(Encode(act, h.x)), dw = Upload(q), dscale = Upload(h.col_scale), dbias = Upload(h.bias);
      const size_t y_bytes = static_cast<size_t>(kMaxM * n) * DTypeSize(act);
      DeviceBuffer dy(y_bytes);
      for (int64_t m : {1, 3, 8, 13}) {
        const std::string what = std::string(DTypeName(act)) + " M=" + std::to_string(m) + " N=" + std::to_string(n) +
                                 " K=" + std::to_string(k);
        FERRY_ASSERT_CUDA(cudaMemset(dy.get(), 0xff, y_bytes));
        FERRY_ASSERT_OK(ferry::cuda::gemm_kernels::Fp8WeightOnlySmallM(
            dx.get(), act, k, m, dw.get(), dscale.as<float>(), n, k, dbias.get(), DType::kF32, GemmActivation::kNone,
            dy.get(), n, stream_));
        FERRY_ASSERT_CUDA(cudaStreamSynchronize(stream_));
        std::vector<uint8_t> raw(static_cast<size_t>(m * n) * DTypeSize(act));
        FERRY_ASSERT_CUDA(cudaMemcpy(raw.data(), dy.get(), raw.size(), cudaMemcpyDeviceToHost));
        std::vector<float> got(static_cast<size_t>(m * n));
        ConvertToF32(act, raw.data(), got.data(), got.size());
        std::vector<int64_t> rows(static_cast<size_t>(m));
        for (int64_t r = 0; r < m; ++r) rows[r] = r;
        const std::vector<double> ref = ReferenceRows(h, rows, GemmActivation::kNone);
        double err2 = 0.0, ref2 = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
          err2 += (got[i] - ref[i]) * (got[i] - ref[i]);
          ref2 += ref[i] * ref[i];
        }
        // f32 accumulation of exact products: only the output's rounding to bf16 / f16 remains.
        EXPECT_LT(std::sqrt(err2 / ref2), act == DType::kBF16 ? 4e-3 : 1e-3) << what;
      }
    }
  }
  // K not a multiple of 16 is refused.
  DeviceBuffer any(4096);
  EXPECT_EQ(ferry::cuda::gemm_kernels::Fp8WeightOnlySmallM(any.get(), DType::kBF16, 40, 1, any.get(), any.as<float>(),
                                                           8, 40, nullptr, DType::kF32, GemmActivation::kNone,
                                                           any.get(), 8, stream_)
                .code(),
            StatusCode::kInvalidArgument);
}

// Dense bf16 / f16 weights on the small-M kernel (a split-K GEMV), forced by small_m_max
// (two launches past 8 rows) and by a kSmallM choice, bias and activations included; without
// either, dense problems stay on cuBLASLt.
TEST_F(GemmTest, DenseSmallMKernelMatchesReference) {
  GemmChoice small;
  small.route = GemmChoice::Route::kSmallM;
  struct Case {
    int64_t n, k;
    bool bias;
    DType bias_dtype;
    GemmActivation activation;
  };
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const GemmKind kind = dt == DType::kBF16 ? GemmKind::kBF16 : GemmKind::kF16;
    for (const Case& c : {Case{2048, 2048, false, DType::kF32, GemmActivation::kNone},
                          Case{5632, 2048, false, DType::kF32, GemmActivation::kNone},
                          Case{2048, 8192, false, DType::kF32, GemmActivation::kNone},
                          Case{1000, 1024, true, DType::kF32, GemmActivation::kGeluErf},
                          Case{1001, 1024, true, dt, GemmActivation::kGeluTanh},
                          // K past whole unrolled iterations (a tail of two pieces), odd N.
                          Case{1003, 4112, false, DType::kF32, GemmActivation::kNone}}) {
      HostOperands h;
      DeviceOperands d;
      MakeOperands({kind, dt, 16, c.n, c.k, c.bias, c.bias_dtype}, h, d);
      ASSERT_FALSE(HasFatalFailure());
      GemmProblem p = FloatProblem(kind, dt);
      p.n = c.n;
      p.k = c.k;
      p.has_bias = c.bias;
      p.bias_dtype = c.bias_dtype;
      p.activation = c.activation;
      for (int64_t m : {1, 3, 8, 13, 16}) {
        p.m = m;
        for (int how = 0; how < 3; ++how) {
          GemmProblem q = p;
          if (how == 1) q.small_m_max = 16;
          const GemmChoice* choice = how == 2 ? &small : nullptr;
          CheckResult r;
          RunAndCheck(*gemm_, q, h, d, stream_, r, choice);
          ASSERT_FALSE(HasFatalFailure());
          EXPECT_LT(r.rel_err, 1e-2) << Describe(q) << " how " << how;
          EXPECT_EQ(r.unwritten, 0) << Describe(q) << " how " << how;
          if (how == 1) {
            EXPECT_EQ(r.route, "small_m_kernel") << Describe(q);
          } else if (how == 0) {
            EXPECT_NE(r.route, "small_m_kernel") << Describe(q);
          }
        }
      }
    }
  }
  EXPECT_EQ(gemm_->choice_fallbacks(), 0);
  // The tuner, asked to, times the kernel against cuBLASLt; whichever it picks runs.
  {
    HostOperands h;
    DeviceOperands d;
    MakeOperands({GemmKind::kBF16, DType::kBF16, 8, 2048, 2048}, h, d);
    ASSERT_FALSE(HasFatalFailure());
    TuneOptions options;
    options.dense_small_m = true;
    for (int64_t m : {1, 8}) {
      GemmProblem p = FloatProblem(GemmKind::kBF16, DType::kBF16);
      p.m = m, p.n = 2048, p.k = 2048;
      DeviceBuffer y(static_cast<size_t>(m * 2048 * 2));
      Result<GemmChoice> choice = gemm_->Tune(p, ArgsFor(d, y.get()), stream_, options);
      ASSERT_TRUE(choice.ok()) << choice.status().ToString();
      std::cout << "  tuned " << Describe(p) << ": " << choice->ToString().substr(0, 7) << ", "
                << choice->measured_us << " us\n";
      CheckResult r;
      RunAndCheck(*gemm_, p, h, d, stream_, r, &*choice);
      EXPECT_LT(r.rel_err, 1e-2) << Describe(p);
    }
  }
  // K not a multiple of 16: the kernel cannot run it, and a kSmallM choice falls back.
  HostOperands h;
  DeviceOperands d;
  MakeOperands({GemmKind::kBF16, DType::kBF16, 4, 1000, 1000}, h, d);
  GemmProblem p = FloatProblem(GemmKind::kBF16, DType::kBF16);
  p.m = 4, p.n = 1000, p.k = 1000;
  const int64_t fallbacks = gemm_->choice_fallbacks();
  CheckResult r;
  RunAndCheck(*gemm_, p, h, d, stream_, r, &small);
  EXPECT_LT(r.rel_err, 1e-2);
  EXPECT_EQ(gemm_->choice_fallbacks(), fallbacks + 1);
}

// int4 weight-only: each route forced (small-M kernel, tensor-core kernel with and without
// split-K, dequantization + cuBLASLt) and the default choice, against the exact product with
// the dequantized matrix; odd N, bias, GELU and groups of 32 too.
TEST_F(GemmTest, Int4WeightOnlyEveryRoute) {
  GemmChoice small, mma, lt;
  small.route = GemmChoice::Route::kSmallM;
  mma.route = GemmChoice::Route::kInt4Mma;
  lt.route = GemmChoice::Route::kCublasLt;  // an unchecked zero algo: Run falls back to the heuristic
  struct Case {
    DType act;
    int64_t n, k, group;
    bool bias;
    GemmActivation activation;
  };
  for (const Case& c : {Case{DType::kBF16, 2048, 2048, 128, false, GemmActivation::kNone},
                        Case{DType::kF16, 5632, 2048, 128, false, GemmActivation::kNone},
                        Case{DType::kBF16, 2048, 8192, 128, false, GemmActivation::kNone},
                        Case{DType::kBF16, 1000, 1024, 32, true, GemmActivation::kGeluErf},
                        Case{DType::kF16, 1000, 1024, 1024, true, GemmActivation::kGeluTanh}}) {
    OperandSpec spec{GemmKind::kInt4WeightOnly, c.act, 513, c.n, c.k, c.bias, DType::kF32};
    spec.group_size = c.group;
    HostOperands h;
    DeviceOperands d;
    MakeOperands(spec, h, d);
    ASSERT_FALSE(HasFatalFailure());
    GemmProblem p;
    p.kind = GemmKind::kInt4WeightOnly;
    p.out_dtype = c.act;
    p.n = c.n;
    p.k = c.k;
    p.group_size = c.group;
    p.has_bias = c.bias;
    p.bias_dtype = DType::kF32;
    p.activation = c.activation;
    for (int64_t m : {1, 3, 8, 16, 33, 64, 200, 513}) {
      p.m = m;
      for (const GemmChoice* choice : std::vector<const GemmChoice*>{nullptr, &small, &mma, &lt}) {
        if (choice == &small && m > 64) continue;
        CheckResult r;
        RunAndCheck(*gemm_, p, h, d, stream_, r, choice);
        ASSERT_FALSE(HasFatalFailure());
        const std::string how = choice == nullptr ? "default" : choice->ToString().substr(0, 8);
        std::cout << "  " << std::left << std::setw(58) << Describe(p) << " " << how << " rel_err " << std::scientific
                  << std::setprecision(2) << r.rel_err << std::defaultfloat << "\n";
        EXPECT_LT(r.rel_err, 1e-2) << Describe(p) << " " << how;
        EXPECT_EQ(r.unwritten, 0) << Describe(p) << " " << how;
      }
    }
  }
}

TEST_F(GemmTest, Int4ProblemsItCannotTakeAreErrors) {
  GemmProblem p;
  p.kind = GemmKind::kInt4WeightOnly;
  p.out_dtype = DType::kF32;
  p.m = 1;
  p.n = 64;
  p.k = 256;
  p.group_size = 128;
  EXPECT_EQ(gemm_->CheckProblem(p).code(), StatusCode::kInvalidArgument);  // f32 activations
  p.out_dtype = DType::kBF16;
  EXPECT_TRUE(gemm_->CheckProblem(p).ok());
  p.group_size = 48;
  EXPECT_EQ(gemm_->CheckProblem(p).code(), StatusCode::kInvalidArgument);
  p.group_size = 0;
  EXPECT_EQ(gemm_->CheckProblem(p).code(), StatusCode::kInvalidArgument);
  auto choice = GemmChoice::FromString("int4_mma");
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->route, GemmChoice::Route::kInt4Mma);
  EXPECT_EQ(choice->ToString(), "int4_mma");
}

TEST_F(GemmTest, StridedRowsLeavePaddingAlone) {
  struct Case {
    GemmKind kind;
    DType act, out;
    double tol;
  };
  for (const Case& c : {Case{GemmKind::kBF16, DType::kBF16, DType::kBF16, 1e-2},
                        Case{GemmKind::kInt8, DType::kI8, DType::kBF16, 1e-2},
                        Case{GemmKind::kInt8WeightOnly, DType::kBF16, DType::kBF16, 1e-2}}) {
    const int64_t m = 37, n = 1024, k = 512, ldx = k + 64, ldy = n + 32;
    OperandSpec spec{c.kind, c.out, m, n, k};
    HostOperands h;
    DeviceOperands d;
    MakeOperands(spec, h, d);
    const size_t xsize = c.kind == GemmKind::kInt8 ? 1 : DTypeSize(c.act);
    DeviceBuffer xs(static_cast<size_t>(m * ldx) * xsize);
    FERRY_ASSERT_CUDA(cudaMemset(xs.get(), 0x7f, xs.bytes()));
    FERRY_ASSERT_CUDA(cudaMemcpy2D(xs.get(), ldx * xsize, d.x.get(), k * xsize, k * xsize, m,
                                   cudaMemcpyDeviceToDevice));
    d.x = std::move(xs);
    for (int64_t rows_m : {int64_t{3}, m}) {
      GemmProblem p;
      p.kind = c.kind;
      p.out_dtype = c.out;
      p.m = rows_m;
      p.n = n;
      p.k = k;
      p.ldx = ldx;
      p.ldy = ldy;
      CheckResult r;
      RunAndCheck(*gemm_, p, h, d, stream_, r);
      EXPECT_LT(r.rel_err, c.tol) << Describe(p) << " via " << r.route;
      EXPECT_EQ(r.unwritten, 0) << Describe(p);
    }
    // The padding columns of Y stay as poisoned.
    GemmProblem p;
    p.kind = c.kind;
    p.out_dtype = c.out;
    p.m = m;
    p.n = n;
    p.k = k;
    p.ldx = ldx;
    p.ldy = ldy;
    const size_t y_bytes = static_cast<size_t>(m * ldy) * 2;
    DeviceBuffer y(y_bytes);
    FERRY_ASSERT_CUDA(cudaMemset(y.get(), 0xff, y_bytes));
    FERRY_ASSERT_OK(gemm_->Run(p, ArgsFor(d, y.get()), stream_));
    FERRY_ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<uint16_t> raw(m * ldy);
    FERRY_ASSERT_CUDA(cudaMemcpy(raw.data(), y.get(), y_bytes, cudaMemcpyDeviceToHost));
    int64_t touched = 0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t col = n; col < ldy; ++col) touched += raw[r * ldy + col] != 0xffff;
    }
    EXPECT_EQ(touched, 0) << GemmKindName(c.kind);
  }
}

TEST_F(GemmTest, TunedChoiceRunsAndSerializes) {
  struct Case {
    GemmKind kind;
    DType act;
    int64_t m;
    Fp8Scaling scaling = Fp8Scaling::kPerTensor;
  };
  std::vector<Case> cases = {{GemmKind::kBF16, DType::kBF16, 64},
                             {GemmKind::kBF16, DType::kBF16, 1},
                             {GemmKind::kInt8, DType::kBF16, 64},
                             {GemmKind::kInt8WeightOnly, DType::kBF16, 4},
                             {GemmKind::kInt8WeightOnly, DType::kBF16, 128}};
  if (cc_ >= 89) {
    cases.push_back({GemmKind::kFp8, DType::kBF16, 512});
    // Per-row/col scales: candidates from both routes (outer-vector and f32 accumulator).
    cases.push_back({GemmKind::kFp8, DType::kBF16, 16, Fp8Scaling::kPerRowCol});
    cases.push_back({GemmKind::kFp8, DType::kBF16, 512, Fp8Scaling::kPerRowCol});
  }
  for (const Case& c : cases) {
    OperandSpec spec{c.kind, c.act, c.m, 2048, 2048, true, c.act};
    spec.fp8_scaling = c.scaling;
    HostOperands h;
    DeviceOperands d;
    MakeOperands(spec, h, d);
    GemmProblem p;
    p.kind = c.kind;
    p.out_dtype = c.act;
    p.m = c.m;
    p.n = 2048;
    p.k = 2048;
    p.has_bias = true;
    p.bias_dtype = c.act;
    p.fp8_scaling = c.scaling;
    DeviceBuffer y(static_cast<size_t>(c.m * 2048) * DTypeSize(c.act));
    Result<GemmChoice> choice = gemm_->Tune(p, ArgsFor(d, y.get()), stream_);
    ASSERT_TRUE(choice.ok()) << choice.status().ToString();
    std::cout << "  tuned " << Describe(p) << ": " << choice->measured_us << " us, " << choice->ToString().substr(0, 6)
              << "\n";
    Result<GemmChoice> parsed = GemmChoice::FromString(choice->ToString());
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(parsed->route, choice->route);
    EXPECT_EQ(parsed->algo, choice->algo);
    EXPECT_EQ(parsed->workspace_bytes, choice->workspace_bytes);

    const int64_t fallbacks = gemm_->choice_fallbacks();
    CheckResult r;
    RunAndCheck(*gemm_, p, h, d, stream_, r, &*parsed);
    EXPECT_LT(r.rel_err, 1e-2) << Describe(p);
    EXPECT_EQ(r.unwritten, 0);
    // Another M of the same bucket takes the same choice.
    GemmProblem q = p;
    q.m = std::max<int64_t>(1, c.m - 1);
    if (GemmMBucket(q.m) == GemmMBucket(p.m)) {
      RunAndCheck(*gemm_, q, h, d, stream_, r, &*parsed);
      EXPECT_LT(r.rel_err, 1e-2) << Describe(q);
      EXPECT_EQ(r.unwritten, 0);
    }
    EXPECT_EQ(gemm_->choice_fallbacks(), fallbacks) << "the tuned choice was rejected";

    if (parsed->route == GemmChoice::Route::kCublasLt) {
      // A choice that needs more workspace than this LtGemm owns falls back to the heuristic.
      GemmChoice greedy = *parsed;
      greedy.workspace_bytes = gemm_->workspace_bytes() + 1;
      RunAndCheck(*gemm_, p, h, d, stream_, r, &greedy);
      EXPECT_LT(r.rel_err, 1e-2);
      EXPECT_EQ(gemm_->choice_fallbacks(), fallbacks + 1);
    }
  }
  // A small-M choice only fits weight-only and dense bf16 / f16 problems.
  GemmChoice small;
  small.route = GemmChoice::Route::kSmallM;
  OperandSpec spec{GemmKind::kF32, DType::kF32, 4, 256, 256};
  HostOperands h;
  DeviceOperands d;
  MakeOperands(spec, h, d);
  GemmProblem p = FloatProblem(GemmKind::kF32, DType::kF32);
  p.m = 4, p.n = 256, p.k = 256;
  DeviceBuffer y(4 * 256 * 4);
  EXPECT_EQ(gemm_->Run(p, ArgsFor(d, y.get()), stream_, &small).code(), StatusCode::kInvalidArgument);
  // An accumulator-route choice only fits fp8 per-row/col problems.
  GemmChoice acc;
  acc.route = GemmChoice::Route::kCublasLtAcc;
  EXPECT_EQ(gemm_->Run(p, ArgsFor(d, y.get()), stream_, &acc).code(), StatusCode::kInvalidArgument);
}

// fp8 per-row/col with a choice from each route the tuner may pick, bias and exact GELU
// included: the accumulator route's kernels give the same result as the outer-vector ones.
TEST_F(GemmTest, Fp8PerRowColChoicesOfEitherRouteMatchReference) {
  if (cc_ < 89) GTEST_SKIP() << "fp8 needs sm_89+";
  for (int64_t m : {1, 24, 128}) {
    OperandSpec spec{GemmKind::kFp8, DType::kBF16, m, 4096, 1024, true, DType::kBF16};
    spec.fp8_scaling = Fp8Scaling::kPerRowCol;
    HostOperands h;
    DeviceOperands d;
    MakeOperands(spec, h, d);
    GemmProblem p;
    p.kind = GemmKind::kFp8;
    p.out_dtype = DType::kBF16;
    p.fp8_scaling = Fp8Scaling::kPerRowCol;
    p.m = m;
    p.n = 4096;
    p.k = 1024;
    p.has_bias = true;
    p.bias_dtype = DType::kBF16;
    p.activation = GemmActivation::kGeluErf;
    DeviceBuffer y(static_cast<size_t>(m * 4096) * 2);
    Result<GemmChoice> tuned = gemm_->Tune(p, ArgsFor(d, y.get()), stream_);
    ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
    std::cout << "  fp8 row/col M=" << m << ": tuned " << tuned->ToString().substr(0, 6) << " " << tuned->measured_us
              << " us\n";
    // The same algorithm bits under the other route are not a valid choice in general; each
    // route is checked with its own heuristic algorithm instead (an empty algo falls back).
    for (GemmChoice::Route route : {GemmChoice::Route::kCublasLt, GemmChoice::Route::kCublasLtAcc}) {
      GemmChoice c = *tuned;
      if (c.route != route) c = GemmChoice{.route = route};
      CheckResult r;
      RunAndCheck(*gemm_, p, h, d, stream_, r, &c);
      EXPECT_LT(r.rel_err, 2e-2) << "M=" << m << " route " << static_cast<int>(route);
      EXPECT_EQ(r.unwritten, 0);
    }
  }
}

// Fast accumulation (the tensor cores' accumulator over the whole K) against the exact
// route on a long K, where its error grows: both tuned and both against the float64
// reference of the same e4m3 operands. On an H200 (bench/cuda_gemm_bench --fp8) the fast
// error is about ten times the exact one and far below e4m3 rounding of the operands; that
// it is larger shows the setting reached cuBLASLt.
TEST_F(GemmTest, Fp8FastAccumulationStaysNearTheExactResult) {
  if (cc_ < 89) GTEST_SKIP() << "fp8 needs sm_89+";
  const int64_t m = 256, n = 1024, k = 8192;
  OperandSpec spec{GemmKind::kFp8, DType::kBF16, m, n, k};
  spec.fp8_scaling = Fp8Scaling::kPerRowCol;
  HostOperands h;
  DeviceOperands d;
  MakeOperands(spec, h, d);
  double err[2] = {0, 0};
  for (int fast = 0; fast < 2; ++fast) {
    GemmProblem p;
    p.kind = GemmKind::kFp8;
    p.out_dtype = DType::kF32;
    p.fp8_scaling = Fp8Scaling::kPerRowCol;
    p.fp8_fast_accum = fast == 1;
    p.m = m;
    p.n = n;
    p.k = k;
    DeviceBuffer y(static_cast<size_t>(m * n) * 4);
    Result<GemmChoice> tuned = gemm_->Tune(p, ArgsFor(d, y.get()), stream_);
    ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
    CheckResult r;
    RunAndCheck(*gemm_, p, h, d, stream_, r, &*tuned);
    EXPECT_EQ(r.unwritten, 0);
    err[fast] = r.rel_err;
  }
  std::cout << "  fp8 K=" << k << " relative error: exact " << err[0] << ", fast " << err[1] << "\n";
  EXPECT_LT(err[0], 1e-3);
  EXPECT_LT(err[1], 1e-2);
  if (cc_ == 90) {
    EXPECT_GT(err[1], err[0]) << "fast accumulation did not reach cuBLASLt";
  }
}

TEST_F(GemmTest, CachesOnePlanPerShape) {
  OperandSpec spec{GemmKind::kBF16, DType::kBF16, 64, 512, 512};
  HostOperands h;
  DeviceOperands d;
  MakeOperands(spec, h, d);
  DeviceBuffer y(64 * 512 * 2);
  GemmProblem p = FloatProblem(GemmKind::kBF16, DType::kBF16);
  p.n = 512, p.k = 512;
  const int before = gemm_->cached_plans();
  for (int64_t m : {64, 64, 32, 64, 32}) {
    p.m = m;
    FERRY_ASSERT_OK(gemm_->Run(p, ArgsFor(d, y.get()), stream_));
  }
  EXPECT_EQ(gemm_->cached_plans(), before + 2);
  FERRY_ASSERT_CUDA(cudaStreamSynchronize(stream_));
}

TEST_F(GemmTest, RejectsWhatCublasLtCannotRun) {
  GemmProblem p;
  p.m = 8;
  p.n = 64;
  p.k = 64;
  p.kind = GemmKind::kBF16;
  p.out_dtype = DType::kF32;
  EXPECT_EQ(gemm_->CheckProblem(p).code(), StatusCode::kInvalidArgument);  // bf16 writes bf16
  p.out_dtype = DType::kBF16;
  p.has_bias = true;
  p.bias_dtype = DType::kF16;
  EXPECT_EQ(gemm_->CheckProblem(p).code(), StatusCode::kInvalidArgument);  // bias f32 or bf16
  p.has_bias = false;
  p.ldx = 32;
  EXPECT_EQ(gemm_->CheckProblem(p).code(), StatusCode::kInvalidArgument);  // ldx < K
  p.ldx = 0;

  GemmProblem i8 = p;
  i8.kind = GemmKind::kInt8;
  i8.n = 4098;
  EXPECT_EQ(gemm_->CheckProblem(i8).code(), StatusCode::kInvalidArgument);  // IMMA: N % 4
  i8.n = 64;
  i8.out_dtype = DType::kI32;
  i8.has_bias = true;
  i8.bias_dtype = DType::kF32;
  EXPECT_EQ(gemm_->CheckProblem(i8).code(), StatusCode::kInvalidArgument);  // raw i32 takes no bias

  GemmProblem f8 = p;
  f8.kind = GemmKind::kFp8;
  f8.k = 2056;
  if (cc_ >= 89) {
    EXPECT_EQ(gemm_->CheckProblem(f8).code(), StatusCode::kInvalidArgument);  // K % 16
    f8.k = 64;
    EXPECT_TRUE(gemm_->CheckProblem(f8).ok());
    // Misaligned fp8 operand.
    DeviceBuffer x(8 * 64 + 16), w(64 * 64), y(8 * 64 * 2);
    GemmArgs a;
    a.x = x.as<uint8_t>() + 8;
    a.w = w.get();
    a.y = y.get();
    EXPECT_EQ(gemm_->Run(f8, a, stream_).code(), StatusCode::kInvalidArgument);
  } else {
    EXPECT_EQ(gemm_->CheckProblem(f8).code(), StatusCode::kUnimplemented);
  }

  // Missing pointers and scales.
  DeviceBuffer buf(64 * 64 * 4);
  GemmArgs a;
  a.x = buf.get();
  a.w = buf.get();
  EXPECT_EQ(gemm_->Run(p, a, stream_).code(), StatusCode::kInvalidArgument);
  a.y = buf.get();
  GemmProblem w8 = p;
  w8.kind = GemmKind::kInt8;
  w8.out_dtype = DType::kBF16;
  EXPECT_EQ(gemm_->Run(w8, a, stream_).code(), StatusCode::kInvalidArgument);  // no scales
  // M = 0 is a no-op.
  GemmProblem empty = p;
  empty.m = 0;
  EXPECT_TRUE(gemm_->Run(empty, a, stream_).ok());
}

TEST(GemmChoiceTest, RoundTripAndMalformed) {
  GemmChoice c;
  c.route = GemmChoice::Route::kCublasLt;
  for (int i = 0; i < 8; ++i) c.algo[i] = 0x0123456789abcdefull * (i + 1);
  c.workspace_bytes = 4u << 20;
  const std::string text = c.ToString();
  Result<GemmChoice> back = GemmChoice::FromString(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->algo, c.algo);
  EXPECT_EQ(back->workspace_bytes, c.workspace_bytes);
  Result<GemmChoice> small = GemmChoice::FromString("small_m");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->route, GemmChoice::Route::kSmallM);
  Result<GemmChoice> w8 = GemmChoice::FromString("w8_mma");
  ASSERT_TRUE(w8.ok());
  EXPECT_EQ(w8->route, GemmChoice::Route::kW8Mma);
  EXPECT_EQ(w8->ToString(), "w8_mma");
  EXPECT_FALSE(w8->wide_tile);
  Result<GemmChoice> wide = GemmChoice::FromString("w8_mma:t256");
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(wide->route, GemmChoice::Route::kW8Mma);
  EXPECT_TRUE(wide->wide_tile);
  EXPECT_EQ(wide->ToString(), "w8_mma:t256");
  EXPECT_FALSE(GemmChoice::FromString("w8_mma:t512").ok());
  GemmChoice acc = c;
  acc.route = GemmChoice::Route::kCublasLtAcc;
  ASSERT_EQ(acc.ToString().substr(0, 7), "lt_acc:");
  Result<GemmChoice> acc_back = GemmChoice::FromString(acc.ToString());
  ASSERT_TRUE(acc_back.ok()) << acc_back.status().ToString();
  EXPECT_EQ(acc_back->route, GemmChoice::Route::kCublasLtAcc);
  EXPECT_EQ(acc_back->algo, c.algo);
  for (const std::string& bad : {std::string(""), std::string("lt:"), text.substr(0, text.size() - 1) + "x",
                                "xx" + text.substr(2), text.substr(0, 40)}) {
    EXPECT_FALSE(GemmChoice::FromString(bad).ok()) << bad;
  }
}

TEST(GemmHostHelpers, FastE4M3MatchesCore) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-500.0f, 500.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = i % 2 ? dist(rng) : dist(rng) * 1e-3f;
    ASSERT_EQ(EncodeE4M3(v), F32ToF8E4M3(v)) << v;
  }
  for (int c = 0; c < 0x7f; ++c) {
    const float v = F8E4M3ToF32(static_cast<uint8_t>(c));
    EXPECT_EQ(EncodeE4M3(v), c);
    EXPECT_EQ(EncodeE4M3(-v), c == 0 ? 0x80 : (0x80 | c));
  }
}

TEST(GemmChoiceTest, Buckets) {
  EXPECT_EQ(GemmMBucket(1), 0);
  EXPECT_EQ(GemmMBucket(2), 1);
  EXPECT_EQ(GemmMBucket(4), 1);
  EXPECT_EQ(GemmMBucket(5), 2);
  EXPECT_EQ(GemmMBucket(64), 5);
  EXPECT_EQ(GemmMBucket(65), 6);
  EXPECT_EQ(GemmMBucket(512), 8);
  EXPECT_EQ(GemmMBucket(513), 9);
  EXPECT_EQ(GemmMBucket(1024), 9);
  EXPECT_EQ(GemmMBucket(1025), 10);
  EXPECT_EQ(GemmMBucket(kGemmMaxTunedM), kGemmMBuckets - 1);
  EXPECT_EQ(GemmMBucket(kGemmMaxTunedM + 1), kGemmMBuckets);  // untuned: the heuristic
  EXPECT_EQ(GemmMBucket(100000), kGemmMBuckets);
  for (int b = 0; b < kGemmMBuckets; ++b) EXPECT_EQ(GemmMBucket(GemmBucketTuneM(b)), b);
}

// A timing table, run on demand (--gtest_also_run_disabled_tests): bf16 TFLOP/s through the
// heuristic and the tuned choice, and the int8 weight-only routes at decode sizes. Each
// call is captured 20 times into a CUDA graph and replayed; weights rotate through enough
// copies to overflow L2.
TEST_F(GemmTest, DISABLED_TimingTable) {
  struct Row {
    GemmKind kind;
    DType act;
    int64_t m, n, k;
    int small_m_max;
  };
  std::vector<Row> rows;
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{2048, 2048}, {8192, 2048}}) {
    for (int64_t m : {1, 64, 512, 2048}) rows.push_back({GemmKind::kBF16, DType::kBF16, m, n, k, 0});
  }
  for (int64_t m : {1, 8}) {
    rows.push_back({GemmKind::kInt8WeightOnly, DType::kBF16, m, 8192, 2048, 64});
    rows.push_back({GemmKind::kInt8WeightOnly, DType::kBF16, m, 8192, 2048, -1});
  }
  if (cc_ >= 89) rows.push_back({GemmKind::kFp8, DType::kBF16, 2048, 8192, 2048, 0});
  rows.push_back({GemmKind::kInt8, DType::kBF16, 2048, 8192, 2048, 0});
  // llama-3-8b's decode GEMMs (qkv, o, gate_up, down), fp8 per-row/col against bf16.
  const std::vector<std::pair<int64_t, int64_t>> llama8b = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  for (int64_t m : {1, 32, 128}) {
    for (const auto& [n, k] : llama8b) {
      rows.push_back({GemmKind::kBF16, DType::kBF16, m, n, k, 0});
      if (cc_ >= 89) rows.push_back({GemmKind::kFp8, DType::kBF16, m, n, k, 1});  // 1: per-row/col
    }
  }

  std::cout << "\n  kind              M      N      K   heuristic us  TFLOP/s   tuned us  TFLOP/s  route\n";
  for (const Row& row : rows) {
    OperandSpec spec{row.kind, row.act, row.m, row.n, row.k};
    const bool row_col = row.kind == GemmKind::kFp8 && row.small_m_max == 1;
    if (row_col) spec.fp8_scaling = Fp8Scaling::kPerRowCol;
    const size_t w_bytes = static_cast<size_t>(row.n * row.k) *
                           (row.kind == GemmKind::kBF16 ? 2 : 1);
    const int copies = static_cast<int>(std::clamp<size_t>((size_t{160} << 20) / w_bytes + 1, 1, 16));
    std::vector<HostOperands> hs(copies);
    std::vector<DeviceOperands> ds(copies);
    for (int c = 0; c < copies; ++c) {
      spec.seed = 100 + c;
      MakeOperands(spec, hs[c], ds[c]);
    }
    GemmProblem p;
    p.kind = row.kind;
    p.out_dtype = row.act;
    p.m = row.m;
    p.n = row.n;
    p.k = row.k;
    p.small_m_max = row_col ? 0 : row.small_m_max;
    if (row_col) p.fp8_scaling = Fp8Scaling::kPerRowCol;
    DeviceBuffer y(static_cast<size_t>(row.m * row.n) * 2);
    const auto time_graph = [&](const GemmChoice* choice, double& us) {
      for (int c = 0; c < copies; ++c) FERRY_ASSERT_OK(gemm_->Run(p, ArgsFor(ds[c], y.get()), stream_, choice));
      FERRY_ASSERT_CUDA(cudaStreamSynchronize(stream_));
      constexpr int kCalls = 20;
      cudaGraph_t graph = nullptr;
      FERRY_ASSERT_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < kCalls; ++i) {
        const Status s = gemm_->Run(p, ArgsFor(ds[i % copies], y.get()), stream_, choice);
        if (!s.ok()) {
          cudaStreamEndCapture(stream_, &graph);
          if (graph != nullptr) cudaGraphDestroy(graph);
          FAIL() << s.ToString();
        }
      }
      FERRY_ASSERT_CUDA(cudaStreamEndCapture(stream_, &graph));
      cudaGraphExec_t exec = nullptr;
      FERRY_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      std::vector<float> times;
      for (int rep = 0; rep < 7; ++rep) {
        cudaEventRecord(start, stream_);
        cudaGraphLaunch(exec, stream_);
        cudaEventRecord(stop, stream_);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        times.push_back(ms * 1000.0f / kCalls);
      }
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      FERRY_ASSERT_CUDA(cudaGetLastError());
      std::sort(times.begin(), times.end());
      us = times[times.size() / 2];
    };
    double heuristic_us = 0, tuned_us = 0;
    time_graph(nullptr, heuristic_us);
    if (HasFatalFailure()) return;
    Result<GemmChoice> choice = gemm_->Tune(p, ArgsFor(ds[0], y.get()), stream_);
    ASSERT_TRUE(choice.ok()) << choice.status().ToString();
    time_graph(&*choice, tuned_us);
    if (HasFatalFailure()) return;
    const double flops = 2.0 * row.m * row.n * row.k;
    Result<std::string> route = gemm_->DescribeRoute(p, ArgsFor(ds[0], y.get()));
    std::cout << "  " << std::left << std::setw(16) << GemmKindName(row.kind) << std::right << std::setw(5) << row.m
              << std::setw(7) << row.n << std::setw(7) << row.k << std::fixed << std::setprecision(1)
              << std::setw(14) << heuristic_us << std::setw(9) << flops / heuristic_us * 1e-6 << std::setw(11)
              << tuned_us << std::setw(9) << flops / tuned_us * 1e-6 << "  "
              << (route.ok() ? *route : route.status().ToString())
              << (choice->route == GemmChoice::Route::kSmallM       ? " (tuned: small_m)"
                  : choice->route == GemmChoice::Route::kCublasLtAcc ? " (tuned: f32 acc route)"
                  : row_col                                          ? " (row/col)"
                                                                     : "")
              << std::defaultfloat
              << "\n";
  }
}

}  // namespace
}  // namespace ferry::cuda
