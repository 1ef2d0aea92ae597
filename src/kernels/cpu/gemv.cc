#include "kernels/cpu/gemv.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/parallel.h"

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

// One 16-column row of a panel widened to f32 in one AVX-512 register. (The zero-masked
// forms of the widenings: GCC's unmasked ones start from an undefined register and warn.)
constexpr __mmask16 kAll16 = 0xffff;
__attribute__((target("avx512f"), always_inline)) inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
__attribute__((target("avx512f"), always_inline)) inline __m512 Load16(const Bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, _mm512_maskz_cvtepu16_epi32(kAll16, h), 16));
}
__attribute__((target("avx512f"), always_inline)) inline __m512 Load16(const F16* p) {
  return _mm512_maskz_cvtph_ps(kAll16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
__attribute__((target("avx512f"), always_inline)) inline __m512 Load16(const int8_t* p) {
  return _mm512_maskz_cvtepi32_ps(
      kAll16, _mm512_maskz_cvtepi8_epi32(kAll16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// How far ahead the AVX-512 tile prefetches the weight stream. On the 2-core AMD EPYC (Zen 5)
// of docs/performance.md (gemm_bench --threads=2, M = 1, binaries alternating), bf16 and
// int8 streamed 1.09-1.17x faster 4,096 bytes ahead than 2,048, and 8,192 was no better overall.
constexpr int kGemv512PrefetchBytes = 4096;

// Rows of x per AVX-512 GEMV tile: one accumulator a row, the widened weight row used by all.
constexpr int kGemv512Rows = 8;

// Panels one AVX-512 GEMV tile streams at once. One core reading one sequential stream did
// not reach the memory system's rate on the 2-core AMD EPYC (Zen 5) of docs/performance.md:
// at M = 1 the f32 tile read 39 GB/s and the bf16 one 27 GB/s (BM_MemoryRead 42-46); two
// panels side by side, the same instructions, read bf16 at 37-42 GB/s.
constexpr int kGemv512Streams = 2;

// Where one AVX-512 GEMV tile writes: per stream (panel), its weights, output, columns and
// the panel's bias and scale (either may be null), and for int8 blocks the panel's block
// scales ([k / block, kPanelCols], from the panel's first input).
template <typename BT>
struct GemvPanelRef {
  const BT* b;
  float* y;
  int ncols;
  const float* bias;
  const float* scale;
  const uint16_t* block_scales = nullptr;  // f16
};

// The inputs of a tile's K range [k0, k0 + kc) of int8 blocks: kBlocks tiles widen each
// weight times its block's scale (the f32 weight itself), one run of U-unrolled steps per block.
struct GemvBlocks {
  int64_t k0 = 0;
  int64_t size = 0;  // inputs per scale (PackedWeight::block_size); a multiple of 8
};

// The f16 block scales of a panel's input k (from the tile's first input blocks.k0), widened.
__attribute__((target("avx512f"), always_inline)) inline __m512 BlockScales(const uint16_t* block_scales,
                                                                           const GemvBlocks& blocks, int64_t k) {
  return Load16(reinterpret_cast<const F16*>(block_scales + (blocks.k0 + k) / blocks.size * kPanelCols));
}

// The AVX-512 GEMV tile: for each of NS panels, y[0:MR, 0:ncols] (+)= x[0:MR, k range] ·
// panel rows, x row-major (stride lda). Each panel row is widened once into one register (16
// columns) and used by all MR rows, so a widening costs one instruction a 16 weights where
// the AVX2 tile spends two (at 8 rows the AVX2 tile runs 6 + 2 rows and widens every weight
// twice), each broadcast of x serves every panel, and the few-row tiles keep U independent
// chains a row against the FMA latency.
template <int MR, int NS, typename BT, bool kBlocks = false>
__attribute__((target("avx512f"))) void Gemv512(int64_t kc, const float* x, int64_t lda,
                                                const GemvPanelRef<BT>* panels, int64_t ldy, bool accumulate,
                                                GemvBlocks blocks = {}) {
  constexpr int kChains = MR == 1 ? 8 : (MR == 2 ? 4 : (MR <= 4 ? 2 : 1));
  constexpr int U = kChains / NS > 0 ? kChains / NS : 1;
  __m512 acc[NS][U][MR];
#pragma GCC unroll 8
  for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[s][u][m] = _mm512_setzero_ps();
    }
  }
  const BT* b[NS];
#pragma GCC unroll 4
  for (int s = 0; s < NS; ++s) b[s] = panels[s].b;
  int64_t k = 0;
  while (k + U <= kc) {
    // One run: the whole range, or (kBlocks) the rest of k's block, its scales loaded once.
    int64_t run_end = kc;
    __m512 sv[NS];
    if constexpr (kBlocks) {
      run_end = std::min(kc, ((blocks.k0 + k) / blocks.size + 1) * blocks.size - blocks.k0);
#pragma GCC unroll 4
      for (int s = 0; s < NS; ++s) sv[s] = BlockScales(panels[s].block_scales, blocks, k);
    }
    for (; k + U <= run_end; k += U) {
#pragma GCC unroll 4
      for (int s = 0; s < NS; ++s) {
        PrefetchLines<U * kPanelCols * sizeof(BT)>(reinterpret_cast<const char*>(b[s] + k * kPanelCols) +
                                                   kGemv512PrefetchBytes);
      }
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) {
        __m512 wv[NS];
#pragma GCC unroll 4
        for (int s = 0; s < NS; ++s) {
          wv[s] = Load16(b[s] + (k + u) * kPanelCols);
          if constexpr (kBlocks) wv[s] = _mm512_mul_ps(wv[s], sv[s]);
        }
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
          const __m512 xv = _mm512_set1_ps(x[m * lda + k + u]);
#pragma GCC unroll 4
          for (int s = 0; s < NS; ++s) acc[s][u][m] = _mm512_fmadd_ps(xv, wv[s], acc[s][u][m]);
        }
      }
    }
    if (k < run_end) break;  // a run that is not whole U steps: the rest one input at a time
  }
  for (; k < kc; ++k) {
#pragma GCC unroll 4
    for (int s = 0; s < NS; ++s) {
      __m512 wv = Load16(b[s] + k * kPanelCols);
      if constexpr (kBlocks) wv = _mm512_mul_ps(wv, BlockScales(panels[s].block_scales, blocks, k));
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[s][0][m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * lda + k]), wv, acc[s][0][m]);
    }
  }
#pragma GCC unroll 4
  for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 8
    for (int u = 1; u < U; ++u) {
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) acc[s][0][m] = _mm512_add_ps(acc[s][0][m], acc[s][u][m]);
    }
    const GemvPanelRef<BT>& p = panels[s];
    const __mmask16 cols = p.ncols >= kPanelCols ? __mmask16{0xffff} : static_cast<__mmask16>((1u << p.ncols) - 1);
    const __m512 sv = p.scale != nullptr ? _mm512_loadu_ps(p.scale) : _mm512_set1_ps(1.0f);
    const __m512 bias_v = !accumulate && p.bias != nullptr ? _mm512_maskz_loadu_ps(cols, p.bias) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      float* ym = p.y + m * ldy;
      const __m512 r = p.scale != nullptr ? _mm512_mul_ps(acc[s][0][m], sv) : acc[s][0][m];
      const __m512 prev = accumulate ? _mm512_maskz_loadu_ps(cols, ym) : bias_v;
      _mm512_mask_storeu_ps(ym, cols, _mm512_add_ps(r, prev));
    }
  }
}

template <int NS, typename BT, bool kBlocks = false>
void Gemv512Rows(int rows, int64_t kc, const float* x, int64_t lda, const GemvPanelRef<BT>* panels, int64_t ldy,
                 bool accumulate, GemvBlocks blocks = {}) {
  switch (rows) {
    case 1: return Gemv512<1, NS, BT, kBlocks>(kc, x, lda, panels, ldy, accumulate, blocks);
    case 2: return Gemv512<2, NS, BT, kBlocks>(kc, x, lda, panels, ldy, accumulate, blocks);
    case 3: return Gemv512<3, NS, BT, kBlocks>(kc, x, lda, panels, ldy, accumulate, blocks);
    case 4: return Gemv512<4, NS, BT, kBlocks>(kc, x, lda, panels, ldy, accumulate, blocks);
    case 5: return Gemv512<5, NS, BT, kBlocks>(kc, x, lda, panels, ldy, accumulate, blocks);
    case 6: return Gemv512<6, NS, BT, kBlocks>(kc, x, lda, panels, ldy, accumulate, blocks);
    case 7: return Gemv512<7, NS, BT, kBlocks>(kc, x, lda, panels, ldy, accumulate, blocks);
    default: return Gemv512<8, NS, BT, kBlocks>(kc, x, lda, panels, ldy, accumulate, blocks);
  }
}

// The tile for NS panels, with block scales when the weight has them (int8 only).
template <int NS, typename BT>
void Gemv512Tile(const PackedWeight& w, int rows, int64_t k0, int64_t kc, const float* x, int64_t lda,
                 const GemvPanelRef<BT>* panels, int64_t ldy, bool accumulate) {
  if constexpr (std::is_same_v<BT, int8_t>) {
    if (w.block_size > 0) {
      return Gemv512Rows<NS, BT, true>(rows, kc, x, lda, panels, ldy, accumulate, GemvBlocks{k0, w.block_size});
    }
  }
  Gemv512Rows<NS, BT>(rows, kc, x, lda, panels, ldy, accumulate);
}

template <typename BT>
void GemvImpl(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
              int64_t ldy) {
  const int64_t k = w.k;
  const int64_t n = w.n;
  // AVX-512 reads the x rows in place (at most kGemvMaxRows of them, all in L1). For the AVX2
  // tile a single row is already a sequential stream; more rows are packed once per call.
  const bool avx512 = ActiveGemmKernel() == GemmKernel::kAvx512;
  const int64_t tile_rows = avx512 ? kGemv512Rows : kMaxTileRows;
  thread_local std::vector<float> packed_x;
  const bool pack = !avx512 && m > 1;
  if (pack) {
    const size_t need = static_cast<size_t>(((m + kMaxTileRows - 1) / kMaxTileRows) * kMaxTileRows * k);
    if (packed_x.size() < need) packed_x.resize(need);
    PackTiles(x, lda, m, k, packed_x.data());
  }
  const float* xp = pack ? packed_x.data() : x;
  const int64_t kc = m <= tile_rows ? k : kMultiTileKChunk;
  const int64_t panel_bytes = k * kPanelCols * static_cast<int64_t>(sizeof(BT));
  const int64_t grain = std::max<int64_t>(1, kMinBytesPerThread / std::max<int64_t>(panel_bytes, 1));
  // int8 weights accumulate unscaled; the per-column scale is applied once per tile.
  const float* scales = w.scale_data();
  if (avx512) {
    // Threads claim runs of whole groups of kGemv512Streams panels (the last group may be
    // short) as they finish the last (ParallelForDecodePanels).
    const int64_t groups = (w.num_panels + kGemv512Streams - 1) / kGemv512Streams;
    const int64_t group_grain = std::max<int64_t>(1, grain / kGemv512Streams);
    ParallelForDecodePanels(groups, group_grain, [&](int64_t g_begin, int64_t g_end) {
      GemvPanelRef<BT> refs[kGemv512Streams];
      for (int64_t g = g_begin; g < g_end; ++g) {
        const int64_t p0 = g * kGemv512Streams;
        const int ns = static_cast<int>(std::min<int64_t>(kGemv512Streams, w.num_panels - p0));
        for (int64_t k0 = 0; k0 < k; k0 += kc) {
          const int64_t kn = std::min(kc, k - k0);
          for (int64_t r0 = 0; r0 < m; r0 += tile_rows) {
            const int rows = static_cast<int>(std::min<int64_t>(tile_rows, m - r0));
            for (int s = 0; s < ns; ++s) {
              const int64_t p = p0 + s;
              refs[s] = {static_cast<const BT*>(w.panel(p)) + k0 * kPanelCols, y + r0 * ldy + p * kPanelCols,
                         static_cast<int>(std::min<int64_t>(kPanelCols, n - p * kPanelCols)),
                         bias != nullptr ? bias + p * kPanelCols : nullptr,
                         scales != nullptr ? scales + p * kPanelCols : nullptr,
                         w.block_size > 0 ? w.block_scale_data(p) : nullptr};
            }
            const float* xt = x + r0 * lda + k0;
            if (ns == kGemv512Streams) {
              Gemv512Tile<kGemv512Streams, BT>(w, rows, k0, kn, xt, lda, refs, ldy, k0 > 0);
            } else {
              for (int s = 0; s < ns; ++s) Gemv512Tile<1, BT>(w, rows, k0, kn, xt, lda, refs + s, ldy, k0 > 0);
            }
          }
        }
      }
    });
    return;
  }
  ParallelForDecodePanels(w.num_panels, grain, [&](int64_t p_begin, int64_t p_end) {
    // int8 blocks: each panel widened whole to f32 (q times its block's scale, the f32 weight
    // itself) and run as an f32 panel, so the bytes are the f32 weight's.
    thread_local std::vector<float> widened;
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int ncols = static_cast<int>(std::min<int64_t>(kPanelCols, n - p * kPanelCols));
      const float* panel_bias = bias != nullptr ? bias + p * kPanelCols : nullptr;
      const auto run = [&]<typename PT>(const PT* panel, const float* panel_scale) {
        for (int64_t k0 = 0; k0 < k; k0 += kc) {
          const int64_t kn = std::min(kc, k - k0);
          const PT* b = panel + k0 * kPanelCols;
          for (int64_t r0 = 0; r0 < m; r0 += tile_rows) {
            const int rows = static_cast<int>(std::min<int64_t>(tile_rows, m - r0));
            float* yt = y + r0 * ldy + p * kPanelCols;
            if (!pack) {
              MicroKernel<1, PT, false, kPrefetchBytes<PT>>(kn, xp + k0, lda, b, kPanelCols, yt, ldy, ncols, k0 > 0,
                                                            panel_bias, panel_scale);
            } else {
              MicroKernelRows<PT, true, kPrefetchBytes<PT>>(rows, kn, xp + r0 * k + k0 * kMaxTileRows, 0, b,
                                                            kPanelCols, yt, ldy, ncols, k0 > 0, panel_bias,
                                                            panel_scale);
            }
          }
        }
      };
      const BT* panel = static_cast<const BT*>(w.panel(p));
      if constexpr (std::is_same_v<BT, int8_t>) {
        if (w.block_size > 0) {
          if (widened.size() < static_cast<size_t>(k * kPanelCols)) widened.resize(static_cast<size_t>(k * kPanelCols));
          WidenInt8Blocks(panel, 0, k, w.block_scale_data(p), w.block_size, widened.data());
          run(static_cast<const float*>(widened.data()), nullptr);
          continue;
        }
      }
      run(panel, scales != nullptr ? scales + p * kPanelCols : nullptr);
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
