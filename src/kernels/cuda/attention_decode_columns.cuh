// The decode attention kernel for GQA groups of up to 8 heads: the group's heads are the N
// side of the tensor-core products and the keys the M side, and every warp streams its own
// keys from the cache straight into registers. Internal to kernels/cuda (attention_decode.cu).
//
// Why: the 16-row kernel (FlashAttentionKernel in its decode shape) pads a group of 4 heads to
// the 16 rows of an m16n8k16 product, so 3/4 of its tensor work is padding, and it stages
// every 64 keys through shared memory with two barriers per round. Measured on an H200 it was
// bound by the latency of those rounds, not by bytes: an fp8 cache, half the bytes, took
// about the time of a bf16 one. Here, per 16 keys a warp runs
//   S^T[16 keys x 8 heads] = K[16 x d] Q^T[d x 8]       (head_dim / 16 products)
//   O^T[d x 8 heads]      += V^T[d x 16 keys] P^T[16 x 8] (head_dim / 16 products)
// half the products of the 16-row kernel, with no shared memory and no barrier until the
// warps' results are merged at the end.
//
// Fragment layouts (PTX m16n8k16; lane = 4 g + t4):
// - K as the A operand: the products sum over the head dimension, so the order of the
//   dimensions inside a product is free as long as Q uses the same one. Lane (g, t4) loads
//   the contiguous dimensions [c * CW + t4 * KD, + KD) of keys g and g + 8 (KD = 8, CW = 32;
//   4 and 16 at head_dim 16): words 2s, 2s + 1 of a key are a0/a2 (a1/a3 for key g + 8) of
//   the s-th product, and Q's words 2s, 2s + 1 of head g are its b0/b1. No shuffles.
// - P^T as the B operand is the score accumulator transposed: movmatrix.trans of the packed
//   scores of keys 0-7 and 8-15 gives b0 and b1.
// - V^T as the A operand needs pairs of keys per register. Lane (g, t4) loads dimensions
//   [g * d / 8, + d / 8) of keys 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9; product m's rows g and
//   g + 8 are dimensions g * d / 8 + 2m and + 1, so each 32-bit word of a key holds one
//   dimension of row g and one of row g + 8, and a byte permute of two keys' words makes
//   each A register. The accumulator then holds, for heads 2 t4 and 2 t4 + 1, the same
//   d / 8 contiguous dimensions.
#pragma once

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/launch.h"

namespace ferry::cuda::attention_detail {

inline constexpr int kColumnWarps = 4;       // warps per CTA; warp w takes key tiles w, w + 4, ...
inline constexpr int kColumnTileKeys = 16;   // keys per warp per tile (the M of the products)
inline constexpr int kColumnMaxGroup = 8;    // heads per KV head this kernel serves (the N)
inline constexpr int kColumnCtasPerSm = 4;   // asked for by the launch bounds (<= 128 registers)

template <int HD>
struct ColumnConfig {
  static constexpr int kKd = HD >= 32 ? 8 : 4;  // K dimensions per lane per chunk
  static constexpr int kChunkDims = 4 * kKd;    // a chunk: the 4 lanes of a key row
  static constexpr int kChunks = HD / kChunkDims;
  static constexpr int kKWords = HD / 8;        // 16-bit pairs of K (and Q) per lane per key
  static constexpr int kVDims = HD / 8;         // V dimensions per lane per key
  static constexpr int kVWords = HD / 16;       // = the products of O^T (m tiles)
  static constexpr int kOutLd = HD + 4;
  static constexpr size_t kSmemBytes =
      (static_cast<size_t>(kColumnWarps) * kColumnMaxGroup * kOutLd + 2 * kColumnWarps * kColumnMaxGroup) * 4;
  static_assert(kChunks * kChunkDims == HD && kKWords * 2 == kChunks * kKd, "head_dim 16, 32, 64 or 128");
};

__device__ __forceinline__ uint32_t MovMatrixTrans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// kBytes (2, 4, 8, 16 or 32) from global memory into 32-bit words (a 2-byte load fills the low
// half of w[0]); streaming loads: each cache row is read once per step. Zeros when !valid.
template <int kBytes>
__device__ __forceinline__ void LoadWords(const void* src, bool valid, uint32_t* w) {
  if constexpr (kBytes == 32 || kBytes == 16) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 v = valid ? __ldcs(reinterpret_cast<const uint4*>(src) + i) : make_uint4(0, 0, 0, 0);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (kBytes == 8) {
    const uint2 v = valid ? __ldcs(reinterpret_cast<const uint2*>(src)) : make_uint2(0, 0);
    w[0] = v.x, w[1] = v.y;
  } else if constexpr (kBytes == 4) {
    w[0] = valid ? __ldcs(reinterpret_cast<const unsigned int*>(src)) : 0u;
  } else {
    static_assert(kBytes == 2, "2, 4, 8, 16 or 32 bytes");
    w[0] = valid ? __ldcs(reinterpret_cast<const unsigned short*>(src)) : 0u;
  }
}

// Two e4m3 values (the low 16 bits of `two`) as an f16 pair, exactly: one instruction.
__device__ __forceinline__ uint32_t Fp8x2ToHalf2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// One CTA per (split, KV head, sequence) of the decode rows; grid and split plan as for the
// 16-row kernel (attention_decode.cu). Requires group <= kColumnMaxGroup.
//
// Over an e4m3 cache the products run in f16 whatever the activations: e4m3 widens to f16 in
// one instruction per pair (to bf16 it takes four), and every e4m3 value is an f16 value. Q is
// then scaled by the softmax scale in f32 before it is rounded to f16 (|q| * scale stays far
// inside f16's range for any real model, and f16 keeps 3 more bits than bf16), and P is
// rounded to f16 (again finer than bf16).
template <typename T, typename KvT, int HD, bool kSoftcap>
__global__ void __launch_bounds__(32 * kColumnWarps, kColumnCtasPerSm) DecodeColumnsKernel(const Params p) {
  AwaitPriorGrids();
  using C = ColumnConfig<HD>;
  constexpr int kTile = kColumnTileKeys;
  constexpr bool kFp8 = std::is_same_v<KvT, Fp8>;
  using M = std::conditional_t<kFp8, Half, T>;  // the products' input type
  const int seq = blockIdx.z;
  if (p.q_len[seq] != 1) return;
  const int kv_head = blockIdx.y;
  const int ctx = p.context_len[seq];
  const int2 plan = DecodeSplit(p, ctx);
  const int nsplits = plan.x;
  const int split = blockIdx.x;
  if (split >= nsplits) return;
  const int k_begin = split * plan.y;
  const int k_end = split == nsplits - 1 ? ctx : k_begin + plan.y;
  const int pos = ctx - 1;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int64_t token = p.q_begin[seq];

  // Q^T fragments: head g of the group (zeros past the group), this lane's dimensions.
  uint32_t qf[C::kKWords];
  {
    const bool valid = g < p.group;
    const T* q = static_cast<const T*>(p.q) + token * p.q_stride +
                 static_cast<int64_t>(kv_head * p.group + (valid ? g : 0)) * HD;
#pragma unroll
    for (int c = 0; c < C::kChunks; ++c) {
      uint32_t w[C::kKd / 2];
      LoadWords<C::kKd * 2>(q + c * C::kChunkDims + t4 * C::kKd, valid, w);
#pragma unroll
      for (int i = 0; i < C::kKd / 2; ++i) {
        if constexpr (kFp8) {
          T pair[2];
          memcpy(pair, &w[i], 4);
          w[i] = PackPair<Half>(ToFloat(pair[0]) * p.scale, ToFloat(pair[1]) * p.scale);
        }
        qf[c * (C::kKd / 2) + i] = w[i];
      }
    }
  }

  const KvT* k_src = static_cast<const KvT*>(p.k);
  const KvT* v_src = static_cast<const KvT*>(p.v);
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;
  auto key_offset = [&](int key) -> int64_t {
    const int64_t block = table[key / p.block_tokens];
    return ((block * p.num_kv_heads + kv_head) * p.block_tokens + key % p.block_tokens) * HD;
  };

  // Scores in the log2 domain are s * sc (see FlashAttentionKernel); over an e4m3 cache the
  // softmax scale is already in Q.
  constexpr float kLog2e = 1.4426950408889634f;
  const float score_scale = kFp8 ? 1.0f : p.scale;
  float sc = score_scale * kLog2e;
  float cap_in = 0.0f, cap_out = 0.0f;
  if constexpr (kSoftcap) {
    sc = 1.0f;
    cap_in = score_scale / p.softcap;
    cap_out = p.softcap * kLog2e;
  }

  float o[C::kVWords][4];
#pragma unroll
  for (int mt = 0; mt < C::kVWords; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // heads 2 t4, 2 t4 + 1
  float l[2] = {0.0f, 0.0f};            // this lane's keys only; summed over g at the end

  const int ntiles = (k_end - k_begin + kTile - 1) / kTile;
  // The first tile any key of the window reaches (keys at or before pos - window are cut).
  int first_tile = 0;
  if (p.window > 0) first_tile = max(0, (pos - p.window + 1 - k_begin) / kTile);

  // A tile's cache words as loaded. K: this lane's dimensions of keys g and g + 8, chunk by
  // chunk. V: dimensions [g * d / 8, + d / 8) of keys 2 t4 + {0, 1, 8, 9}; 16-bit, word mt
  // holds dimensions 2 mt and 2 mt + 1; e4m3, byte i holds dimension i (at least 2 bytes).
  constexpr int kKRawWords = C::kChunks * C::kKd * static_cast<int>(sizeof(KvT)) / 4;
  constexpr int kVRawWords = (C::kVDims * static_cast<int>(sizeof(KvT)) + 3) / 4;
  struct TileWords {
    uint32_t k[2][kKRawWords];
    uint32_t v[4][kVRawWords];
  };
  auto load = [&](int key0, TileWords& w) {
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int key = key0 + g + 8 * x;
      const bool valid = key < k_end;
      const KvT* src = k_src + (valid ? key_offset(key) : 0) + t4 * C::kKd;
      constexpr int kChunkWords = C::kKd * static_cast<int>(sizeof(KvT)) / 4;
#pragma unroll
      for (int c = 0; c < C::kChunks; ++c) {
        LoadWords<C::kKd * sizeof(KvT)>(src + c * C::kChunkDims, valid, w.k[x] + c * kChunkWords);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int key = key0 + 2 * t4 + (j & 1) + 8 * (j >> 1);
      const bool valid = key < k_end;
      LoadWords<C::kVDims * sizeof(KvT)>(v_src + (valid ? key_offset(key) : 0) + g * C::kVDims, valid, w.v[j]);
    }
  };
  // The 16-bit pair i of a key's K words (e4m3 widened to f16).
  auto k_pair = [](const uint32_t* words, int i) -> uint32_t {
    if constexpr (kFp8) {
      return Fp8x2ToHalf2(words[i / 2] >> (16 * (i % 2)));
    } else {
      return words[i];
    }
  };
  auto compute = [&](int key0, const TileWords& w) {
    // S^T = K Q^T, two accumulators to halve the dependent chain.
    float s2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int st = 0; st < HD / 16; ++st) {
      const uint32_t a[4] = {k_pair(w.k[0], 2 * st), k_pair(w.k[1], 2 * st), k_pair(w.k[0], 2 * st + 1),
                             k_pair(w.k[1], 2 * st + 1)};
      const uint32_t b[2] = {qf[2 * st], qf[2 * st + 1]};
      Mma16816<M>(s2[st & 1], a, b);
    }
    float s[4];  // (key g, head 2 t4), (g, 2 t4 + 1), (g + 8, 2 t4), (g + 8, 2 t4 + 1)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[e] = s2[0][e] + s2[1][e];
      if constexpr (kSoftcap) s[e] = cap_out * tanhf(s[e] * cap_in);
    }
    if (key0 + kTile > k_end || (p.window > 0 && key0 <= pos - p.window)) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + g + 8 * (e >> 1);
        if (key >= k_end || (p.window > 0 && key <= pos - p.window)) s[e] = -INFINITY;
      }
    }
    // Online softmax per head (column): the 16 keys are spread over g and the two rows.
    float base[2];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      float mx = fmaxf(s[x], s[x + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m[x], mx * sc);
      base[x] = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = FastExp2(m[x] - base[x]);
      m[x] = m_new;
      l[x] *= alpha;
#pragma unroll
      for (int mt = 0; mt < C::kVWords; ++mt) {
        o[mt][x] *= alpha;
        o[mt][x + 2] *= alpha;
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[e] = FastExp2(fmaf(s[e], sc, -base[e & 1]));
      l[e & 1] += s[e];
    }
    // P^T as the B operand, then O^T += V^T P^T. Each A register pairs one dimension of two
    // keys: 16-bit words are split by halves; e4m3 bytes are interleaved first
    // (key A's d, key B's d, key A's d + 1, key B's d + 1) and widened as two pairs.
    const uint32_t b[2] = {MovMatrixTrans(PackPair<M>(s[0], s[1])), MovMatrixTrans(PackPair<M>(s[2], s[3]))};
#pragma unroll
    for (int mt = 0; mt < C::kVWords; ++mt) {
      uint32_t a[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // keys (2 t4, 2 t4 + 1), then (2 t4 + 8, 2 t4 + 9)
        if constexpr (kFp8) {
          const uint32_t mix = __byte_perm(w.v[2 * h][mt / 2], w.v[2 * h + 1][mt / 2], mt % 2 ? 0x7362 : 0x5140);
          a[2 * h] = Fp8x2ToHalf2(mix);
          a[2 * h + 1] = Fp8x2ToHalf2(mix >> 16);
        } else {
          a[2 * h] = __byte_perm(w.v[2 * h][mt], w.v[2 * h + 1][mt], 0x5410);
          a[2 * h + 1] = __byte_perm(w.v[2 * h][mt], w.v[2 * h + 1][mt], 0x7632);
        }
      }
      Mma16816<M>(o[mt], a, b);
    }
  };

  // Warp w takes tiles w, w + 4, ... (Loading two tiles before computing either measured the
  // same at head_dim 64 on an H200, and spills at 128.)
  for (int tile = first_tile + warp; tile < ntiles; tile += kColumnWarps) {
    TileWords w;
    load(k_begin + tile * kTile, w);
    compute(k_begin + tile * kTile, w);
  }

#pragma unroll
  for (int x = 0; x < 2; ++x) {
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 4);
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 8);
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 16);
  }

  // Merge the warps through shared memory: [warp][head][HD] outputs, [warp][head] max and sum.
  __shared__ __align__(16) float comb[C::kSmemBytes / 4];
  float* comb_o = comb;
  float* comb_m = comb_o + kColumnWarps * kColumnMaxGroup * C::kOutLd;
  float* comb_l = comb_m + kColumnWarps * kColumnMaxGroup;
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int h = 2 * t4 + x;
    float* co = comb_o + (warp * kColumnMaxGroup + h) * C::kOutLd + g * C::kVDims;
#pragma unroll
    for (int mt = 0; mt < C::kVWords; ++mt) {
      *reinterpret_cast<float2*>(co + 2 * mt) = make_float2(o[mt][x], o[mt][x + 2]);
    }
    if (g == 0) {
      comb_m[warp * kColumnMaxGroup + h] = m[x];
      comb_l[warp * kColumnMaxGroup + h] = l[x];
    }
  }
  __syncthreads();

  constexpr int kChunksPerRow = HD / 8;
  const bool partial = nsplits > 1;
  for (int i = threadIdx.x; i < p.group * kChunksPerRow; i += 32 * kColumnWarps) {
    const int h = i / kChunksPerRow;
    const int c = i % kChunksPerRow;
    MergePartsAndStore<T, HD, kColumnWarps>(p, comb_o, C::kOutLd, comb_m, comb_l, h, kColumnMaxGroup, c, partial, seq,
                                            split, kv_head * p.group + h, token);
  }
}

}  // namespace ferry::cuda::attention_detail
