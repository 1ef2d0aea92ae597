#include "kernels/cpu/int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm_microkernel.h"

namespace ferry::kernels::cpu {
namespace {

// Why 16-bit madd and not the u8 x s8 vpmaddubsw: without VNNI, vpmaddubsw needs an
// unsigned operand, i.e. a sign transfer (vpsignb) per activation row and weight vector,
// then a vpmaddwd against ones to widen, then the add: 4 ops per 32 multiply-adds. Widening
// the weights to int16 once (shared by all rows of a tile) and using vpmaddwd directly costs
// 2 ops per 16 (madd + add), the same rate per row with no saturation to reason about, and
// on Zen 3 measured faster (see bench/gemm_bench.cc).

// Decode with more rows than one tile re-reads each weight chunk per tile; 256 pairs of a
// panel (8 KiB of int8) stay in L1 meanwhile.
constexpr int64_t kGemvChunkPairs = 256;
// Smallest amount of weight bytes worth handing to a thread.
constexpr int64_t kMinBytesPerThread = 64 << 10;
// Decode prefetch distance, as in gemv.cc.
constexpr int kPrefetchBytes = 1024;
// Prefill blocking: a K chunk of a panel widened to int16 is chunk_pairs * 64 bytes (16 KiB,
// L1); a row block of activation tiles is row_block * chunk_pairs * 4 bytes (288 KiB, L2).
constexpr int64_t kGemmChunkPairs = 256;
constexpr int64_t kGemmRowBlock = 288;
// Threads split the panels when each gets at least this many, otherwise the rows.
constexpr int64_t kMinPanelsPerThread = 4;

inline void LoadPair(const int8_t* p, __m256i& w0, __m256i& w1) {
  w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
}
inline void LoadPair(const int16_t* p, __m256i& w0, __m256i& w1) {
  w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
}

// C[0:MR, 0:ncols] for one K range of a panel: a holds the activations as int32 words (two
// int16 of consecutive k), element (m, j) at a[j*a_stride + m]; b holds the panel's pairs,
// 32 elements per pair (int8 from the panel, or int16 already widened). Unless `first`, the
// int32 sums of the previous ranges are read back from C; unless `last`, the sums are stored
// to C as int32 (C's f32 storage borrowed as scratch), else converted and scaled.
//
// kPrefetchBytes > 0 (decode, b streamed from memory) prefetches that far ahead of b.
template <int MR, typename BT, int kPrefetchBytes = 0>
inline void Int8Tile(int64_t pairs, const int32_t* a, int64_t a_stride, const BT* b, float* c, int64_t ldc,
                     int ncols, bool first, bool last, const float* row_scale, const float* col_scale,
                     const float* bias) {
  __m256i acc[MR][2];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_si256();
  auto step = [&](int64_t j) {
    __m256i w0, w1;
    LoadPair(b + j * 2 * kPanelCols, w0, w1);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const __m256i av = _mm256_set1_epi32(a[j * a_stride + m]);
      acc[m][0] = _mm256_add_epi32(acc[m][0], _mm256_madd_epi16(av, w0));
      acc[m][1] = _mm256_add_epi32(acc[m][1], _mm256_madd_epi16(av, w1));
    }
  };
  int64_t j = 0;
  if constexpr (kPrefetchBytes > 0) {
    // One 64-byte line of int8 weights per two pairs.
    for (; j + 2 <= pairs; j += 2) {
      _mm_prefetch(reinterpret_cast<const char*>(b + j * 2 * kPanelCols) + kPrefetchBytes, _MM_HINT_T0);
      step(j);
      step(j + 1);
    }
  }
  // Not unrolled: GCC would pair up the products of two steps before adding them to the
  // accumulators, which needs more than the 16 ymm registers a 6-row tile leaves.
#pragma GCC unroll 1
  for (; j < pairs; ++j) step(j);
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
#pragma GCC unroll 6
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
#pragma GCC unroll 6
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

template <int kPrefetchBytes = 0, typename BT>
inline void Int8TileRows(int rows, int64_t pairs, const int32_t* a, int64_t a_stride, const BT* b, float* c,
                         int64_t ldc, int ncols, bool first, bool last, const float* rs, const float* cs,
                         const float* bias) {
  switch (rows) {
    case 1: return Int8Tile<1, BT, kPrefetchBytes>(pairs, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
    case 2: return Int8Tile<2, BT, kPrefetchBytes>(pairs, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
    case 3: return Int8Tile<3, BT, kPrefetchBytes>(pairs, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
    case 4: return Int8Tile<4, BT, kPrefetchBytes>(pairs, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
    case 5: return Int8Tile<5, BT, kPrefetchBytes>(pairs, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
    default: return Int8Tile<6, BT, kPrefetchBytes>(pairs, a, a_stride, b, c, ldc, ncols, first, last, rs, cs, bias);
  }
}

void QuantizeRow(const float* x, int64_t k, const float* smooth, float* tmp, int16_t* out, int64_t pair_stride,
                 float* scale) {
  const float* xs = x;
  int64_t i = 0;
  if (smooth != nullptr) {
    for (; i + 8 <= k; i += 8) {
      _mm256_storeu_ps(tmp + i, _mm256_div_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(smooth + i)));
    }
    for (; i < k; ++i) tmp[i] = x[i] / smooth[i];
    xs = tmp;
  }
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  for (i = 0; i + 8 <= k; i += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(xs + i), abs_mask));
  float amax = HMax(vmax);
  for (; i < k; ++i) amax = std::max(amax, std::fabs(xs[i]));
  *scale = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (i = 0; i + 16 <= k; i += 16) {
    // cvtps2dq rounds half to even (the default MXCSR mode), as nearbyint does below.
    auto quantize8 = [&](const float* p) {
      return _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p), vinv))));
    };
    const __m256i q0 = quantize8(xs + i), q1 = quantize8(xs + i + 8);
    // packs interleaves 128-bit lanes; the permute restores k order: 16 int16 = 8 pairs.
    const __m256i q16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
    int16_t* dst = out + (i / 2) * pair_stride;
    if (pair_stride == 2) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), q16);
    } else {
      alignas(32) int32_t words[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(words), q16);
      for (int w = 0; w < 8; ++w) std::memcpy(dst + w * pair_stride, &words[w], 4);
    }
  }
  for (; i < k; ++i) {
    const float q = std::clamp(std::nearbyint(xs[i] * inv), -127.0f, 127.0f);
    out[(i / 2) * pair_stride + (i & 1)] = static_cast<int16_t>(q);
  }
  if (k & 1) out[(k / 2) * pair_stride + 1] = 0;
}

struct Int8Scratch {
  std::vector<int16_t> q;        // quantized activation tiles
  std::vector<float> row_scale;  // per row
};

// Per thread, kept across calls: fresh buffers each call would page-fault every time.
struct Int8ThreadScratch {
  std::vector<float> tmp;    // one smoothed row
  std::vector<int16_t> b;    // one widened K chunk of a panel
};

Int8ThreadScratch& ThreadScratch() {
  thread_local Int8ThreadScratch scratch;
  return scratch;
}

// Decode: every panel streamed once, all rows riding along.
void Int8Gemv(const int32_t* aq, int tile_rows, int64_t m, const float* row_scale, const PackedWeight& w,
              const float* bias, float* y, int64_t ldy) {
  const int64_t pairs = w.k_stored / 2;
  const int64_t chunk = m <= kMaxTileRows ? pairs : kGemvChunkPairs;
  const int64_t grain = std::max<int64_t>(1, kMinBytesPerThread / std::max<int64_t>(w.panel_bytes(), 1));
  const float* scales = w.scale_data();
  ParallelFor(w.num_panels, grain, [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const auto* panel = static_cast<const int8_t*>(w.panel(p));
      const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.n - p * kPanelCols));
      const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
      for (int64_t j0 = 0; j0 < pairs; j0 += chunk) {
        const int64_t jn = std::min(chunk, pairs - j0);
        for (int64_t r0 = 0; r0 < m; r0 += kMaxTileRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kMaxTileRows, m - r0));
          const int32_t* a = aq + (r0 / kMaxTileRows) * pairs * tile_rows + j0 * tile_rows;
          Int8TileRows<kPrefetchBytes>(rows, jn, a, tile_rows, panel + j0 * 2 * kPanelCols,
                                       y + r0 * ldy + p * kPanelCols, ldy, ncols, j0 == 0, j0 + jn >= pairs,
                                       row_scale + r0, scales + p * kPanelCols, panel_bias);
        }
      }
    }
  });
}

// Prefill: rows [r_begin, r_end) (a multiple of the tile height apart) x panels [p_begin, p_end).
void Int8GemmRange(const int32_t* aq, int64_t r_begin, int64_t r_end, int64_t p_begin, int64_t p_end,
                   const float* row_scale, const PackedWeight& w, const float* bias, float* y, int64_t ldy) {
  Int8ThreadScratch& scratch = ThreadScratch();
  const int64_t pairs = w.k_stored / 2;
  const int64_t chunks = (pairs + kGemmChunkPairs - 1) / kGemmChunkPairs;
  const int64_t kc_max = (pairs + chunks - 1) / chunks;
  if (scratch.b.size() < static_cast<size_t>(kc_max * 2 * kPanelCols)) {
    scratch.b.resize(static_cast<size_t>(kc_max * 2 * kPanelCols));
  }
  const float* scales = w.scale_data();
  for (int64_t j0 = 0; j0 < pairs; j0 += kc_max) {
    const int64_t kc = std::min(kc_max, pairs - j0);
    for (int64_t i0 = r_begin; i0 < r_end; i0 += kGemmRowBlock) {
      const int64_t i1 = std::min(r_end, i0 + kGemmRowBlock);
      for (int64_t p = p_begin; p < p_end; ++p) {
        const int8_t* src = static_cast<const int8_t*>(w.panel(p)) + j0 * 2 * kPanelCols;
        int16_t* b = scratch.b.data();
        for (int64_t e = 0; e < kc * 2 * kPanelCols; e += 16) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + e),
                              _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + e))));
        }
        const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.n - p * kPanelCols));
        const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
        for (int64_t r = i0; r < i1; r += kMaxTileRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kMaxTileRows, i1 - r));
          Int8TileRows(rows, kc, aq + (r / kMaxTileRows) * pairs * kMaxTileRows + j0 * kMaxTileRows, kMaxTileRows,
                       static_cast<const int16_t*>(b), y + r * ldy + p * kPanelCols, ldy, ncols, j0 == 0,
                       j0 + kc >= pairs, row_scale + r, scales + p * kPanelCols, panel_bias);
        }
      }
    }
  }
}

}  // namespace

void QuantizeActivations(const float* x, int64_t lda, int64_t m, int64_t k, int64_t k_stored, const float* smooth,
                         int tile_rows, int16_t* q, float* row_scale) {
  const int64_t tiles = (m + tile_rows - 1) / tile_rows;
  ParallelFor(tiles, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(k * tile_rows, 1)), [&](int64_t b, int64_t e) {
    Int8ThreadScratch& scratch = ThreadScratch();
    if (smooth != nullptr && scratch.tmp.size() < static_cast<size_t>(k)) scratch.tmp.resize(static_cast<size_t>(k));
    for (int64_t t = b; t < e; ++t) {
      int16_t* tile = q + t * k_stored * tile_rows;
      for (int64_t r = t * tile_rows; r < std::min(m, (t + 1) * tile_rows); ++r) {
        QuantizeRow(x + r * lda, k, smooth, scratch.tmp.data(), tile + 2 * (r - t * tile_rows), 2 * tile_rows,
                    row_scale + r);
      }
    }
  });
}

void Int8Linear(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy, int64_t gemv_max_rows) {
  thread_local Int8Scratch scratch;
  const bool gemv = m <= gemv_max_rows;
  const int tile_rows = gemv ? static_cast<int>(std::min<int64_t>(m, kMaxTileRows)) : kMaxTileRows;
  const int64_t tiles = (m + kMaxTileRows - 1) / kMaxTileRows;
  const size_t q_need = static_cast<size_t>(tiles * tile_rows * w.k_stored);
  if (scratch.q.size() < q_need) scratch.q.resize(q_need);
  if (scratch.row_scale.size() < static_cast<size_t>(m)) scratch.row_scale.resize(static_cast<size_t>(m));
  QuantizeActivations(x, lda, m, w.k, w.k_stored, w.smooth_data(), tile_rows, scratch.q.data(),
                      scratch.row_scale.data());
  const auto* aq = reinterpret_cast<const int32_t*>(scratch.q.data());
  if (gemv) {
    Int8Gemv(aq, tile_rows, m, scratch.row_scale.data(), w, bias, y, ldy);
    return;
  }
  const float* rs = scratch.row_scale.data();
  if (w.num_panels >= kMinPanelsPerThread * ComputeThreads()) {
    ParallelFor(w.num_panels, 1, [&](int64_t p_begin, int64_t p_end) {
      Int8GemmRange(aq, 0, m, p_begin, p_end, rs, w, bias, y, ldy);
    });
  } else {
    ParallelFor(m, kMaxTileRows, [&](int64_t r_begin, int64_t r_end) {
      Int8GemmRange(aq, r_begin, r_end, 0, w.num_panels, rs, w, bias, y, ldy);
    });
  }
}

}  // namespace ferry::kernels::cpu
