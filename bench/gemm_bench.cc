// Linear at llama-3.2-1B shapes in every weight format: ferry's kernels (GEMV for small M,
// blocked GEMM for large M) for f32, bf16, int8 weight-only and int8 W8A8, next to oneDNN's
// f32 matmul and oneDNN's s8 matmul (the W8A8 product with oneDNN doing the int8 GEMM), a
// plain memory-read baseline, the f32 FMA peak (BM_FmaPeak, 512- and 256-bit) and the
// AVX-512 dot-product peaks (BM_DotPeak: vpdpbusd, vdpbf16ps).
//
//   gemm_bench [--threads=N] [google-benchmark flags]
//   e.g. gemm_bench --threads=2 --benchmark_min_time=0.2 --benchmark_repetitions=5
//                   --benchmark_report_aggregates_only=true --benchmark_filter=M:1/
//
// Counters: GFLOP/s (2*M*N*K per call) and GB/s of weight bytes as stored (4, 2 or 1 byte
// per weight), the bound for the memory-bound small-M cases. Small-M cases rotate through
// enough weight copies (>= 384 MiB) that every call streams its weights from DRAM, as
// decode does with a real model; a single 25 MiB weight would otherwise sit in the 32 MiB
// L3 and overstate bandwidth. The vocabulary projection (N = 128256) runs only at decode
// sizes: prefill computes logits for the last token of each sequence, never for 512 rows.
// BM_Bert_*: bert-base's linears at a 32 x 128 encoder batch.
#include <benchmark/benchmark.h>

#include "bench_threads.h"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu_backend.h"
#include "core/allocator.h"
#include "core/thread_pool.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/int8_gemm.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed_weight.h"

namespace {

using ferry::DType;
using ferry::Tensor;
using ferry::backend::LinearWeight;
using ferry::backend::WeightFormat;
namespace cpu = ferry::kernels::cpu;

constexpr size_t kRotateBytes = size_t{384} << 20;

// Uniform in [-scale, scale) from a counter hash: the lm_head's 262M weights in well under a
// second, and the same values whatever the thread count.
Tensor RandomF32(int64_t rows, int64_t cols, uint32_t seed, float scale = 0.05f) {
  Tensor t = Tensor::Empty({rows, cols}, DType::kF32);
  float* p = t.data<float>();
  ferry::ParallelFor(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint64_t z = (static_cast<uint64_t>(seed) << 40) ^ static_cast<uint64_t>(i);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      p[i] = (static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
    }
  });
  return t;
}

size_t BytesPerWeight(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16: return 2;
    default: return 1;
  }
}

int Copies(int64_t m, size_t bytes) {
  if (m > 16) return 1;  // compute bound: one copy, weights partly cached, as in prefill
  return static_cast<int>(std::max<size_t>(1, (kRotateBytes + bytes - 1) / bytes));
}

void SetCounters(benchmark::State& state, int64_t m, int64_t n, int64_t k, size_t weight_bytes) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// Weight sets take seconds to build (hundreds of MiB); the benchmarks that share a key (same
// weights, other M) share the last one built.
template <typename T>
T& Cached(const std::string& key, const std::function<T()>& make) {
  static std::string cached_key;
  static std::unique_ptr<T> value;
  if (!value || cached_key != key) {
    value.reset();
    value = std::make_unique<T>(make());
    cached_key = key;
  }
  return *value;
}

std::string Key(const std::string& what, int copies, int64_t n, int64_t k) {
  return what + "/" + std::to_string(copies) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

using Weights = std::vector<LinearWeight>;

// SmoothQuant-like factors in [0.25, 4): what a calibrated W8A8 engine's linears carry.
Tensor RandomSmooth(int64_t k) {
  const Tensor r = RandomF32(1, k, 77, 1.0f);
  Tensor s = Tensor::Empty({k}, DType::kF32);
  for (int64_t i = 0; i < k; ++i) s.data<float>()[i] = std::exp2(2.0f * r.data<float>()[i]);
  return s;
}

// smoothed: W8A8 weights with RandomSmooth factors, so that each call's activation
// quantization applies them as an engine's does.
Weights& FerryWeights(int64_t m, int64_t n, int64_t k, WeightFormat format, bool smoothed = false) {
  const int copies = Copies(m, static_cast<size_t>(n * k) * BytesPerWeight(format));
  const std::string what = std::string(ferry::backend::WeightFormatName(format)) + (smoothed ? "-smoothed" : "");
  return Cached<Weights>(Key(what, copies, n, k), [&] {
    auto be = ferry::backend::MakeCpuBackend();
    Weights w(static_cast<size_t>(copies));
    for (size_t i = 0; i < w.size(); ++i) {
      w[i].weight = RandomF32(n, k, static_cast<uint32_t>(i));
      w[i].format = format;
      if (smoothed) w[i].smooth = RandomSmooth(k);
      if (!be->PrepareLinear(w[i]).ok()) std::abort();
      w[i].weight = Tensor();  // frees the f32 source
    }
    return w;
  });
}

// bf16_activations: the backend's LinearConfig::bf16_activations (bf16 weights' prefill GEMMs
// on vdpbf16ps with x rounded to bf16).
void FerryLinearRun(benchmark::State& state, int64_t m, int64_t n, int64_t k, WeightFormat format,
                    bool bf16_activations, bool smoothed) {
  ferry::backend::CpuBackendOptions options;
  options.linear.bf16_activations = bf16_activations;
  auto be = ferry::backend::MakeCpuBackend(options);
  Weights& weights = FerryWeights(m, n, k, format, smoothed);
  Tensor x = RandomF32(m, k, 99, 1.0f);
  Tensor y = Tensor::Empty({m, n}, DType::kF32);
  size_t i = 0;
  for (auto _ : state) {
    if (!be->Linear(x, weights[i], y).ok()) state.SkipWithError("Linear failed");
    i = (i + 1) % weights.size();
    benchmark::ClobberMemory();
  }
  const cpu::PackedWeight* pw = cpu::AsPackedWeight(weights[0].packed);
  SetCounters(state, m, n, k, pw->panels.nbytes() + (pw->scales.defined() ? pw->scales.nbytes() : 0));
}

void BM_FerryLinear(benchmark::State& state, int64_t m, int64_t n, int64_t k, WeightFormat format,
                    bool bf16_activations = false) {
  FerryLinearRun(state, m, n, k, format, bf16_activations, /*smoothed=*/false);
}

// A W8A8 linear as a calibrated engine's: its activation quantization applies the factors.
void BM_FerryW8A8Smoothed(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  FerryLinearRun(state, m, n, k, WeightFormat::kInt8W8A8, /*bf16_activations=*/false, /*smoothed=*/true);
}

// The W8A8 activation quantization alone (the active kernel's tiles, as a prefill GEMM reads
// them), with SmoothQuant-like factors: GB/s of f32 input read.
void BM_W8A8Quantize(benchmark::State& state, int64_t m, int64_t k) {
  const cpu::Int8Kernel kernel = cpu::ActiveInt8Kernel();
  const int tile_rows = kernel == cpu::Int8Kernel::kVnni ? 12 : 4;
  const int64_t k_stored = cpu::StoredK(cpu::PanelLayout::kQuads, k);
  const int64_t tiles = (m + tile_rows - 1) / tile_rows;
  Tensor x = RandomF32(m, k, 99, 1.0f);
  const Tensor factors = RandomSmooth(k);
  std::vector<int8_t> q(static_cast<size_t>(tiles * tile_rows * k_stored * cpu::kActivationBytesPerK));
  std::vector<float> row_scale(static_cast<size_t>(m));
  for (auto _ : state) {
    cpu::QuantizeActivations(x.data<float>(), k, m, k, k_stored, factors.data<float>(), tile_rows, q.data(),
                             row_scale.data(), kernel);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(m * k * 4), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// oneDNN's f32 matmul with weights pre-packed in the layout it picks for `any`; the primitive
// is created (and cached) before the timed loop.
void BM_OnednnF32(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  const size_t bytes = static_cast<size_t>(n * k) * 4;
  using OneWeights = std::vector<std::shared_ptr<cpu::OnednnWeight>>;
  OneWeights& weights = Cached<OneWeights>(Key("onednn-f32", Copies(m, bytes), n, k), [&] {
    OneWeights w;
    for (int c = 0; c < Copies(m, bytes); ++c) {
      auto packed = cpu::PackOnednnWeight(RandomF32(n, k, static_cast<uint32_t>(c)));
      if (!packed.ok()) std::abort();
      w.push_back(*packed);
    }
    return w;
  });
  Tensor x = RandomF32(m, k, 99, 1.0f);
  Tensor y = Tensor::Empty({m, n}, DType::kF32);
  if (!cpu::OnednnMatmul(x.data<float>(), k, m, k, weights[0]->data.get(), true, n, nullptr, y.data<float>(), n)
           .ok()) {
    state.SkipWithError("oneDNN matmul failed");
  }
  size_t i = 0;
  for (auto _ : state) {
    (void)cpu::OnednnMatmul(x.data<float>(), k, m, k, weights[i]->data.get(), true, n, nullptr, y.data<float>(), n);
    i = (i + 1) % weights.size();
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, k, bytes);
}

// The int8 W[N, K] row-major out of a W8A8 pack (PanelLayout::kQuads).
std::vector<int8_t> UnpackQuads(const cpu::PackedWeight& pw) {
  std::vector<int8_t> w(static_cast<size_t>(pw.n * pw.k));
  for (int64_t r = 0; r < pw.n; ++r) {
    const auto* panel = static_cast<const int8_t*>(pw.panel(r / cpu::kPanelCols));
    const int64_t c = r % cpu::kPanelCols;
    for (int64_t j = 0; j < pw.k; ++j) w[r * pw.k + j] = panel[(j / 4) * 4 * cpu::kPanelCols + c * 4 + j % 4];
  }
  return w;
}

struct OnednnInt8Set {
  std::vector<std::shared_ptr<cpu::OnednnInt8Weight>> weights;
  std::vector<float> col_scale;
};

// The whole W8A8 linear with oneDNN doing the int8 GEMM: ferry's per-token quantization
// (gathered into a row-major s8 matrix), oneDNN's s8 x s8 -> s32 matmul, then the same dequantizing
// epilogue as ferry's kernel (row scale x column scale + bias).
void BM_OnednnInt8(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  const size_t bytes = static_cast<size_t>(n * k);
  OnednnInt8Set& set = Cached<OnednnInt8Set>(Key("onednn-s8", Copies(m, bytes), n, k), [&] {
    auto be = ferry::backend::MakeCpuBackend();
    OnednnInt8Set s;
    for (int c = 0; c < Copies(m, bytes); ++c) {
      LinearWeight w;
      w.weight = RandomF32(n, k, static_cast<uint32_t>(c));
      w.format = WeightFormat::kInt8W8A8;
      if (!be->PrepareLinear(w).ok()) std::abort();
      const cpu::PackedWeight* pw = cpu::AsPackedWeight(w.packed);
      auto packed = cpu::PackOnednnInt8Weight(UnpackQuads(*pw).data(), n, k);
      if (!packed.ok()) std::abort();
      s.weights.push_back(*packed);
      if (c == 0) s.col_scale.assign(pw->scale_data(), pw->scale_data() + n);
    }
    return s;
  });
  Tensor x = RandomF32(m, k, 99, 1.0f);
  Tensor y = Tensor::Empty({m, n}, DType::kF32);
  const int64_t k_stored = cpu::StoredK(cpu::PanelLayout::kQuads, k);
  std::vector<int8_t> quads(static_cast<size_t>(m * k_stored * cpu::kActivationBytesPerK));
  std::vector<int8_t> q8(static_cast<size_t>(m * k));
  std::vector<float> row_scale(static_cast<size_t>(m));
  std::vector<int32_t> acc(static_cast<size_t>(m * n));
  size_t i = 0;
  // The AVX2 kernel's quads hold q itself (the VNNI kernel's hold q + 128).
  for (auto _ : state) {
    cpu::QuantizeActivations(x.data<float>(), k, m, k, k_stored, nullptr, 1, quads.data(), row_scale.data(),
                             cpu::Int8Kernel::kAvx2);
    ferry::ParallelFor(m, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int8_t* row = quads.data() + r * k_stored * cpu::kActivationBytesPerK;
        for (int64_t j = 0; j < k; ++j) q8[r * k + j] = row[(j / 4) * 8 + j % 4];
      }
    });
    if (!cpu::OnednnInt8Matmul(q8.data(), m, *set.weights[i], acc.data()).ok()) state.SkipWithError("oneDNN failed");
    ferry::ParallelFor(m, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          y.data<float>()[r * n + j] = static_cast<float>(acc[r * n + j]) * (set.col_scale[j] * row_scale[r]);
        }
      }
    });
    i = (i + 1) % set.weights.size();
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, k, bytes);
}

// Whether oneDNN's s8 matmul gives exact int32 sums at the extremes of the int8 range
// (vpmaddubsw-based kernels without VNNI saturate int16 pair sums there).
std::string OnednnInt8Exact() {
  const int64_t m = 4, n = 16, k = 512;
  std::vector<int8_t> x(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < m * k; ++i) x[i] = (i % 3 == 0) ? -127 : 127;
  for (int64_t i = 0; i < n * k; ++i) w[i] = ((i % k) % 3 == 0) ? -127 : 127;
  auto packed = cpu::PackOnednnInt8Weight(w.data(), n, k);
  if (!packed.ok()) return "unavailable";
  std::vector<int32_t> acc(static_cast<size_t>(m * n));
  if (!cpu::OnednnInt8Matmul(x.data(), m, **packed, acc.data()).ok()) return "failed";
  int64_t worst = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      int64_t exact = 0;
      for (int64_t j = 0; j < k; ++j) exact += int64_t{x[r * k + j]} * w[c * k + j];
      worst = std::max<int64_t>(worst, std::abs(exact - acc[r * n + c]));
    }
  }
  return worst == 0 ? "yes" : "no (max |error| " + std::to_string(worst) + " of " + std::to_string(k * 127 * 127) + ")";
}

// Streams a 512 MiB buffer with AVX2 loads split over the compute threads: the DRAM read
// bandwidth the small-M cases should approach.
void BM_MemoryRead(benchmark::State& state) {
  const size_t bytes = size_t{512} << 20;
  const int64_t n = static_cast<int64_t>(bytes / 4);
  float* data = static_cast<float*>(ferry::AlignedAlloc(bytes));
  ferry::ParallelFor(n, 1 << 20, [&](int64_t b, int64_t e) { std::memset(data + b, 0, (e - b) * 4); });
  for (auto _ : state) {
    float total = 0;
    ferry::ParallelFor(n, 1 << 20, [&](int64_t b, int64_t e) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = b; i + 32 <= e; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(data + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(data + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(data + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(data + i + 24));
      }
      const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
      float lanes[8];
      _mm256_storeu_ps(lanes, s);
      if (lanes[0] != 0.0f) total += lanes[0];
    });
    benchmark::DoNotOptimize(total);
  }
  ferry::AlignedFree(data);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// The f32 FMA peak of the compute threads: each thread runs independent chains of packed
// FMAs (more chains than the FMA latency times the FMA ports, so the ports never wait),
// 512-bit or 256-bit. GFLOP/s counts 2 per lane and FMA: the ceiling for any f32 GEMM here.
template <int kChains>
__attribute__((target("avx512f"))) float FmaChains512(int64_t iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  return lanes[0];
}

template <int kChains>
float FmaChains256(int64_t iters) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return lanes[0];
}

// The same for the two AVX-512 dot-product instructions the 8-bit and bf16 kernels use:
// vpdpbusd (64 u8 x s8 products a 512-bit instruction, counted as 2 ops each) and
// vdpbf16ps (32 bf16 products, 2 flops each). The ceilings of the W8A8 and bf16-activation
// GEMMs, as BM_FmaPeak is of the f32 ones.
template <int kChains>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int32_t VnniChains512(int64_t iters) {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  const __m512i a = _mm512_set1_epi32(0x01010101), b = _mm512_set1_epi32(0x01fe01fe);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
  }
  __m512i sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_epi32(sum, acc[c]);
  int32_t lanes[16];
  _mm512_storeu_si512(lanes, sum);
  return lanes[0];
}

template <int kChains>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) float Bf16DotChains512(int64_t iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f), b = (__m512bh)_mm512_set1_epi32(0x33d633d6);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  return lanes[0];
}

// Runs chains() on every compute thread per iteration and reports `ops_per_thread` per thread
// and iteration as a rate under `counter`.
template <typename Chains>
void RunPeak(benchmark::State& state, Chains chains, double ops_per_thread, const char* counter) {
  const int threads = ferry::ComputeThreads();
  for (auto _ : state) {
    std::vector<float> out(threads);
    ferry::ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) out[t] = chains();
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters[counter] = benchmark::Counter(ops_per_thread * threads, benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
}

constexpr int kPeakChains = 12;
constexpr int64_t kPeakIters = 1 << 18;

// kind: 0 vpdpbusd, 1 vdpbf16ps.
void BM_DotPeak(benchmark::State& state, int kind) {
  const bool ok = kind == 0 ? __builtin_cpu_supports("avx512vnni") : __builtin_cpu_supports("avx512bf16");
  if (!ok) {
    state.SkipWithError("this CPU lacks the instruction");
    return;
  }
  const double per_instruction = kind == 0 ? 128.0 : 64.0;
  RunPeak(
      state,
      [kind] {
        return kind == 0 ? static_cast<float>(VnniChains512<kPeakChains>(kPeakIters))
                         : Bf16DotChains512<kPeakChains>(kPeakIters);
      },
      per_instruction * kPeakChains * static_cast<double>(kPeakIters), kind == 0 ? "GOP/s" : "GFLOP/s");
}

void BM_FmaPeak(benchmark::State& state, int bits) {
  if (bits == 512 && !__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("this CPU has no AVX-512");
    return;
  }
  RunPeak(
      state,
      [bits] {
        return bits == 512 ? FmaChains512<kPeakChains>(kPeakIters) : FmaChains256<kPeakChains>(kPeakIters);
      },
      2.0 * (bits / 32) * kPeakChains * static_cast<double>(kPeakIters), "GFLOP/s");
}

// A float format on one GEMM register tile (AVX2 or AVX-512), whatever the default.
void BM_FerryGemmOn(benchmark::State& state, int64_t m, int64_t n, int64_t k, WeightFormat format,
                    cpu::GemmKernel kernel) {
  const cpu::GemmKernel saved = cpu::ActiveGemmKernel();
  if (!cpu::SetActiveGemmKernel(kernel)) {
    state.SkipWithError("this CPU cannot run the kernel");
    return;
  }
  BM_FerryLinear(state, m, n, k, format);
  cpu::SetActiveGemmKernel(saved);
}

// W8A8 on one integer kernel (AVX2 or VNNI), whatever the default.
void BM_FerryW8A8On(benchmark::State& state, int64_t m, int64_t n, int64_t k, cpu::Int8Kernel kernel) {
  const cpu::Int8Kernel saved = cpu::ActiveInt8Kernel();
  if (!cpu::SetActiveInt8Kernel(kernel)) {
    state.SkipWithError("this CPU cannot run the kernel");
    return;
  }
  BM_FerryLinear(state, m, n, k, WeightFormat::kInt8W8A8);
  cpu::SetActiveInt8Kernel(saved);
}

// With --benchmark_repetitions, the "_max" aggregate's counters are the best rate seen: on a
// machine shared with other work that is the closest to what the kernel can do.
double Max(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

template <typename... Args>
void Register(const std::string& name, Args&&... args) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->ComputeStatistics("max", Max);
}

// Registered shape by shape and, within a shape, variant by variant over M, so that the
// numbers compared with each other are measured minutes apart at most and each weight set
// is built once for both decode sizes.
void RegisterAll() {
  Register("BM_MemoryRead", BM_MemoryRead);
  Register("BM_FmaPeak/avx512", BM_FmaPeak, 512);
  Register("BM_FmaPeak/avx2", BM_FmaPeak, 256);
  Register("BM_DotPeak/vpdpbusd", BM_DotPeak, 0);
  Register("BM_DotPeak/vdpbf16ps", BM_DotPeak, 1);
  const std::vector<std::pair<WeightFormat, std::string>> formats = {{WeightFormat::kF32, "f32"},
                                                                     {WeightFormat::kBF16, "bf16"},
                                                                     {WeightFormat::kInt8, "int8wo"},
                                                                     {WeightFormat::kInt8W8A8, "w8a8"}};
  for (auto [n, k] : {std::pair<int64_t, int64_t>{3072, 2048}, {16384, 2048}, {2048, 8192}, {128256, 2048}}) {
    const std::vector<int64_t> ms = n > 100000 ? std::vector<int64_t>{1, 8} : std::vector<int64_t>{1, 8, 512};
    auto shape = [&](int64_t m) {
      return "/M:" + std::to_string(m) + "/N:" + std::to_string(n) + "/K:" + std::to_string(k);
    };
    for (const auto& [format, name] : formats) {
      for (int64_t m : ms) Register("BM_Ferry_" + name + shape(m), BM_FerryLinear, m, n, k, format, false);
    }
    if (n < 100000 && cpu::Bf16DotSupported()) {
      // bf16 activations on vdpbf16ps (the prefill size only: decode keeps f32 x).
      Register("BM_Ferry_bf16act" + shape(512), BM_FerryLinear, 512, n, k, WeightFormat::kBF16, true);
    }
    if (cpu::GemmKernelSupported(cpu::GemmKernel::kAvx512)) {
      // The default is AVX-512 here: the AVX2 tile and GEMV beside it.
      for (const auto& [format, name] : formats) {
        if (format == WeightFormat::kInt8W8A8) continue;
        for (int64_t m : ms) {
          Register("BM_Ferry_" + name + "_avx2" + shape(m), BM_FerryGemmOn, m, n, k, format, cpu::GemmKernel::kAvx2);
        }
      }
    }
    if (cpu::Int8KernelSupported(cpu::Int8Kernel::kVnni)) {
      // The default is VNNI here: the AVX2 kernel beside it.
      for (int64_t m : ms) Register("BM_Ferry_w8a8_avx2" + shape(m), BM_FerryW8A8On, m, n, k, cpu::Int8Kernel::kAvx2);
    }
    for (int64_t m : ms) Register("BM_oneDNN_f32" + shape(m), BM_OnednnF32, m, n, k);
    for (int64_t m : ms) Register("BM_oneDNN_w8a8" + shape(m), BM_OnednnInt8, m, n, k);
  }
  // bert-base's four linears at a 32 x 128 batch (4,096 rows): qkv, attention output, the
  // FFN's two. Named BM_Bert_* so that the default filter of the 1B runs can leave them out.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}}) {
    const std::string shape = "/M:4096/N:" + std::to_string(n) + "/K:" + std::to_string(k);
    for (const auto& [format, name] : formats) {
      Register("BM_Bert_" + name + shape, BM_FerryLinear, 4096, n, k, format, false);
    }
    Register("BM_Bert_w8a8_smoothed" + shape, BM_FerryW8A8Smoothed, 4096, n, k);
    Register("BM_Bert_oneDNN_f32" + shape, BM_OnednnF32, 4096, n, k);
    Register("BM_Bert_oneDNN_w8a8" + shape, BM_OnednnInt8, 4096, n, k);
  }
  for (int64_t k : {768, 3072}) Register("BM_Bert_w8a8_quantize/M:4096/K:" + std::to_string(k), BM_W8A8Quantize, 4096, k);
}

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = ferry::bench::ApplyThreadsFlag(argc, argv);
  int n = static_cast<int>(args.size());
  benchmark::AddCustomContext("load_average_at_start", LoadAverage());
  benchmark::AddCustomContext("onednn_f32_impl", cpu::OnednnF32MatmulImpl());
  benchmark::AddCustomContext("int8_kernel", std::string(cpu::Int8KernelName(cpu::ActiveInt8Kernel())));
  benchmark::AddCustomContext("gemm_kernel", std::string(cpu::GemmKernelName(cpu::ActiveGemmKernel())));
  benchmark::AddCustomContext("onednn_fast_bf16", cpu::OnednnHasFastBf16Matmul() ? "yes" : "no");
  benchmark::AddCustomContext("onednn_s8_impl", cpu::OnednnInt8MatmulImpl());
  benchmark::AddCustomContext("onednn_s8_exact_at_extremes", OnednnInt8Exact());
  RegisterAll();
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
