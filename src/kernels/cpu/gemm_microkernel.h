// The register-tile kernel shared by the decode GEMV and the prefill GEMM: an MR x 16
// block of C from MR rows of A (f32, any row stride) and one packed-weight micro-panel.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/vec_math.h"

namespace ferry::kernels::cpu {

inline constexpr int kMaxTileRows = 6;  // 6 x 2 accumulators + 2 B + 1 broadcast = 15 ymm

// Prefetches the kBytes bytes at p into L1, a cache line at a time (a weight stream's next
// rows, well ahead of the kernel that reads them).
template <size_t kBytes>
inline void PrefetchLines(const char* p) {
#pragma GCC unroll 8
  for (size_t off = 0; off < kBytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// Rows [k0, k0 + kc) of an int8 panel with block scales (PackedWeight::block_size) -> f32
// rows of 16 at dst: q times its block's (f16) scale in f32, exactly the f32 weight the blocks
// stand for.
inline void WidenInt8Blocks(const int8_t* panel, int64_t k0, int64_t kc, const uint16_t* block_scales, int64_t block,
                            float* dst) {
  const F16* scales = reinterpret_cast<const F16*>(block_scales);
  int64_t b = k0 / block;
  int64_t left = block - k0 % block;  // inputs of block b still to come
  __m256 s0 = Load8(scales + b * kPanelCols), s1 = Load8(scales + b * kPanelCols + 8);
  for (int64_t kk = 0; kk < kc; ++kk) {
    if (left == 0) {
      ++b;
      left = block;
      s0 = Load8(scales + b * kPanelCols);
      s1 = Load8(scales + b * kPanelCols + 8);
    }
    const int8_t* q = panel + (k0 + kk) * kPanelCols;
    _mm256_storeu_ps(dst + kk * kPanelCols, _mm256_mul_ps(Load8(q), s0));
    _mm256_storeu_ps(dst + kk * kPanelCols + 8, _mm256_mul_ps(Load8(q + 8), s1));
    --left;
  }
}

// C[0:MR, 0:ncols] (+)= A[0:MR, 0:kc] · B[0:kc, 0:16], where B's rows are 16 contiguous
// values `ldb` elements apart (a packed micro-panel has ldb = 16; attention passes V rows),
// f32 or widened in-register from bf16/f16/int8. With `accumulate` the
// tile is added to C; otherwise C is overwritten, plus bias[0:ncols] when bias is set.
// With `scale` (int8 weights: per output column) the tile is multiplied by scale[0:16]
// first; it must point at 16 readable floats even when ncols < 16.
// Few rows leave few FMA chains, so small MR also unrolls K into independent accumulators
// to hide the FMA latency (decode must stream weights at memory speed). kOneSet keeps one
// set at every MR, so that a row's sums have the same order on every tile height: the blocked
// GEMM's last rows then give the bytes they give in a full tile, whatever the batch.
//
// A is either row-major (element (m, k) at a[m*lda + k]) or, with kPackedA, a packed tile
// of kMaxTileRows-row columns (element (m, k) at a[k*kMaxTileRows + m]; lda unused): one
// sequential stream, which the blocked GEMM prefers.
template <int MR, typename BT, bool kPackedA = false, int kPrefetchBytes = 0, bool kOneSet = false>
inline void MicroKernel(int64_t kc, const float* a, int64_t lda, const BT* b, int64_t ldb, float* c,
                        int64_t ldc, int ncols, bool accumulate, const float* bias, const float* scale = nullptr) {
  const int64_t a_row = kPackedA ? 1 : lda;
  constexpr int64_t a_k = kPackedA ? kMaxTileRows : 1;
  constexpr int U = kOneSet ? 1 : (MR == 1 ? 4 : (MR == 2 ? 2 : 1));
  __m256 acc[U][MR][2];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) acc[u][m][0] = acc[u][m][1] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + U <= kc; k += U) {
    if constexpr (kPrefetchBytes > 0) {
      // B streamed from memory (decode): with few FMAs per weight byte the out-of-order
      // window runs out before enough cache misses are in flight; prefetch well ahead.
      PrefetchLines<U * kPanelCols * sizeof(BT)>(reinterpret_cast<const char*>(b + k * ldb) + kPrefetchBytes);
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m256 b0 = Load8(b + (k + u) * ldb);
      const __m256 b1 = Load8(b + (k + u) * ldb + 8);
#pragma GCC unroll 6
      for (int m = 0; m < MR; ++m) {
        const __m256 av = _mm256_broadcast_ss(a + m * a_row + (k + u) * a_k);
        acc[u][m][0] = _mm256_fmadd_ps(av, b0, acc[u][m][0]);
        acc[u][m][1] = _mm256_fmadd_ps(av, b1, acc[u][m][1]);
      }
    }
  }
  for (; k < kc; ++k) {
    const __m256 b0 = Load8(b + k * ldb);
    const __m256 b1 = Load8(b + k * ldb + 8);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const __m256 av = _mm256_broadcast_ss(a + m * a_row + k * a_k);
      acc[0][m][0] = _mm256_fmadd_ps(av, b0, acc[0][m][0]);
      acc[0][m][1] = _mm256_fmadd_ps(av, b1, acc[0][m][1]);
    }
  }
#pragma GCC unroll 4
  for (int u = 1; u < U; ++u) {
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      acc[0][m][0] = _mm256_add_ps(acc[0][m][0], acc[u][m][0]);
      acc[0][m][1] = _mm256_add_ps(acc[0][m][1], acc[u][m][1]);
    }
  }
  if (scale != nullptr) {
    const __m256 s0 = _mm256_loadu_ps(scale), s1 = _mm256_loadu_ps(scale + 8);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      acc[0][m][0] = _mm256_mul_ps(acc[0][m][0], s0);
      acc[0][m][1] = _mm256_mul_ps(acc[0][m][1], s1);
    }
  }
  if (ncols == kPanelCols) {
    __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
    if (!accumulate && bias != nullptr) {
      bias0 = _mm256_loadu_ps(bias);
      bias1 = _mm256_loadu_ps(bias + 8);
    }
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      float* cm = c + m * ldc;
      __m256 r0 = acc[0][m][0], r1 = acc[0][m][1];
      if (accumulate) {
        r0 = _mm256_add_ps(r0, _mm256_loadu_ps(cm));
        r1 = _mm256_add_ps(r1, _mm256_loadu_ps(cm + 8));
      } else {
        r0 = _mm256_add_ps(r0, bias0);
        r1 = _mm256_add_ps(r1, bias1);
      }
      _mm256_storeu_ps(cm, r0);
      _mm256_storeu_ps(cm + 8, r1);
    }
    return;
  }
  // Last panel of an N that is not a multiple of 16: only ncols columns exist in C. The
  // accumulators go through a stack tile with compile-time indices only, so the compiler
  // keeps them in registers in the main loop.
  alignas(32) float tmp[MR][kPanelCols];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
    _mm256_store_ps(tmp[m], acc[0][m][0]);
    _mm256_store_ps(tmp[m] + 8, acc[0][m][1]);
  }
  for (int m = 0; m < MR; ++m) {
    float* cm = c + m * ldc;
    for (int j = 0; j < ncols; ++j) {
      if (accumulate) {
        cm[j] += tmp[m][j];
      } else {
        cm[j] = tmp[m][j] + (bias != nullptr ? bias[j] : 0.0f);
      }
    }
  }
}

// Runtime row count -> template instance.
template <typename BT, bool kPackedA = false, int kPrefetchBytes = 0, bool kOneSet = false>
inline void MicroKernelRows(int rows, int64_t kc, const float* a, int64_t lda, const BT* b, int64_t ldb, float* c,
                            int64_t ldc, int ncols, bool accumulate, const float* bias,
                            const float* scale = nullptr) {
  switch (rows) {
    case 1:
      return MicroKernel<1, BT, kPackedA, kPrefetchBytes, kOneSet>(kc, a, lda, b, ldb, c, ldc, ncols,
                                                                   accumulate, bias, scale);
    case 2:
      return MicroKernel<2, BT, kPackedA, kPrefetchBytes, kOneSet>(kc, a, lda, b, ldb, c, ldc, ncols,
                                                                   accumulate, bias, scale);
    case 3:
      return MicroKernel<3, BT, kPackedA, kPrefetchBytes, kOneSet>(kc, a, lda, b, ldb, c, ldc, ncols,
                                                                   accumulate, bias, scale);
    case 4:
      return MicroKernel<4, BT, kPackedA, kPrefetchBytes, kOneSet>(kc, a, lda, b, ldb, c, ldc, ncols,
                                                                   accumulate, bias, scale);
    case 5:
      return MicroKernel<5, BT, kPackedA, kPrefetchBytes, kOneSet>(kc, a, lda, b, ldb, c, ldc, ncols,
                                                                   accumulate, bias, scale);
    default:
      return MicroKernel<6, BT, kPackedA, kPrefetchBytes, kOneSet>(kc, a, lda, b, ldb, c, ldc, ncols,
                                                                   accumulate, bias, scale);
  }
}

}  // namespace ferry::kernels::cpu
