#include "kernels/cpu/gemv.h"

#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm_microkernel.h"

namespace ferry::kernels::cpu {
namespace {

// With more rows than one register tile holds, each tile re-reads the weight chunk; 256
// rows of a panel (16 KiB in f32) keep that re-read in L1.
constexpr int64_t kMultiTileKChunk = 256;
// Smallest amount of weight bytes worth handing to a thread.
constexpr int64_t kMinBytesPerThread = 64 << 10;
// How far ahead of the kernel the weight stream is prefetched (see MicroKernel). On the
// 2-core AVX-512 Xeon of docs/performance.md (gemm_bench --threads=2, M = 1, llama-3.2-1B
// shapes): f32 27.6 -> 33.3 GB/s, bf16 24.0 -> 26.6, int8 21.7 -> 25.3 against no f32
// prefetch and 1,024 bytes for the others; at M = 8, f32 1.37x, bf16 1.08x. (On Zen 3, 1,024
// bytes had been enough for the narrow types and f32 had not needed it.)
template <typename BT>
constexpr int kPrefetchBytes = 2048;

// Packs x into 6-row tiles (element (r, k) of tile t at t*k*6 + k*6 + r) so that each tile's
// broadcasts are one sequential stream instead of up to six rows 4*K bytes apart.
void PackTiles(const float* x, int64_t lda, int64_t m, int64_t k, float* out) {
  for (int64_t t0 = 0; t0 < m; t0 += kMaxTileRows) {
    const int64_t rows = std::min<int64_t>(kMaxTileRows, m - t0);
    float* tile = out + t0 * k;
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = x + (t0 + r) * lda;
      for (int64_t j = 0; j < k; ++j) tile[j * kMaxTileRows + r] = src[j];
    }
  }
}

template <typename BT>
void GemvImpl(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
              int64_t ldy) {
  const int64_t k = w.k;
  const int64_t n = w.n;
  // A single row is already a sequential stream; more rows are packed once per call.
  thread_local std::vector<float> packed_x;
  const bool pack = m > 1;
  if (pack) {
    const size_t need = static_cast<size_t>(((m + kMaxTileRows - 1) / kMaxTileRows) * kMaxTileRows * k);
    if (packed_x.size() < need) packed_x.resize(need);
    PackTiles(x, lda, m, k, packed_x.data());
  }
  const float* xp = pack ? packed_x.data() : x;
  const int64_t kc = m <= kMaxTileRows ? k : kMultiTileKChunk;
  const int64_t panel_bytes = k * kPanelCols * static_cast<int64_t>(sizeof(BT));
  const int64_t grain = std::max<int64_t>(1, kMinBytesPerThread / std::max<int64_t>(panel_bytes, 1));
  // int8 weights accumulate unscaled; the per-column scale is applied once per tile.
  const float* scales = w.scale_data();
  ParallelFor(w.num_panels, grain, [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const BT* panel = static_cast<const BT*>(w.panel(p));
      const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, n - p * kPanelCols));
      const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
      const float* panel_scale = scales != nullptr ? scales + p * kPanelCols : nullptr;
      float* yp = y + p * kPanelCols;
      for (int64_t k0 = 0; k0 < k; k0 += kc) {
        const int64_t kn = std::min(kc, k - k0);
        const BT* b = panel + k0 * kPanelCols;
        if (!pack) {
          MicroKernel<1, BT, false, kPrefetchBytes<BT>>(kn, xp + k0, lda, b, kPanelCols, yp, ldy, ncols, k0 > 0,
                                                        panel_bias, panel_scale);
          continue;
        }
        for (int64_t r0 = 0; r0 < m; r0 += kMaxTileRows) {
          const int rows = static_cast<int>(std::min<int64_t>(kMaxTileRows, m - r0));
          MicroKernelRows<BT, true, kPrefetchBytes<BT>>(rows, kn, xp + r0 * k + k0 * kMaxTileRows, 0, b,
                                                        kPanelCols, yp + r0 * ldy, ldy, ncols, k0 > 0, panel_bias,
                                                        panel_scale);
        }
      }
    }
  });
}

}  // namespace

void GemvPacked(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy) {
  switch (w.dtype) {
    case DType::kF32:
      return GemvImpl<float>(x, lda, m, w, bias, y, ldy);
    case DType::kBF16:
      return GemvImpl<Bf16>(x, lda, m, w, bias, y, ldy);
    case DType::kI8:
      return GemvImpl<int8_t>(x, lda, m, w, bias, y, ldy);
    default:
      return GemvImpl<F16>(x, lda, m, w, bias, y, ldy);
  }
}

}  // namespace ferry::kernels::cpu
