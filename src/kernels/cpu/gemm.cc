#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/kernel_switch.h"
#include "kernels/cpu/vec_math.h"

namespace ferry::kernels::cpu {
namespace {

// Threads split the weight panels when there are enough of them to keep every thread busy
// (each reads only its share of W) and the rows fill fewer than a row block a thread;
// otherwise they split the rows. Past a row block a thread, every row block reads all of W
// again either way, and split panels would have each thread pack every row of x.
constexpr int64_t kMinPanelsPerThread = 4;

// Kept per thread across calls: fresh buffers each call would mean page faults every time.
struct GemmScratch {
  std::vector<float> a;  // packed x block
  std::vector<float> b;  // one widened micro-panel
};

template <typename BT>
void WidenPanel(const BT* src, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, Load8(src + i));
  for (; i < count; ++i) dst[i] = ToFloat(src[i]);
}

// int8 rows (kc x 16) -> f32 with the column scales folded in, so the f32 micro-kernel runs
// on the dequantized weights as they are; the multiply is amortized over the whole row block.
void WidenPanel(const int8_t* src, int64_t kc, const float* scale, float* dst) {
  const __m256 s0 = _mm256_loadu_ps(scale), s1 = _mm256_loadu_ps(scale + 8);
  for (int64_t kk = 0; kk < kc; ++kk) {
    _mm256_storeu_ps(dst + kk * kPanelCols, _mm256_mul_ps(Load8(src + kk * kPanelCols), s0));
    _mm256_storeu_ps(dst + kk * kPanelCols + 8, _mm256_mul_ps(Load8(src + kk * kPanelCols + 8), s1));
  }
}

// The AVX-512 register tile: C[0:MR, 0:ncols] (+)= A · B for a packed 6-row A tile and an
// f32 micro-panel (16 columns, one vector per k). MR accumulators per set, and k split into
// even and odd sets, so 2 MR independent FMA chains cover the FMA latency on two ports.
template <int MR>
__attribute__((target("avx512f"))) void MicroKernel512(int64_t kc, const float* a, const float* b, float* c,
                                                       int64_t ldc, int ncols, bool accumulate, const float* bias,
                                                       bool gelu) {
  __m512 acc[2][MR];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) acc[0][m] = acc[1][m] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= kc; k += 2) {
#pragma GCC unroll 2
    for (int u = 0; u < 2; ++u) {
      const __m512 bv = _mm512_loadu_ps(b + (k + u) * kPanelCols);
      const float* ak = a + (k + u) * kMaxTileRows;
#pragma GCC unroll 6
      for (int m = 0; m < MR; ++m) acc[u][m] = _mm512_fmadd_ps(_mm512_set1_ps(ak[m]), bv, acc[u][m]);
    }
  }
  if (k < kc) {
    const __m512 bv = _mm512_loadu_ps(b + k * kPanelCols);
    const float* ak = a + k * kMaxTileRows;
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) acc[0][m] = _mm512_fmadd_ps(_mm512_set1_ps(ak[m]), bv, acc[0][m]);
  }
  const __mmask16 cols = ncols >= kPanelCols ? __mmask16{0xffff} : static_cast<__mmask16>((1u << ncols) - 1);
  const __m512 bias_v = !accumulate && bias != nullptr ? _mm512_maskz_loadu_ps(cols, bias) : _mm512_setzero_ps();
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    float* cm = c + m * ldc;
    const __m512 prev = accumulate ? _mm512_maskz_loadu_ps(cols, cm) : bias_v;
    const __m512 v = _mm512_add_ps(_mm512_add_ps(acc[0][m], acc[1][m]), prev);
    _mm512_mask_storeu_ps(cm, cols, gelu ? Gelu(v) : v);
  }
}

// C[0:ROWS, 0:16 + ncols1] (+)= the accumulators of a two-panel tile (acc0: the first, whole
// panel; acc1: the second, ncols1 columns), with the bias on the first K chunk and, with
// `gelu` (the last chunk's), GELU on what is stored: Gelu in vec_math.h, the operations of the
// separate pass (GeluRows), so its bytes.
template <int ROWS>
__attribute__((target("avx512f"), always_inline)) inline void StorePairTile(const __m512* acc0, const __m512* acc1,
                                                                           float* c, int64_t ldc, int ncols1,
                                                                           bool accumulate, const float* bias,
                                                                           bool gelu) {
  const __mmask16 cols1 = ncols1 >= kPanelCols ? __mmask16{0xffff} : static_cast<__mmask16>((1u << ncols1) - 1);
  const bool add_bias = !accumulate && bias != nullptr;
  const __m512 bias0 = add_bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  const __m512 bias1 = add_bias ? _mm512_maskz_loadu_ps(cols1, bias + kPanelCols) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int m = 0; m < ROWS; ++m) {
    float* cm = c + m * ldc;
    const __m512 prev0 = accumulate ? _mm512_loadu_ps(cm) : bias0;
    const __m512 prev1 = accumulate ? _mm512_maskz_loadu_ps(cols1, cm + kPanelCols) : bias1;
    const __m512 v0 = _mm512_add_ps(acc0[m], prev0);
    const __m512 v1 = _mm512_add_ps(acc1[m], prev1);
    _mm512_storeu_ps(cm, gelu ? Gelu(v0) : v0);
    _mm512_mask_storeu_ps(cm + kPanelCols, cols1, gelu ? Gelu(v1) : v1);
  }
}

// The AVX-512 tile over two adjacent micro-panels: C[0:kTiles*MR, 0:16 + ncols1] (+)=
// A · [B0 B1] for kTiles packed A tiles (a0, and a1 when kTiles is 2). Each k loads two B
// vectors and kTiles * MR broadcasts for 2 kTiles MR FMAs (the one-panel tile loads MR + 1
// for MR FMAs, which keeps the two load ports, not the FMA ports, the limit), and the
// accumulators are independent chains. The first panel is whole; the second has ncols1
// columns. kTiles = 2 (12 x 32, 24 accumulators) uses each B vector for twelve rows.
template <int MR, int kTiles>
__attribute__((target("avx512f"))) void MicroKernel512Pair(int64_t kc, const float* a0, const float* a1,
                                                           const float* b0, const float* b1, float* c, int64_t ldc,
                                                           int ncols1, bool accumulate, const float* bias, bool gelu) {
  constexpr int kRows = kTiles * MR;
  __m512 acc0[kRows], acc1[kRows];
#pragma GCC unroll 12
  for (int m = 0; m < kRows; ++m) acc0[m] = acc1[m] = _mm512_setzero_ps();
  // The tile's C rows are read (or written) once, after the K loop, a row stride apart, where
  // the hardware prefetchers do not follow; ask for them now so that the loop hides the misses
  // (a wide output, such as the 1B gate_up's 512 x 16,384, does not stay in the caches
  // between K chunks).
#pragma GCC unroll 12
  for (int m = 0; m < kRows; ++m) {
    __builtin_prefetch(c + m * ldc, 1, 3);
    __builtin_prefetch(c + m * ldc + kPanelCols, 1, 3);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 v0 = _mm512_loadu_ps(b0 + k * kPanelCols);
    const __m512 v1 = _mm512_loadu_ps(b1 + k * kPanelCols);
#pragma GCC unroll 2
    for (int t = 0; t < kTiles; ++t) {
      const float* ak = (t == 0 ? a0 : a1) + k * kMaxTileRows;
#pragma GCC unroll 6
      for (int m = 0; m < MR; ++m) {
        const __m512 am = _mm512_set1_ps(ak[m]);
        acc0[t * MR + m] = _mm512_fmadd_ps(am, v0, acc0[t * MR + m]);
        acc1[t * MR + m] = _mm512_fmadd_ps(am, v1, acc1[t * MR + m]);
      }
    }
  }
  StorePairTile<kRows>(acc0, acc1, c, ldc, ncols1, accumulate, bias, gelu);
}

inline void TileRowsPair512(int rows, int64_t kc, const float* a, const float* b0, const float* b1, float* c,
                            int64_t ldc, int ncols1, bool accumulate, const float* bias, bool gelu) {
  switch (rows) {
    case 1: return MicroKernel512Pair<1, 1>(kc, a, nullptr, b0, b1, c, ldc, ncols1, accumulate, bias, gelu);
    case 2: return MicroKernel512Pair<2, 1>(kc, a, nullptr, b0, b1, c, ldc, ncols1, accumulate, bias, gelu);
    case 3: return MicroKernel512Pair<3, 1>(kc, a, nullptr, b0, b1, c, ldc, ncols1, accumulate, bias, gelu);
    case 4: return MicroKernel512Pair<4, 1>(kc, a, nullptr, b0, b1, c, ldc, ncols1, accumulate, bias, gelu);
    case 5: return MicroKernel512Pair<5, 1>(kc, a, nullptr, b0, b1, c, ldc, ncols1, accumulate, bias, gelu);
    default: return MicroKernel512Pair<6, 1>(kc, a, nullptr, b0, b1, c, ldc, ncols1, accumulate, bias, gelu);
  }
}

// gelu: the AVX-512 tiles only (the AVX2 ones leave GELU to the caller).
template <GemmKernel kKernel>
inline void TileRows(int rows, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int ncols,
                     bool accumulate, const float* bias, bool gelu) {
  if constexpr (kKernel == GemmKernel::kAvx512) {
    switch (rows) {
      case 1: return MicroKernel512<1>(kc, a, b, c, ldc, ncols, accumulate, bias, gelu);
      case 2: return MicroKernel512<2>(kc, a, b, c, ldc, ncols, accumulate, bias, gelu);
      case 3: return MicroKernel512<3>(kc, a, b, c, ldc, ncols, accumulate, bias, gelu);
      case 4: return MicroKernel512<4>(kc, a, b, c, ldc, ncols, accumulate, bias, gelu);
      case 5: return MicroKernel512<5>(kc, a, b, c, ldc, ncols, accumulate, bias, gelu);
      default: return MicroKernel512<6>(kc, a, b, c, ldc, ncols, accumulate, bias, gelu);
    }
  } else if (rows == kMaxTileRows) {
    MicroKernel<kMaxTileRows, float, true>(kc, a, 0, b, kPanelCols, c, ldc, ncols, accumulate, bias);
  } else {
    // One accumulator set at every height: the last rows sum as they would in a full tile.
    MicroKernelRows<float, true, 0, true>(rows, kc, a, 0, b, kPanelCols, c, ldc, ncols, accumulate, bias);
  }
}

// Columns [0, kc) of six rows into one tile (element (r, k) at k*6 + r), four columns at a
// time: rows 0-3 transposed in 4 x 4 blocks and rows 4-5 interleaved, so each column's six
// values go out as one 16-byte and one 8-byte store (the element-by-element loop cost about 8 %
// of an fp32 encoder batch, and each thread packs the rows of its panel range).
void PackTile6(const float* x, int64_t lda, int64_t kc, float* tile) {
  static_assert(kMaxTileRows == 6);
  const float* r0 = x;
  const float* r1 = x + lda;
  const float* r2 = x + 2 * lda;
  const float* r3 = x + 3 * lda;
  const float* r4 = x + 4 * lda;
  const float* r5 = x + 5 * lda;
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    __m128 a = _mm_loadu_ps(r0 + k), b = _mm_loadu_ps(r1 + k), c = _mm_loadu_ps(r2 + k), d = _mm_loadu_ps(r3 + k);
    _MM_TRANSPOSE4_PS(a, b, c, d);  // a: column k of rows 0-3, b: column k + 1, ...
    const __m128 e = _mm_loadu_ps(r4 + k), f = _mm_loadu_ps(r5 + k);
    const __m128 lo = _mm_unpacklo_ps(e, f);  // rows 4-5 of columns k, k + 1
    const __m128 hi = _mm_unpackhi_ps(e, f);  // rows 4-5 of columns k + 2, k + 3
    float* o = tile + k * kMaxTileRows;
    _mm_storeu_ps(o, a);
    _mm_storel_pi(reinterpret_cast<__m64*>(o + 4), lo);
    _mm_storeu_ps(o + 6, b);
    _mm_storeh_pi(reinterpret_cast<__m64*>(o + 10), lo);
    _mm_storeu_ps(o + 12, c);
    _mm_storel_pi(reinterpret_cast<__m64*>(o + 16), hi);
    _mm_storeu_ps(o + 18, d);
    _mm_storeh_pi(reinterpret_cast<__m64*>(o + 22), hi);
  }
  for (; k < kc; ++k) {
    float* o = tile + k * kMaxTileRows;
    o[0] = r0[k], o[1] = r1[k], o[2] = r2[k], o[3] = r3[k], o[4] = r4[k], o[5] = r5[k];
  }
}

// Packs rows [0, mc) x columns [0, kc) of x into 6-row tiles: tile t holds element (r, k) at
// t*kc*6 + k*6 + r. Rows past mc in the last tile are left as they are (never read).
void PackRows(const float* x, int64_t lda, int64_t mc, int64_t kc, float* out) {
  for (int64_t t0 = 0; t0 < mc; t0 += kMaxTileRows) {
    const int64_t rows = std::min<int64_t>(kMaxTileRows, mc - t0);
    float* tile = out + t0 * kc;
    if (rows == kMaxTileRows) {
      PackTile6(x + t0 * lda, lda, kc, tile);
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = x + (t0 + r) * lda;
      for (int64_t k = 0; k < kc; ++k) tile[k * kMaxTileRows + r] = src[k];
    }
  }
}

// Rows [r_begin, r_end) x panels [p_begin, p_end) of the product.
// The AVX-512 tile reads two micro-panels per K chunk of up to kPairKChunk: a tile's C is
// read and written once per chunk, and on this tile (24 accumulators, FMA-bound at about the
// CPU's peak with its operands in L1) that per-tile traffic, not where the micro-panels
// stream from, is what long chunks save. gemm_bench, 2 threads, on a Zen 5, paired runs
// against chunks of 256 (768 for outputs of 8,192 columns and more): the 1B linears at 512 rows
// 1.04-1.06x, bert-base's at 4,096 rows 1.05-1.26x (bench/results/cpu/zen5-long-k-chunks). The
// chunk depends on the weight alone, never on M or the thread count, so a row's sums keep
// their order in any batch.
constexpr int64_t kPairKChunk = 1024;

template <typename BT, GemmKernel kKernel>
void GemmRange(const float* x, int64_t lda, int64_t r_begin, int64_t r_end, int64_t p_begin, int64_t p_end,
               const PackedWeight& w, const float* bias, float* y, int64_t ldy, bool gelu, const GemmBlocking& blk) {
  thread_local GemmScratch scratch;
  const int64_t k = w.k;
  const int64_t k_chunk = kKernel == GemmKernel::kAvx512 ? kPairKChunk : blk.k_chunk;
  const int64_t chunks = (k + k_chunk - 1) / k_chunk;
  const int64_t kc_max = (k + chunks - 1) / chunks;
  const int64_t mc_max = std::min(blk.row_block, r_end - r_begin);
  const size_t a_need = static_cast<size_t>((mc_max + kMaxTileRows) * kc_max);
  if (scratch.a.size() < a_need) scratch.a.resize(a_need);
  // The AVX-512 tile takes panels in pairs: two widened micro-panels side by side.
  constexpr int64_t kStep = kKernel == GemmKernel::kAvx512 ? 2 : 1;
  if (!std::is_same_v<BT, float> && scratch.b.size() < static_cast<size_t>(kStep * kc_max * kPanelCols)) {
    scratch.b.resize(static_cast<size_t>(kStep * kc_max * kPanelCols));
  }
  for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
    const int64_t kc = std::min(kc_max, k - k0);
    const bool accumulate = k0 > 0;
    const bool gelu_now = gelu && k0 + kc >= k;  // GELU on the last chunk's stores
    for (int64_t i0 = r_begin; i0 < r_end; i0 += blk.row_block) {
      const int64_t mc = std::min(blk.row_block, r_end - i0);
      PackRows(x + i0 * lda + k0, lda, mc, kc, scratch.a.data());
      // Panel p's micro-panel for this K chunk as f32 (slot: which scratch half widens it).
      auto micro_panel = [&](int64_t p, int64_t slot) -> const float* {
        const BT* src = static_cast<const BT*>(w.panel(p)) + k0 * kPanelCols;
        float* dst = scratch.b.data() + slot * kc_max * kPanelCols;
        if constexpr (std::is_same_v<BT, float>) {
          (void)dst;
          return src;
        } else if constexpr (std::is_same_v<BT, int8_t>) {
          if (w.block_size > 0) {
            WidenInt8Blocks(static_cast<const int8_t*>(w.panel(p)), k0, kc, w.block_scale_data(p), w.block_size, dst);
          } else {
            WidenPanel(src, kc, w.scale_data() + p * kPanelCols, dst);
          }
          return dst;
        } else {
          WidenPanel(src, kc * kPanelCols, dst);
          return dst;
        }
      };
      for (int64_t p = p_begin; p < p_end; p += kStep) {
        const float* b = micro_panel(p, 0);
        const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
        float* yp = y + i0 * ldy + p * kPanelCols;
        if (kStep == 2 && p + 1 < p_end) {
          const float* b1 = micro_panel(p + 1, 1);
          const int ncols1 = static_cast<int>(std::min<int64_t>(kPanelCols, w.n - (p + 1) * kPanelCols));
          int64_t r = 0;
          for (; r + 2 * kMaxTileRows <= mc; r += 2 * kMaxTileRows) {
            MicroKernel512Pair<kMaxTileRows, 2>(kc, scratch.a.data() + r * kc,
                                                scratch.a.data() + (r + kMaxTileRows) * kc, b, b1, yp + r * ldy, ldy,
                                                ncols1, accumulate, panel_bias, gelu_now);
          }
          for (; r < mc; r += kMaxTileRows) {
            TileRowsPair512(static_cast<int>(std::min<int64_t>(kMaxTileRows, mc - r)), kc, scratch.a.data() + r * kc,
                            b, b1, yp + r * ldy, ldy, ncols1, accumulate, panel_bias, gelu_now);
          }
          continue;
        }
        const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.n - p * kPanelCols));
        for (int64_t r = 0; r < mc; r += kMaxTileRows) {
          TileRows<kKernel>(static_cast<int>(std::min<int64_t>(kMaxTileRows, mc - r)), kc, scratch.a.data() + r * kc,
                            b, yp + r * ldy, ldy, ncols, accumulate, panel_bias, gelu_now);
        }
      }
    }
  }
}

template <typename BT>
bool GemmImpl(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
              int64_t ldy, bool gelu, const GemmBlocking& blk) {
  const int64_t threads = ComputeThreads();
  const bool avx512 = ActiveGemmKernel() == GemmKernel::kAvx512;
  const auto range = [&](int64_t r_begin, int64_t r_end, int64_t p_begin, int64_t p_end) {
    if (avx512) {
      GemmRange<BT, GemmKernel::kAvx512>(x, lda, r_begin, r_end, p_begin, p_end, w, bias, y, ldy, gelu, blk);
    } else {
      GemmRange<BT, GemmKernel::kAvx2>(x, lda, r_begin, r_end, p_begin, p_end, w, bias, y, ldy, false, blk);
    }
  };
  if (w.num_panels >= kMinPanelsPerThread * threads && m < threads * blk.row_block) {
    // The AVX-512 tile pairs panels (2j, 2j + 1) and runs a panel left without a partner on
    // the one-panel tile, whose sums are ordered differently: threads take whole pairs, so
    // the pairing, and every output's bytes, do not depend on the thread count.
    ParallelFor(w.num_panels, avx512 ? 2 : 1, [&](int64_t p_begin, int64_t p_end) { range(0, m, p_begin, p_end); });
  } else {
    ParallelFor(m, kMaxTileRows, [&](int64_t r_begin, int64_t r_end) { range(r_begin, r_end, 0, w.num_panels); });
  }
  return gelu && avx512;
}

bool CpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

KernelSwitch<GemmKernel>& Switch() {
  static KernelSwitch<GemmKernel> kernel(GemmKernel::kAvx2, GemmKernel::kAvx512, CpuHasAvx512, "FERRY_GEMM_KERNEL",
                                         "avx2");
  return kernel;
}

}  // namespace

bool GemmKernelSupported(GemmKernel kernel) { return Switch().Supported(kernel); }
GemmKernel ActiveGemmKernel() { return Switch().Active(); }
bool SetActiveGemmKernel(GemmKernel kernel) { return Switch().Set(kernel); }
std::string_view GemmKernelName(GemmKernel kernel) { return kernel == GemmKernel::kAvx512 ? "avx512" : "avx2"; }

bool GemmPacked(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy, bool gelu, const GemmBlocking& blocking) {
  switch (w.dtype) {
    case DType::kF32:
      return GemmImpl<float>(x, lda, m, w, bias, y, ldy, gelu, blocking);
    case DType::kBF16:
      return GemmImpl<Bf16>(x, lda, m, w, bias, y, ldy, gelu, blocking);
    case DType::kI8:
      return GemmImpl<int8_t>(x, lda, m, w, bias, y, ldy, gelu, blocking);
    default:
      return GemmImpl<F16>(x, lda, m, w, bias, y, ldy, gelu, blocking);
  }
}

}  // namespace ferry::kernels::cpu
