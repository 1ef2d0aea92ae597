#include "kernels/cpu/int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/kernel_switch.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace ferry::kernels::cpu {
namespace {

// AVX2 has no int8 dot product (VNNI); vpmaddubsw multiplies u8 x s8 pairs into int16 sums
// and vpmaddwd against ones widens those to int32. The activations are made unsigned by
// moving their sign onto the weights: |a| * sign(w, a) = a * w, with vpsignb per row and
// weight vector. Since |a| <= 127 and |w| <= 127, a pair sum is at most 2 * 127 * 127 =
// 32258 and never saturates the int16. Measured on Zen 3 against widening the weights to
// int16 and using vpmaddwd directly: ~90 vs ~61 GOP/s per core for a cache-resident tile.
//
// Why not oneDNN's int8 matmul (the plan was to use it where it wins): on this AVX2 CPU
// oneDNN 2.6 runs s8 x s8 as gemm:jit, which shifts the activations to u8 = a + 128 and
// then vpmaddubsw can saturate (2 * 255 * 127 > 32767): at the int8 extremes its int32 sums
// are off by up to 2.7M of 8.3M (bench/gemm_bench.cc checks this at start-up). It would
// need 7-bit weights. It is also not faster where it matters: it recomputes the s8
// compensation over all of W per call (decode M = 1: 11 ms vs 0.43 ms here for 3072 x 2048),
// and at M = 512 on two threads it does 170-223 GFLOP/s against 181-196 here. Where oneDNN
// runs s8 on AMX tiles (exact, and about twice the VNNI kernel at M = 512), prefill goes
// there: Int8LinearOnednn below.
//
// Rows per register tile: 4 x 2 accumulators + 2 weight vectors + ones + 2 broadcasts + a
// temporary = 14 ymm. Six rows would need 18 and spill; unlike an f32 tile, the arithmetic
// per multiply-add does not depend on the tile height (sign, maddubs, madd, add per row and
// vector), only the weight loads are shared, and those are cheap.
constexpr int kTileRows = 4;
// Decode with more rows than one tile re-reads each weight chunk per tile; 128 quads of a
// panel (8 KiB of int8) stay in L1 meanwhile.
constexpr int64_t kGemvChunkQuads = 128;
// Smallest amount of weight bytes worth handing to a thread.
constexpr int64_t kMinBytesPerThread = 64 << 10;
// Decode prefetch distance, as in gemv.cc.
constexpr int kPrefetchBytes = 1024;
// Prefill blocking: a K chunk of a panel is chunk_quads * 64 bytes (8 KiB, L1); a row block
// of the AVX2 kernel's activation tiles is row_block * chunk_quads * 8 bytes (288 KiB, L2).
constexpr int64_t kGemmChunkQuads = 128;
constexpr int64_t kGemmRowBlock = 288;
// The VNNI kernel does four times the work per byte of C it reads and writes between K
// ranges, so it takes longer ones. With one panel a tile, 512 quads (32 KiB of a panel, in a
// 48 KiB L1) measured 619 -> 724, 445 -> 717 and 608 -> 661 GFLOP/s against 128 at N x K =
// 3072 x 2048, 16384 x 2048 and 2048 x 8192 (Xeon with AVX-512 VNNI, 2 threads, M = 512,
// bench/gemm_bench). Its tile now reads two panels, so 256 quads keep both in L1.
constexpr int64_t kVnniPairChunkQuads = 256;
// Prefill's VNNI tile height (Int8TileVnniPair): its activation tiles hold this many rows.
constexpr int kVnniTileRows = 12;
// Bytes per row and quad in the activation tiles (int8_gemm.h, ActivationQuadBytes).
constexpr int kAvx2QuadBytes = ActivationQuadBytes(Int8Kernel::kAvx2);
constexpr int kVnniQuadBytes = ActivationQuadBytes(Int8Kernel::kVnni);
// Threads split the panels when each gets at least this many, otherwise the rows.
constexpr int64_t kMinPanelsPerThread = 4;

inline __m256i BroadcastWord(const int8_t* p) {
  int32_t word;
  std::memcpy(&word, p, 4);
  return _mm256_set1_epi32(word);
}

// The end of a tile: adds the int32 sums of the earlier K ranges (unless `first`), then
// stores the sums as int32 in C (unless `last`) or converts, scales and biases them.
template <int MR>
inline void StoreInt8Tile(__m256i (&acc)[MR][2], float* c, int64_t ldc, int ncols, bool first, bool last,
                          const float* row_scale, const float* col_scale, const float* bias) {
  if (ncols == kPanelCols) {
    __m256 cs0 = _mm256_setzero_ps(), cs1 = cs0, bias0 = cs0, bias1 = cs0;
    if (last) {
      cs0 = _mm256_loadu_ps(col_scale);
      cs1 = _mm256_loadu_ps(col_scale + 8);
      if (bias != nullptr) {
        bias0 = _mm256_loadu_ps(bias);
        bias1 = _mm256_loadu_ps(bias + 8);
      }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      float* cm = c + m * ldc;
      __m256i s0 = acc[m][0], s1 = acc[m][1];
      if (!first) {
        s0 = _mm256_add_epi32(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cm)));
        s1 = _mm256_add_epi32(s1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cm + 8)));
      }
      if (!last) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(cm), s0);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(cm + 8), s1);
        continue;
      }
      const __m256 rs = _mm256_set1_ps(row_scale[m]);
      _mm256_storeu_ps(cm, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(cs0, rs), bias0));
      _mm256_storeu_ps(cm + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(cs1, rs), bias1));
    }
    return;
  }
  // Last panel of an N that is not a multiple of 16: only ncols columns of C exist.
  alignas(32) int32_t tmp[MR][kPanelCols];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp[m]), acc[m][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp[m] + 8), acc[m][1]);
  }
  for (int m = 0; m < MR; ++m) {
    float* cm = c + m * ldc;
    for (int j = 0; j < ncols; ++j) {
      int32_t s = tmp[m][j];
      if (!first) {
        int32_t prev;
        std::memcpy(&prev, cm + j, 4);
        s += prev;
      }
      if (!last) {
        std::memcpy(cm + j, &s, 4);
      } else {
        cm[j] = std::fma(static_cast<float>(s), col_scale[j] * row_scale[m], bias != nullptr ? bias[j] : 0.0f);
      }
    }
  }
}

// C[0:MR, 0:ncols] for one K range of a panel. a holds the quantized activations in quads,
// q[4j..4j+3] then |q[4j..4j+3]| of row m at a + (j*a_stride + m)*8; b holds the
// panel's quads, 64 bytes each. Unless `first`, the int32 sums of the previous ranges are
// read back from C; unless `last`, the sums are stored to C as int32 (C's f32 storage
// borrowed as scratch), else converted, scaled and biased.
//
// kPrefetchBytes > 0 (decode, b streamed from memory) prefetches that far ahead of b.
template <int MR, int kPrefetchBytes = 0>
inline void Int8Tile(int64_t quads, const int8_t* a, int64_t a_stride, const int8_t* b, float* c, int64_t ldc,
                     int ncols, bool first, bool last, const float* row_scale, const float* col_scale,
                     const float* bias) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[MR][2];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_si256();
  for (int64_t j = 0; j < quads; ++j) {
    const int8_t* bj = b + j * 4 * kPanelCols;
    if constexpr (kPrefetchBytes > 0) _mm_prefetch(reinterpret_cast<const char*>(bj) + kPrefetchBytes, _MM_HINT_T0);
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bj));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bj + 32));
    const int8_t* aj = a + j * a_stride * kAvx2QuadBytes;
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m256i sa = BroadcastWord(aj + kAvx2QuadBytes * m);
      const __m256i ua = BroadcastWord(aj + kAvx2QuadBytes * m + 4);
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(w0, sa)), ones);
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(w1, sa)), ones);
      acc[m][0] = _mm256_add_epi32(acc[m][0], p0);
      acc[m][1] = _mm256_add_epi32(acc[m][1], p1);
    }
  }
  StoreInt8Tile<MR>(acc, c, ldc, ncols, first, last, row_scale, col_scale, bias);
}

// The same tile with VNNI (vpdpbusd: u8 x s8 quads summed into int32, no saturation) on
// 512-bit vectors: one quad of a panel (16 columns x 4 k, 64 bytes) is one vector, so the
// panel layout is the AVX2 one. The activations come as u8 = q + 128 (QuantizeRow stores
// q ^ 0x80, 4 bytes a quad, for this kernel), and the shift is taken
// back out with the tile's own column sums of the weights over this K range:
// sum (q + 128) w = sum q w + 128 sum w, exact. Per row and quad one broadcast load and one
// instruction, against two broadcasts and eight for AVX2 (sign, maddubs, madd, add on two
// vectors); one more per quad for the column sums. The int32 sums stay below 2^31 for K up
// to 66,000 (|(q + 128) w| <= 255 * 127 per term).
__attribute__((target("avx512f,avx512vnni"))) inline __m512i DotBytes(__m512i acc, __m512i u, __m512i s) {
  // One asm statement: GCC 12 copies every accumulator through another register around the
  // intrinsic's tied operand, doubling the loop's instructions.
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

// Quad j of a VNNI tile into one set of accumulators and column sums.
template <int MR, int kPrefetchBytes>
__attribute__((target("avx512f,avx512vnni"), always_inline)) inline void VnniQuad(
    const int8_t* b, const int8_t* a, int64_t a_stride, int64_t j, __m512i ones, __m512i (&acc)[MR], __m512i& wsum) {
  const int8_t* bj = b + j * 4 * kPanelCols;
  if constexpr (kPrefetchBytes > 0) _mm_prefetch(reinterpret_cast<const char*>(bj) + kPrefetchBytes, _MM_HINT_T0);
  const __m512i w = _mm512_loadu_si512(bj);
  wsum = DotBytes(wsum, ones, w);
  const int8_t* aj = a + j * a_stride * kVnniQuadBytes;
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    int32_t word;
    std::memcpy(&word, aj + kVnniQuadBytes * m, 4);
    acc[m] = DotBytes(acc[m], _mm512_set1_epi32(word), w);
  }
}

template <int MR, int kPrefetchBytes = 0>
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni"))) void Int8TileVnni(
    int64_t quads, const int8_t* a, int64_t a_stride, const int8_t* b, float* c, int64_t ldc, int ncols, bool first,
    bool last, const float* row_scale, const float* col_scale, const float* bias) {
  static_assert(kPanelCols * 4 == 64, "one panel quad is one 512-bit vector");
  const __m512i ones = _mm512_set1_epi8(1);
  // Two sets of accumulators, for even and odd quads: vpdpbusd has a latency of several
  // cycles, and MR + 1 dependency chains alone would leave its ports idle.
  __m512i acc[2][MR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) acc[0][m] = acc[1][m] = _mm512_setzero_si512();
  __m512i wsum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
  int64_t j = 0;
  for (; j + 2 <= quads; j += 2) {
    VnniQuad<MR, kPrefetchBytes>(b, a, a_stride, j, ones, acc[0], wsum[0]);
    VnniQuad<MR, kPrefetchBytes>(b, a, a_stride, j + 1, ones, acc[1], wsum[1]);
  }
  if (j < quads) VnniQuad<MR, kPrefetchBytes>(b, a, a_stride, j, ones, acc[0], wsum[0]);
  const __m512i shift = _mm512_maskz_slli_epi32(0xffff, _mm512_add_epi32(wsum[0], wsum[1]), 7);
  __m256i halves[MR][2];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    const __m512i s = _mm512_sub_epi32(_mm512_add_epi32(acc[0][m], acc[1][m]), shift);
    // Masked forms: the unmasked ones trip -Wuninitialized in GCC 12's headers.
    halves[m][0] = _mm512_maskz_extracti64x4_epi64(0xf, s, 0);
    halves[m][1] = _mm512_maskz_extracti64x4_epi64(0xf, s, 1);
  }
  StoreInt8Tile<MR>(halves, c, ldc, ncols, first, last, row_scale, col_scale, bias);
}

// StoreInt8Tile on 512-bit vectors for the VNNI tiles, the shift taken out first: the same
// per-lane arithmetic (the sums of earlier K ranges added as int32, then
// fma(float(sum), col_scale * row_scale, bias)), so the same bytes; a panel of fewer than
// 16 columns is a lane mask. With `gelu`, the last range's values go through the same GELU
// as the separate pass (GeluRows on 512-bit lanes), so the same bytes without that pass.
template <int MR>
__attribute__((target("avx512f"), always_inline)) inline void StoreInt8Tile512(
    const __m512i (&acc)[MR], __m512i shift, float* c, int64_t ldc, int ncols, bool first, bool last,
    const float* row_scale, const float* col_scale, const float* bias, bool gelu) {
  const __mmask16 lanes = ncols >= kPanelCols ? static_cast<__mmask16>(0xffff)
                                              : static_cast<__mmask16>((1u << ncols) - 1u);
  __m512 cs = _mm512_setzero_ps(), bv = cs;
  if (last) {
    cs = _mm512_maskz_loadu_ps(lanes, col_scale);
    if (bias != nullptr) bv = _mm512_maskz_loadu_ps(lanes, bias);
  }
#pragma GCC unroll 12
  for (int m = 0; m < MR; ++m) {
    float* cm = c + m * ldc;
    __m512i s = _mm512_sub_epi32(acc[m], shift);
    if (!first) s = _mm512_add_epi32(s, _mm512_maskz_loadu_epi32(lanes, cm));
    if (!last) {
      _mm512_mask_storeu_epi32(cm, lanes, s);
      continue;
    }
    const __m512 scale = _mm512_mul_ps(cs, _mm512_set1_ps(row_scale[m]));
    __m512 v = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, s), scale, bv);
    if (gelu) v = Gelu(v);
    _mm512_mask_storeu_ps(cm, lanes, v);
  }
}

// Prefill's VNNI tile: up to kVnniTileRows rows over two adjacent panels (MR x 32), so
// per quad two weight vectors, MR broadcasts and 2 MR vpdpbusd, 24 independent chains at 12
// rows (24 accumulators, the two weight vectors and a broadcast: 27 of the 32 zmm). The
// column sums that take the activations' +128 shift back out are the same for every row
// tile of a panel pair and K range, so the caller computes them once (VnniShift) instead of
// each tile spending a vpdpbusd a panel and quad on them; at 4 rows a tile with its own
// sums spent a fifth of its instructions there. The C rows are prefetched for writing
// before the K loop: a row stride apart, the hardware prefetchers do not follow them.
// The panels have ncols0 and ncols1 columns (ncols1 0: there is no second panel, b1 is b0).
template <int MR>
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni"))) void Int8TileVnniPair(
    int64_t quads, const int8_t* a, int64_t a_stride, const int8_t* b0, const int8_t* b1, const __m512i (&shift)[2],
    float* c, int64_t ldc, int ncols0, int ncols1, bool first, bool last, const float* row_scale,
    const float* col_scale, const float* bias, bool gelu) {
#pragma GCC unroll 12
  for (int m = 0; m < MR; ++m) {
    _mm_prefetch(reinterpret_cast<const char*>(c + m * ldc), _MM_HINT_ET0);
    _mm_prefetch(reinterpret_cast<const char*>(c + m * ldc + kPanelCols), _MM_HINT_ET0);
  }
  __m512i acc[2][MR];
#pragma GCC unroll 12
  for (int m = 0; m < MR; ++m) acc[0][m] = acc[1][m] = _mm512_setzero_si512();
  for (int64_t j = 0; j < quads; ++j) {
    const __m512i w0 = _mm512_loadu_si512(b0 + j * 4 * kPanelCols);
    const __m512i w1 = _mm512_loadu_si512(b1 + j * 4 * kPanelCols);
    const int8_t* aj = a + j * a_stride * kVnniQuadBytes;
#pragma GCC unroll 12
    for (int m = 0; m < MR; ++m) {
      int32_t word;
      std::memcpy(&word, aj + kVnniQuadBytes * m, 4);
      const __m512i u = _mm512_set1_epi32(word);
      acc[0][m] = DotBytes(acc[0][m], u, w0);
      acc[1][m] = DotBytes(acc[1][m], u, w1);
    }
  }
  for (int h = 0; h < (ncols1 > 0 ? 2 : 1); ++h) {
    StoreInt8Tile512<MR>(acc[h], shift[h], c + h * kPanelCols, ldc, h == 0 ? ncols0 : ncols1, first, last, row_scale,
                         col_scale + h * kPanelCols, bias != nullptr ? bias + h * kPanelCols : nullptr, gelu);
  }
}

// 128 times the column sums of two panels over `quads` quads: what u8 = q + 128 adds to the
// tile's sums.
__attribute__((target("avx512f,avx512vnni"))) void VnniShift(int64_t quads, const int8_t* b0, const int8_t* b1,
                                                              __m512i (&shift)[2]) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i sum[2][2] = {{_mm512_setzero_si512(), _mm512_setzero_si512()},
                       {_mm512_setzero_si512(), _mm512_setzero_si512()}};
  int64_t j = 0;
  for (; j + 2 <= quads; j += 2) {
    for (int u = 0; u < 2; ++u) {
      sum[0][u] = DotBytes(sum[0][u], ones, _mm512_loadu_si512(b0 + (j + u) * 4 * kPanelCols));
      sum[1][u] = DotBytes(sum[1][u], ones, _mm512_loadu_si512(b1 + (j + u) * 4 * kPanelCols));
    }
  }
  if (j < quads) {
    sum[0][0] = DotBytes(sum[0][0], ones, _mm512_loadu_si512(b0 + j * 4 * kPanelCols));
    sum[1][0] = DotBytes(sum[1][0], ones, _mm512_loadu_si512(b1 + j * 4 * kPanelCols));
  }
  for (int h = 0; h < 2; ++h) {
    shift[h] = _mm512_maskz_slli_epi32(0xffff, _mm512_add_epi32(sum[h][0], sum[h][1]), 7);
  }
}

struct alignas(64) VnniShiftPair {
  __m512i v[2];
};

template <int... kRows>
inline void Int8TileRowsVnniPairOf(std::integer_sequence<int, kRows...>, int rows, int64_t quads, const int8_t* a,
                                   int64_t a_stride, const int8_t* b0, const int8_t* b1, const __m512i (&shift)[2],
                                   float* c, int64_t ldc, int ncols0, int ncols1, bool first, bool last,
                                   const float* rs, const float* cs, const float* bias, bool gelu) {
  // rows is 1..kVnniTileRows: the instantiation for exactly that many.
  (void)((rows == kRows + 1 &&
          (Int8TileVnniPair<kRows + 1>(quads, a, a_stride, b0, b1, shift, c, ldc, ncols0, ncols1, first, last, rs, cs,
                                       bias, gelu),
           true)) ||
         ...);
}

inline void Int8TileRowsVnniPair(int rows, int64_t quads, const int8_t* a, int64_t a_stride, const int8_t* b0,
                                 const int8_t* b1, const __m512i (&shift)[2], float* c, int64_t ldc, int ncols0,
                                 int ncols1, bool first, bool last, const float* rs, const float* cs,
                                 const float* bias, bool gelu) {
  Int8TileRowsVnniPairOf(std::make_integer_sequence<int, kVnniTileRows>(), rows, quads, a, a_stride, b0, b1, shift, c,
                         ldc, ncols0, ncols1, first, last, rs, cs, bias, gelu);
}

template <bool kVnni, int MR, int kPrefetchBytes>
inline void Int8TileOf(int64_t quads, const int8_t* a, int64_t a_stride, const int8_t* b, float* c, int64_t ldc,
                       int ncols, bool first, bool last, const float* rs, const float* cs, const float* bias) {
  if constexpr (kVnni) {
    Int8TileVnni<MR, kPrefetchBytes>(quads, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
  } else {
    Int8Tile<MR, kPrefetchBytes>(quads, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
  }
}

template <bool kVnni, int kPrefetchBytes = 0>
inline void Int8TileRows(int rows, int64_t quads, const int8_t* a, int64_t a_stride, const int8_t* b, float* c,
                         int64_t ldc, int ncols, bool first, bool last, const float* rs, const float* cs,
                         const float* bias) {
  switch (rows) {
    case 1:
      return Int8TileOf<kVnni, 1, kPrefetchBytes>(quads, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
    case 2:
      return Int8TileOf<kVnni, 2, kPrefetchBytes>(quads, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
    case 3:
      return Int8TileOf<kVnni, 3, kPrefetchBytes>(quads, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
    default:
      return Int8TileOf<kVnni, 4, kPrefetchBytes>(quads, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
  }
}

// The VNNI kernel's byte for q: q + 128 as u8.
inline int8_t VnniByte(int8_t q) { return static_cast<int8_t>(static_cast<uint8_t>(q) ^ 0x80u); }

// Writes 16 quantized values (k order) and their magnitudes as 4 AVX2 quads of 8 bytes,
// `quad_stride` bytes apart.
inline void StoreQuads(__m128i q, int8_t* out, int64_t quad_stride) {
  const __m128i mag = _mm_abs_epi8(q);
  const __m128i lo = _mm_unpacklo_epi32(q, mag);  // quads 0 and 1: q, |q|, q, |q|
  const __m128i hi = _mm_unpackhi_epi32(q, mag);
  if (quad_stride == kAvx2QuadBytes) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), hi);
    return;
  }
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), lo);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out + quad_stride), _mm_unpackhi_epi64(lo, lo));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 2 * quad_stride), hi);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 3 * quad_stride), _mm_unpackhi_epi64(hi, hi));
}

// Writes 16 quantized values (k order) as 4 VNNI quads of q + 128, `quad_stride` bytes apart.
inline void StoreVnniQuads(__m128i q, int8_t* out, int64_t quad_stride) {
  const __m128i u = _mm_xor_si128(q, _mm_set1_epi8(static_cast<char>(0x80)));
  if (quad_stride == kVnniQuadBytes) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), u);
    return;
  }
  alignas(16) int32_t words[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(words), u);
  for (int j = 0; j < 4; ++j) std::memcpy(out + j * quad_stride, &words[j], 4);
}

// A row's scale from the lanes' absolute maxima: *scale = amax / 127; returns 127 / amax (0 for
// an all-zero row), the factor the values are multiplied by before rounding.
__attribute__((target("avx512f"))) float RowScaleFromMax512(__m512 vmax, float* scale) {
  alignas(64) float lanes_max[16];
  _mm512_store_ps(lanes_max, vmax);
  const float amax = *std::max_element(lanes_max, lanes_max + 16);
  *scale = amax / 127.0f;
  return amax > 0.0f ? 127.0f / amax : 0.0f;
}

// x[i] * inv_smooth[i] (inv_smooth null: x[i]): the value a row is quantized from. A product
// with no sum, so each pass that recomputes it gets the same bits and no copy of the row is kept.
inline float Smoothed(const float* x, const float* inv_smooth, int64_t i) {
  return inv_smooth != nullptr ? x[i] * inv_smooth[i] : x[i];
}

__attribute__((target("avx512f"))) inline __m512 Smoothed512(const float* x, const float* inv_smooth, int64_t i,
                                                             __mmask16 lanes) {
  const __m512 v = _mm512_maskz_loadu_ps(lanes, x + i);
  return inv_smooth != nullptr ? _mm512_mul_ps(v, _mm512_maskz_loadu_ps(lanes, inv_smooth + i)) : v;
}

// QuantizeRow's quad form for the VNNI kernel (whose CPUs have AVX-512), 16 lanes at a time:
// the same product, maximum, scaling, round-half-even conversion and clamp per element, and
// the same scalar tail, so the same values and scale; stored as q + 128, 4 bytes a quad.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void QuantizeRowQuads512(const float* x, int64_t k,
                                                                              int64_t k_stored, const float* inv_smooth,
                                                                              int8_t* out, int64_t quad_stride,
                                                                              float* scale) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) vmax = Max512(vmax, _mm512_abs_ps(Smoothed512(x, inv_smooth, i, kAllLanes)));
  for (int64_t t = i; t < k; ++t) vmax = Max512(vmax, _mm512_set1_ps(std::fabs(Smoothed(x, inv_smooth, t))));
  const float inv = RowScaleFromMax512(vmax, scale);
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i zero_i = _mm512_setzero_si512();
  for (i = 0; i + 16 <= k; i += 16) {
    const __m512 v = _mm512_mul_ps(Smoothed512(x, inv_smooth, i, kAllLanes), vinv);
    const __m512i r = _mm512_mask_cvtps_epi32(zero_i, kAllLanes, v);
    const __m512i q = _mm512_mask_min_epi32(zero_i, kAllLanes, hi, _mm512_mask_max_epi32(zero_i, kAllLanes, lo, r));
    StoreVnniQuads(_mm512_maskz_cvtepi32_epi8(kAllLanes, q), out + (i / 4) * quad_stride, quad_stride);
  }
  for (; i < k_stored; ++i) {
    const int8_t q =
        i < k ? static_cast<int8_t>(std::clamp(std::nearbyint(Smoothed(x, inv_smooth, i) * inv), -127.0f, 127.0f)) : 0;
    out[(i / 4) * quad_stride + i % 4] = VnniByte(q);
  }
}

// quad_stride 0: q[0..k) row-major (oneDNN's s8 source) instead of `vnni`'s or the AVX2 kernel's quads.
void QuantizeRow(const float* x, int64_t k, int64_t k_stored, const float* inv_smooth, bool vnni, int8_t* out,
                 int64_t quad_stride, float* scale) {
  if (vnni && quad_stride != 0) {
    QuantizeRowQuads512(x, k, k_stored, inv_smooth, out, quad_stride, scale);
    return;
  }
  auto smoothed8 = [&](int64_t at) {
    const __m256 v = _mm256_loadu_ps(x + at);
    return inv_smooth != nullptr ? _mm256_mul_ps(v, _mm256_loadu_ps(inv_smooth + at)) : v;
  };
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(smoothed8(i), abs_mask));
  float amax = HMax(vmax);
  for (; i < k; ++i) amax = std::max(amax, std::fabs(Smoothed(x, inv_smooth, i)));
  *scale = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  auto quantize8 = [&](int64_t at) {
    // cvtps2dq rounds half to even (the default MXCSR mode), as nearbyint does below.
    return _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(smoothed8(at), vinv))));
  };
  for (i = 0; i + 16 <= k; i += 16) {
    // packs interleaves 128-bit lanes; the permute restores k order.
    const __m256i q16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(quantize8(i), quantize8(i + 8)), 0xd8);
    const __m128i q8 = _mm_packs_epi16(_mm256_castsi256_si128(q16), _mm256_extracti128_si256(q16, 1));
    if (quad_stride == 0) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), q8);
    } else {
      StoreQuads(q8, out + (i / 4) * quad_stride, quad_stride);
    }
  }
  for (; i < (quad_stride == 0 ? k : k_stored); ++i) {
    const int8_t q =
        i < k ? static_cast<int8_t>(std::clamp(std::nearbyint(Smoothed(x, inv_smooth, i) * inv), -127.0f, 127.0f)) : 0;
    if (quad_stride == 0) {
      out[i] = q;
      continue;
    }
    int8_t* quad = out + (i / 4) * quad_stride;
    quad[i % 4] = q;
    quad[4 + i % 4] = static_cast<int8_t>(q < 0 ? -q : q);
  }
}

// QuantizeRow's row-major form (quad_stride 0) on 16 lanes, for the AMX route (whose CPUs
// have AVX-512): the absolute maximum in one pass, the rounding in a second. The same product,
// maximum, scaling and round-half-even conversion per element, so the same bytes and scale.
__attribute__((target("avx512f"))) void QuantizeRowMajor512(const float* x, int64_t k, const float* inv_smooth,
                                                            int8_t* out, float* scale) {
  const __m512i zero_i = _mm512_setzero_si512();
  __m512 vmax = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 lanes = k - i >= 16 ? kAllLanes : static_cast<__mmask16>((1u << (k - i)) - 1u);
    vmax = Max512(vmax, _mm512_abs_ps(Smoothed512(x, inv_smooth, i, lanes)));
  }
  const float inv = RowScaleFromMax512(vmax, scale);
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 lanes = k - i >= 16 ? kAllLanes : static_cast<__mmask16>((1u << (k - i)) - 1u);
    const __m512 v = _mm512_mul_ps(Smoothed512(x, inv_smooth, i, lanes), vinv);
    const __m512i r = _mm512_mask_cvtps_epi32(zero_i, kAllLanes, v);
    const __m512i q = _mm512_mask_min_epi32(zero_i, kAllLanes, hi, _mm512_mask_max_epi32(zero_i, kAllLanes, lo, r));
    _mm512_mask_cvtsepi32_storeu_epi8(out + i, lanes, q);
  }
}

// Per thread, kept across calls: fresh buffers each call would page-fault every time.
struct Int8Scratch {
  std::vector<int8_t> q;         // quantized activation tiles (or rows, for oneDNN)
  std::vector<float> row_scale;  // per row
  std::vector<int32_t> acc;      // oneDNN's int32 sums
};

Int8Scratch& ThreadScratch() {
  thread_local Int8Scratch scratch;
  return scratch;
}

// Decode: every panel streamed once, all rows riding along.
template <bool kVnni>
void Int8Gemv(const int8_t* aq, int tile_rows, int64_t m, const float* row_scale, const PackedWeight& w,
              const float* bias, float* y, int64_t ldy) {
  const int64_t quads = w.k_stored / 4;
  constexpr int kQuadBytes = kVnni ? kVnniQuadBytes : kAvx2QuadBytes;
  const int64_t chunk = m <= kTileRows ? quads : kGemvChunkQuads;
  const int64_t grain = std::max<int64_t>(1, kMinBytesPerThread / std::max<int64_t>(w.panel_bytes(), 1));
  const float* scales = w.scale_data();
  ParallelForDecodePanels(w.num_panels, grain, [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const auto* panel = static_cast<const int8_t*>(w.panel(p));
      const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.n - p * kPanelCols));
      const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
      for (int64_t j0 = 0; j0 < quads; j0 += chunk) {
        const int64_t jn = std::min(chunk, quads - j0);
        for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m - r0));
          const int8_t* a = aq + ((r0 / kTileRows) * quads + j0) * tile_rows * kQuadBytes;
          Int8TileRows<kVnni, kPrefetchBytes>(rows, jn, a, tile_rows, panel + j0 * 4 * kPanelCols,
                                       y + r0 * ldy + p * kPanelCols, ldy, ncols, j0 == 0, j0 + jn >= quads,
                                       row_scale + r0, scales + p * kPanelCols, panel_bias);
        }
      }
    }
  });
}

// Prefill: rows [r_begin, r_end) (a multiple of the tile height apart) x panels [p_begin, p_end).
// The activation tiles hold kVnniTileRows rows for the VNNI kernel, kTileRows for AVX2. The
// VNNI kernel applies GELU in its epilogue when `gelu` (the AVX2 one leaves it to the caller).
template <bool kVnni>
void Int8GemmRange(const int8_t* aq, int tile_rows, int64_t r_begin, int64_t r_end, int64_t p_begin, int64_t p_end,
                   const float* row_scale, const PackedWeight& w, const float* bias, float* y, int64_t ldy,
                   bool gelu) {
  const int64_t quads = w.k_stored / 4;
  // The VNNI tile takes panels in pairs, two micro-panels of kVnniPairChunkQuads quads in L1.
  constexpr int64_t kChunkQuads = kVnni ? kVnniPairChunkQuads : kGemmChunkQuads;
  constexpr int64_t kStep = kVnni ? 2 : 1;
  constexpr int64_t kTile = kVnni ? kVnniTileRows : kTileRows;
  const int64_t chunks = (quads + kChunkQuads - 1) / kChunkQuads;
  const int64_t kc_max = (quads + chunks - 1) / chunks;
  const float* scales = w.scale_data();
  // The VNNI tiles' column shifts of this K range, one pair a panel pair, for every row block.
  thread_local std::vector<VnniShiftPair> shifts;
  if constexpr (kVnni) shifts.resize(static_cast<size_t>((p_end - p_begin + 1) / 2));
  for (int64_t j0 = 0; j0 < quads; j0 += kc_max) {
    const int64_t kc = std::min(kc_max, quads - j0);
    if constexpr (kVnni) {
      for (int64_t p = p_begin; p < p_end; p += kStep) {
        const int8_t* b = static_cast<const int8_t*>(w.panel(p)) + j0 * 4 * kPanelCols;
        const int8_t* b1 = p + 1 < p_end ? static_cast<const int8_t*>(w.panel(p + 1)) + j0 * 4 * kPanelCols : b;
        VnniShift(kc, b, b1, shifts[static_cast<size_t>((p - p_begin) / 2)].v);
      }
    }
    for (int64_t i0 = r_begin; i0 < r_end; i0 += kGemmRowBlock) {
      const int64_t i1 = std::min(r_end, i0 + kGemmRowBlock);
      for (int64_t p = p_begin; p < p_end; p += kStep) {
        const int8_t* b = static_cast<const int8_t*>(w.panel(p)) + j0 * 4 * kPanelCols;
        const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.n - p * kPanelCols));
        const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
        if constexpr (kVnni) {
          const bool pair = p + 1 < p_end;
          const int8_t* b1 = pair ? static_cast<const int8_t*>(w.panel(p + 1)) + j0 * 4 * kPanelCols : b;
          const int ncols1 = pair ? static_cast<int>(std::min<int64_t>(kPanelCols, w.n - (p + 1) * kPanelCols)) : 0;
          const auto& shift = shifts[static_cast<size_t>((p - p_begin) / 2)].v;
          for (int64_t r = i0; r < i1; r += kTile) {
            const int rows = static_cast<int>(std::min<int64_t>(kTile, i1 - r));
            const int8_t* a = aq + ((r / kTile) * quads + j0) * tile_rows * kVnniQuadBytes;
            Int8TileRowsVnniPair(rows, kc, a, tile_rows, b, b1, shift, y + r * ldy + p * kPanelCols, ldy, ncols,
                                 ncols1, j0 == 0, j0 + kc >= quads, row_scale + r, scales + p * kPanelCols, panel_bias,
                                 gelu);
          }
        } else {
          for (int64_t r = i0; r < i1; r += kTile) {
            const int rows = static_cast<int>(std::min<int64_t>(kTile, i1 - r));
            const int8_t* a = aq + ((r / kTile) * quads + j0) * tile_rows * kAvx2QuadBytes;
            Int8TileRows<false>(rows, kc, a, tile_rows, b, y + r * ldy + p * kPanelCols, ldy, ncols, j0 == 0,
                                j0 + kc >= quads, row_scale + r, scales + p * kPanelCols, panel_bias);
          }
        }
      }
    }
  }
}

}  // namespace

namespace {

bool CpuHasVnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

KernelSwitch<Int8Kernel>& Switch() {
  static KernelSwitch<Int8Kernel> kernel(Int8Kernel::kAvx2, Int8Kernel::kVnni, CpuHasVnni, "FERRY_INT8_KERNEL",
                                         "avx2");
  return kernel;
}

}  // namespace

bool Int8KernelSupported(Int8Kernel kernel) { return Switch().Supported(kernel); }
Int8Kernel ActiveInt8Kernel() { return Switch().Active(); }
bool SetActiveInt8Kernel(Int8Kernel kernel) { return Switch().Set(kernel); }
std::string_view Int8KernelName(Int8Kernel kernel) { return kernel == Int8Kernel::kVnni ? "vnni" : "avx2"; }

void QuantizeActivations(const float* x, int64_t lda, int64_t m, int64_t k, int64_t k_stored, const float* inv_smooth,
                         int tile_rows, int8_t* q, float* row_scale, Int8Kernel kernel) {
  const bool vnni = kernel == Int8Kernel::kVnni;
  const int64_t quad_bytes = ActivationQuadBytes(kernel);
  const int64_t tiles = (m + tile_rows - 1) / tile_rows;
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(k * tile_rows, 1));
  ParallelFor(tiles, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int8_t* tile = q + t * (k_stored / 4) * tile_rows * quad_bytes;
      for (int64_t r = t * tile_rows; r < std::min(m, (t + 1) * tile_rows); ++r) {
        QuantizeRow(x + r * lda, k, k_stored, inv_smooth, vnni, tile + quad_bytes * (r - t * tile_rows),
                    quad_bytes * tile_rows, row_scale + r);
      }
    }
  });
}

namespace {

// oneDNN's s8 matmul counts as fast here only where it runs on AMX tiles: on AVX2 it is
// gemm:jit, which can saturate (the comment at the top), and with VNNI alone it did not beat
// the VNNI kernel by enough to pay for a second copy of the weights.
bool OnednnInt8OnAmx() {
  static const bool amx = OnednnInt8MatmulImpl().find("amx") != std::string::npos;
  return amx;
}

std::atomic<bool>& OnednnInt8Switch() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("FERRY_INT8_ONEDNN");
    return OnednnInt8OnAmx() && (v == nullptr || std::strcmp(v, "0") != 0);
  }()};
  return on;
}

// W[N, K] int8 row-major from the quad panels, reordered into oneDNN's layout; built once per
// weight (null when oneDNN refuses, and then the weight keeps ferry's kernels).
const OnednnInt8Weight* OnednnWeightOf(const PackedWeight& w) {
  DerivedLayouts& d = *w.derived;
  std::call_once(d.onednn_s8_once, [&] {
    std::vector<int8_t> rows(static_cast<size_t>(w.n * w.k));
    ParallelFor(w.n, kPanelCols, [&](int64_t n_begin, int64_t n_end) {
      for (int64_t n = n_begin; n < n_end; ++n) {
        const int8_t* panel = static_cast<const int8_t*>(w.panel(n / kPanelCols));
        const int64_t c = n % kPanelCols;
        for (int64_t k = 0; k < w.k; ++k) rows[n * w.k + k] = panel[(k / 4) * 64 + c * 4 + k % 4];
      }
    });
    Result<std::shared_ptr<OnednnInt8Weight>> packed = PackOnednnInt8Weight(rows.data(), w.n, w.k);
    if (packed.ok()) d.onednn_s8 = std::move(*packed);
  });
  return static_cast<const OnednnInt8Weight*>(d.onednn_s8.get());
}

// y = fma(float(acc), col_scale * row_scale, bias): StoreInt8Tile's arithmetic, so the same bytes.
void ScaleInt32Rows(const int32_t* acc, int64_t m, int64_t n, const float* row_scale, const float* col_scale,
                    const float* bias, float* y, int64_t ldy) {
  ParallelFor(m, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(n, 1)), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int32_t* a = acc + r * n;
      float* yr = y + r * ldy;
      const __m256 rs = _mm256_set1_ps(row_scale[r]);
      int64_t j = 0;
      for (; j + 8 <= n; j += 8) {
        const __m256 b = bias != nullptr ? _mm256_loadu_ps(bias + j) : _mm256_setzero_ps();
        const __m256 v = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j)));
        _mm256_storeu_ps(yr + j, _mm256_fmadd_ps(v, _mm256_mul_ps(_mm256_loadu_ps(col_scale + j), rs), b));
      }
      for (; j < n; ++j) {
        yr[j] = std::fma(static_cast<float>(a[j]), col_scale[j] * row_scale[r], bias != nullptr ? bias[j] : 0.0f);
      }
    }
  });
}

// The oneDNN route; false when this weight has no oneDNN layout (the caller runs its kernels).
bool Int8LinearOnednn(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                      int64_t ldy) {
  const OnednnInt8Weight* ow = OnednnWeightOf(w);
  if (ow == nullptr) return false;
  Int8Scratch& scratch = ThreadScratch();
  if (scratch.q.size() < static_cast<size_t>(m * w.k)) scratch.q.resize(static_cast<size_t>(m * w.k));
  if (scratch.row_scale.size() < static_cast<size_t>(m)) scratch.row_scale.resize(static_cast<size_t>(m));
  if (scratch.acc.size() < static_cast<size_t>(m * w.n)) scratch.acc.resize(static_cast<size_t>(m * w.n));
  int8_t* q = scratch.q.data();
  float* rs = scratch.row_scale.data();
  const float* inv_smooth = w.inv_smooth_data();
  ParallelFor(m, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(w.k, 1)), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      QuantizeRow(x + r * lda, w.k, w.k, inv_smooth, /*vnni=*/false, q + r * w.k, /*quad_stride=*/0, rs + r);
    }
  });
  if (!OnednnInt8Matmul(q, m, *ow, scratch.acc.data()).ok()) return false;
  ScaleInt32Rows(scratch.acc.data(), m, w.n, rs, w.scale_data(), bias, y, ldy);
  return true;
}

// The AMX route: the same quantized rows, row-major and zero-padded to the tiles' K step and
// row blocks, through tdpbssd and the same epilogue.
void Int8LinearAmx(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                   int64_t ldy, bool gelu) {
  Int8Scratch& scratch = ThreadScratch();
  const int64_t ldq = AmxInt8Ld(w);
  const int64_t pad = AmxInt8RowPad();
  const int64_t m_pad = (m + pad - 1) / pad * pad;
  if (scratch.q.size() < static_cast<size_t>(m_pad * ldq)) scratch.q.resize(static_cast<size_t>(m_pad * ldq));
  if (scratch.row_scale.size() < static_cast<size_t>(m)) scratch.row_scale.resize(static_cast<size_t>(m));
  int8_t* q = scratch.q.data();
  float* rs = scratch.row_scale.data();
  const float* inv_smooth = w.inv_smooth_data();
  ParallelFor(m_pad, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(w.k, 1)), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      int8_t* qr = q + r * ldq;
      int64_t written = 0;
      if (r < m) {
        QuantizeRowMajor512(x + r * lda, w.k, inv_smooth, qr, rs + r);
        written = w.k;
      }
      std::memset(qr + written, 0, static_cast<size_t>(ldq - written));
    }
  });
  GemmAmxInt8(q, ldq, rs, m, w, bias, y, ldy, gelu);
}

}  // namespace

bool Int8OnednnSupported() { return OnednnInt8OnAmx(); }
bool Int8OnednnEnabled() { return OnednnInt8Switch().load(std::memory_order_relaxed); }
bool SetInt8OnednnEnabled(bool enabled) {
  if (enabled && !Int8OnednnSupported()) return false;
  OnednnInt8Switch().store(enabled, std::memory_order_relaxed);
  return true;
}

namespace {

// The routes other than AMX's; true when y has had GELU applied (the VNNI prefill tile's
// epilogue), false when that is left to the caller.
bool Int8LinearOther(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                     int64_t ldy, int64_t gemv_max_rows, bool gelu) {
  if (m > gemv_max_rows && m >= kInt8OnednnMinRows && w.n * w.k >= kInt8OnednnMinWeightBytes &&
      Int8OnednnEnabled() && Int8LinearOnednn(x, lda, m, w, bias, y, ldy)) {
    return false;
  }
  Int8Scratch& scratch = ThreadScratch();
  const bool gemv = m <= gemv_max_rows;
  const Int8Kernel kernel = ActiveInt8Kernel();
  const bool vnni = kernel == Int8Kernel::kVnni;
  // The tile height the kernel reads; fewer rows than a tile need no padding rows.
  const int64_t tile = !gemv && vnni ? kVnniTileRows : kTileRows;
  const int tile_rows = static_cast<int>(std::min<int64_t>(m, tile));
  const int64_t tiles = (m + tile - 1) / tile;
  const size_t q_need = static_cast<size_t>(tiles * tile_rows * w.k_stored * kActivationBytesPerK);
  if (scratch.q.size() < q_need) scratch.q.resize(q_need);
  if (scratch.row_scale.size() < static_cast<size_t>(m)) scratch.row_scale.resize(static_cast<size_t>(m));
  QuantizeActivations(x, lda, m, w.k, w.k_stored, w.inv_smooth_data(), tile_rows, scratch.q.data(),
                      scratch.row_scale.data(), kernel);
  const int8_t* aq = scratch.q.data();
  const float* rs = scratch.row_scale.data();
  if (gemv) {
    if (vnni) {
      Int8Gemv<true>(aq, tile_rows, m, rs, w, bias, y, ldy);
    } else {
      Int8Gemv<false>(aq, tile_rows, m, rs, w, bias, y, ldy);
    }
    return false;
  }
  const auto range = [&](int64_t r_begin, int64_t r_end, int64_t p_begin, int64_t p_end) {
    if (vnni) {
      Int8GemmRange<true>(aq, tile_rows, r_begin, r_end, p_begin, p_end, rs, w, bias, y, ldy, gelu);
    } else {
      Int8GemmRange<false>(aq, tile_rows, r_begin, r_end, p_begin, p_end, rs, w, bias, y, ldy, false);
    }
  };
  if (w.num_panels >= kMinPanelsPerThread * ComputeThreads()) {
    ParallelFor(w.num_panels, 1, [&](int64_t p_begin, int64_t p_end) { range(0, m, p_begin, p_end); });
  } else {
    ParallelFor(m, tile, [&](int64_t r_begin, int64_t r_end) { range(r_begin, r_end, 0, w.num_panels); });
  }
  return vnni;
}

}  // namespace

void Int8Linear(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy, int64_t gemv_max_rows, bool gelu) {
  if (m > gemv_max_rows && m >= kAmxMinRows && AmxEnabled()) {
    Int8LinearAmx(x, lda, m, w, bias, y, ldy, gelu);
    return;
  }
  if (!Int8LinearOther(x, lda, m, w, bias, y, ldy, gemv_max_rows, gelu) && gelu) GeluRows(y, m, w.n, ldy);
}

}  // namespace ferry::kernels::cpu
