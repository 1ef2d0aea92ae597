// Device code shared by the attention entry points (attention_decode.cu, attention_prefill.cu,
// attention_simt.cu): the tensor-core FlashAttention kernel in its decode and prefill shapes,
// the reduction over decode splits, and the f32 SIMT kernel. Internal to kernels/cuda.
#pragma once

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/launch.h"

namespace ferry::cuda::attention_detail {

// ---------------------------------------------------------------------------------------
// Tensor-core FlashAttention (FlashAttention-2 style, mma.sync m16n8k16).
//
// A CTA owns kRows query rows of one sequence and one KV head. GQA/MQA rows are packed:
// row r is token r / group, head kv_head * group + r % group, so every key/value tile is
// read once for all the heads that share it. The 4 warps are arranged WM x WK: WM groups of
// 16 rows, each with WK warps that take alternate key tiles of KT keys (WK = 1 for prefill,
// where many rows share a tile; WK = 4 for decode, where 16 rows are all there is and the
// keys must be spread over the warps instead). 16-bit K/V tiles stream through shared memory
// by cp.async in two stages. An fp8 cache's e4m3 bytes arrive by cp.async too, in a ring of
// kFp8RingStages stages, and each stage is widened into one 16-bit tile just before its
// round; the tile is single, so an fp8 CTA needs about as much shared memory as a 16-bit one
// and as many fit per multiprocessor. At the end the warps' (max, sum, output) are merged
// through shared memory, and either the normalized output or, for a split decode row, a
// partial result is written.
//
// Decode for GQA groups of up to 8 heads runs the head-column kernel instead
// (attention_decode_columns.cuh) where it is faster; this decode shape serves wider groups
// and the rest. This decode kernel is bound by the latency of its rounds, not by bytes: an fp8 cache, half
// the bytes, took about the time of a bf16 one (H200, llama-3-8b heads, 512 tokens of context,
// the CudaAttentionTiming shapes). What moves it is resident CTAs: a 4-stage ring (two CTAs a
// multiprocessor) measured 24 / 46 / 87 / 168 us at batch 32 / 64 / 128 / 256, a 2-stage ring
// at three CTAs 31 / 51 / 77 / 139 us, against 35 / 57 / 85 / 160 us for a bf16 cache. The
// 2-stage ring is the one built, for the large batches that serving runs.
inline constexpr int kFp8RingStages = 2;

template <typename T, typename KvT, int HD, int WM, int WK, int KT>
struct FlashConfig {
  static constexpr bool kFp8 = std::is_same_v<KvT, Fp8>;
  static constexpr int kRawStages = kFp8RingStages;
  static constexpr int kWarps = WM * WK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * WM;
  static constexpr int kStageKeys = WK * KT;
  static constexpr int kLd = HD + 8;  // +16 bytes per row: ldmatrix rows land in distinct banks
  static constexpr int kChunksPerRow = HD / 8;
  static constexpr int kRowStep = kThreads / kChunksPerRow;  // key rows one pass of the CTA loads
  static constexpr int kChunks = kStageKeys / kRowStep;       // 16-byte chunks per thread per matrix
  static constexpr int kOutLd = HD + 4;
  static constexpr size_t kQBytes = static_cast<size_t>(kRows) * kLd * sizeof(T);
  static constexpr size_t kTileBytes = static_cast<size_t>(kStageKeys) * kLd * sizeof(T);
  static constexpr size_t kPipeBytes = (kFp8 ? 2 : 4) * kTileBytes;  // (K, V) x 2 stages, or 1 for fp8
  // fp8: 16-byte chunks (16 keys' worth of one row's e4m3 bytes) per matrix and stage, and
  // the ring [kRawStages][K, V][kStageKeys][HD] behind the tiles.
  static constexpr int kRawChunksPerRow = HD / 16;
  static constexpr int kRawChunks = kStageKeys * kRawChunksPerRow;
  static constexpr int kRawPerThread = (kRawChunks + kThreads - 1) / kThreads;
  static constexpr size_t kRawStageBytes = static_cast<size_t>(kStageKeys) * HD;  // one matrix
  static constexpr size_t kRawBytes = kFp8 ? kRawStages * 2 * kRawStageBytes : 0;
  static constexpr size_t kCombineBytes = (static_cast<size_t>(kWarps) * 16 * kOutLd + 2 * kWarps * 16) * 4;
  static constexpr size_t kSmemBytes =
      kQBytes + (kPipeBytes + kRawBytes > kCombineBytes ? kPipeBytes + kRawBytes : kCombineBytes);
  static_assert(kWarps == 4, "the kernel is written for 4 warps");
  static_assert(KT % 16 == 0 && HD % 16 == 0, "tiles are whole mma steps");
  static_assert(kThreads % kChunksPerRow == 0 && kStageKeys % kRowStep == 0, "loads split evenly");
};

// kSoftcap: scores go through softcap * tanh(score / softcap) (p.softcap > 0). A template
// parameter, not a test per score: with the test inside the unrolled score loop the compiler
// kept a branch (and the tanh's division) per element, which tripled the instructions per
// tensor-core op of the prefill kernel.
//
// Resident CTAs: decode asks for three per multiprocessor (registers capped at 168 a thread;
// head_dim 128 needs 166 with an fp8 cache, 153 with bf16, without spills), which shared
// memory also allows at head_dim 128; prefill at head_dim <= 64 asks for four.
template <typename T, typename KvT, int HD, int WM, int WK, int KT, Mode kMode, bool kSoftcap>
__global__ void __launch_bounds__(128, (kMode != Mode::kDecode && HD <= 64) ? 4 : kMode == Mode::kDecode ? 3 : 1)
    FlashAttentionKernel(const Params p) {
  AwaitPriorGrids();
  using C = FlashConfig<T, KvT, HD, WM, WK, KT>;
  constexpr bool kFp8 = C::kFp8;
  static_assert(kFp8 || std::is_same_v<KvT, T>, "16-bit K/V must be of the compute type");

  extern __shared__ __align__(16) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* pipe = reinterpret_cast<T*>(smem + C::kQBytes);  // [stage][K, V][kStageKeys][kLd]
  [[maybe_unused]] unsigned char* raw = smem + C::kQBytes + C::kPipeBytes;  // fp8 ring
  float* comb_o = reinterpret_cast<float*>(smem + C::kQBytes);
  float* comb_m = comb_o + C::kWarps * 16 * C::kOutLd;
  float* comb_l = comb_m + C::kWarps * 16;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wm = warp % WM;
  const int kg = warp / WM;
  const int g = lane >> 2;
  const int t4 = lane & 3;

  // ---- Which rows and keys this CTA owns.
  int seq, kv_head, row0, rows, ctx, first_pos, k_begin, k_end;
  int split = 0, nsplits = 1;
  if constexpr (kMode == Mode::kDecode) {
    seq = blockIdx.z;
    if (p.q_len[seq] != 1) return;
    const int row_tiles = (p.group + 15) / 16;
    kv_head = blockIdx.y / row_tiles;
    row0 = (blockIdx.y % row_tiles) * 16;
    rows = min(16, p.group - row0);
    ctx = p.context_len[seq];
    const int2 plan = DecodeSplit(p, ctx);
    nsplits = plan.x;
    split = blockIdx.x;
    if (split >= nsplits) return;
    first_pos = ctx - 1;
    k_begin = split * plan.y;
    k_end = split == nsplits - 1 ? ctx : k_begin + plan.y;
  } else {
    __shared__ int found[2];
    kv_head = blockIdx.y;
    if (warp == 0) {
      const int group = p.group;
      auto tiles = [group](int ql) {
        const bool mine = kMode == Mode::kDense ? ql > 0 : ql > 1;
        return mine ? (ql * group + C::kRows - 1) / C::kRows : 0;
      };
      int s = -1, local = 0;
      const int begin = p.item_seq_begin;
      const bool ok = FindItem(p.q_len + begin, p.num_seqs - begin, static_cast<int>(blockIdx.x), tiles, s, local);
      if (lane == 0) {
        found[0] = ok ? begin + s : -1;
        found[1] = local;
      }
    }
    __syncthreads();
    seq = found[0];
    if (seq < 0) return;
    const int ql = p.q_len[seq];
    ctx = kMode == Mode::kDense ? ql : p.context_len[seq];
    const int tiles = (ql * p.group + C::kRows - 1) / C::kRows;
    row0 = (tiles - 1 - found[1]) * C::kRows;  // the costliest (latest) tiles of a sequence first
    rows = min(C::kRows, ql * p.group - row0);
    first_pos = ctx - ql;
    k_begin = 0;
    const int t_last = (row0 + rows - 1) / p.group;
    k_end = p.causal ? min(ctx, first_pos + t_last + 1) : ctx;
  }
  const int64_t q_base = p.q_begin[seq];

  // ---- Q tile -> shared memory -> fragments (kept in registers for the whole kernel).
  {
    const T* q = static_cast<const T*>(p.q);
    for (int i = tid; i < C::kRows * C::kChunksPerRow; i += C::kThreads) {
      const int r = i / C::kChunksPerRow;
      const int c = i % C::kChunksPerRow;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < rows) {
        const int pr = row0 + r;
        const int64_t token = q_base + pr / p.group;
        const int head = kv_head * p.group + pr % p.group;
        val = *reinterpret_cast<const uint4*>(q + token * p.q_stride + static_cast<int64_t>(head) * HD + c * 8);
      }
      *reinterpret_cast<uint4*>(q_s + r * C::kLd + c * 8) = val;
    }
  }
  // The last key position each of this thread's two rows (g, g + 8) may see; -1 for rows
  // past the end (they see nothing and are never written). pos: the rows' own positions,
  // which sliding windows are measured from.
  int lim[2], pos[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int r = wm * 16 + g + 8 * x;
    pos[x] = first_pos + (row0 + r) / p.group;
    if (r < rows) {
      lim[x] = (p.causal || kMode == Mode::kDecode) ? first_pos + (row0 + r) / p.group : ctx - 1;
    } else {
      lim[x] = -1;
    }
  }
  // Rows past the end take no part in the minimum: unmasked, their zero queries score a
  // finite 0 and their results are discarded, so tiles that are whole for every real row
  // skip the masking.
  int warp_lim_max = max(lim[0], lim[1]);
  int warp_lim_min = min(lim[0] < 0 ? INT_MAX : lim[0], lim[1] < 0 ? INT_MAX : lim[1]);
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    warp_lim_max = max(warp_lim_max, __shfl_xor_sync(0xffffffffu, warp_lim_max, d));
    warp_lim_min = min(warp_lim_min, __shfl_xor_sync(0xffffffffu, warp_lim_min, d));
  }
  __syncthreads();
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    Ldmatrix4(qf[kk], q_s + (wm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * C::kLd + kk * 16 + (lane >> 4) * 8);
  }

  // ---- K/V pipeline. Thread tid always loads column chunk `col` of key rows
  // row_first + n * kRowStep of a stage.
  const int col = tid % C::kChunksPerRow;
  const int row_first = tid / C::kChunksPerRow;
  const KvT* k_src = static_cast<const KvT*>(p.k);
  const KvT* v_src = static_cast<const KvT*>(p.v);
  const int32_t* table = kMode == Mode::kDense ? nullptr : p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;
  const int ntiles = (k_end - k_begin + KT - 1) / KT;
  const int rounds_total = (ntiles + WK - 1) / WK;

  auto stage_k = [&](int stage) { return pipe + (2 * stage) * C::kStageKeys * C::kLd; };
  auto stage_v = [&](int stage) { return pipe + (2 * stage + 1) * C::kStageKeys * C::kLd; };

  // 16-bit caches: starts the loads of round `round` (keys k_begin + round * kStageKeys ...)
  // straight into its stage.
  auto issue = [&](int round) {
    const int key0 = k_begin + round * C::kStageKeys;
    const int stage = round & 1;
#pragma unroll
    for (int n = 0; n < C::kChunks; ++n) {
      const int j = row_first + n * C::kRowStep;
      const int key = key0 + j;
      const bool valid = key < k_end;
      const int64_t off = valid ? KeyOffset<kMode, HD>(p, table, q_base, kv_head, key) + col * 8 : 0;
      CpAsync16(stage_k(stage) + j * C::kLd + col * 8, k_src + off, valid);
      CpAsync16(stage_v(stage) + j * C::kLd + col * 8, v_src + off, valid);
    }
    CpAsyncCommit();
  };
  // fp8: the ring slot of round `round`, its K then its V bytes. Thread tid owns chunks
  // tid, tid + kThreads, ... of each matrix, both when it loads them and when it widens them,
  // so a cp.async wait of its own is all the ring needs (no barrier).
  auto raw_k = [&](int round) { return raw + (round % C::kRawStages) * 2 * C::kRawStageBytes; };
  auto for_raw_chunks = [&](auto&& f) {
#pragma unroll
    for (int n = 0; n < C::kRawPerThread; ++n) {
      const int idx = tid + n * C::kThreads;
      if (C::kRawChunks % C::kThreads == 0 || idx < C::kRawChunks) {
        f(idx, idx / C::kRawChunksPerRow, idx % C::kRawChunksPerRow);
      }
    }
  };
  // fp8: starts the loads of round `round` into its ring slot (an empty group past the end,
  // so every round commits exactly one).
  auto issue_raw = [&](int round) {
    if (round < rounds_total) {
      const int key0 = k_begin + round * C::kStageKeys;
      unsigned char* rk = raw_k(round);
      for_raw_chunks([&](int idx, int j, int c) {
        const int key = key0 + j;
        const bool valid = key < k_end;
        const int64_t off = valid ? KeyOffset<kMode, HD>(p, table, q_base, kv_head, key) + c * 16 : 0;
        CpAsync16(rk + idx * 16, k_src + off, valid);
        CpAsync16(rk + C::kRawStageBytes + idx * 16, v_src + off, valid);
      });
    }
    CpAsyncCommit();
  };
  // fp8: widens round `round`'s ring slot into the tile (16 e4m3 -> two 16-byte chunks).
  auto widen = [&](int round) {
    const unsigned char* rk = raw_k(round);
    for_raw_chunks([&](int idx, int j, int c) {
      const uint4 kb = *reinterpret_cast<const uint4*>(rk + idx * 16);
      const uint4 vb = *reinterpret_cast<const uint4*>(rk + C::kRawStageBytes + idx * 16);
      T* dk = stage_k(0) + j * C::kLd + c * 16;
      T* dv = stage_v(0) + j * C::kLd + c * 16;
      *reinterpret_cast<uint4*>(dk) = Fp8x8ToPairs<T>(make_uint2(kb.x, kb.y));
      *reinterpret_cast<uint4*>(dk + 8) = Fp8x8ToPairs<T>(make_uint2(kb.z, kb.w));
      *reinterpret_cast<uint4*>(dv) = Fp8x8ToPairs<T>(make_uint2(vb.x, vb.y));
      *reinterpret_cast<uint4*>(dv + 8) = Fp8x8ToPairs<T>(make_uint2(vb.z, vb.w));
    });
  };

  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  if constexpr (kFp8) {
#pragma unroll
    for (int r = 0; r + 1 < C::kRawStages; ++r) issue_raw(r);
  } else if (rounds_total > 0) {
    issue(0);
  }
  for (int round = 0; round < rounds_total; ++round) {
    const bool more = round + 1 < rounds_total;
    if constexpr (kFp8) {
      issue_raw(round + C::kRawStages - 1);
      CpAsyncWait<C::kRawStages - 1>();  // this thread's chunks of `round` have landed
      if (round > 0) __syncthreads();     // every warp is done with the previous round's tile
      widen(round);
    } else {
      if (more) issue(round + 1);
      if (more) {
        CpAsyncWait<1>();
      } else {
        CpAsyncWait<0>();
      }
    }
    __syncthreads();

    const int tile = round * WK + kg;
    const int key0 = k_begin + tile * KT;
    if (tile < ntiles && key0 <= warp_lim_max) {
      const int stage = kFp8 ? 0 : round & 1;
      const T* ks = stage_k(stage) + kg * KT * C::kLd;
      const T* vs = stage_v(stage) + kg * KT * C::kLd;
      // S = Q K^T
      float s[KT / 8][4];
#pragma unroll
      for (int j = 0; j < KT / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
        for (int j = 0; j < KT / 8; j += 2) {
          uint32_t b[4];
          Ldmatrix4(b, ks + (8 * j + (lane & 7) + (lane >> 4) * 8) * C::kLd + kk * 16 + ((lane >> 3) & 1) * 8);
          Mma16816<T>(s[j], qf[kk], b);
          Mma16816<T>(s[j + 1], qf[kk], b + 2);
        }
      }
      // Mask (only tiles that reach past k_end or a row's causal limit, or cross a sliding
      // window's edge) and online softmax. Soft-capping acts on the scaled score. A window
      // cuts the keys at or before pos - window and, bidirectional, those at or after
      // pos + window_right. (lim >= pos for every real row, so warp_lim_max bounds the left
      // edge; the CTA's first row has the smallest pos, so it bounds the right one.)
      const bool mask = key0 + KT > k_end || key0 + KT - 1 > warp_lim_min ||
                        (p.window > 0 && key0 <= warp_lim_max - p.window) ||
                        (p.window_right > 0 && key0 + KT - 1 >= first_pos + row0 / p.group + p.window_right);
      // Scores in the log2 domain are s * sc: soft-capped ones are computed there (sc = 1);
      // plain ones are scaled inside the exponent's FFMA below, which saves a multiply per
      // score (max is taken on the raw scores: sc > 0 keeps their order).
      float sc = p.scale_log2;
      if constexpr (kSoftcap) {
        sc = 1.0f;
        const float in = p.scale / p.softcap;
        const float out = p.softcap * 1.4426950408889634f;
#pragma unroll
        for (int j = 0; j < KT / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[j][e] = out * tanhf(s[j][e] * in);
        }
      }
      if (mask) {
#pragma unroll
        for (int j = 0; j < KT / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + 8 * j + 2 * t4 + (e & 1);
            const int ps = pos[e >> 1];
            if (key >= k_end || key > lim[e >> 1] || (p.window > 0 && key <= ps - p.window) ||
                (p.window_right > 0 && key >= ps + p.window_right)) {
              s[j][e] = -INFINITY;
            }
          }
        }
      }
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < KT / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
      }
      float base[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 1));
        mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 2));
        const float m_new = fmaxf(m[x], mx[x] * sc);
        base[x] = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: keep exp2 finite
        const float alpha = FastExp2(m[x] - base[x]);
        m[x] = m_new;
        l[x] *= alpha;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n) {
          o[n][2 * x] *= alpha;
          o[n][2 * x + 1] *= alpha;
        }
      }
#pragma unroll
      for (int j = 0; j < KT / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pv = FastExp2(fmaf(s[j][e], sc, -base[e >> 1]));
          s[j][e] = pv;
          l[e >> 1] += pv;
        }
      }
      // O += P V, P taken straight from the score accumulators.
#pragma unroll
      for (int i = 0; i < KT / 16; ++i) {
        const uint32_t a[4] = {PackPair<T>(s[2 * i][0], s[2 * i][1]), PackPair<T>(s[2 * i][2], s[2 * i][3]),
                               PackPair<T>(s[2 * i + 1][0], s[2 * i + 1][1]),
                               PackPair<T>(s[2 * i + 1][2], s[2 * i + 1][3])};
#pragma unroll
        for (int n = 0; n < HD / 8; n += 2) {
          uint32_t b[4];
          Ldmatrix4Trans(b, vs + (16 * i + (lane & 7) + ((lane >> 3) & 1) * 8) * C::kLd + 8 * n + (lane >> 4) * 8);
          Mma16816<T>(o[n], a, b);
          Mma16816<T>(o[n + 1], a, b + 2);
        }
      }
    }
    if constexpr (!kFp8) __syncthreads();  // the next issue overwrites this round's stage
  }

#pragma unroll
  for (int x = 0; x < 2; ++x) {
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 1);
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 2);
  }
  // ---- One warp per row group (prefill, dense): each warp holds whole rows, written
  // straight from the accumulators, two columns per store.
  if constexpr (WK == 1 && kMode != Mode::kDecode) {
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      const int r = wm * 16 + g + 8 * x;
      if (r >= rows) continue;
      const float inv = l[x] > 0.0f ? 1.0f / l[x] : 0.0f;
      const int pr = row0 + r;
      const int64_t token = q_base + pr / p.group;
      const int head = kv_head * p.group + pr % p.group;
      T* dst = static_cast<T*>(p.out) + token * p.out_stride + static_cast<int64_t>(head) * HD + 2 * t4;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dst + 8 * n) = PackPair<T>(o[n][2 * x] * inv, o[n][2 * x + 1] * inv);
      }
    }
    return;
  }
  // ---- Otherwise merge the warps' partial results through shared memory (aliases the
  // pipeline).
  __syncthreads();
  {
    float* co = comb_o + warp * 16 * C::kOutLd;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<float2*>(co + g * C::kOutLd + 8 * n + 2 * t4) = make_float2(o[n][0], o[n][1]);
      *reinterpret_cast<float2*>(co + (g + 8) * C::kOutLd + 8 * n + 2 * t4) = make_float2(o[n][2], o[n][3]);
    }
    if (t4 == 0) {
      comb_m[warp * 16 + g] = m[0];
      comb_m[warp * 16 + g + 8] = m[1];
      comb_l[warp * 16 + g] = l[0];
      comb_l[warp * 16 + g + 8] = l[1];
    }
  }
  __syncthreads();

  const bool partial = kMode == Mode::kDecode && nsplits > 1;
  for (int i = tid; i < C::kRows * C::kChunksPerRow; i += C::kThreads) {
    const int r = i / C::kChunksPerRow;
    const int c = i % C::kChunksPerRow;
    if (r >= rows) continue;
    const int pr = row0 + r;
    MergePartsAndStore<T, HD, WK>(p, comb_o, C::kOutLd, comb_m, comb_l, r, WM * 16, c, partial,
                                  seq, split, kv_head * p.group + pr % p.group, q_base + pr / p.group);
  }
}

// Merges the splits of each decode row: out = sum_k 2^(lse_k - M) o_k / sum_k 2^(lse_k - M).
template <typename T, int HD>
__global__ void __launch_bounds__(HD) CombineSplitsKernel(const Params p) {
  AwaitPriorGrids();
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  if (p.q_len[seq] != 1) return;
  const int ctx = p.context_len[seq];
  const int nsplits = DecodeSplit(p, ctx).x;
  if (nsplits <= 1) return;  // written directly by the decode kernel
  const int64_t first = static_cast<int64_t>(seq) * p.splits * p.num_heads + head;
  float mmax = -INFINITY;
  for (int k = 0; k < nsplits; ++k) mmax = fmaxf(mmax, p.partial_lse[first + static_cast<int64_t>(k) * p.num_heads]);
  float sum = 0.0f;
  float acc = 0.0f;
  const int d = threadIdx.x;
  for (int k = 0; k < nsplits; ++k) {
    const int64_t idx = first + static_cast<int64_t>(k) * p.num_heads;
    const float lse = p.partial_lse[idx];
    if (lse == -INFINITY) continue;
    const float w = exp2f(lse - mmax);
    sum += w;
    acc += w * p.partial_o[idx * HD + d];
  }
  const int64_t token = p.q_begin[seq];
  static_cast<T*>(p.out)[token * p.out_stride + static_cast<int64_t>(head) * HD + d] =
      FromFloat<T>(sum > 0.0f ? acc / sum : 0.0f);
}

// ---------------------------------------------------------------------------------------
// Plain f32 kernel, for f32 activations (where 16-bit tensor-core products would cost
// precision), f32 caches, and caches whose 16-bit dtype differs from the activations'. One
// CTA per (query token, KV head); its warps take the heads of the group, one row each. Per 32
// keys a lane scores one key, then the warp accumulates P V with each lane owning kCols
// columns. Below head_dim 32 a row of V spans fewer than 32 lanes, so the warp splits into
// kKeyLanes groups that take alternate keys and are summed at the end.
template <typename A, typename KvT, int HD, Mode kMode>
__global__ void __launch_bounds__(128) SimtAttentionKernel(const Params p) {
  AwaitPriorGrids();
  constexpr int kWarps = 4;
  constexpr int kCols = HD >= 32 ? HD / 32 : 1;
  constexpr int kColLanes = HD / kCols;
  constexpr int kKeyLanes = 32 / kColLanes;
  static_assert(HD % 32 == 0 || 32 % HD == 0, "a row of V maps onto whole lanes");
  __shared__ float q_s[kWarps][HD];
  __shared__ int found[2];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int col0 = (lane % kColLanes) * kCols;
  const int key_lane = lane / kColLanes;
  const int kv_head = blockIdx.y;
  if (warp == 0) {
    auto rows = [](int ql) { return ql > 0 ? ql : 0; };
    int s = -1, t = 0;
    const bool ok = FindItem(p.q_len, p.num_seqs, static_cast<int>(blockIdx.x), rows, s, t);
    if (lane == 0) {
      found[0] = ok ? s : -1;
      found[1] = t;
    }
  }
  __syncthreads();
  const int seq = found[0];
  if (seq < 0) return;
  const int t = found[1];
  const int ql = p.q_len[seq];
  const int ctx = kMode == Mode::kDense ? ql : p.context_len[seq];
  const int pos = ctx - ql + t;
  int nkeys = p.causal ? pos + 1 : ctx;
  if (p.window_right > 0) nkeys = min(nkeys, pos + p.window_right);
  // A sliding window starts the scan at the window's first key, so lane 0's key stays valid.
  const int key_first = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  const int64_t q_base = p.q_begin[seq];
  const int64_t token = q_base + t;
  const A* q = static_cast<const A*>(p.q);
  A* out = static_cast<A*>(p.out);
  const KvT* k_src = static_cast<const KvT*>(p.k);
  const KvT* v_src = static_cast<const KvT*>(p.v);
  const int32_t* table = kMode == Mode::kDense ? nullptr : p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;

  for (int hg = warp; hg < p.group; hg += kWarps) {
    const int head = kv_head * p.group + hg;
    for (int d = lane; d < HD; d += 32) {
      q_s[warp][d] = ToFloat(q[token * p.q_stride + static_cast<int64_t>(head) * HD + d]) * p.scale;
    }
    __syncwarp();
    float m = -INFINITY;
    float l = 0.0f;
    float acc[kCols];
#pragma unroll
    for (int e = 0; e < kCols; ++e) acc[e] = 0.0f;
    for (int key0 = key_first; key0 < nkeys; key0 += 32) {
      const int key = key0 + lane;
      float s = -INFINITY;
      if (key < nkeys) {
        const KvT* kr = k_src + KeyOffset<kMode, HD>(p, table, q_base, kv_head, key);
        s = 0.0f;
#pragma unroll 4
        for (int d0 = 0; d0 < HD; d0 += 8) {
          float kf[8];
          Load8(kr + d0, kf);
#pragma unroll
          for (int e = 0; e < 8; ++e) s = fmaf(q_s[warp][d0 + e], kf[e], s);
        }
        if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
      }
      const float m_new = fmaxf(m, WarpMax(s));  // finite: lane 0's key is always valid
      const float alpha = expf(m - m_new);
      const float pv = key < nkeys ? expf(s - m_new) : 0.0f;
      l = l * alpha + WarpSum(pv);
      m = m_new;
#pragma unroll
      for (int e = 0; e < kCols; ++e) acc[e] *= alpha;
      const int count = min(32, nkeys - key0);
      for (int j0 = 0; j0 < count; j0 += kKeyLanes) {
        // Every lane shuffles (the whole warp must), only lanes with a real key read V: the
        // table entries past the context are not valid blocks.
        const int jj = j0 + key_lane;
        const float pj = __shfl_sync(0xffffffffu, pv, jj & 31);
        if (jj < count) {
          const KvT* vr = v_src + KeyOffset<kMode, HD>(p, table, q_base, kv_head, key0 + jj) + col0;
#pragma unroll
          for (int e = 0; e < kCols; ++e) acc[e] = fmaf(pj, ToFloat(vr[e]), acc[e]);
        }
      }
    }
#pragma unroll
    for (int d = kColLanes; d < 32; d <<= 1) {
#pragma unroll
      for (int e = 0; e < kCols; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], d);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    if (key_lane == 0) {
      A* dst = out + token * p.out_stride + static_cast<int64_t>(head) * HD + col0;
#pragma unroll
      for (int e = 0; e < kCols; ++e) dst[e] = FromFloat<A>(acc[e] * inv);
    }
    __syncwarp();
  }
}

// ---------------------------------------------------------------------------------------
// Host-side launchers (defined in the .cu files).

// Every kernel is instantiated for these head sizes: 64 and 128 for real models, 16 and 32
// for small ones (the tensor-core tiling only needs head_dim to be whole 16-wide mma steps).
inline bool SupportedHeadDim(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

inline std::string HeadDimMessage(const char* op, int head_dim) {
  return std::string(op) + ": head_dim " + std::to_string(head_dim) + " is not supported (16, 32, 64 or 128)";
}

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The checks PagedAttention and DenseAttention share: head counts (GQA groups) and head size.
inline Status CheckHeads(const char* op, int num_heads, int num_kv_heads, int head_dim) {
  if (num_heads <= 0 || num_kv_heads <= 0) {
    return InvalidArgument(std::string(op) + ": num_heads and num_kv_heads must be positive");
  }
  if (num_heads % num_kv_heads != 0) {
    return InvalidArgument(std::string(op) + ": num_heads " + std::to_string(num_heads) +
                           " is not a multiple of num_kv_heads " + std::to_string(num_kv_heads));
  }
  if (!SupportedHeadDim(head_dim)) return Unimplemented(HeadDimMessage(op, head_dim));
  return Status::Ok();
}

// Calls f(std::integral_constant<int, HD>) for the supported head sizes.
template <typename F>
Status WithHeadDim(const char* op, int head_dim, F&& f) {
  if (head_dim == 64) return f(std::integral_constant<int, 64>{});
  if (head_dim == 128) return f(std::integral_constant<int, 128>{});
  if (head_dim == 16) return f(std::integral_constant<int, 16>{});
  if (head_dim == 32) return f(std::integral_constant<int, 32>{});
  return Unimplemented(HeadDimMessage(op, head_dim));
}

// Launches kKernel with `smem_bytes` of dynamic shared memory. The first launch on each
// device raises the kernel's shared-memory limit past the 48 KB default and asks for the
// largest shared-memory carveout (so that 2-3 CTAs fit per multiprocessor); the attributes
// belong to the device, so they are set once per device, not on every call.
template <auto kKernel>
Status LaunchWithSmem(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, const Params& p) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return Status::Ok();
  static std::atomic<uint64_t> prepared{0};  // bit d: device d done (devices 0..63 cached)
  int device = 0;
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (prepared.load(std::memory_order_acquire) & bit) == 0) {
    FERRY_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
    FERRY_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                    cudaSharedmemCarveoutMaxShared));
    prepared.fetch_or(bit, std::memory_order_acq_rel);
  }
  LaunchKernel(kKernel, grid, block, smem_bytes, stream, p);
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

// Prefill rows (q_len > 1) of a paged batch, on the tensor cores. act/kv: the dtypes.
// The prefill grid covers num_tokens query rows in num_seqs sequences (bounds: every
// sequence's tiles are rounded up), searched for from p.item_seq_begin on.
Status LaunchPagedPrefill(const Params& p, DType act, DType kv, int head_dim, int num_tokens, int num_seqs,
                          cudaStream_t stream);
// All spans of a dense batch on the tensor cores (act bf16 or f16).
Status LaunchDenseFlash(const Params& p, DType act, int head_dim, int num_tokens, cudaStream_t stream);
// Every row of a paged (kMode kDecode/kPrefill ignored: all rows) or dense batch on the f32
// SIMT kernel. kv is the cache dtype (paged: bf16, f16, e4m3 or f32) or act (dense).
Status LaunchSimt(const Params& p, bool dense, DType act, DType kv, int head_dim, int num_tokens,
                  cudaStream_t stream);

}  // namespace ferry::cuda::attention_detail
