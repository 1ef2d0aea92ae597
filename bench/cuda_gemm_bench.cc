// The linears of a decoder layer on the GPU, bf16 weights against int4 weight-only (groups of
// 128), at llama-3-8B shapes (qkv 6144 x 4096, o 4096 x 4096, gate_up 28672 x 4096, down
// 4096 x 14336), for M from decode to prefill sizes.
//
//   cuda_gemm_bench [--layers=L] [--ms=1,2,4,...] [--json=FILE] [--model=8b|1b] [--per-shape]
//   cuda_gemm_bench --fp8 [--layers=L] [--ms=...] [--model=8b|1b] [--tune-m=M]
//   cuda_gemm_bench --passes [--layers=L] [--ms=...] [--model=8b|1b]
//   cuda_gemm_bench --w8 [--layers=L] [--ms=...] [--model=8b|1b|bert] [--per-shape]
//
// --fp8 times fp8 (e4m3) layers instead, against bf16: the per-token x per-channel scaled
// GEMMs of fp8 engines, tuned with exact (f32-promoted) and with fast accumulation, cuBLASLt's
// outer-vector heuristic with each, per-tensor scales (the fastest fp8 kernels cuBLASLt has),
// the per-token quantization passes of the layer's four inputs, TFLOP/s of each, and the error
// of exact and fast accumulation against an f32 GEMM of the same quantized values.
// --tune-m=M tunes every row count's GEMMs at M rows instead of at its own (what an engine's
// M bucket does: every M it serves runs the choice tuned at the bucket's tuning M).
//
// --w8 times the 8-bit GEMMs: fp8 (fast accumulation, per-token x per-channel scales) and int8
// (W8A8) layers tuned on cuBLASLt's kernels alone, ferry's 8-bit tensor-core kernels
// (GemmChoice::Route::kW8Mma: the decode kernel up to 64 rows, the tile kernel past that, with
// 128-token tiles unless FERRY_W8_TILE_KERNEL names another form) alone, and tuned over both
// (which times both tile widths), against tuned bf16; with the weight bytes per second of
// each and the relative difference of the kernel's output from cuBLASLt's. --per-shape adds
// each linear alone (weight TB/s for decode batches, tera-ops/s past 64 rows). The int8 layers
// reuse the fp8 layers' bytes as int8 values (the time does not depend on them).
// --model=bert (with --w8) takes bert-base's linears (qkv 2304 x 768, o 768 x 768, up 3072 x 768,
// down 768 x 3072).
//
// --passes times the memory-bound passes between an fp8 layer's GEMMs instead (the norms with
// their quantization, the o and down inputs' quantization, RoPE with the KV-cache write), in
// microseconds and in bytes moved per second, against a device-to-device copy.
//
// --model=1b takes the llama-3.2-1B shapes instead (qkv 3072 x 2048, o 2048 x 2048, gate_up
// 16384 x 2048, down 2048 x 8192). --per-shape adds, for M <= 8, a table of each bf16 linear
// alone: the dense small-M kernel against cuBLASLt's heuristic, in us and in weight GB/s.
//
// Each format gets L layers of distinct random weights (default 8: 1.7 GB of bf16, 0.45 GB of
// int4, far beyond the 50 MB L2, so every GEMM streams its weight from HBM as decode does).
// Every (shape, M) is first tuned with LtGemm::Tune (bf16: cuBLASLt's top algorithms; int4:
// the small-M kernel, the tensor-core kernel and dequantization + cuBLASLt), then the L
// layers' 4 L GEMMs are captured in one CUDA graph and replayed; the median of 15 replays,
// divided by L, is the time of one layer's linears. The int4 routes are also timed one by one
// (forced choices), so the table shows where each wins; bf16 is also timed with cuBLASLt's
// heuristic and with ferry's dense small-M kernel (M <= 8) on every shape.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"
#include "kernels/int4_groups.h"

namespace {

using ferry::DType;
using ferry::cuda::GemmArgs;
using ferry::cuda::GemmChoice;
using ferry::cuda::GemmKind;
using ferry::cuda::GemmProblem;
using ferry::cuda::LtGemm;

#define CHECK_CUDA(expr)                                                                         \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// A Status, or a Result's status.
const ferry::Status& StatusOf(const ferry::Status& s) { return s; }
template <typename T>
ferry::Status StatusOf(const ferry::Result<T>& r) {
  return r.status();
}

#define CHECK_OK(expr)                                                                          \
  do {                                                                                          \
    const ferry::Status s_ = StatusOf(expr);                                                    \
    if (!s_.ok()) {                                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape k8BShapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
constexpr Shape k1BShapes[] = {{"qkv", 3072, 2048}, {"o", 2048, 2048}, {"gate_up", 16384, 2048}, {"down", 2048, 8192}};
constexpr Shape kBertShapes[] = {{"qkv", 2304, 768}, {"o", 768, 768}, {"up", 3072, 768}, {"down", 768, 3072}};
std::vector<Shape> kShapes(std::begin(k8BShapes), std::end(k8BShapes));
constexpr int64_t kGroup = 128;

void* DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  return p;
}

// Uniform values in [-scale, scale) from a counter hash.
std::vector<float> Random(int64_t count, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    uint64_t z = (seed << 40) ^ static_cast<uint64_t>(i);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v[static_cast<size_t>(i)] = (static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
  }
  return v;
}

struct Weight {
  void* w = nullptr;  // bf16 [n, k] or packed int4 [n, k / 8]
  float* scale = nullptr;
  uint8_t* zero = nullptr;
};

// One (shape, layer) weight in both formats. The int4 one is the bf16 one quantized, so both
// formats compute the same layer.
void MakeWeights(const Shape& s, uint64_t seed, Weight& bf16, Weight& int4) {
  const std::vector<float> w = Random(s.n * s.k, seed, 0.05f);
  std::vector<uint16_t> b(w.size());
  for (size_t i = 0; i < w.size(); ++i) b[i] = ferry::F32ToBf16(w[i]);
  bf16.w = DeviceAlloc(b.size() * 2);
  CHECK_CUDA(cudaMemcpy(bf16.w, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  auto g = ferry::kernels::QuantizeInt4(w.data(), s.n, s.k, kGroup);
  CHECK_OK(g);
  const std::vector<uint32_t> packed = ferry::kernels::PackInt4Rows(*g);
  int4.w = DeviceAlloc(packed.size() * 4);
  CHECK_CUDA(cudaMemcpy(int4.w, packed.data(), packed.size() * 4, cudaMemcpyHostToDevice));
  int4.scale = static_cast<float*>(DeviceAlloc(g->scales.size() * 4));
  CHECK_CUDA(cudaMemcpy(int4.scale, g->scales.data(), g->scales.size() * 4, cudaMemcpyHostToDevice));
  int4.zero = static_cast<uint8_t*>(DeviceAlloc(g->zeros.size()));
  CHECK_CUDA(cudaMemcpy(int4.zero, g->zeros.data(), g->zeros.size(), cudaMemcpyHostToDevice));
}

GemmProblem Problem(bool int4, int64_t m, const Shape& s) {
  GemmProblem p;
  p.kind = int4 ? GemmKind::kInt4WeightOnly : GemmKind::kBF16;
  p.out_dtype = DType::kBF16;
  p.m = m;
  p.n = s.n;
  p.k = s.k;
  p.group_size = int4 ? kGroup : 0;
  return p;
}

GemmArgs Args(const Weight& w, const void* x, void* y) {
  GemmArgs a;
  a.x = x;
  a.w = w.w;
  a.y = y;
  a.w_scale = w.scale;
  a.w_zero = w.zero;
  return a;
}

// Median microseconds of one replay of `body` captured in a graph (15 replays after 3), the
// body run once outside capture first (plans, scratch).
template <typename Body>
double TimeGraph(cudaStream_t stream, const Body& body) {
  body();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  body();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  std::vector<double> us;
  for (int i = 0; i < 15; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000.0);
  }
  std::sort(us.begin(), us.end());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return us[us.size() / 2];
}

// Median microseconds per layer of replaying all layers' GEMMs with one choice per shape
// (null: the default route); only shape `only` when it is not negative.
double TimeLayers(LtGemm& gemm, cudaStream_t stream, bool int4, int64_t m, const std::vector<std::vector<Weight>>& w,
                  const std::vector<const GemmChoice*>& choices, const void* x, void* y, int only = -1) {
  const int layers = static_cast<int>(w[0].size());
  return TimeGraph(stream, [&] {
           for (int l = 0; l < layers; ++l) {
             for (size_t si = 0; si < std::size(kShapes); ++si) {
               if (only >= 0 && static_cast<int>(si) != only) continue;
               CHECK_OK(gemm.Run(Problem(int4, m, kShapes[si]), Args(w[si][l], x, y), stream, choices[si]));
             }
           }
         }) /
         layers;
}

// Random bf16 activations [max_m, max_k] on the device, for the largest M and K of the run,
// an LtGemm and a stream.
struct Setup {
  int64_t max_m = 0, max_n = 0, max_k = 0;
  void* x = nullptr;
  std::unique_ptr<LtGemm> gemm;
  cudaStream_t stream = nullptr;
};
Setup MakeSetup(const std::vector<int64_t>& ms) {
  Setup a;
  a.max_m = *std::max_element(ms.begin(), ms.end());
  for (const Shape& s : kShapes) {
    a.max_n = std::max(a.max_n, s.n);
    a.max_k = std::max(a.max_k, s.k);
  }
  const std::vector<float> xf = Random(a.max_m * a.max_k, 999, 1.0f);
  std::vector<uint16_t> xb(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xb[i] = ferry::F32ToBf16(xf[i]);
  a.x = DeviceAlloc(xb.size() * 2);
  CHECK_CUDA(cudaMemcpy(a.x, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  auto gemm_or = LtGemm::Create();
  CHECK_OK(gemm_or);
  a.gemm = std::move(gemm_or).value();
  CHECK_CUDA(cudaStreamCreateWithFlags(&a.stream, cudaStreamNonBlocking));
  return a;
}

// ---- fp8 mode ----

struct Fp8Weight {
  void* w = nullptr;        // e4m3 [n, k]
  float* scale = nullptr;   // [n]
  void* bf16 = nullptr;     // the same layer in bf16 (not quantized)
};

// One shape's layers: random weights quantized per output channel on the host, uploaded once
// and copied to every layer's own buffers (distinct memory, so each read comes from HBM).
std::vector<Fp8Weight> MakeFp8Layers(const Shape& s, int layers, uint64_t seed) {
  const std::vector<float> w = Random(s.n * s.k, seed, 0.05f);
  std::vector<uint8_t> q(w.size());
  std::vector<float> scale(static_cast<size_t>(s.n));
  std::vector<uint16_t> b(w.size());
  for (int64_t r = 0; r < s.n; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < s.k; ++c) amax = std::max(amax, std::abs(w[r * s.k + c]));
    const float sc = amax > 0 ? amax / 448.0f : 1.0f;
    scale[r] = sc;
    for (int64_t c = 0; c < s.k; ++c) {
      q[r * s.k + c] = ferry::F32ToF8E4M3(w[r * s.k + c] / sc);
      b[r * s.k + c] = ferry::F32ToBf16(w[r * s.k + c]);
    }
  }
  std::vector<Fp8Weight> out(layers);
  for (int l = 0; l < layers; ++l) {
    out[l].w = DeviceAlloc(q.size());
    out[l].scale = static_cast<float*>(DeviceAlloc(scale.size() * 4));
    out[l].bf16 = DeviceAlloc(b.size() * 2);
    if (l == 0) {
      CHECK_CUDA(cudaMemcpy(out[l].w, q.data(), q.size(), cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(out[l].scale, scale.data(), scale.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(out[l].bf16, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
    } else {
      CHECK_CUDA(cudaMemcpy(out[l].w, out[0].w, q.size(), cudaMemcpyDeviceToDevice));
      CHECK_CUDA(cudaMemcpy(out[l].scale, out[0].scale, scale.size() * 4, cudaMemcpyDeviceToDevice));
      CHECK_CUDA(cudaMemcpy(out[l].bf16, out[0].bf16, b.size() * 2, cudaMemcpyDeviceToDevice));
    }
  }
  return out;
}

enum class Fp8Mode { kBf16, kRowColExact, kRowColFast, kTensorExact, kTensorFast };

GemmProblem Fp8Problem(Fp8Mode mode, int64_t m, const Shape& s) {
  GemmProblem p;
  p.kind = mode == Fp8Mode::kBf16 ? GemmKind::kBF16 : GemmKind::kFp8;
  p.out_dtype = DType::kBF16;
  p.m = m;
  p.n = s.n;
  p.k = s.k;
  p.fp8_scaling = mode == Fp8Mode::kTensorExact || mode == Fp8Mode::kTensorFast ? ferry::cuda::Fp8Scaling::kPerTensor
                                                                                : ferry::cuda::Fp8Scaling::kPerRowCol;
  p.fp8_fast_accum = mode == Fp8Mode::kRowColFast || mode == Fp8Mode::kTensorFast;
  return p;
}

struct Fp8Inputs {
  const void* x_bf16 = nullptr;
  const void* x_fp8 = nullptr;
  const float* x_scale = nullptr;
};

GemmArgs Fp8Args(Fp8Mode mode, const Fp8Weight& w, const Fp8Inputs& in, void* y) {
  GemmArgs a;
  a.y = y;
  if (mode == Fp8Mode::kBf16) {
    a.x = in.x_bf16;
    a.w = w.bf16;
  } else {
    a.x = in.x_fp8;
    a.w = w.w;
    a.x_scale = in.x_scale;
    a.w_scale = w.scale;
  }
  return a;
}

// Every shape's layers (MakeFp8Layers), and the weights of one layer's linears.
std::vector<std::vector<Fp8Weight>> MakeFp8LayerSets(int layers, double& weights_per_layer) {
  std::vector<std::vector<Fp8Weight>> w(std::size(kShapes));
  weights_per_layer = 0;
  for (size_t si = 0; si < std::size(kShapes); ++si) {
    w[si] = MakeFp8Layers(kShapes[si], layers, si + 1);
    weights_per_layer += static_cast<double>(kShapes[si].n * kShapes[si].k);
  }
  std::printf("fp8 and bf16 weights ready\n");
  std::fflush(stdout);
  return w;
}

// ---- w8 mode ----

// Relative RMS difference of two bf16 [m, ldy] outputs over their first n columns.
double RelDiffBf16(const void* a, const void* b, int64_t m, int64_t n, int64_t ldy) {
  std::vector<uint16_t> ha(static_cast<size_t>(m * ldy)), hb(ha.size());
  CHECK_CUDA(cudaMemcpy(ha.data(), a, ha.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hb.data(), b, hb.size() * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const double va = ferry::Bf16ToF32(ha[r * ldy + c]), vb = ferry::Bf16ToF32(hb[r * ldy + c]);
      num += (va - vb) * (va - vb);
      den += vb * vb;
    }
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

int RunW8(int layers, const std::vector<int64_t>& ms, bool per_shape) {
  double weights_per_layer = 0;
  const std::vector<std::vector<Fp8Weight>> w = MakeFp8LayerSets(layers, weights_per_layer);
  const Setup setup = MakeSetup(ms);
  const int64_t max_m = setup.max_m, max_n = setup.max_n, max_k = setup.max_k;
  LtGemm& gemm = *setup.gemm;
  cudaStream_t stream = setup.stream;
  void* xq = DeviceAlloc(static_cast<size_t>(max_m * max_k));
  float* xs = static_cast<float*>(DeviceAlloc(max_m * 4));
  void* y = DeviceAlloc(static_cast<size_t>(max_m * max_n) * 2);
  void* y_ref = DeviceAlloc(static_cast<size_t>(max_m * max_n) * 2);
  CHECK_OK(ferry::cuda::QuantizeRowsFp8(setup.x, max_m, max_k, xq, xs, DType::kBF16, stream));
  const Fp8Inputs in{setup.x, xq, xs};

  enum Kind { kBf16, kFp8, kInt8 };
  const auto problem = [&](Kind kind, int64_t m, const Shape& s) {
    GemmProblem p = Fp8Problem(kind == kBf16 ? Fp8Mode::kBf16 : Fp8Mode::kRowColFast, m, s);
    if (kind == kInt8) p.kind = GemmKind::kInt8;
    if (kind != kBf16) p.ldx = max_k;
    return p;
  };
  const auto args = [&](Kind kind, const Fp8Weight& wt, void* out) {
    return Fp8Args(kind == kBf16 ? Fp8Mode::kBf16 : Fp8Mode::kRowColFast, wt, in, out);
  };
  GemmChoice w8;
  w8.route = GemmChoice::Route::kW8Mma;

  std::printf(
      "\n| M | bf16 tuned | fp8 cuBLASLt tuned | fp8 w8 kernel | fp8 tuned (both) | bf16 / fp8 tuned | int8 cuBLASLt "
      "tuned | int8 w8 kernel | int8 tuned (both) | w8 fp8 weight TB/s | w8 vs cuBLASLt (fp8, int8 rel. diff) "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (int64_t m : ms) {
    // tuned[kind][with w8][shape]
    std::vector<GemmChoice> tuned[3][2];
    for (int kind = 0; kind < 3; ++kind) {
      for (int with = 0; with < 2; ++with) {
        if (kind == kBf16 && with == 1) continue;
        ferry::cuda::TuneOptions options;
        options.w8_mma = with == 1;
        for (size_t si = 0; si < std::size(kShapes); ++si) {
          auto c = gemm.Tune(problem(static_cast<Kind>(kind), m, kShapes[si]),
                             args(static_cast<Kind>(kind), w[si][0], y), stream, options);
          CHECK_OK(c);
          tuned[kind][with].push_back(*c);
        }
      }
    }
    const auto time = [&](Kind kind, const std::vector<GemmChoice>* choices, const GemmChoice* forced, int only) {
      return TimeGraph(stream, [&] {
               for (int l = 0; l < layers; ++l) {
                 for (size_t si = 0; si < std::size(kShapes); ++si) {
                   if (only >= 0 && static_cast<int>(si) != only) continue;
                   const GemmChoice* c = forced != nullptr ? forced : &(*choices)[si];
                   CHECK_OK(gemm.Run(problem(kind, m, kShapes[si]), args(kind, w[si][l], y), stream, c));
                 }
               }
             }) /
             layers;
    };
    const double t_bf16 = time(kBf16, &tuned[kBf16][0], nullptr, -1);
    const double t_fp8_lt = time(kFp8, &tuned[kFp8][0], nullptr, -1);
    const double t_fp8_w8 = time(kFp8, nullptr, &w8, -1);
    const double t_fp8 = time(kFp8, &tuned[kFp8][1], nullptr, -1);
    const double t_i8_lt = time(kInt8, &tuned[kInt8][0], nullptr, -1);
    const double t_i8_w8 = time(kInt8, nullptr, &w8, -1);
    const double t_i8 = time(kInt8, &tuned[kInt8][1], nullptr, -1);
    // The kernel's output against cuBLASLt's on the first shape.
    double diff[2];
    for (int kind = kFp8; kind <= kInt8; ++kind) {
      const Kind kd = static_cast<Kind>(kind);
      const GemmProblem p = problem(kd, m, kShapes[0]);
      CHECK_OK(gemm.Run(p, args(kd, w[0][0], y_ref), stream, &tuned[kind][0][0]));
      CHECK_OK(gemm.Run(p, args(kd, w[0][0], y), stream, &w8));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      diff[kind - kFp8] = RelDiffBf16(y, y_ref, m, p.n, p.y_stride());
    }
    std::printf("| %lld | %.1f | %.1f | %.1f | %.1f | %.2fx | %.1f | %.1f | %.1f | %.2f | %.1e, %.1e |\n",
                static_cast<long long>(m), t_bf16, t_fp8_lt, t_fp8_w8, t_fp8, t_bf16 / t_fp8, t_i8_lt, t_i8_w8, t_i8,
                weights_per_layer / (t_fp8_w8 * 1e6), diff[0], diff[1]);
    if (per_shape) {
      for (size_t si = 0; si < std::size(kShapes); ++si) {
        const int only = static_cast<int>(si);
        const double bf = time(kBf16, &tuned[kBf16][0], nullptr, only);
        const double lt = time(kFp8, &tuned[kFp8][0], nullptr, only);
        const double k8 = time(kFp8, nullptr, &w8, only);
        const double i8_lt = time(kInt8, &tuned[kInt8][0], nullptr, only);
        const double i8_k8 = time(kInt8, nullptr, &w8, only);
        const double bytes = static_cast<double>(kShapes[si].n * kShapes[si].k);
        // Weight TB/s for decode batches; tera-ops/s (2 m n k) past the decode kernel's rows.
        const bool rate_ops = m > ferry::cuda::kW8MmaMaxM;
        const double per_us = rate_ops ? 2.0 * static_cast<double>(m) * bytes / 1e6 : bytes / 1e6;
        const char* unit = rate_ops ? "TOP/s" : "TB/s";
        std::printf(
            "|   %s (%lld x %lld) | bf16 %.1f us (%.0f) | fp8 cuBLASLt %.1f us (%.2f %s) [%s] | w8 %.1f us (%.2f %s) | "
            "%.2fx | int8 cuBLASLt %.1f us (%.2f %s) | w8 %.1f us (%.2f %s) | %.2fx |\n",
            kShapes[si].name, static_cast<long long>(kShapes[si].n), static_cast<long long>(kShapes[si].k), bf,
            per_us / bf, lt, per_us / lt, unit, tuned[kFp8][0][si].ToString().substr(0, 6).c_str(), k8, per_us / k8,
            unit, lt / k8, i8_lt, per_us / i8_lt, unit, i8_k8, per_us / i8_k8, unit, i8_lt / i8_k8);
      }
    }
    std::fflush(stdout);
  }
  std::printf("(us per layer of the four linears)\n");
  return 0;
}

// Relative RMS error of y (bf16 or f32 [m, n]) against ref (f32 [m, n]), both on the device.
double RelRms(const void* y, DType y_dtype, const float* ref, int64_t count) {
  std::vector<float> r(static_cast<size_t>(count)), v(static_cast<size_t>(count));
  CHECK_CUDA(cudaMemcpy(r.data(), ref, count * 4, cudaMemcpyDeviceToHost));
  if (y_dtype == DType::kF32) {
    CHECK_CUDA(cudaMemcpy(v.data(), y, count * 4, cudaMemcpyDeviceToHost));
  } else {
    std::vector<uint16_t> b(static_cast<size_t>(count));
    CHECK_CUDA(cudaMemcpy(b.data(), y, count * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < count; ++i) v[i] = ferry::Bf16ToF32(b[i]);
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < count; ++i) {
    num += (static_cast<double>(v[i]) - r[i]) * (static_cast<double>(v[i]) - r[i]);
    den += static_cast<double>(r[i]) * r[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

int RunFp8(int layers, const std::vector<int64_t>& ms, const std::string& json_path, int64_t tune_m, bool per_shape) {
  double weights_per_layer = 0;
  const std::vector<std::vector<Fp8Weight>> w = MakeFp8LayerSets(layers, weights_per_layer);
  std::vector<int64_t> setup_ms = ms;
  if (tune_m > 0) setup_ms.push_back(tune_m);
  const Setup setup = MakeSetup(setup_ms);
  const int64_t max_m = setup.max_m, max_n = setup.max_n, max_k = setup.max_k;
  void* x = setup.x;
  LtGemm& gemm = *setup.gemm;
  cudaStream_t stream = setup.stream;
  void* xq = DeviceAlloc(static_cast<size_t>(max_m * max_k));
  float* xs = static_cast<float*>(DeviceAlloc(max_m * 4));
  void* y = DeviceAlloc(static_cast<size_t>(max_m * max_n) * 4);

  std::printf(
      "\n| M | bf16 tuned | fp8 tuned, exact acc | fp8 tuned, fast acc | fast / exact | fp8 heuristic, exact | "
      "fp8 heuristic, fast | fp8 per-tensor, exact | fp8 per-tensor, fast | fp8 per-tensor tuned, fast | quantize 4 "
      "inputs | fp8 fast + quantize vs bf16 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t m : ms) {
    // Quantize x once for this M (row scales per token; the tuning M's rows too).
    CHECK_OK(ferry::cuda::QuantizeRowsFp8(x, std::max(m, tune_m), max_k, xq, xs, DType::kBF16, stream));
    // The quantized rows are [m, max_k]; each shape reads its first k columns with ldx = max_k.
    Fp8Inputs in{x, xq, xs};
    auto problem = [&](Fp8Mode mode, const Shape& s) {
      GemmProblem p = Fp8Problem(mode, m, s);
      p.ldx = max_k;
      return p;
    };
    // Tuned choices per shape for bf16 and both fp8 accumulations, at this M or at tune_m.
    std::vector<GemmChoice> tuned[4];
    const Fp8Mode tuned_modes[4] = {Fp8Mode::kBf16, Fp8Mode::kRowColExact, Fp8Mode::kRowColFast, Fp8Mode::kTensorFast};
    for (int t = 0; t < 4; ++t) {
      for (size_t si = 0; si < std::size(kShapes); ++si) {
        GemmProblem tp = problem(tuned_modes[t], kShapes[si]);
        if (tune_m > 0) tp.m = tune_m;
        auto c = gemm.Tune(tp, Fp8Args(tuned_modes[t], w[si][0], in, y), stream);
        CHECK_OK(c);
        tuned[t].push_back(*c);
      }
    }
    auto time_mode = [&](Fp8Mode mode, const std::vector<GemmChoice>* choices, int only = -1) {
      return TimeGraph(stream, [&] {
               for (int l = 0; l < layers; ++l) {
                 for (size_t si = 0; si < std::size(kShapes); ++si) {
                   if (only >= 0 && static_cast<int>(si) != only) continue;
                   CHECK_OK(gemm.Run(problem(mode, kShapes[si]), Fp8Args(mode, w[si][l], in, y), stream,
                                     choices != nullptr ? &(*choices)[si] : nullptr));
                 }
               }
             }) /
             layers;
    };
    const double t_bf16 = time_mode(Fp8Mode::kBf16, &tuned[0]);
    const double t_exact = time_mode(Fp8Mode::kRowColExact, &tuned[1]);
    const double t_fast = time_mode(Fp8Mode::kRowColFast, &tuned[2]);
    const double t_h_exact = time_mode(Fp8Mode::kRowColExact, nullptr);
    const double t_h_fast = time_mode(Fp8Mode::kRowColFast, nullptr);
    const double t_t_exact = time_mode(Fp8Mode::kTensorExact, nullptr);
    const double t_t_fast = time_mode(Fp8Mode::kTensorFast, nullptr);
    const double t_tt_fast = time_mode(Fp8Mode::kTensorFast, &tuned[3]);
    // The layer's four per-token quantizations (its inputs' K), as an fp8 layer runs them
    // (the norm-fused ones and SiLU-mul-fused one cost about as much as a plain pass).
    const double t_quant = TimeGraph(stream, [&] {
      for (const Shape& s : kShapes) CHECK_OK(ferry::cuda::QuantizeRowsFp8(x, m, s.k, xq, xs, DType::kBF16, stream));
    });
    // Restore the full-width quantized rows the GEMMs read.
    CHECK_OK(ferry::cuda::QuantizeRowsFp8(x, m, max_k, xq, xs, DType::kBF16, stream));
    const double flop = 2.0 * static_cast<double>(m) * weights_per_layer;
    auto tf = [&](double us) { return flop / (us * 1e6); };
    std::printf(
        "| %lld | %.1f (%.0f) | %.1f (%.0f) | %.1f (%.0f) | %.2fx | %.1f (%.0f) | %.1f (%.0f) | %.1f (%.0f) | %.1f "
        "(%.0f) | %.1f (%.0f) | %.1f | %.2fx |\n",
        static_cast<long long>(m), t_bf16, tf(t_bf16), t_exact, tf(t_exact), t_fast, tf(t_fast), t_exact / t_fast,
        t_h_exact, tf(t_h_exact), t_h_fast, tf(t_h_fast), t_t_exact, tf(t_t_exact), t_t_fast, tf(t_t_fast), t_tt_fast,
        tf(t_tt_fast), t_quant, t_bf16 / (t_fast + t_quant));
    if (per_shape) {
      // Each linear alone: tuned per-row/col (fast) against tuned per-tensor (fast).
      for (size_t si = 0; si < std::size(kShapes); ++si) {
        const double rc = time_mode(Fp8Mode::kRowColFast, &tuned[2], static_cast<int>(si));
        const double pt = time_mode(Fp8Mode::kTensorFast, &tuned[3], static_cast<int>(si));
        std::printf("|   %s (%lld x %lld) | per-row/col %.1f | per-tensor %.1f | %.2fx |\n", kShapes[si].name,
                    static_cast<long long>(kShapes[si].n), static_cast<long long>(kShapes[si].k), rc, pt, rc / pt);
      }
    }
    std::fflush(stdout);
    rows.push_back({{"m", m},
                    {"bf16_us", t_bf16},
                    {"fp8_exact_us", t_exact},
                    {"fp8_fast_us", t_fast},
                    {"fp8_heuristic_exact_us", t_h_exact},
                    {"fp8_heuristic_fast_us", t_h_fast},
                    {"fp8_tensor_exact_us", t_t_exact},
                    {"fp8_tensor_fast_us", t_t_fast},
                    {"fp8_tensor_fast_tuned_us", t_tt_fast},
                    {"quantize_us", t_quant}});
  }
  std::printf("(us per layer of the four linears; TFLOP/s in brackets)\n");

  // Accuracy of the accumulation: each shape at M = 256 in f32 output, exact and fast,
  // against an f32 GEMM (f32 accumulation) of the same dequantized values.
  std::printf(
      "\n| linear (N x K) | exact acc: rel. RMS error vs f32 | fast acc | fast / exact | e4m3 rounding: exact acc vs "
      "f32 of the unquantized bf16 values |\n|---|---|---|---|---|\n");
  const int64_t m = std::min<int64_t>(256, max_m);
  CHECK_OK(ferry::cuda::QuantizeRowsFp8(x, m, max_k, xq, xs, DType::kBF16, stream));
  std::vector<uint8_t> hq(static_cast<size_t>(m * max_k));
  std::vector<float> hs(static_cast<size_t>(m));
  CHECK_CUDA(cudaMemcpy(hq.data(), xq, hq.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hs.data(), xs, hs.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t si = 0; si < std::size(kShapes); ++si) {
    const Shape& s = kShapes[si];
    // Dequantized x [m, k] and w [n, k] in f32.
    std::vector<float> xd(static_cast<size_t>(m * s.k));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < s.k; ++c) xd[r * s.k + c] = ferry::F8E4M3ToF32(hq[r * max_k + c]) * hs[r];
    std::vector<uint8_t> wq(static_cast<size_t>(s.n * s.k));
    std::vector<float> ws(static_cast<size_t>(s.n));
    CHECK_CUDA(cudaMemcpy(wq.data(), w[si][0].w, wq.size(), cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(ws.data(), w[si][0].scale, ws.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> wd(wq.size());
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t c = 0; c < s.k; ++c) wd[r * s.k + c] = ferry::F8E4M3ToF32(wq[r * s.k + c]) * ws[r];
    float* dx = static_cast<float*>(DeviceAlloc(xd.size() * 4));
    float* dw = static_cast<float*>(DeviceAlloc(wd.size() * 4));
    float* ref = static_cast<float*>(DeviceAlloc(static_cast<size_t>(m * s.n) * 4));
    CHECK_CUDA(cudaMemcpy(dx, xd.data(), xd.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dw, wd.data(), wd.size() * 4, cudaMemcpyHostToDevice));
    GemmProblem pf;
    pf.kind = GemmKind::kF32;
    pf.out_dtype = DType::kF32;
    pf.m = m;
    pf.n = s.n;
    pf.k = s.k;
    GemmArgs af;
    af.x = dx;
    af.w = dw;
    af.y = ref;
    CHECK_OK(gemm.Run(pf, af, stream));
    // The same GEMM on the values before e4m3 rounding (bf16 x and w, widened to f32).
    float* ref_unq = static_cast<float*>(DeviceAlloc(static_cast<size_t>(m * s.n) * 4));
    {
      std::vector<uint16_t> xb16(static_cast<size_t>(m * max_k)), wb16(static_cast<size_t>(s.n * s.k));
      CHECK_CUDA(cudaMemcpy(xb16.data(), x, xb16.size() * 2, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(wb16.data(), w[si][0].bf16, wb16.size() * 2, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < s.k; ++c) xd[r * s.k + c] = ferry::Bf16ToF32(xb16[r * max_k + c]);
      for (size_t i = 0; i < wd.size(); ++i) wd[i] = ferry::Bf16ToF32(wb16[i]);
      CHECK_CUDA(cudaMemcpy(dx, xd.data(), xd.size() * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(dw, wd.data(), wd.size() * 4, cudaMemcpyHostToDevice));
      af.y = ref_unq;
      CHECK_OK(gemm.Run(pf, af, stream));
    }
    double err[2], err_unq = 0;
    for (int fast = 0; fast < 2; ++fast) {
      GemmProblem p = Fp8Problem(fast ? Fp8Mode::kRowColFast : Fp8Mode::kRowColExact, m, s);
      p.ldx = max_k;
      p.out_dtype = DType::kF32;
      CHECK_OK(gemm.Run(p, Fp8Args(Fp8Mode::kRowColExact, w[si][0], Fp8Inputs{x, xq, xs}, y), stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      err[fast] = RelRms(y, DType::kF32, ref, m * s.n);
      if (fast == 0) err_unq = RelRms(y, DType::kF32, ref_unq, m * s.n);
    }
    std::printf("| %s (%lld x %lld) | %.3g | %.3g | %.2fx | %.3g |\n", s.name, static_cast<long long>(s.n),
                static_cast<long long>(s.k), err[0], err[1], err[1] / err[0], err_unq);
    std::fflush(stdout);
    CHECK_CUDA(cudaFree(dx));
    CHECK_CUDA(cudaFree(dw));
    CHECK_CUDA(cudaFree(ref));
    CHECK_CUDA(cudaFree(ref_unq));
  }
  if (!json_path.empty()) std::ofstream(json_path) << rows.dump() << "\n";
  std::printf("\nchoice fallbacks: %lld\n", static_cast<long long>(gemm.choice_fallbacks()));
  return 0;
}

// ---- passes mode ----

// A bf16 buffer of `count` random values in [-1, 1) on the device.
void* RandomBf16(int64_t count, uint64_t seed) {
  const std::vector<float> f = Random(count, seed, 1.0f);
  std::vector<uint16_t> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = ferry::F32ToBf16(f[i]);
  void* d = DeviceAlloc(b.size() * 2);
  CHECK_CUDA(cudaMemcpy(d, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

// One layer's activations for the passes at the largest M, each layer in its own memory (so a
// pass reads what the GEMM before it would have left in HBM, not another layer's L2 lines).
struct PassLayer {
  void* residual = nullptr;  // bf16 [M, H]
  void* delta = nullptr;     // bf16 [M, H]
  void* attn = nullptr;      // bf16 [M, H], the o projection's input
  void* gate_up = nullptr;   // bf16 [M, 2 I], the down projection's input before SiLU-mul
  void* qkv = nullptr;       // bf16 [M, (heads + 2 kv heads) D]
  void* q_out = nullptr;     // bf16 [M, heads D]
  void* k_cache = nullptr;   // e4m3 [blocks, kv heads, 16, D]
  void* v_cache = nullptr;
  void* q8 = nullptr;        // e4m3 [M, max(H, I)]
  float* scales = nullptr;   // [M]
  void* copy = nullptr;      // the copy's destination
};

// The memory-bound passes of an fp8 decoder layer, each timed over L layers in one graph at
// every M: the residual-add RMSNorm fused with the next GEMM's per-token quantization (twice
// a layer), the per-token quantization of the o projection's input, SiLU(gate) * up fused with
// the down projection's quantization, and RoPE with the fp8 KV-cache write. Bytes each pass
// must move and the rate it reaches, against a device-to-device copy of the widest pass's
// bytes in the same run.
int RunPasses(int layers, const std::vector<int64_t>& ms, int head_dim) {
  const int64_t hidden = kShapes[1].n, inter = kShapes[3].k, qkv_cols = kShapes[0].n;
  const int heads = static_cast<int>(hidden / head_dim);
  const int kv_heads = static_cast<int>((qkv_cols - hidden) / 2 / head_dim);
  constexpr int kBlockTokens = 16;
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  const int64_t blocks = (max_m + kBlockTokens - 1) / kBlockTokens;
  const int64_t cache_elems = blocks * kv_heads * kBlockTokens * head_dim;
  std::vector<PassLayer> l(static_cast<size_t>(layers));
  PassLayer first;
  first.residual = RandomBf16(max_m * hidden, 11);
  first.delta = RandomBf16(max_m * hidden, 12);
  first.attn = RandomBf16(max_m * hidden, 13);
  first.gate_up = RandomBf16(max_m * 2 * inter, 14);
  first.qkv = RandomBf16(max_m * qkv_cols, 15);
  for (int i = 0; i < layers; ++i) {
    PassLayer& p = l[i];
    auto copy = [&](void* src, int64_t bytes) {
      if (i == 0) return src;
      void* d = DeviceAlloc(bytes);
      CHECK_CUDA(cudaMemcpy(d, src, bytes, cudaMemcpyDeviceToDevice));
      return d;
    };
    p.residual = copy(first.residual, max_m * hidden * 2);
    p.delta = copy(first.delta, max_m * hidden * 2);
    p.attn = copy(first.attn, max_m * hidden * 2);
    p.gate_up = copy(first.gate_up, max_m * 2 * inter * 2);
    p.qkv = copy(first.qkv, max_m * qkv_cols * 2);
    p.q_out = DeviceAlloc(max_m * heads * head_dim * 2);
    p.k_cache = DeviceAlloc(cache_elems);
    p.v_cache = DeviceAlloc(cache_elems);
    p.q8 = DeviceAlloc(max_m * std::max(hidden, inter));
    p.scales = static_cast<float*>(DeviceAlloc(max_m * 4));
    p.copy = DeviceAlloc(max_m * inter * 5 / 2 + 16);
  }
  std::vector<float> gamma(static_cast<size_t>(hidden), 1.0f), inv_freq(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / head_dim);
  std::vector<int32_t> positions(static_cast<size_t>(max_m)), slots(static_cast<size_t>(max_m));
  for (int64_t t = 0; t < max_m; ++t) {
    positions[t] = static_cast<int32_t>(100 + t);
    slots[t] = static_cast<int32_t>(t);
  }
  float* d_gamma = static_cast<float*>(DeviceAlloc(gamma.size() * 4));
  float* d_freq = static_cast<float*>(DeviceAlloc(inv_freq.size() * 4));
  auto* d_pos = static_cast<int32_t*>(DeviceAlloc(positions.size() * 4));
  auto* d_slots = static_cast<int32_t*>(DeviceAlloc(slots.size() * 4));
  CHECK_CUDA(cudaMemcpy(d_gamma, gamma.data(), gamma.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_freq, inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_pos, positions.data(), positions.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_slots, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::printf("\n%d layers, hidden %lld, intermediate %lld, %d / %d heads of %d; us per pass and GB/s moved\n\n",
              layers, static_cast<long long>(hidden), static_cast<long long>(inter), heads, kv_heads, head_dim);
  std::printf(
      "| M | add-RMSNorm + quantize | quantize o input | SiLU-mul + quantize | RoPE + fp8 KV write | copy of the "
      "SiLU-mul pass's bytes |\n|---|---|---|---|---|---|\n");
  using ferry::cuda::QuantPrologue;
  for (int64_t m : ms) {
    const double b_norm = static_cast<double>(m * hidden) * 7 + m * 4;
    const double b_quant = static_cast<double>(m * hidden) * 3 + m * 4;
    const double b_down = static_cast<double>(m * inter) * 5 + m * 4;
    const double b_rope = static_cast<double>(m) * (qkv_cols * 2 + heads * head_dim * 2 + 2 * kv_heads * head_dim);
    const double t_norm = TimeGraph(stream, [&] {
                            for (auto& p : l) {
                              CHECK_OK(ferry::cuda::RmsNormQuantize(p.residual, p.delta, d_gamma, 1e-5f, m, hidden,
                                                                     nullptr, p.q8, DType::kF8E4M3, p.scales,
                                                                     DType::kBF16, stream));
                            }
                          }) /
                          layers;
    const double t_quant = TimeGraph(stream, [&] {
                             for (auto& p : l) {
                               CHECK_OK(ferry::cuda::QuantizeRowsFp8(p.attn, m, hidden, p.q8, p.scales, DType::kBF16,
                                                                      stream));
                             }
                           }) /
                           layers;
    const double t_down = TimeGraph(stream, [&] {
                            for (auto& p : l) {
                              CHECK_OK(ferry::cuda::QuantizeRowsFp8(p.gate_up, m, inter, p.q8, p.scales, DType::kBF16,
                                                                     stream, QuantPrologue::kSiluMul));
                            }
                          }) /
                          layers;
    const double t_rope = TimeGraph(stream, [&] {
                            for (auto& p : l) {
                              CHECK_OK(ferry::cuda::RopeQkvWriteKv(p.qkv, p.q_out, m, heads, kv_heads, head_dim, d_pos,
                                                                    d_freq, d_slots, kBlockTokens, p.k_cache, p.v_cache,
                                                                    DType::kBF16, DType::kF8E4M3, stream));
                            }
                          }) /
                          layers;
    // A copy that reads and writes the SiLU-mul pass's bytes (half each way).
    const size_t copy_bytes = static_cast<size_t>(b_down / 2);
    const double t_copy = TimeGraph(stream, [&] {
                            for (auto& p : l) {
                              CHECK_CUDA(cudaMemcpyAsync(p.copy, p.gate_up, copy_bytes, cudaMemcpyDeviceToDevice,
                                                         stream));
                            }
                          }) /
                          layers;
    auto gbs = [](double bytes, double us) { return bytes / (us * 1e3); };
    std::printf("| %lld | %.2f (%.0f) | %.2f (%.0f) | %.2f (%.0f) | %.2f (%.0f) | %.2f (%.0f) |\n",
                static_cast<long long>(m), t_norm, gbs(b_norm, t_norm), t_quant, gbs(b_quant, t_quant), t_down,
                gbs(b_down, t_down), t_rope, gbs(b_rope, t_rope), t_copy, gbs(2.0 * copy_bytes, t_copy));
    std::fflush(stdout);
  }
  return 0;
}

std::vector<int64_t> ParseList(const char* text) {
  std::vector<int64_t> v;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    v.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p != '\0') break;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 8;
  std::vector<int64_t> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048};
  std::string json_path;
  bool per_shape = false;
  bool fp8 = false;
  bool passes = false;
  bool w8 = false;
  int64_t tune_m = 0;
  bool ms_given = false;
  const char* model = "8B";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--layers=", 0) == 0)
      layers = std::atoi(a.c_str() + 9);
    else if (a.rfind("--ms=", 0) == 0) {
      ms = ParseList(a.c_str() + 5);
      ms_given = true;
    }
    else if (a.rfind("--json=", 0) == 0)
      json_path = a.substr(7);
    else if (a == "--model=1b") {
      kShapes.assign(std::begin(k1BShapes), std::end(k1BShapes));
      model = "3.2-1B";
    } else if (a == "--model=bert") {
      kShapes.assign(std::begin(kBertShapes), std::end(kBertShapes));
      model = "bert-base";
    } else if (a == "--model=8b")
      kShapes.assign(std::begin(k8BShapes), std::end(k8BShapes));
    else if (a == "--per-shape")
      per_shape = true;
    else if (a == "--fp8")
      fp8 = true;
    else if (a == "--passes")
      passes = true;
    else if (a == "--w8")
      w8 = true;
    else if (a.rfind("--tune-m=", 0) == 0)
      tune_m = std::atoll(a.c_str() + 9);
    else {
      std::fprintf(stderr,
                   "usage: cuda_gemm_bench [--layers=L] [--ms=1,2,...] [--json=FILE] [--model=8b|1b|bert] [--per-shape] [--fp8 [--tune-m=M]] [--passes] [--w8]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; %d layers of llama-%s linears per format\n", prop.name, prop.multiProcessorCount,
              layers, model);
  std::fflush(stdout);
  if (passes) {
    if (!ms_given) ms = {1, 32, 128, 256, 512, 1024, 2048};
    return RunPasses(layers, ms, std::string(model) == "8B" ? 128 : 64);
  }
  if (w8) {
    if (!ms_given) ms = {1, 8, 16, 32, 64};
    return RunW8(layers, ms, per_shape);
  }
  if (fp8) {
    if (!ms_given) ms = {1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    return RunFp8(layers, ms, json_path, tune_m, per_shape);
  }

  std::vector<std::vector<Weight>> bf16(std::size(kShapes)), int4(std::size(kShapes));
  for (size_t si = 0; si < std::size(kShapes); ++si) {
    bf16[si].resize(layers);
    int4[si].resize(layers);
    for (int l = 0; l < layers; ++l) MakeWeights(kShapes[si], si * 100 + l + 1, bf16[si][l], int4[si][l]);
  }
  std::printf("weights ready\n");
  std::fflush(stdout);
  const Setup setup = MakeSetup(ms);
  void* x = setup.x;
  LtGemm& gemm = *setup.gemm;
  cudaStream_t stream = setup.stream;
  void* y = DeviceAlloc(static_cast<size_t>(setup.max_m * setup.max_n) * 2);

  if (per_shape) {
    // Each bf16 linear alone (all layers' copies in one graph): the small-M kernel against
    // cuBLASLt's heuristic, with the weight bytes each reads per microsecond.
    std::printf("\n| M | linear (N x K) | bf16 small-M (us) | GB/s | bf16 cuBLASLt heuristic (us) | GB/s |\n"
                "|---|---|---|---|---|---|\n");
    GemmChoice small;
    small.route = GemmChoice::Route::kSmallM;
    const std::vector<const GemmChoice*> smalls(std::size(kShapes), &small), none(std::size(kShapes), nullptr);
    for (int64_t m : ms) {
      if (m > ferry::cuda::kDenseSmallMMaxM) continue;
      for (size_t si = 0; si < std::size(kShapes); ++si) {
        const double gb = static_cast<double>(kShapes[si].n * kShapes[si].k * 2) * 1e-3;  // per us
        const double t_s = TimeLayers(gemm, stream, false, m, bf16, smalls, x, y, static_cast<int>(si));
        const double t_l = TimeLayers(gemm, stream, false, m, bf16, none, x, y, static_cast<int>(si));
        std::printf("| %lld | %s (%lld x %lld) | %.2f | %.0f | %.2f | %.0f |\n", static_cast<long long>(m),
                    kShapes[si].name, static_cast<long long>(kShapes[si].n), static_cast<long long>(kShapes[si].k),
                    t_s, gb / t_s, t_l, gb / t_l);
        std::fflush(stdout);
      }
    }
  }

  std::string json = "[";
  std::printf(
      "\n| M | bf16 tuned (us/layer) | int4 tuned (us/layer) | bf16 / int4 | int4 small-M | int4 mma | int4 "
      "dequant+cuBLASLt | int4 routes chosen (qkv, o, gate_up, down) | bf16 cuBLASLt heuristic | bf16 small-M | "
      "bf16 routes chosen |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (int64_t m : ms) {
    std::vector<GemmChoice> tuned_b(std::size(kShapes)), tuned_i(std::size(kShapes));
    std::vector<const GemmChoice*> cb, ci;
    std::string routes, routes_b;
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      ferry::cuda::TuneOptions bf16_options;
      bf16_options.dense_small_m = true;
      auto b = gemm.Tune(Problem(false, m, kShapes[si]), Args(bf16[si][0], x, y), stream, bf16_options);
      CHECK_OK(b);
      tuned_b[si] = *b;
      routes_b += std::string(si ? ", " : "") + (b->route == GemmChoice::Route::kSmallM ? "small_m" : "lt");
      auto q = gemm.Tune(Problem(true, m, kShapes[si]), Args(int4[si][0], x, y), stream);
      CHECK_OK(q);
      tuned_i[si] = *q;
      routes += std::string(si ? ", " : "") + (q->route == GemmChoice::Route::kSmallM    ? "small_m"
                                               : q->route == GemmChoice::Route::kInt4Mma ? "mma"
                                                                                         : "dequant");
    }
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      cb.push_back(&tuned_b[si]);
      ci.push_back(&tuned_i[si]);
    }
    const double t_b = TimeLayers(gemm, stream, false, m, bf16, cb, x, y);
    const double t_i = TimeLayers(gemm, stream, true, m, int4, ci, x, y);
    // Each int4 route forced for every shape.
    GemmChoice small, mma, lt;
    small.route = GemmChoice::Route::kSmallM;
    mma.route = GemmChoice::Route::kInt4Mma;
    lt.route = GemmChoice::Route::kCublasLt;  // with a zero algo: Run checks it, falls back to the heuristic
    double t_small = -1, t_mma = -1;
    if (m <= 64) t_small = TimeLayers(gemm, stream, true, m, int4, {&small, &small, &small, &small}, x, y);
    if (m <= 512) t_mma = TimeLayers(gemm, stream, true, m, int4, {&mma, &mma, &mma, &mma}, x, y);
    std::vector<const GemmChoice*> lt_choices;
    std::vector<GemmChoice> lt_tuned(std::size(kShapes));
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      lt_tuned[si] = tuned_i[si].route == GemmChoice::Route::kCublasLt ? tuned_i[si] : lt;
      lt_choices.push_back(&lt_tuned[si]);
    }
    const double t_lt = TimeLayers(gemm, stream, true, m, int4, lt_choices, x, y);
    // bf16: cuBLASLt's heuristic (no choice) against the dense small-M kernel, every shape.
    const double t_b_lt = TimeLayers(gemm, stream, false, m, bf16, {nullptr, nullptr, nullptr, nullptr}, x, y);
    double t_b_small = -1;
    if (m <= ferry::cuda::kDenseSmallMMaxM) {
      t_b_small = TimeLayers(gemm, stream, false, m, bf16, {&small, &small, &small, &small}, x, y);
    }
    auto cell = [](double v) {
      char buf[32];
      if (v < 0) return std::string("-");
      std::snprintf(buf, sizeof(buf), "%.1f", v);
      return std::string(buf);
    };
    std::printf("| %lld | %.1f | %.1f | %.2fx | %s | %s | %s | %s | %.1f | %s | %s |\n", static_cast<long long>(m), t_b,
                t_i, t_b / t_i, cell(t_small).c_str(), cell(t_mma).c_str(), cell(t_lt).c_str(), routes.c_str(), t_b_lt,
                cell(t_b_small).c_str(), routes_b.c_str());
    std::fflush(stdout);
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"m\": %lld, \"bf16_us\": %.2f, \"int4_us\": %.2f, \"int4_small_m_us\": %.2f, "
                  "\"int4_mma_us\": %.2f, \"int4_dequant_us\": %.2f, \"int4_routes\": \"%s\", "
                  "\"bf16_heuristic_us\": %.2f, \"bf16_small_m_us\": %.2f, \"bf16_routes\": \"%s\"}",
                  json.size() > 1 ? ", " : "", static_cast<long long>(m), t_b, t_i, t_small, t_mma, t_lt,
                  routes.c_str(), t_b_lt, t_b_small, routes_b.c_str());
    json += buf;
  }
  json += "]\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
  std::printf("\nchoice fallbacks: %lld\n", static_cast<long long>(gemm.choice_fallbacks()));
  return 0;
}
