#include "kernels/cpu/amx_gemm.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/vec_math.h"

// Every function that touches tiles or 512-bit registers carries this target; the rest of the
// build stays at AVX2 and the route is taken only where AmxSupported().
#define FERRY_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,amx-int8,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ferry::kernels::cpu {
namespace {

// Tiles: C blocks of 32 rows x 32 columns in tmm0-3 (2 x 2 tiles of 16 x 16 f32), the two
// 16-row A tiles in tmm4-5 (16 x 32 bf16), the two panels' B tiles in tmm6-7 (16 pairs of K
// x 16 columns). One K step is 32 and runs four tile products.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileK = 32;
constexpr int64_t kBlockRows = 2 * kTileRows;
constexpr int64_t kBlockCols = 2 * kPanelCols;
// Cache blocking: a thread sweeps a group of up to kBlocksPerGroup column blocks (128
// columns) over kRowGroup rows one K chunk at a time; a block's paired B chunk is built once
// and used by every row block of the group. Long chunks pay: each chunk boundary stores and
// reloads the C tiles, and each row group pairs the weights again. Chosen on a 2-core
// Sapphire Rapids-class Xeon at the llama-3.2-1B shapes (512 rows): 256 x 4096 x 4 reached
// 1.05-1.25 TFLOP/s, against 0.68-0.78 for 512-long chunks and 0.76-0.95 for 128-row groups.
constexpr int64_t kKChunk = 4096;
constexpr int64_t kRowGroup = 256;
// W8A8's K chunk: the 1B shape's K = 8,192 (the down projection) in one chunk; spilling the
// sums to the group's buffer between two chunks of 4,096 cost it 5-7 %.
constexpr int64_t kInt8KChunk = 8192;
constexpr int64_t kBlocksPerGroup = 4;

// Outputs of at least this many bytes are written with non-temporal stores: more than a core's
// L2, so ordinary stores would read every line first (write-allocate) and push the weights the
// next row group reuses out of L2. bert-base's int8 batch of 32 x 128 (GEMM outputs of 12-50
// MB) ran 1.2x faster with them. Smaller outputs stay cached for the next op. The values are
// the same either way.
constexpr int64_t kStreamBytes = int64_t{4} << 20;

// Whether y [m, n] (row stride ldy) is streamed: large enough, and its 16-float vectors 64-byte
// aligned (the column blocks start at multiples of 32).
bool StreamOutput(const float* y, int64_t ldy, int64_t m, int64_t n) {
  return m * n * static_cast<int64_t>(sizeof(float)) >= kStreamBytes && ldy % 16 == 0 &&
         reinterpret_cast<uintptr_t>(y) % 64 == 0;
}

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

bool CpuHasAmx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u, amx_int8 = (edx >> 25) & 1u,
             avx512f = (ebx >> 16) & 1u, avx512bw = (ebx >> 30) & 1u, avx512vl = (ebx >> 31) & 1u;
  if (!(amx_bf16 && amx_tile && amx_int8 && avx512f && avx512bw && avx512vl)) return false;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax >> 5) & 1u;  // AVX512_BF16
}

// Linux hands a process the tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA); the
// permission covers every thread of the process.
bool RequestTileState() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
}

std::atomic<bool>& Switch() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("FERRY_AMX");
    return AmxSupported() && (v == nullptr || std::strcmp(v, "0") != 0);
  }()};
  return on;
}

FERRY_AMX_TARGET void ConfigureTiles() {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(kTileRows);
    cfg.colsb[t] = 64;
  }
  // Not _tile_loadconfig: GCC 12's tells the compiler it reads 8 of the 64 bytes, so where this
  // function is not inlined the row and column stores are dropped as dead and the tiles come up
  // unconfigured (#UD at the first tile instruction). The operand here is the whole struct.
  asm volatile("ldtilecfg %0" : : "m"(cfg));
}

// The zero-masked forms of the widening and shift intrinsics throughout: GCC 12's unmasked
// ones start from an undefined register and warn (-Wmaybe-uninitialized).
constexpr __mmask16 kAll = 0xffff;

// Activations as kAmxTerms bf16 planes whose sum is x: plane 0 is x rounded to nearest even,
// each next plane the remainder rounded again. Three planes hold all of an f32's 24 significant
// bits, so the tiles multiply the activations the f32 kernels multiply, and the results differ
// from theirs only by the order of the f32 sums (the weights, bf16 or int8, are exact in bf16).
constexpr int kAmxTerms = 3;

// 16 activations into the planes at dst, dst + plane, ...
FERRY_AMX_TARGET inline void Split16(__m512 v, int64_t plane, uint16_t* dst) {
  for (int t = 0; t < kAmxTerms; ++t) {
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + t * plane), h);
    v = _mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16)));
  }
}

// Rows [r_begin, r_end) of the planes a [kAmxTerms][m_pad, kp] (row stride ld, plane stride
// plane): zeros past K and for the padding rows past m.
FERRY_AMX_TARGET void SplitRows(const float* x, int64_t lda, int64_t m, int64_t k, int64_t kp, int64_t ld,
                                int64_t plane, int64_t r_begin, int64_t r_end, uint16_t* a) {
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t r = r_begin; r < r_end; ++r) {
    uint16_t* ar = a + r * ld;
    int64_t c = 0;
    if (r < m) {
      const float* xr = x + r * lda;
      for (; c + 16 <= k; c += 16) Split16(_mm512_loadu_ps(xr + c), plane, ar + c);
      if (c < k) {
        Split16(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (k - c)) - 1u), xr + c), plane, ar + c);
        c += 16;
      }
    }
    for (; c < kp; c += 16) {
      for (int t = 0; t < kAmxTerms; ++t) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ar + t * plane + c), zero);
    }
  }
}

// One K row of a panel's 16 columns in the 16 lanes of a B tile row, as bf16 bit patterns:
// in the low halves (kHigh false: the even k) or the high halves (the odd k).
template <bool kHigh>
FERRY_AMX_TARGET inline __m512i PanelRow(const uint16_t* row) {
  const __m512i v = _mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row)));
  return kHigh ? _mm512_maskz_slli_epi32(kAll, v, 16) : v;
}
// int8 weights are small integers: their f32 values have nothing below the top 16 bits, which
// are then exactly their bf16 patterns.
template <bool kHigh>
FERRY_AMX_TARGET inline __m512i PanelRow(const int8_t* row) {
  const __m512i f = _mm512_castps_si512(_mm512_maskz_cvtepi32_ps(
      kAll, _mm512_maskz_cvtepi8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(row)))));
  return kHigh ? _mm512_and_si512(f, _mm512_set1_epi32(static_cast<int>(0xffff0000u)))
               : _mm512_maskz_srli_epi32(kAll, f, 16);
}

// Panel p's weights for k in [k0, k0 + kc) (kc a multiple of 32) in the order a B tile
// reads: row j (64 bytes) holds k0 + 2j and k0 + 2j + 1 of each column, the even k in the
// low half. Zeros past K.
template <typename BT>
FERRY_AMX_TARGET void PairPanel(const PackedWeight& w, int64_t p, int64_t k0, int64_t kc, uint32_t* out) {
  const BT* src = static_cast<const BT*>(w.panel(p));
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t j = 0; j < kc / 2; ++j) {
    const int64_t k = k0 + 2 * j;
    const __m512i even = k < w.k ? PanelRow<false>(src + k * kPanelCols) : zero;
    const __m512i odd = k + 1 < w.k ? PanelRow<true>(src + (k + 1) * kPanelCols) : zero;
    _mm512_storeu_si512(out + j * 16, _mm512_or_si512(even, odd));
  }
}

// 16 outputs at dst (the lanes of mask): a whole vector of a streamed output goes out with a
// non-temporal store (StreamOutput), anything else with an ordinary masked one.
FERRY_AMX_TARGET inline void StoreOutput(float* dst, __mmask16 mask, __m512 v, bool stream) {
  if (stream && mask == 0xffff) {
    _mm512_stream_ps(dst, v);
  } else {
    _mm512_mask_storeu_ps(dst, mask, v);
  }
}

// y for rows [r0, r0 + rows) of m and columns [c0, c0 + cols) of n from the group's sums c
// (row stride ldc): times the int8 scales, plus the bias, then GELU when asked.
FERRY_AMX_TARGET void StoreGroup(const float* c, int64_t ldc, int64_t r0, int64_t rows, int64_t m, int64_t c0,
                                 int64_t cols, int64_t n, const float* scale, const float* bias, bool gelu,
                                 bool stream, float* y, int64_t ldy) {
  for (int64_t i = 0; i < rows && r0 + i < m; ++i) {
    const float* cr = c + i * ldc;
    float* yr = y + (r0 + i) * ldy;
    for (int64_t j = 0; j < cols && c0 + j < n; j += 16) {
      const int64_t col = c0 + j;
      const __mmask16 mask =
          n - col >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - col)) - 1u);
      __m512 v = _mm512_loadu_ps(cr + j);
      if (scale != nullptr) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, scale + col));
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + col));
      if (gelu) v = Gelu(v);
      StoreOutput(yr + col, mask, v, stream);
    }
  }
}

// The four C tiles of a 32 x 32 block of 4-byte sums at c (ldc elements a row): zeroed for the
// first K chunk, else reloaded; and stored back.
template <typename T>
FERRY_AMX_TARGET inline void LoadSums(bool first, const T* c, int64_t ldc) {
  static_assert(sizeof(T) == 4);
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    return;
  }
  _tile_loadd(0, c, ldc * 4);
  _tile_loadd(1, c + kTileRows, ldc * 4);
  _tile_loadd(2, c + kTileRows * ldc, ldc * 4);
  _tile_loadd(3, c + kTileRows * ldc + kTileRows, ldc * 4);
}
template <typename T>
FERRY_AMX_TARGET inline void StoreSums(T* c, int64_t ldc) {
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + kTileRows, ldc * 4);
  _tile_stored(2, c + kTileRows * ldc, ldc * 4);
  _tile_stored(3, c + kTileRows * ldc + kTileRows, ldc * 4);
}

// Column blocks [blk_begin, blk_end) (two panels each) over all rows.
template <typename BT>
FERRY_AMX_TARGET void AmxRange(const uint16_t* a, int64_t kp, int64_t ld, int64_t plane, int64_t m, int64_t m_pad,
                               const PackedWeight& w, const float* bias, bool gelu, bool stream, float* y,
                               int64_t ldy, int64_t blk_begin, int64_t blk_end) {
  thread_local std::vector<uint32_t> bbuf;
  thread_local std::vector<float> cbuf;
  constexpr int64_t kPanelChunk = kKChunk / 2 * 16;  // uint32 of one panel's paired K chunk
  constexpr int64_t ldc = kBlocksPerGroup * kBlockCols;
  if (bbuf.size() < 2 * kPanelChunk) bbuf.resize(2 * kPanelChunk);
  if (cbuf.size() < static_cast<size_t>(kRowGroup * ldc)) cbuf.resize(static_cast<size_t>(kRowGroup * ldc));
  uint32_t* b0 = bbuf.data();
  uint32_t* b1 = b0 + kPanelChunk;
  const float* scale = std::is_same_v<BT, int8_t> ? w.scale_data() : nullptr;
  const int64_t a_stride = ld * static_cast<int64_t>(sizeof(uint16_t));  // bytes between A rows
  ConfigureTiles();
  for (int64_t r0 = 0; r0 < m_pad; r0 += kRowGroup) {
    const int64_t rows = std::min(kRowGroup, m_pad - r0);
    for (int64_t g0 = blk_begin; g0 < blk_end; g0 += kBlocksPerGroup) {
      const int64_t blocks = std::min(kBlocksPerGroup, blk_end - g0);
      for (int64_t k0 = 0; k0 < kp; k0 += kKChunk) {
        const int64_t kc = std::min(kKChunk, kp - k0);
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t p0 = 2 * (g0 + b);
          PairPanel<BT>(w, p0, k0, kc, b0);
          if (p0 + 1 < w.num_panels) {
            PairPanel<BT>(w, p0 + 1, k0, kc, b1);
          } else {
            std::memset(b1, 0, static_cast<size_t>(kc / 2 * 64));
          }
          for (int64_t i = 0; i < rows; i += kBlockRows) {
            float* c = cbuf.data() + i * ldc + b * kBlockCols;
            LoadSums(k0 == 0, c, ldc);
            const uint16_t* a0 = a + (r0 + i) * ld + k0;
            const uint16_t* a1 = a0 + kTileRows * ld;
            for (int64_t s = 0; s < kc; s += kTileK) {
              // The next step's rows towards L1: 16-row strided reads that the hardware
              // prefetchers do not follow (1.36 -> 1.46 TFLOP/s on the 1B qkv shape).
              if (s + kTileK < kc) {
                for (int64_t r = 0; r < kTileRows; ++r) {
                  for (int t = 0; t < kAmxTerms; ++t) {
                    _mm_prefetch(reinterpret_cast<const char*>(a0 + t * plane + r * ld + s + kTileK), _MM_HINT_T0);
                    _mm_prefetch(reinterpret_cast<const char*>(a1 + t * plane + r * ld + s + kTileK), _MM_HINT_T0);
                  }
                  _mm_prefetch(reinterpret_cast<const char*>(b0 + (s + kTileK) / 2 * 16 + r * 16), _MM_HINT_T0);
                  _mm_prefetch(reinterpret_cast<const char*>(b1 + (s + kTileK) / 2 * 16 + r * 16), _MM_HINT_T0);
                }
              }
              _tile_loadd(6, b0 + s / 2 * 16, 64);
              _tile_loadd(7, b1 + s / 2 * 16, 64);
              for (int t = 0; t < kAmxTerms; ++t) {  // each activation plane against the same B tiles
                _tile_loadd(4, a0 + t * plane + s, a_stride);
                _tile_loadd(5, a1 + t * plane + s, a_stride);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
              }
            }
            StoreSums(c, ldc);
          }
        }
      }
      StoreGroup(cbuf.data(), ldc, r0, rows, m, g0 * kBlockCols, blocks * kBlockCols, w.n, scale, bias, gelu, stream,
                 y, ldy);
    }
  }
  if (stream) _mm_sfence();  // the streamed stores ordered before the threads' join
  _tile_release();
}

// A finished 32 x 32 block of W8A8 int32 sums (row stride kBlockCols) on its way to y.
struct Int8Pending {
  const int32_t* sums = nullptr;  // none pending when null
  int64_t row = 0;                // y row of the block's first row
  int64_t rows = 0;               // the block's rows inside m
  int64_t col = 0;                // y column of the block's first column
  int64_t done = 0;               // rows finished
};

// y = fma(float(acc), col_scale * row_scale, bias), then GELU when asked: the W8A8 kernels'
// epilogue, a row at a time.
struct Int8Epilogue {
  const float* row_scale;
  const float* col_scale;
  const float* bias;
  bool gelu;
  bool stream;  // whole 16-column vectors with non-temporal stores (StreamOutput)
  float* y;
  int64_t ldy;
  int64_t n;

  // Rows [p.done, until) of p (clamped to its rows).
  FERRY_AMX_TARGET void Rows(Int8Pending& p, int64_t until) const {
    const int64_t end = std::min(until, p.rows);
    for (int64_t i = p.done; i < end; ++i) {
      const int32_t* cr = p.sums + i * kBlockCols;
      float* yr = y + (p.row + i) * ldy;
      const __m512 rs = _mm512_set1_ps(row_scale[p.row + i]);
      for (int64_t j = 0; j < kBlockCols && p.col + j < n; j += 16) {
        const int64_t col = p.col + j;
        const __mmask16 mask =
            n - col >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - col)) - 1u);
        const __m512 acc = _mm512_maskz_cvtepi32_ps(kAll, _mm512_loadu_si512(cr + j));
        const __m512 bv = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + col) : _mm512_setzero_ps();
        const __m512 scale = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, col_scale + col), rs);
        __m512 v = _mm512_fmadd_ps(acc, scale, bv);
        if (gelu) v = Gelu(v);
        StoreOutput(yr + col, mask, v, stream);
      }
    }
    p.done = std::max(p.done, end);
  }
};

// W8A8 column blocks [blk_begin, blk_end) over all rows: the same blocking as AmxRange, with
// 64 K a step (tdpbssd: s8 x s8 into int32) and the B tiles read straight from the quad
// panels. A K tail shorter than a step is copied into a zero-padded tile first (the panel's
// next bytes belong to another panel, or to no allocation at all).
//
// The epilogue is software-pipelined: a block's finished sums go to a 4 KB staging buffer
// (L1) and are scaled, biased and stored a few rows per K step of the next block, so the
// vector units work while the tile unit multiplies (run after the group, from sums in L2, it
// was a quarter of the kernel's time at bert-base's shapes). Sums go through the group's
// buffer only between the chunks of a K longer than kInt8KChunk.
FERRY_AMX_TARGET void AmxInt8Range(const int8_t* q, int64_t ldq, const float* row_scale, int64_t m, int64_t m_pad,
                                   const PackedWeight& w, const float* bias, bool gelu, bool stream, float* y,
                                   int64_t ldy, int64_t blk_begin, int64_t blk_end) {
  constexpr int64_t kStep = 64;                     // K per tile step
  constexpr int64_t kTileBytes = kTileRows * 64;    // one B tile
  constexpr int64_t ldc = kBlocksPerGroup * kBlockCols;
  thread_local std::vector<int32_t> cbuf;
  thread_local std::vector<int8_t> zeros;  // the missing partner of an odd last panel
  alignas(64) int8_t tail[2][kTileBytes];
  alignas(64) int32_t stage[2][kBlockRows * kBlockCols];
  const int64_t kext = AmxInt8K(w);  // K covered by tile steps (ldq may add a padding line)
  if (kext > kInt8KChunk && cbuf.size() < static_cast<size_t>(kRowGroup * ldc)) {
    cbuf.resize(static_cast<size_t>(kRowGroup * ldc));
  }
  if (zeros.size() < static_cast<size_t>(kext * kPanelCols)) zeros.assign(static_cast<size_t>(kext * kPanelCols), 0);
  const int64_t full_steps = w.k_stored / kStep * kStep;  // K covered by whole tiles of a panel
  const Int8Epilogue epi{row_scale, w.scale_data(), bias, gelu, stream, y, ldy, w.n};
  Int8Pending pending;
  int which = 0;
  ConfigureTiles();
  for (int64_t r0 = 0; r0 < m_pad; r0 += kRowGroup) {
    const int64_t rows = std::min(kRowGroup, m_pad - r0);
    for (int64_t g0 = blk_begin; g0 < blk_end; g0 += kBlocksPerGroup) {
      const int64_t blocks = std::min(kBlocksPerGroup, blk_end - g0);
      for (int64_t k0 = 0; k0 < kext; k0 += kInt8KChunk) {
        const int64_t kc = std::min(kInt8KChunk, kext - k0);
        const bool last_chunk = k0 + kc >= kext;
        // Epilogue rows per K step: a block's 32 rows spread over the steps of the next.
        const int64_t per_step = (kBlockRows * kStep + kc - 1) / kc;
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t p0 = 2 * (g0 + b);
          const bool pair = p0 + 1 < w.num_panels;
          // Byte k*16 of a panel starts K quad k/4 (64 bytes a quad line).
          const int8_t* b0 = static_cast<const int8_t*>(w.panel(p0));
          const int8_t* b1 = pair ? static_cast<const int8_t*>(w.panel(p0 + 1)) : zeros.data();
          const bool has_tail = k0 + kc > full_steps;
          if (has_tail) {
            const int64_t valid = (w.k_stored - full_steps) * kPanelCols;  // bytes of the last partial step
            std::memset(tail, 0, sizeof(tail));
            std::memcpy(tail[0], b0 + full_steps * kPanelCols, static_cast<size_t>(valid));
            if (pair) std::memcpy(tail[1], b1 + full_steps * kPanelCols, static_cast<size_t>(valid));
          }
          // The next block's panels towards L2 while this one runs over the row group (its
          // first row block would otherwise wait on memory).
          const int64_t next_block = g0 + b + 1;
          const char* pf[2] = {nullptr, nullptr};
          int64_t pf_lines = 0, pf_done = 0, pf_per_step = 0;
          if (next_block < blk_end && k0 == 0) {
            pf[0] = static_cast<const char*>(w.panel(2 * next_block));
            if (2 * next_block + 1 < w.num_panels) pf[1] = static_cast<const char*>(w.panel(2 * next_block + 1));
            pf_lines = w.k_stored * kPanelCols / 64;
            const int64_t steps_total = (rows / kBlockRows) * (kc / kStep);
            pf_per_step = (pf_lines + steps_total - 1) / steps_total;
          }
          for (int64_t i = 0; i < rows; i += kBlockRows) {
            int32_t* c = last_chunk && k0 == 0 ? nullptr : cbuf.data() + i * ldc + b * kBlockCols;
            LoadSums(k0 == 0, c, ldc);
            const int8_t* a0 = q + (r0 + i) * ldq;
            const int8_t* a1 = a0 + kTileRows * ldq;
            for (int64_t s = k0; s < k0 + kc; s += kStep) {
              const bool whole = s < full_steps;
              if (s + kStep < k0 + kc) {
                for (int64_t r = 0; r < kTileRows; ++r) {
                  _mm_prefetch(reinterpret_cast<const char*>(a0 + r * ldq + s + kStep), _MM_HINT_T0);
                  _mm_prefetch(reinterpret_cast<const char*>(a1 + r * ldq + s + kStep), _MM_HINT_T0);
                }
              }
              for (int64_t l = 0; l < pf_per_step && pf_done < pf_lines; ++l, ++pf_done) {
                _mm_prefetch(pf[0] + pf_done * 64, _MM_HINT_T1);
                if (pf[1] != nullptr) _mm_prefetch(pf[1] + pf_done * 64, _MM_HINT_T1);
              }
              _tile_loadd(4, a0 + s, ldq);
              _tile_loadd(5, a1 + s, ldq);
              _tile_loadd(6, whole ? b0 + s * kPanelCols : tail[0], 64);
              _tile_loadd(7, whole ? b1 + s * kPanelCols : (pair ? tail[1] : zeros.data()), 64);
              _tile_dpbssd(0, 4, 6);
              _tile_dpbssd(1, 4, 7);
              _tile_dpbssd(2, 5, 6);
              _tile_dpbssd(3, 5, 7);
              if (pending.sums != nullptr) epi.Rows(pending, pending.done + per_step);
            }
            if (pending.sums != nullptr) epi.Rows(pending, kBlockRows);
            if (last_chunk) {
              int32_t* st = stage[which];
              which ^= 1;
              StoreSums(st, kBlockCols);
              pending = Int8Pending{st, r0 + i, std::clamp<int64_t>(m - (r0 + i), 0, kBlockRows),
                                    (g0 + b) * kBlockCols, 0};
            } else {
              StoreSums(c, ldc);
            }
          }
        }
      }
    }
  }
  if (pending.sums != nullptr) epi.Rows(pending, kBlockRows);
  if (stream) _mm_sfence();  // the streamed stores ordered before the threads' join
  _tile_release();
}

}  // namespace

bool AmxSupported() {
  static const bool supported = CpuHasAmx() && RequestTileState();
  return supported;
}

bool AmxEnabled() { return Switch().load(std::memory_order_relaxed); }

bool SetAmxEnabled(bool enabled) {
  if (enabled && !AmxSupported()) return false;
  Switch().store(enabled, std::memory_order_relaxed);
  return true;
}

bool AmxGemmApplies(const PackedWeight& w, int64_t m) {
  if (m < kAmxMinRows || w.layout != PanelLayout::kRows || w.int8_activations()) return false;
  if (w.dtype != DType::kBF16 && !(w.dtype == DType::kI8 && w.scales.defined())) return false;
  return AmxEnabled();
}

void GemmAmxBf16(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                 int64_t ldy, bool gelu) {
  if (m <= 0 || w.n <= 0) return;
  const int64_t kp = (w.k + kTileK - 1) / kTileK * kTileK;
  // One cache line more than K per row: a tile's 16 row reads at a power-of-two stride would all
  // fall in one L1 set.
  const int64_t ld = kp + 32;
  const int64_t m_pad = (m + kBlockRows - 1) / kBlockRows * kBlockRows;
  const int64_t plane = m_pad * ld;
  thread_local std::vector<uint16_t> a;
  if (a.size() < static_cast<size_t>(kAmxTerms * plane)) a.resize(static_cast<size_t>(kAmxTerms * plane));
  uint16_t* ap = a.data();
  ParallelFor(m_pad, kTileRows, [&](int64_t r_begin, int64_t r_end) {
    SplitRows(x, lda, m, w.k, kp, ld, plane, r_begin, r_end, ap);
  });
  const int64_t blocks = (w.num_panels + 1) / 2;
  const bool stream = StreamOutput(y, ldy, m, w.n);
  ParallelFor(blocks, 1, [&](int64_t b_begin, int64_t b_end) {
    if (w.dtype == DType::kI8) {
      AmxRange<int8_t>(ap, kp, ld, plane, m, m_pad, w, bias, gelu, stream, y, ldy, b_begin, b_end);
    } else {
      AmxRange<uint16_t>(ap, kp, ld, plane, m, m_pad, w, bias, gelu, stream, y, ldy, b_begin, b_end);
    }
  });
}

}  // namespace ferry::kernels::cpu

namespace ferry::kernels::cpu {

void ConfigureAmxTiles() { ConfigureTiles(); }

int64_t AmxInt8RowPad() { return kBlockRows; }
int64_t AmxInt8K(const PackedWeight& w) { return (w.k_stored + 63) / 64 * 64; }
// One cache line more than the tiles' K: a tile's 16 rows at a stride of a multiple of 256
// bytes (K = 2,048 or 3,072) would fall in a few L1 sets.
int64_t AmxInt8Ld(const PackedWeight& w) { return AmxInt8K(w) + 64; }

void GemmAmxInt8(const int8_t* q, int64_t ldq, const float* row_scale, int64_t m, const PackedWeight& w,
                 const float* bias, float* y, int64_t ldy, bool gelu) {
  if (m <= 0 || w.n <= 0) return;
  const int64_t m_pad = (m + kBlockRows - 1) / kBlockRows * kBlockRows;
  const int64_t blocks = (w.num_panels + 1) / 2;
  const bool stream = StreamOutput(y, ldy, m, w.n);
  ParallelFor(blocks, 1, [&](int64_t b_begin, int64_t b_end) {
    AmxInt8Range(q, ldq, row_scale, m, m_pad, w, bias, gelu, stream, y, ldy, b_begin, b_end);
  });
}

}  // namespace ferry::kernels::cpu
