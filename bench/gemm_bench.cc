// Linear at llama-3.2-1B shapes: ferry's kernels (GEMV for small M, blocked GEMM for large
// M) next to oneDNN's f32 matmul with pre-packed weights and a plain memory-read baseline.
//
//   gemm_bench [--threads=N] [google-benchmark flags]
//   e.g. gemm_bench --threads=2 --benchmark_min_time=0.2 --benchmark_repetitions=5
//                   --benchmark_report_aggregates_only=true
//
// Counters: GFLOP/s (2*M*N*K per call) and, for the memory-bound small-M cases, GB/s of
// weight bytes. Small-M cases rotate through enough weight copies (>= 384 MiB) that every
// call streams its weights from DRAM, as decode does with a real model; a single 25 MiB
// weight would otherwise sit in the 32 MiB L3 and overstate bandwidth.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/allocator.h"
#include "core/thread_pool.h"
#include "kernels/cpu/onednn_matmul.h"

namespace {

using ferry::DType;
using ferry::Tensor;

constexpr size_t kRotateBytes = size_t{384} << 20;

Tensor RandomWeight(int64_t n, int64_t k, DType dtype, uint32_t seed) {
  Tensor f = Tensor::Empty({n, k}, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = dist(rng);
  if (dtype == DType::kF32) return f;
  Tensor t = Tensor::Empty({n, k}, dtype);
  ferry::ConvertFromF32(dtype, f.data<float>(), t.raw(), static_cast<size_t>(f.numel()));
  return t;
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

// Weight sets take seconds to build (hundreds of MiB); the repetitions of one benchmark
// share the last one built.
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

std::string Key(int64_t m, int64_t n, int64_t k, DType dtype) {
  return std::to_string(Copies(m, static_cast<size_t>(n * k) * ferry::DTypeSize(dtype))) + "x" + std::to_string(n) +
         "x" + std::to_string(k) + std::string(ferry::DTypeName(dtype));
}

void BM_FerryLinear(benchmark::State& state, int64_t m, int64_t n, int64_t k, DType dtype) {
  auto be = ferry::backend::MakeCpuBackend();
  const size_t bytes = static_cast<size_t>(n * k) * ferry::DTypeSize(dtype);
  using Weights = std::vector<ferry::backend::LinearWeight>;
  Weights& weights = Cached<Weights>(Key(m, n, k, dtype), [&] {
    Weights w(static_cast<size_t>(Copies(m, bytes)));
    for (size_t i = 0; i < w.size(); ++i) {
      w[i].weight = RandomWeight(n, k, dtype, static_cast<uint32_t>(i));
      if (!be->PrepareLinear(w[i]).ok()) std::abort();
    }
    return w;
  });
  Tensor x = RandomWeight(m, k, DType::kF32, 99);
  Tensor y = Tensor::Empty({m, n}, DType::kF32);
  size_t i = 0;
  for (auto _ : state) {
    if (!be->Linear(x, weights[i], y).ok()) state.SkipWithError("Linear failed");
    i = (i + 1) % weights.size();
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, k, bytes);
}

// oneDNN's f32 matmul with weights pre-packed in the layout it picks for `any`; the primitive
// is created (and cached) before the timed loop.
void BM_OnednnF32(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  const size_t bytes = static_cast<size_t>(n * k) * 4;
  using Weights = std::vector<std::shared_ptr<ferry::kernels::cpu::OnednnWeight>>;
  Weights& weights = Cached<Weights>(Key(m, n, k, DType::kF32), [&] {
    Weights w;
    for (int c = 0; c < Copies(m, bytes); ++c) {
      auto packed = ferry::kernels::cpu::PackOnednnWeight(RandomWeight(n, k, DType::kF32, static_cast<uint32_t>(c)));
      if (!packed.ok()) std::abort();
      w.push_back(*packed);
    }
    return w;
  });
  Tensor x = RandomWeight(m, k, DType::kF32, 99);
  Tensor y = Tensor::Empty({m, n}, DType::kF32);
  if (!ferry::kernels::cpu::OnednnMatmul(x.data<float>(), k, m, k, weights[0]->data.get(), true, n, nullptr,
                                         y.data<float>(), n)
           .ok()) {
    state.SkipWithError("oneDNN matmul failed");
  }
  size_t i = 0;
  for (auto _ : state) {
    (void)ferry::kernels::cpu::OnednnMatmul(x.data<float>(), k, m, k, weights[i]->data.get(), true, n, nullptr,
                                            y.data<float>(), n);
    i = (i + 1) % weights.size();
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, k, bytes);
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

// With --benchmark_repetitions, the "_max" aggregate's counters are the best rate seen: on a
// machine shared with other work that is the closest to what the kernel can do.
double Max(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

// Registered shape by shape (ferry f32, ferry bf16, oneDNN f32) so that the numbers compared
// with each other are measured back to back, under the same machine load.
void RegisterAll() {
  benchmark::RegisterBenchmark("BM_MemoryRead", BM_MemoryRead)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->ComputeStatistics("max", Max);
  for (int64_t m : {1, 8, 512}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{3072, 2048}, {16384, 2048}, {2048, 8192}}) {
      const std::string shape = "/M:" + std::to_string(m) + "/N:" + std::to_string(n) + "/K:" + std::to_string(k);
      benchmark::RegisterBenchmark(("BM_Ferry_f32" + shape).c_str(), BM_FerryLinear, m, n, k, DType::kF32)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->ComputeStatistics("max", Max);
      benchmark::RegisterBenchmark(("BM_Ferry_bf16" + shape).c_str(), BM_FerryLinear, m, n, k, DType::kBF16)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->ComputeStatistics("max", Max);
      benchmark::RegisterBenchmark(("BM_oneDNN_f32" + shape).c_str(), BM_OnednnF32, m, n, k)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->ComputeStatistics("max", Max);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --threads=N sets the compute threads (kernels and oneDNN); removed before Google Benchmark
  // parses the rest.
  int threads = 0;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads = std::atoi(argv[i] + 10);
    } else {
      args.push_back(argv[i]);
    }
  }
  ferry::SetComputeThreads(threads);
  int n = static_cast<int>(args.size());
  benchmark::AddCustomContext("compute_threads", std::to_string(ferry::ComputeThreads()));
  benchmark::AddCustomContext("onednn_f32_impl", ferry::kernels::cpu::OnednnF32MatmulImpl());
  benchmark::AddCustomContext("onednn_fast_bf16", ferry::kernels::cpu::OnednnHasFastBf16Matmul() ? "yes" : "no");
  RegisterAll();
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
