// Device code every attention kernel uses: the kernels' parameter block and the small
// device helpers (async copies, ldmatrix, mma.sync, conversions, warp reductions, the work
// item search). Internal to kernels/cuda; attention_kernels.cuh builds the kernels on it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"

namespace ferry::cuda::attention_detail {

using Bf16 = __nv_bfloat16;
using Half = __half;
using Fp8 = uint8_t;  // e4m3 storage

enum class Mode { kDecode, kPrefill, kDense };

// Everything a kernel needs, passed by value. Strides are in elements.
struct Params {
  const void* q = nullptr;
  void* out = nullptr;
  int64_t q_stride = 0;
  int64_t out_stride = 0;
  const void* k = nullptr;  // paged: the cache; dense: rows [T, kv_stride]
  const void* v = nullptr;
  int64_t kv_stride = 0;
  int block_tokens = 0;
  int max_blocks = 0;
  const int32_t* block_tables = nullptr;
  const int32_t* q_begin = nullptr;
  const int32_t* q_len = nullptr;
  const int32_t* context_len = nullptr;  // null for dense
  int num_seqs = 0;
  // Prefill and dense CTAs look for their sequence from this one on: every sequence before it
  // has no prefill rows (a mixed step's decode rows come first). 0: from the start.
  int item_seq_begin = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int group = 0;  // num_heads / num_kv_heads
  float scale = 0.0f;
  float scale_log2 = 0.0f;  // scale * log2(e): the tensor-core kernels use exp2
  bool causal = true;
  int window = 0;        // keys at or before p - window are masked (the row's position p); 0: none
  int window_right = 0;  // keys at or after p + window_right are masked; 0: none (causal rows never see them)
  float softcap = 0.0f;     // 0: none; else scores -> softcap * tanh(scores / softcap)
  // Split decode: the grid has `splits` CTAs per decode row and KV head; a row's context is
  // cut into at most that many ranges, each a whole number of split_granule keys, sized on
  // the device from the row's own length (DecodeSplit), so the launch depends only on the
  // bound it was planned for (and a CUDA graph replays it for any shorter context).
  // Partial results go to the workspace.
  int splits = 1;
  int split_granule = 64;
  float* partial_o = nullptr;    // [num_seqs * splits * num_heads][head_dim], normalized
  float* partial_lse = nullptr;  // [num_seqs * splits * num_heads], log2(sum) + max (log2 domain)
};

// ---------------------------------------------------------------------------------------
// Small device helpers.

// How a decode row of ctx >= 1 keys is split: x = number of ranges, y = keys per range (the
// last range takes the rest). Ranges are whole granules, as many as the grid allows.
__device__ __forceinline__ int2 DecodeSplit(const Params& p, int ctx) {
  const int g = p.split_granule;
  const int granules = max((ctx + g - 1) / g, 1);
  const int want = min(p.splits, granules);
  const int tokens = ((ctx + want - 1) / want + g - 1) / g * g;
  return make_int2((ctx + tokens - 1) / tokens, tokens);
}

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without staging in registers; zero-fills when !valid.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void Ldmatrix4(uint32_t r[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}
__device__ __forceinline__ void Ldmatrix4Trans(uint32_t r[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

// c[16x8] += a[16x16] * b[16x8], f32 accumulators (PTX fragment layouts of m16n8k16).
template <typename T>
__device__ __forceinline__ void Mma16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  if constexpr (std::is_same_v<T, Bf16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Two floats as a packed 16-bit pair (the first in the low half).
// 2^x by the multifunction unit with denormal results flushed to zero: softmax weights that
// small are zero either way. exp2f without fast math adds a range fix-up around the same
// instruction, about three instructions per score in the FlashAttention loop.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <typename T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, Bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, 4);
  }
  return r;
}

// Eight e4m3 values (8 bytes) as eight T (16 bytes). Exact: every e4m3 value is a bf16 and
// an f16 value.
template <typename T>
__device__ __forceinline__ uint4 Fp8x8ToPairs(uint2 v) {
  uint32_t out[4];
  const uint32_t words[2] = {v.x, v.y};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const auto pair = static_cast<__nv_fp8x2_storage_t>((words[i / 2] >> (16 * (i % 2))) & 0xffffu);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    if constexpr (std::is_same_v<T, Half>) {
      out[i] = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
    } else {
      const float2 f = __half22float2(__half2(h));
      out[i] = PackPair<Bf16>(f.x, f.y);
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(Bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(Half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(Fp8 x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x), __NV_E4M3)));
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, Bf16>) {
    return __float2bfloat16_rn(x);
  } else {
    return __float2half_rn(x);
  }
}

// Eight consecutive elements (16-byte aligned for 16-bit types, 8-byte for e4m3) as floats.
template <typename S>
__device__ __forceinline__ void Load8(const S* p, float f[8]) {
  if constexpr (std::is_same_v<S, float>) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    const float4 b = *reinterpret_cast<const float4*>(p + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else if constexpr (std::is_same_v<S, Fp8>) {
    const uint4 w = Fp8x8ToPairs<Half>(*reinterpret_cast<const uint2*>(p));
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &words[i], 4);
      const float2 v = __half22float2(h);
      f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
  } else {
    const uint4 w = *reinterpret_cast<const uint4*>(p);
    const S* e = reinterpret_cast<const S*>(&w);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = ToFloat(e[i]);
  }
}

// Eight floats to eight consecutive T (16-byte aligned for 16-bit T, 32-byte for f32).
template <typename T>
__device__ __forceinline__ void Store8(T* p, const float f[8]) {
  if constexpr (std::is_same_v<T, float>) {
    reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
  } else {
    const uint4 w = make_uint4(PackPair<T>(f[0], f[1]), PackPair<T>(f[2], f[3]), PackPair<T>(f[4], f[5]),
                               PackPair<T>(f[6], f[7]));
    *reinterpret_cast<uint4*>(p) = w;
  }
}

// The end of a kernel whose warps each ran part of a row's keys: merges the parts' (max in
// the log2 domain, sum, unnormalized output) of 8 columns of the row, from shared memory
// where part k sits at index first + k * stride (outputs `out_ld` floats apart), and writes
// them: normalized to out (row `token`, head `head`), or for a split decode row the partial
// output and its log-sum to the workspace (split `split` of sequence `seq`).
template <typename T, int HD, int kParts>
__device__ __forceinline__ void MergePartsAndStore(const Params& p, const float* comb_o, int out_ld,
                                                   const float* comb_m, const float* comb_l, int first, int stride,
                                                   int c, bool partial, int seq, int split, int head,
                                                   int64_t token) {
  float mmax = -INFINITY;
#pragma unroll
  for (int k = 0; k < kParts; ++k) mmax = fmaxf(mmax, comb_m[first + k * stride]);
  float sum = 0.0f;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int k = 0; k < kParts; ++k) {
    const int w = first + k * stride;
    const float mk = comb_m[w];
    if (mk == -INFINITY) continue;
    const float wgt = exp2f(mk - mmax);
    sum += comb_l[w] * wgt;
    const float4 a = *reinterpret_cast<const float4*>(comb_o + w * out_ld + c * 8);
    const float4 b = *reinterpret_cast<const float4*>(comb_o + w * out_ld + c * 8 + 4);
    acc[0] += a.x * wgt, acc[1] += a.y * wgt, acc[2] += a.z * wgt, acc[3] += a.w * wgt;
    acc[4] += b.x * wgt, acc[5] += b.y * wgt, acc[6] += b.z * wgt, acc[7] += b.w * wgt;
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] *= inv;
  if (partial) {
    const int64_t idx = (static_cast<int64_t>(seq) * p.splits + split) * p.num_heads + head;
    Store8<float>(p.partial_o + idx * HD + c * 8, acc);
    if (c == 0) p.partial_lse[idx] = sum > 0.0f ? mmax + log2f(sum) : -INFINITY;
  } else {
    Store8<T>(static_cast<T*>(p.out) + token * p.out_stride + static_cast<int64_t>(head) * HD + c * 8, acc);
  }
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// Called by one whole warp: finds which sequence the `target`-th work item belongs to, where
// sequence s contributes items(q_len[s]) items, in order. Each CTA does this itself, so no
// schedule has to be built on the host (which does not know the q_len values) or in a
// separate launch. Returns false when target is past the last item.
template <typename ItemsFn>
__device__ bool FindItem(const int32_t* q_len, int num_seqs, int target, ItemsFn items, int& seq, int& local) {
  const int lane = threadIdx.x & 31;
  int base = 0;
  for (int s0 = 0; s0 < num_seqs; s0 += 32) {
    const int s = s0 + lane;
    const int n = s < num_seqs ? items(q_len[s]) : 0;
    int incl = n;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += y;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    if (target < base + total) {
      const unsigned hit = __ballot_sync(0xffffffffu, base + incl > target);
      const int first = __ffs(static_cast<int>(hit)) - 1;
      seq = s0 + first;
      local = target - base - __shfl_sync(0xffffffffu, incl - n, first);
      return true;
    }
    base += total;
  }
  return false;
}

// Element offset of key `key` of a sequence for one KV head: through the block table (paged)
// or as a row of the packed K/V (dense).
template <Mode kMode, int HD>
__device__ __forceinline__ int64_t KeyOffset(const Params& p, const int32_t* table, int64_t row_base, int kv_head,
                                             int key) {
  if constexpr (kMode == Mode::kDense) {
    return (row_base + key) * p.kv_stride + static_cast<int64_t>(kv_head) * HD;
  } else {
    const int64_t block = table[key / p.block_tokens];
    return ((block * p.num_kv_heads + kv_head) * p.block_tokens + key % p.block_tokens) * HD;
  }
}

}  // namespace ferry::cuda::attention_detail
