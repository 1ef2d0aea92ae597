#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm_microkernel.h"

namespace ferry::kernels::cpu {
namespace {

// Threads split the weight panels when there are enough of them to keep every thread busy
// (each reads only its share of W); otherwise they split the rows.
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

// Packs rows [0, mc) x columns [0, kc) of x into 6-row tiles: tile t holds element (r, k) at
// t*kc*6 + k*6 + r. Rows past mc in the last tile are left as they are (never read).
void PackRows(const float* x, int64_t lda, int64_t mc, int64_t kc, float* out) {
  for (int64_t t0 = 0; t0 < mc; t0 += kMaxTileRows) {
    const int64_t rows = std::min<int64_t>(kMaxTileRows, mc - t0);
    float* tile = out + t0 * kc;
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = x + (t0 + r) * lda;
      for (int64_t k = 0; k < kc; ++k) tile[k * kMaxTileRows + r] = src[k];
    }
  }
}

// Rows [r_begin, r_end) x panels [p_begin, p_end) of the product.
template <typename BT>
void GemmRange(const float* x, int64_t lda, int64_t r_begin, int64_t r_end, int64_t p_begin, int64_t p_end,
               const PackedWeight& w, const float* bias, float* y, int64_t ldy, const GemmBlocking& blk) {
  thread_local GemmScratch scratch;
  const int64_t k = w.k;
  const int64_t chunks = (k + blk.k_chunk - 1) / blk.k_chunk;
  const int64_t kc_max = (k + chunks - 1) / chunks;
  const int64_t mc_max = std::min(blk.row_block, r_end - r_begin);
  const size_t a_need = static_cast<size_t>((mc_max + kMaxTileRows) * kc_max);
  if (scratch.a.size() < a_need) scratch.a.resize(a_need);
  if (!std::is_same_v<BT, float> && scratch.b.size() < static_cast<size_t>(kc_max * kPanelCols)) {
    scratch.b.resize(static_cast<size_t>(kc_max * kPanelCols));
  }
  for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
    const int64_t kc = std::min(kc_max, k - k0);
    const bool accumulate = k0 > 0;
    for (int64_t i0 = r_begin; i0 < r_end; i0 += blk.row_block) {
      const int64_t mc = std::min(blk.row_block, r_end - i0);
      PackRows(x + i0 * lda + k0, lda, mc, kc, scratch.a.data());
      for (int64_t p = p_begin; p < p_end; ++p) {
        const BT* src = static_cast<const BT*>(w.panel(p)) + k0 * kPanelCols;
        const float* b;
        if constexpr (std::is_same_v<BT, float>) {
          b = src;
        } else if constexpr (std::is_same_v<BT, int8_t>) {
          WidenPanel(src, kc, w.scale_data() + p * kPanelCols, scratch.b.data());
          b = scratch.b.data();
        } else {
          WidenPanel(src, kc * kPanelCols, scratch.b.data());
          b = scratch.b.data();
        }
        const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, w.n - p * kPanelCols));
        const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
        float* yp = y + i0 * ldy + p * kPanelCols;
        int64_t r = 0;
        for (; r + kMaxTileRows <= mc; r += kMaxTileRows) {
          MicroKernel<kMaxTileRows, float, true>(kc, scratch.a.data() + r * kc, 0, b, kPanelCols, yp + r * ldy, ldy,
                                                 ncols, accumulate, panel_bias);
        }
        if (r < mc) {
          MicroKernelRows<float, true>(static_cast<int>(mc - r), kc, scratch.a.data() + r * kc, 0, b, kPanelCols,
                                       yp + r * ldy, ldy, ncols, accumulate, panel_bias);
        }
      }
    }
  }
}

template <typename BT>
void GemmImpl(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
              int64_t ldy, const GemmBlocking& blk) {
  const int64_t threads = ComputeThreads();
  if (w.num_panels >= kMinPanelsPerThread * threads) {
    ParallelFor(w.num_panels, 1, [&](int64_t p_begin, int64_t p_end) {
      GemmRange<BT>(x, lda, 0, m, p_begin, p_end, w, bias, y, ldy, blk);
    });
  } else {
    ParallelFor(m, kMaxTileRows, [&](int64_t r_begin, int64_t r_end) {
      GemmRange<BT>(x, lda, r_begin, r_end, 0, w.num_panels, w, bias, y, ldy, blk);
    });
  }
}

}  // namespace

void GemmPacked(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy, const GemmBlocking& blocking) {
  switch (w.dtype) {
    case DType::kF32:
      return GemmImpl<float>(x, lda, m, w, bias, y, ldy, blocking);
    case DType::kBF16:
      return GemmImpl<Bf16>(x, lda, m, w, bias, y, ldy, blocking);
    case DType::kI8:
      return GemmImpl<int8_t>(x, lda, m, w, bias, y, ldy, blocking);
    default:
      return GemmImpl<F16>(x, lda, m, w, bias, y, ldy, blocking);
  }
}

}  // namespace ferry::kernels::cpu
