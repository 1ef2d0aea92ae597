#include "kernels/cpu/bf16_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/tile_rows.h"
#include "kernels/cpu/vec_math.h"

namespace ferry::kernels::cpu {
namespace {

#define FERRY_BF16_GEMM_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Rows of one register tile: 12 rows x two panels (32 columns) is 24 accumulators, with the
// two weight vectors and the broadcast 27 of the 32 zmm registers.
constexpr int kTileRows = 12;
// k per chunk. Long chunks keep each C tile in registers over more of K: every chunk after
// the first re-reads and re-writes C, which for a wide output (the 1B gate_up's 512 x 16,384)
// cost more than the weights' re-lay. gemm_bench M = 512 on the Zen 5 of docs/performance.md,
// 1B shapes, GFLOP/s: 256: 610-665 / 436-441 / 609-649; 1,024: 674-726 / 611-644 / 673-738;
// 2,048: 693-753 / 667-732 / 667-697; 4,096 no better. Two re-laid panels of 2,048 k (128 KiB)
// stay in L2, which feeds the two weight vectors a k pair (for 24 vdpbf16ps) with room to spare.
constexpr int64_t kKChunk = 2048;
// Rows packed at a time: every row block reads all of the weights again, so the more rows the
// better while the packed block (768 rows x 2,048 k of bf16: 3 MiB) streams from L3. gemm_bench
// M = 512, 1B shapes, GFLOP/s on the Zen 5, alternating: 192 rows 539-599, 384 rows 554-621,
// 768 rows (all 512 in one block) 599-710 (96 rows, a block in L2, was slower still).
constexpr int64_t kRowBlock = 768;

// Threads split the panels when each gets at least this many (each then reads only its share
// of W) and the rows fill fewer than a row block a thread; otherwise they split the rows. Past
// a row block a thread, every row block reads all of W again either way, and split panels
// would have each thread pack every row of x (bert-base's 4,096-row linears: the packing was
// 6 % of a pass, twice over).
constexpr int64_t kMinPanelsPerThread = 4;

// Row j of the result is column j of the input (16 x 16 u32 in registers). The zero-masked
// forms with every lane: GCC 12's unmasked ones start from an undefined register and warn
// (-Wmaybe-uninitialized); they are the same instructions.
FERRY_BF16_GEMM_TARGET inline void Transpose16(__m512i (&r)[16]) {
  constexpr __mmask16 kAll = 0xffff;
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(kAll, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(kAll, r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_maskz_unpacklo_epi64(0xff, t[i], t[i + 2]);
    r[i + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[i], t[i + 2]);
    r[i + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 16; h += 8) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_maskz_shuffle_i32x4(kAll, r[h + i], r[h + 4 + i], 0x88);
      t[h + 4 + i] = _mm512_maskz_shuffle_i32x4(kAll, r[h + i], r[h + 4 + i], 0xdd);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_maskz_shuffle_i32x4(kAll, t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_maskz_shuffle_i32x4(kAll, t[i], t[8 + i], 0xdd);
  }
}

// Rows [0, rows) x k [k0, k0 + kc) of x as bf16 pairs in 12-row tiles: the pair (2j, 2j+1) of
// tile row r at tile * kp * 12 + j * 12 + r (kp = kc rounded up to pairs; an odd kc's last pair
// holds a zero). Rows past `rows` in the last tile are zeros. A tile's rows go 32 values (16
// pairs) at a time: converted (vcvtne2ps2bf16 rounds to nearest even), transposed in registers
// and stored a pair's 12 rows at a time (one value a store, as this once did, took a tenth of
// a bert-base bf16 pass).
FERRY_BF16_GEMM_TARGET void PackPairs(const float* x, int64_t lda, int64_t rows, int64_t k0, int64_t kc,
                                      uint32_t* out) {
  const int64_t kp = (kc + 1) / 2;
  constexpr __mmask16 kTileLanes = static_cast<__mmask16>((1u << kTileRows) - 1);
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  for (int64_t t = 0; t < tiles; ++t) {
    uint32_t* tile = out + t * kp * kTileRows;
    const float* src = x + t * kTileRows * lda + k0;
    const int live = static_cast<int>(std::min<int64_t>(kTileRows, rows - t * kTileRows));
    for (int64_t c = 0; c < kc; c += 32) {
      const int rest = static_cast<int>(std::min<int64_t>(32, kc - c));
      const __mmask16 m_lo = static_cast<__mmask16>(rest >= 16 ? 0xffff : (1u << rest) - 1);
      const __mmask16 m_hi = static_cast<__mmask16>(rest >= 32 ? 0xffff : rest <= 16 ? 0 : (1u << (rest - 16)) - 1);
      __m512i v[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        if (r < live) {
          const float* row = src + r * lda + c;
          const __m512 lo = _mm512_maskz_loadu_ps(m_lo, row);
          const __m512 hi = _mm512_maskz_loadu_ps(m_hi, row + 16);
          v[r] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        } else {
          v[r] = _mm512_setzero_si512();
        }
      }
      Transpose16(v);
      uint32_t* dst = tile + (c / 2) * kTileRows;
      const int pairs = (rest + 1) / 2;
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        if (j < pairs) _mm512_mask_storeu_epi32(dst + j * kTileRows, kTileLanes, v[j]);
      }
    }
  }
}

// One panel's k range [k0, k0 + kc) re-laid as vdpbf16ps takes it: per pair of k, the 16
// columns' (k, k+1) values side by side (32 bf16, 64 bytes), pair j at out + j * stride; an
// odd kc's last k pairs with 0.
FERRY_BF16_GEMM_TARGET void PairPanel(const uint16_t* panel, int64_t k0, int64_t kc, uint16_t* out, int64_t stride) {
  // Element i of the result: column i/2 of row k (i even) or of row k+1 (i odd).
  alignas(64) static const uint16_t kIdx[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kIdx);
  const uint16_t* src = panel + k0 * kPanelCols;
  int64_t j = 0;
  for (; 2 * j + 1 < kc; ++j) {
    const __m512i two_rows = _mm512_loadu_si512(src + 2 * j * kPanelCols);
    _mm512_storeu_si512(out + j * stride, _mm512_permutexvar_epi16(idx, two_rows));
  }
  if (2 * j < kc) {
    const __m512i last = _mm512_maskz_loadu_epi16(0xffff, src + 2 * j * kPanelCols);
    _mm512_storeu_si512(out + j * stride, _mm512_permutexvar_epi16(idx, last));
  }
}

// 16 int8 weights as f32 (exact).
FERRY_BF16_GEMM_TARGET inline __m512 Int8Row(const int8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, q));
}

// PairPanel for an int8-wo panel: the quantized values as bf16, which holds every integer of
// [-127, 127] exactly (the column scales are applied to the sums, in the tile's stores).
FERRY_BF16_GEMM_TARGET void PairPanel(const int8_t* panel, int64_t k0, int64_t kc, uint16_t* out, int64_t stride) {
  alignas(64) static const uint16_t kIdx[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kIdx);
  const int8_t* src = panel + k0 * kPanelCols;
  for (int64_t j = 0; 2 * j < kc; ++j) {
    const __m512 even = Int8Row(src + 2 * j * kPanelCols);
    const __m512 odd = 2 * j + 1 < kc ? Int8Row(src + (2 * j + 1) * kPanelCols) : _mm512_setzero_ps();
    // Row k in the low 16 lanes, row k + 1 in the high 16, as two bf16 rows loaded together.
    const __m512i two_rows = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
    _mm512_storeu_si512(out + j * stride, _mm512_permutexvar_epi16(idx, two_rows));
  }
}

// C[0:MR, 0:16 (NP = 1) or 16 + ncols_last (NP = 2)] (+)= A · [B0 B1] (· diag(scale)): a packed
// 12-row A tile (pairs, 12 a k pair) and NP re-laid panels (NP * 32 bf16 a k pair). `scale`
// (int8-wo: the panels' column scales, 16 a panel; null for bf16) multiplies each chunk's sums
// before they are added. Bias on the first K chunk; the last panel's columns masked to
// ncols_last. `gelu` (the last chunk's): GELU on what is stored, Gelu of vec_math.h, the
// operations of the separate pass (GeluRows), so its bytes.
template <int MR, int NP>
FERRY_BF16_GEMM_TARGET void Tile(int64_t kp, const uint32_t* a, const uint16_t* b, float* c, int64_t ldc,
                                 int ncols_last, bool accumulate, const float* bias, const float* scale, bool gelu) {
  __m512 acc[MR][NP];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 2
    for (int s = 0; s < NP; ++s) acc[r][s] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < kp; ++j) {
    __m512bh bv[NP];
#pragma GCC unroll 2
    for (int s = 0; s < NP; ++s) bv[s] = (__m512bh)_mm512_loadu_si512(b + (j * NP + s) * 2 * kPanelCols);
    const uint32_t* aj = a + j * kTileRows;
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(aj[r]));
#pragma GCC unroll 2
      for (int s = 0; s < NP; ++s) acc[r][s] = _mm512_dpbf16_ps(acc[r][s], av, bv[s]);
    }
  }
#pragma GCC unroll 2
  for (int s = 0; s < NP; ++s) {
    const int ncols = s + 1 == NP ? ncols_last : kPanelCols;
    const __mmask16 cols = ncols >= kPanelCols ? __mmask16{0xffff} : static_cast<__mmask16>((1u << ncols) - 1);
    const __m512 bias_v =
        !accumulate && bias != nullptr ? _mm512_maskz_loadu_ps(cols, bias + s * kPanelCols) : _mm512_setzero_ps();
    if (scale != nullptr) {
      const __m512 sv = _mm512_loadu_ps(scale + s * kPanelCols);
#pragma GCC unroll 12
      for (int r = 0; r < MR; ++r) acc[r][s] = _mm512_mul_ps(acc[r][s], sv);
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      float* cr = c + r * ldc + s * kPanelCols;
      const __m512 prev = accumulate ? _mm512_maskz_loadu_ps(cols, cr) : bias_v;
      const __m512 v = _mm512_add_ps(acc[r][s], prev);
      _mm512_mask_storeu_ps(cr, cols, gelu ? Gelu(v) : v);
    }
  }
}

template <int NP>
void TileRows(int rows, int64_t kp, const uint32_t* a, const uint16_t* b, float* c, int64_t ldc, int ncols_last,
              bool accumulate, const float* bias, const float* scale, bool gelu) {
  WithTileRows<1, kTileRows>(rows, [&](auto mr) {
    Tile<decltype(mr)::value, NP>(kp, a, b, c, ldc, ncols_last, accumulate, bias, scale, gelu);
  });
}

// Rows [r_begin, r_end) x panels [p_begin, p_end) of the product.
void GemmRange(const float* x, int64_t lda, int64_t r_begin, int64_t r_end, int64_t p_begin, int64_t p_end,
               const PackedWeight& w, const float* bias, float* y, int64_t ldy, bool gelu) {
  const int64_t k = w.k;
  const bool int8 = w.dtype == DType::kI8;
  const int64_t chunks = (k + kKChunk - 1) / kKChunk;
  // Chunks of equal size, each even but the last (a pair never straddles two chunks).
  const int64_t kc_max = ((k + chunks - 1) / chunks + 1) / 2 * 2;
  const int64_t kp_max = kc_max / 2;
  const int64_t mc_max = std::min(kRowBlock, r_end - r_begin);
  thread_local std::vector<uint32_t> a_pack;
  thread_local std::vector<uint16_t> b_pairs;
  const size_t a_need = static_cast<size_t>((mc_max + kTileRows) * kp_max);
  if (a_pack.size() < a_need) a_pack.resize(a_need);
  const size_t b_need = static_cast<size_t>(2 * kp_max * 2 * kPanelCols);
  if (b_pairs.size() < b_need) b_pairs.resize(b_need);
  for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
    const int64_t kc = std::min(kc_max, k - k0);
    const int64_t kp = (kc + 1) / 2;
    const bool accumulate = k0 > 0;
    const bool gelu_now = gelu && k0 + kc >= k;  // GELU on the last chunk's stores
    for (int64_t i0 = r_begin; i0 < r_end; i0 += kRowBlock) {
      const int64_t mc = std::min(kRowBlock, r_end - i0);
      PackPairs(x + i0 * lda, lda, mc, k0, kc, a_pack.data());
      for (int64_t p = p_begin; p < p_end; p += 2) {
        const int np = p + 1 < p_end ? 2 : 1;
        // The panels' pairs interleaved a k pair at a time: [B0 pair j][B1 pair j] ...
        for (int s = 0; s < np; ++s) {
          uint16_t* out = b_pairs.data() + s * 2 * kPanelCols;
          if (int8) {
            PairPanel(static_cast<const int8_t*>(w.panel(p + s)), k0, kc, out, np * 2 * kPanelCols);
          } else {
            PairPanel(static_cast<const uint16_t*>(w.panel(p + s)), k0, kc, out, np * 2 * kPanelCols);
          }
        }
        const int64_t last = p + np - 1;
        const int ncols_last = static_cast<int>(std::min<int64_t>(kPanelCols, w.n - last * kPanelCols));
        const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
        const float* panel_scale = int8 ? w.scale_data() + p * kPanelCols : nullptr;
        for (int64_t r = 0; r < mc; r += kTileRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kTileRows, mc - r));
          const uint32_t* a = a_pack.data() + (r / kTileRows) * kp * kTileRows;
          float* c = y + (i0 + r) * ldy + p * kPanelCols;
          if (np == 2) {
            TileRows<2>(rows, kp, a, b_pairs.data(), c, ldy, ncols_last, accumulate, panel_bias, panel_scale,
                        gelu_now);
          } else {
            TileRows<1>(rows, kp, a, b_pairs.data(), c, ldy, ncols_last, accumulate, panel_bias, panel_scale,
                        gelu_now);
          }
        }
      }
    }
  }
}

}  // namespace

bool Bf16DotTakesWeight(const PackedWeight& w) {
  // int8 with block scales is not: q times its scale is not exact in bf16.
  return w.layout == PanelLayout::kRows &&
         (w.dtype == DType::kBF16 || (w.dtype == DType::kI8 && w.format == WeightFormat::kInt8 && w.block_size == 0));
}

bool Bf16DotGemmApplies(const PackedWeight& w) { return Bf16DotSupported() && Bf16DotTakesWeight(w); }

void GemmBf16Dot(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                 int64_t ldy, bool gelu) {
  const int64_t threads = ComputeThreads();
  if (w.num_panels >= kMinPanelsPerThread * threads && m < threads * kRowBlock) {
    // Ranges of whole panel pairs.
    const int64_t pairs = (w.num_panels + 1) / 2;
    ParallelFor(pairs, 1, [&](int64_t q_begin, int64_t q_end) {
      GemmRange(x, lda, 0, m, 2 * q_begin, std::min(w.num_panels, 2 * q_end), w, bias, y, ldy, gelu);
    });
  } else {
    ParallelFor(m, kTileRows, [&](int64_t r_begin, int64_t r_end) {
      GemmRange(x, lda, r_begin, r_end, 0, w.num_panels, w, bias, y, ldy, gelu);
    });
  }
}

}  // namespace ferry::kernels::cpu
