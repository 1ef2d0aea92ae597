// Token sampling on the GPU, one block per row, with engine::Sampler's processors and
// order: repetition penalty, temperature, top-k, top-p, min-p, then a draw. Logit bias,
// banned ids and the presence and frequency penalties are applied before, by AdjustLogits,
// with the same function as the CPU (kernels/logit_adjust.h).
//
// Nothing is sorted. Elements are ranked by a 64-bit key, the logit's order-preserving bits
// over the complement of its id, so that larger keys come first and equal logits rank by
// ascending id: the CPU's order, with its ties, as one total order. top-k and top-p each
// cut that order at one element, found by a radix select over the keys (8-bit digits,
// histograms in shared memory): by count for top-k, by probability mass for top-p. min-p
// is a plain threshold on the probability. The draw is a Gumbel-max race among the
// survivors: argmax of log p + G with G = -log(-log U) and U from a counter-based Philox
// stream keyed by (seed, counter, token id), which yields each survivor with its
// renormalized probability and makes the token a pure function of the row's inputs.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kRowsPerLaunch = 64;
// Probabilities (relative to the top one) are summed as integers in units of 2^-42, so the
// top-p sums do not depend on the order of the additions. 2^42 * 2^21 tokens < 2^64.
constexpr double kMassUnits = 4398046511104.0;

// Row parameters travel in the kernel's argument block: no copy, no allocation.
struct LaunchParams {
  SamplingParamsGpu row[kRowsPerLaunch];
};

__device__ __forceinline__ uint4 Philox4x32(uint4 ctr, uint2 key) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t lo0 = 0xD2511F53u * ctr.x, hi0 = __umulhi(0xD2511F53u, ctr.x);
    const uint32_t lo1 = 0xCD9E8D57u * ctr.z, hi1 = __umulhi(0xCD9E8D57u, ctr.z);
    ctr = make_uint4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
    key.x += 0x9E3779B9u;
    key.y += 0xBB67AE85u;
  }
  return ctr;
}

// Standard Gumbel noise for token `id` of draw `counter` of stream `seed`. U has 53 random
// bits and lies strictly inside (0, 1).
__device__ __forceinline__ double Gumbel(uint64_t seed, uint64_t counter, int id) {
  const uint4 r = Philox4x32(
      make_uint4(static_cast<uint32_t>(id), static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                 0x53414D50u),
      make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
  const uint64_t bits = (static_cast<uint64_t>(r.x) << 21) | (r.y >> 11);
  const double u = (static_cast<double>(bits) + 0.5) * 0x1.0p-53;
  return -log(-log(u));
}

// Larger key = earlier in the CPU's order: higher logit, then lower id.
__device__ __forceinline__ uint64_t RankKey(float logit, int id) {
  uint32_t b = __float_as_uint(logit == 0.0f ? 0.0f : logit);  // -0 ranks as +0
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(b) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

template <typename V>
__device__ __forceinline__ bool Better(V a, int ia, V b, int ib) {
  return a > b || (a == b && ia < ib);
}

// Block-wide argmax of (value, id), ties to the lower id; every thread gets the result.
template <typename V>
__device__ void BlockArgMax(V& v, int& id, V* sv, int* si) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const V ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (Better(ov, oi, v, id)) {
      v = ov;
      id = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = id;
  }
  __syncthreads();
  if (lane < static_cast<int>(blockDim.x >> 5)) {
    v = sv[lane];
    id = si[lane];
  } else {
    v = -INFINITY;
    id = 0x7fffffff;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const V ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (Better(ov, oi, v, id)) {
      v = ov;
      id = oi;
    }
  }
}

__device__ uint64_t BlockSumU64(uint64_t v, unsigned long long* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct SelectShared {
  unsigned long long mass[256];
  unsigned int count[256];
  unsigned long long prefix;
  unsigned long long above;
  int done;
};

// Radix select over the candidates' keys, highest first. Walking the candidates in
// descending key order and accumulating their weight (1 each when !kMass), returns a
// threshold T such that the candidates with key >= T are exactly those up to and including
// the one at which the running weight first reaches `target`. elem(i, key, weight) says
// whether element i is a candidate and gives its key and weight.
template <bool kMass, typename Elem>
__device__ uint64_t SelectThreshold(int vocab, double target, Elem elem, SelectShared& sh) {
  uint64_t prefix = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      sh.mass[b] = 0;
      sh.count[b] = 0;
    }
    if (shift == 56 && threadIdx.x == 0) sh.above = 0;
    __syncthreads();
    const uint64_t high_mask = shift == 56 ? 0 : ~0ull << (shift + 8);
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      uint64_t key, weight;
      if (!elem(i, key, weight) || (key & high_mask) != prefix) continue;
      const int bin = static_cast<int>((key >> shift) & 255);
      atomicAdd(&sh.count[bin], 1u);
      if (kMass && weight != 0) atomicAdd(&sh.mass[bin], static_cast<unsigned long long>(weight));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l owns bins 255 - 8l down to 248 - 8l: a scan over lanes gives each lane the
      // weight of the bins above its own.
      const int lane = threadIdx.x;
      uint64_t local = 0;
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int b = 255 - (8 * lane + m);
        local += kMass ? sh.mass[b] : sh.count[b];
      }
      uint64_t inclusive = local;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint64_t t = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += t;
      }
      const uint64_t above = sh.above;
      const unsigned reach = __ballot_sync(0xffffffffu, static_cast<double>(above + inclusive) >= target);
      // No lane reaching the target cannot happen for a valid target; the lowest bin is the
      // fallback.
      const int cross = reach != 0 ? __ffs(reach) - 1 : 31;
      if (lane == cross) {
        uint64_t acc = above + inclusive - local;
        int chosen = 0;
        uint64_t chosen_weight = 0;
        for (int m = 0; m < 8; ++m) {
          const int b = 255 - (8 * lane + m);
          const uint64_t w = kMass ? sh.mass[b] : sh.count[b];
          chosen = b;
          chosen_weight = w;
          if (static_cast<double>(acc + w) >= target) break;
          acc += w;
        }
        sh.prefix = prefix | (static_cast<uint64_t>(chosen) << shift);
        sh.above = acc;
        // Done when the bin holds only the element sought, or (by count) all of the bin is in.
        sh.done = shift == 0 || sh.count[chosen] <= 1 ||
                  (!kMass && static_cast<double>(acc + chosen_weight) == target);
      }
    }
    __syncthreads();
    prefix = sh.prefix;
    const bool done = sh.done != 0;
    if (done) break;
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) SampleKernel(const float* logits, int vocab, LaunchParams launch,
                                                         int row_base, const int32_t* history,
                                                         const int64_t* history_offsets, int32_t* out_tokens) {
  AwaitPriorGrids();
  extern __shared__ uint32_t seen[];  // bitmap of the row's history, when penalized
  __shared__ SelectShared select;
  __shared__ float scratch_f[32];
  __shared__ double scratch_d[32];
  __shared__ int scratch_i[32];
  __shared__ unsigned long long scratch_u[32];

  const int row = row_base + static_cast<int>(blockIdx.x);
  const SamplingParamsGpu p = launch.row[blockIdx.x];
  const float* lr = logits + static_cast<int64_t>(row) * vocab;
  const float penalty = p.repetition_penalty;
  const bool penalize = penalty != 1.0f && history != nullptr && history_offsets != nullptr;
  if (penalize) {
    const int words = (vocab + 31) / 32;
    for (int w = threadIdx.x; w < words; w += blockDim.x) seen[w] = 0;
    __syncthreads();
    for (int64_t j = history_offsets[row] + threadIdx.x; j < history_offsets[row + 1]; j += blockDim.x) {
      const int32_t id = history[j];
      if (id >= 0 && id < vocab) atomicOr(&seen[id >> 5], 1u << (id & 31));
    }
    __syncthreads();
  }
  // The penalized logit: each distinct history token once, positive divided, negative multiplied.
  auto logit = [&](int i) -> float {
    const float l = lr[i];
    if (penalize && ((seen[i >> 5] >> (i & 31)) & 1u)) return l > 0.0f ? l / penalty : l * penalty;
    return l;
  };

  // Argmax as engine::Argmax: the first strictly greater value wins, starting from id 0 at -inf.
  float best = -INFINITY;
  int best_id = 0;
  int nonfinite = 0;
  auto consider = [&](float l, int i) {
    nonfinite |= !isfinite(l);
    if (l > best) {
      best = l;
      best_id = i;
    }
  };
  if (!penalize && vocab % 4 == 0 && reinterpret_cast<uintptr_t>(lr) % 16 == 0) {
    // The common pass (greedy rows end here): 16-byte loads, kArgMaxUnroll of them in flight
    // per thread, so a 128k vocabulary is a few rounds of memory latency instead of ~125. A
    // thread still visits its ids in increasing order, so the first maximum wins as before.
    constexpr int kArgMaxUnroll = 4;
    const float4* l4 = reinterpret_cast<const float4*>(lr);
    const int n4 = vocab / 4;
    const int step = static_cast<int>(blockDim.x);
    for (int base = threadIdx.x; base < n4; base += step * kArgMaxUnroll) {
      float4 v[kArgMaxUnroll];
#pragma unroll
      for (int u = 0; u < kArgMaxUnroll; ++u) {
        const int j = base + u * step;
        v[u] = j < n4 ? l4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kArgMaxUnroll; ++u) {
        const int j = base + u * step;
        if (j >= n4) break;
        consider(v[u].x, 4 * j);
        consider(v[u].y, 4 * j + 1);
        consider(v[u].z, 4 * j + 2);
        consider(v[u].w, 4 * j + 3);
      }
    }
  } else {
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) consider(logit(i), i);
  }
  if (__syncthreads_or(nonfinite)) {  // a broken row fails its request, not the batch
    if (threadIdx.x == 0) out_tokens[row] = -1;
    return;
  }
  BlockArgMax(best, best_id, scratch_f, scratch_i);
  if (p.temperature == 0.0f) {
    if (threadIdx.x == 0) out_tokens[row] = best_id;
    return;
  }

  // Scaled logits as the CPU rounds them (no contraction): z = l * (1/T), d = z - z_max <= 0.
  const float inv_t = 1.0f / p.temperature;
  const float z_max = __fmul_rn(best, inv_t);
  auto delta = [&](float l) { return __fsub_rn(__fmul_rn(l, inv_t), z_max); };

  uint64_t k_threshold = 0;  // top-k survivors: key >= k_threshold
  if (p.top_k > 0 && p.top_k < vocab) {
    k_threshold = SelectThreshold<false>(
        vocab, static_cast<double>(p.top_k),
        [&](int i, uint64_t& key, uint64_t& weight) {
          key = RankKey(logit(i), i);
          weight = 1;
          return true;
        },
        select);
  }

  uint64_t p_threshold = 0;  // top-p survivors: key >= p_threshold
  if (p.top_p < 1.0f) {
    auto mass_elem = [&](int i, uint64_t& key, uint64_t& weight) {
      const float l = logit(i);
      key = RankKey(l, i);
      if (key < k_threshold) return false;
      weight = __double2ull_rn(exp(static_cast<double>(delta(l))) * kMassUnits);
      return true;
    };
    uint64_t total = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      uint64_t key, weight;
      if (mass_elem(i, key, weight)) total += weight;
    }
    total = BlockSumU64(total, scratch_u);
    p_threshold = SelectThreshold<true>(vocab, static_cast<double>(p.top_p) * static_cast<double>(total), mass_elem,
                                        select);
  }

  const uint64_t threshold = k_threshold > p_threshold ? k_threshold : p_threshold;
  const double min_p = p.min_p;
  double score = -INFINITY;
  int pick = 0x7fffffff;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float l = logit(i);
    if (RankKey(l, i) < threshold) continue;
    const float d = delta(l);
    // min-p: p_i >= min_p * p_max, and p_max corresponds to d = 0.
    if (min_p > 0.0 && exp(static_cast<double>(d)) < min_p) continue;
    const double s = static_cast<double>(d) + Gumbel(p.seed, p.counter, i);
    if (Better(s, i, score, pick)) {
      score = s;
      pick = i;
    }
  }
  BlockArgMax(score, pick, scratch_d, scratch_i);
  if (threadIdx.x == 0) out_tokens[row] = pick < vocab ? pick : best_id;
}

// One thread per adjustment; the entries name distinct (row, id) pairs, so no two threads
// write the same logit.
__global__ void AdjustKernel(float* logits, int vocab, const kernels::LogitAdjustment* entries, int count) {
  AwaitPriorGrids();
  const int i = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const kernels::LogitAdjustment a = entries[i];
  float* l = logits + static_cast<int64_t>(a.row) * vocab + a.id;
  *l = kernels::AdjustLogit(*l, a);
}

Status CheckParams(const SamplingParamsGpu& p, int row) {
  const std::string where = "SampleRows: row " + std::to_string(row) + ": ";
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return InvalidArgument(where + "temperature must be a finite number >= 0");
  }
  if (p.top_k < 0) return InvalidArgument(where + "top_k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgument(where + "top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return InvalidArgument(where + "min_p must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return InvalidArgument(where + "repetition_penalty must be a finite number > 0");
  }
  return Status::Ok();
}

}  // namespace

Status AdjustLogits(float* logits, int vocab, const kernels::LogitAdjustment* entries, int count, cudaStream_t stream) {
  if (count < 0 || vocab <= 0) return InvalidArgument("AdjustLogits: need count >= 0 and vocab > 0");
  if (count == 0) return Status::Ok();
  if (logits == nullptr || entries == nullptr) return InvalidArgument("AdjustLogits: null pointer");
  constexpr int kBlock = 256;
  LaunchKernel(AdjustKernel, (count + kBlock - 1) / kBlock, kBlock, 0, stream, logits, vocab, entries, count);
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

namespace {

// Structured outputs: ids whose bit is clear in the row's mask get kBannedLogit.
__global__ void MaskKernel(float* logits, int vocab, const int32_t* rows, const uint64_t* masks, int words) {
  AwaitPriorGrids();
  const int m = blockIdx.y;
  float* row = logits + static_cast<int64_t>(rows[m]) * vocab;
  const uint64_t* bits = masks + static_cast<int64_t>(m) * words;
  for (int id = blockIdx.x * blockDim.x + threadIdx.x; id < vocab; id += gridDim.x * blockDim.x) {
    if (!((bits[id >> 6] >> (id & 63)) & 1ull)) row[id] = kernels::kBannedLogit;
  }
}

}  // namespace

Status MaskLogits(float* logits, int vocab, const int32_t* rows, const uint64_t* masks, int count, cudaStream_t stream) {
  if (count < 0 || vocab <= 0) return InvalidArgument("MaskLogits: need count >= 0 and vocab > 0");
  if (count == 0) return Status::Ok();
  if (logits == nullptr || rows == nullptr || masks == nullptr) return InvalidArgument("MaskLogits: null pointer");
  constexpr int kBlock = 256;
  const dim3 grid(static_cast<unsigned>(std::min((vocab + kBlock - 1) / kBlock, 128)), static_cast<unsigned>(count));
  LaunchKernel(MaskKernel, grid, kBlock, 0, stream, logits, vocab, rows, masks, (vocab + 63) / 64);
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

namespace {

__global__ void PatchKernel(int32_t* token_ids, const int32_t* source, const int32_t* pairs, int count) {
  AwaitPriorGrids();
  const int k = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= count) return;
  // A failed draw (-1, non-finite logits) ends its sequence when collected; its row here is
  // dropped, but must still read a valid embedding row.
  const int32_t id = source[pairs[2 * k + 1]];
  token_ids[pairs[2 * k]] = id < 0 ? 0 : id;
}

}  // namespace

Status PatchTokens(int32_t* token_ids, const int32_t* source, const int32_t* pairs, int count, cudaStream_t stream) {
  if (count < 0) return InvalidArgument("PatchTokens: need count >= 0");
  if (count == 0) return Status::Ok();
  if (token_ids == nullptr || source == nullptr || pairs == nullptr) return InvalidArgument("PatchTokens: null pointer");
  constexpr int kBlock = 256;
  LaunchKernel(PatchKernel, (count + kBlock - 1) / kBlock, kBlock, 0, stream, token_ids, source, pairs, count);
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

Status SampleRows(const float* logits, int rows, int vocab, const SamplingParamsGpu* params,
                  const int32_t* history_tokens, const int64_t* history_offsets, int32_t* out_tokens,
                  cudaStream_t stream) {
  if (rows < 0 || vocab <= 0) {
    return InvalidArgument("SampleRows: need rows >= 0 and vocab > 0, got " + std::to_string(rows) + " and " +
                           std::to_string(vocab));
  }
  if (rows == 0) return Status::Ok();
  if (logits == nullptr || params == nullptr || out_tokens == nullptr) return InvalidArgument("SampleRows: null pointer");
  if ((history_tokens == nullptr) != (history_offsets == nullptr)) {
    return InvalidArgument("SampleRows: history_tokens and history_offsets go together");
  }
  bool any_penalty = false;
  for (int r = 0; r < rows; ++r) {
    FERRY_RETURN_IF_ERROR(CheckParams(params[r], r));
    any_penalty = any_penalty || params[r].repetition_penalty != 1.0f;
  }
  const size_t bitmap_bytes =
      any_penalty && history_tokens != nullptr ? static_cast<size_t>((vocab + 31) / 32) * sizeof(uint32_t) : 0;
  if (bitmap_bytes > 48 * 1024) {
    FERRY_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(SampleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(bitmap_bytes)));
  }
  for (int base = 0; base < rows; base += kRowsPerLaunch) {
    const int n = rows - base < kRowsPerLaunch ? rows - base : kRowsPerLaunch;
    LaunchParams launch;
    for (int r = 0; r < n; ++r) launch.row[r] = params[base + r];
    LaunchKernel(SampleKernel, n, kThreads, bitmap_bytes, stream, logits, vocab, launch, base, history_tokens,
                 history_offsets, out_tokens);
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  return Status::Ok();
}

}  // namespace ferry::cuda
