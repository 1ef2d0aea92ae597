// Paged attention at llama-3.2-1B shapes (32 heads, 8 KV heads, head_dim 64, 16-token
// blocks): causal prefill of 512 tokens (GFLOP/s over the causal triangle) and decode of
// batch 1 / 8 against 512-token contexts (GB/s of K/V read). And an encoder batch at
// bert-base's shape (12 heads of 64, 32 sequences of 128 tokens, bidirectional, on the fused
// QKV projection) with f32 products and with the W8A8 encoders' bf16 products (on AMX or
// vdpbf16ps, whichever is on: FERRY_AMX=0, FERRY_BF16_DOT_ATTENTION=0).
//
//   attention_bench [--threads=N] [google-benchmark flags]
#include <benchmark/benchmark.h>

#include "bench_threads.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "kernels/cpu/amx_gemm.h"

namespace {

using ferry::DType;
using ferry::Tensor;
using ferry::backend::AttentionParams;
using ferry::backend::KvLayer;
using ferry::backend::SeqSpan;

constexpr int kHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 64;
constexpr int kBlockTokens = 16;

Tensor Random(const ferry::Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

struct Setup {
  Tensor q;
  KvLayer layer;
  std::vector<std::vector<int32_t>> tables;
  std::vector<SeqSpan> spans;
  AttentionParams params;
};

// `batch` sequences of `context` cached tokens each, `q_len` new ones, blocks shuffled.
Setup MakeSetup(int batch, int q_len, int context, DType dtype, ferry::backend::Backend& be) {
  std::mt19937 rng(5);
  Setup s;
  s.params = {kHeads, kKvHeads, kHeadDim, 0.125f, true};
  const int blocks_per_seq = (context + kBlockTokens - 1) / kBlockTokens;
  const int blocks = batch * blocks_per_seq;
  s.layer.block_tokens = kBlockTokens;
  s.layer.k = Tensor::Empty({blocks, kKvHeads, kBlockTokens, kHeadDim}, dtype);
  s.layer.v = Tensor::Empty({blocks, kKvHeads, kBlockTokens, kHeadDim}, dtype);
  std::vector<int32_t> ids(blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  s.tables.resize(batch);
  for (int b = 0; b < batch; ++b) {
    s.tables[b].assign(ids.begin() + b * blocks_per_seq, ids.begin() + (b + 1) * blocks_per_seq);
    const Tensor k = Random({context, kKvHeads * kHeadDim}, rng);
    const Tensor v = Random({context, kKvHeads * kHeadDim}, rng);
    std::vector<int32_t> slots(context);
    for (int p = 0; p < context; ++p) slots[p] = s.tables[b][p / kBlockTokens] * kBlockTokens + p % kBlockTokens;
    if (!be.WriteKv(k, v, ferry::backend::HostIndices(slots), s.layer).ok()) std::abort();
    s.spans.push_back({b * q_len, q_len, context, s.tables[b].data()});
  }
  s.q = Random({batch * q_len, kHeads * kHeadDim}, rng);
  return s;
}

void Run(benchmark::State& state, int batch, int q_len, int context, DType dtype) {
  auto be = ferry::backend::MakeCpuBackend();
  Setup s = MakeSetup(batch, q_len, context, dtype, *be);
  Tensor out = Tensor::Empty(s.q.shape(), DType::kF32);
  for (auto _ : state) {
    if (!be->PagedAttention(s.q, s.layer, s.spans, s.params, out).ok()) state.SkipWithError("attention failed");
    benchmark::ClobberMemory();
  }
  // Score + value FLOPs over the (causal) query/key pairs.
  double pairs = 0;
  for (int t = 0; t < q_len; ++t) pairs += context - q_len + t + 1;
  const double flops = 4.0 * kHeadDim * kHeads * pairs * batch;
  const double kv_bytes = 2.0 * batch * context * kKvHeads * kHeadDim * ferry::DTypeSize(dtype);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["KV_GB/s"] =
      benchmark::Counter(kv_bytes, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_Prefill512(benchmark::State& state) {
  Run(state, 1, 512, 512, state.range(0) == 0 ? DType::kF32 : DType::kBF16);
}
void BM_Decode(benchmark::State& state) {
  Run(state, static_cast<int>(state.range(0)), 1, 512, state.range(1) == 0 ? DType::kF32 : DType::kBF16);
}

void BM_EncoderDense(benchmark::State& state) {
  constexpr int kSeqs = 32, kLen = 128, kEncHeads = 12;
  auto be = ferry::backend::MakeCpuBackend();
  std::mt19937 rng(9);
  const Tensor qkv = Random({kSeqs * kLen, 3 * kEncHeads * kHeadDim}, rng);
  Tensor out = Tensor::Empty({kSeqs * kLen, kEncHeads * kHeadDim}, DType::kF32);
  std::vector<SeqSpan> spans;
  for (int i = 0; i < kSeqs; ++i) spans.push_back({i * kLen, kLen, 0, nullptr});
  AttentionParams p{kEncHeads, kEncHeads, kHeadDim, 0.125f, false};
  p.bf16_products = state.range(0) != 0;
  for (auto _ : state) {
    if (!be->DenseAttentionQkv(qkv, spans, p, out).ok()) state.SkipWithError("attention failed");
    benchmark::ClobberMemory();
  }
  const double flops = 4.0 * kHeadDim * kEncHeads * static_cast<double>(kLen) * kLen * kSeqs;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetLabel(!p.bf16_products                                  ? "f32"
                 : ferry::kernels::cpu::AmxEnabled()               ? "bf16 on AMX"
                 : ferry::kernels::cpu::Bf16DotAttentionEnabled() ? "bf16 on vdpbf16ps"
                                                                   : "f32 (no bf16 route)");
}

// With --benchmark_repetitions, the "_max" aggregate's counters are the best rate seen.
double Max(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

BENCHMARK(BM_Prefill512)
    ->ArgName("bf16_cache")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("max", Max);
BENCHMARK(BM_Decode)
    ->ArgNames({"batch", "bf16_cache"})
    ->Args({1, 0})
    ->Args({8, 0})
    ->Args({1, 1})
    ->Args({8, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->ComputeStatistics("max", Max);
BENCHMARK(BM_EncoderDense)
    ->ArgName("bf16_products")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("max", Max);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = ferry::bench::ApplyThreadsFlag(argc, argv);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
