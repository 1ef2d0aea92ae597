// Bf16Attention (declared in amx_gemm.h with the AMX routes): the tile products on AMX, or on
// AVX512-BF16's vdpbf16ps where AMX is off or absent.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/vec_math.h"

#define FERRY_AMX_ATTN_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#define FERRY_BF16_ATTN_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ferry::kernels::cpu {
namespace {

constexpr int64_t kRows = 16;      // tile rows
constexpr int64_t kPairs = 16;     // bf16 pairs in a tile row (32 K)
constexpr int64_t kTileK = 32;     // K of one tile product
constexpr int64_t kBlock = 32;     // query rows, keys and output columns per 2 x 2 tile block
constexpr int64_t kMaxHeadDim = 256;
constexpr __mmask16 kAll = 0xffff;

// 16 floats to bf16 (round to nearest even), as 16 bit patterns.
FERRY_BF16_ATTN_TARGET inline __m256i ToBf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }

// Per-thread buffers, grown to the largest item seen (tp: the tokens rounded up to 32).
struct Buffers {
  std::vector<uint16_t> q;    // per head [tp, hd] bf16, scaled
  std::vector<uint32_t> kt;   // per head, key blocks of 16: [tp / 16][hd / 32] tiles of 16 dim pairs x 16 keys
  std::vector<uint32_t> v;    // per head, key steps of 32: [tp / 32][hd / 16] tiles of 16 key pairs x 16 columns
  std::vector<float> s;       // [32, tp] scores of a row block
  std::vector<uint16_t> p;    // [32, tp] bf16 probabilities
  std::vector<float> o;       // [32, hd]
  std::vector<float> sum;     // [32]
};

template <typename T>
void Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// Softmax of row s[0, tokens) into bf16 p[0, tp) (zeros past tokens); returns the f32 sum of
// the exponentials.
FERRY_BF16_ATTN_TARGET float SoftmaxToBf16(const float* s, int64_t tokens, int64_t tp, uint16_t* p) {
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < tokens; j += 16) {
    const __mmask16 m = tokens - j >= 16 ? kAll : static_cast<__mmask16>((1u << (tokens - j)) - 1u);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, s + j));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, vmax);
  const __m512 mx = _mm512_set1_ps(*std::max_element(lanes, lanes + 16));
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < tp; j += 16) {
    const __mmask16 m = tokens - j >= 16 ? kAll : tokens > j ? static_cast<__mmask16>((1u << (tokens - j)) - 1u) : 0;
    const __m512 e = _mm512_maskz_mov_ps(m, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), mx)));
    vsum = _mm512_add_ps(vsum, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), ToBf16(e));
  }
  _mm512_store_ps(lanes, vsum);
  float sum = 0.0f;
  for (const float v : lanes) sum += v;
  return sum;
}

// One 32 x 32 block of a product, C = sum over `steps` K steps of A_s . B_s, in f32 at c (rows
// ldc floats apart): A_s the 32 rows x 32 bf16 at a + 32 s (rows lda elements apart), B_s two
// tiles of 16 bf16 pairs x 16 columns (64-byte rows), at b + s * b_step and b + s * b_step +
// b1 (in pairs). On AMX: the 2 x 2 tiles of tmm0-3, A in tmm4-5, B in tmm6-7.
FERRY_AMX_ATTN_TARGET void BlockProductAmx(const uint16_t* a, int64_t lda, const uint32_t* b, int64_t b1,
                                           int64_t b_step, int64_t steps, float* c, int64_t ldc) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, a + s * kTileK, lda * 2);
    _tile_loadd(5, a + kRows * lda + s * kTileK, lda * 2);
    _tile_loadd(6, b + s * b_step, 64);
    _tile_loadd(7, b + s * b_step + b1, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + kRows, ldc * 4);
  _tile_stored(2, c + kRows * ldc, ldc * 4);
  _tile_stored(3, c + kRows * ldc + kRows, ldc * 4);
}

// The same block on 512-bit vectors: eight rows at a time, one accumulator per row and B tile,
// each B tile row (16 columns x one pair) loaded once for the eight rows, and each row's pair
// broadcast into vdpbf16ps (what one AMX tile row product does, 16 pairs deep).
constexpr int kVecRows = 8;
FERRY_BF16_ATTN_TARGET void BlockProductAvx512(const uint16_t* a, int64_t lda, const uint32_t* b, int64_t b1,
                                               int64_t b_step, int64_t steps, float* c, int64_t ldc) {
  for (int64_t r0 = 0; r0 < kBlock; r0 += kVecRows) {
    __m512 acc0[kVecRows], acc1[kVecRows];
#pragma GCC unroll 8
    for (int r = 0; r < kVecRows; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (int64_t s = 0; s < steps; ++s) {
      const uint32_t* bs = b + s * b_step;
      const uint16_t* as = a + r0 * lda + s * kTileK;
#pragma GCC unroll 2
      for (int64_t i = 0; i < kPairs; ++i) {
        const __m512bh v0 = (__m512bh)_mm512_loadu_si512(bs + i * kRows);
        const __m512bh v1 = (__m512bh)_mm512_loadu_si512(bs + b1 + i * kRows);
#pragma GCC unroll 8
        for (int r = 0; r < kVecRows; ++r) {
          uint32_t pair;
          std::memcpy(&pair, as + r * lda + 2 * i, sizeof(pair));
          const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
          acc0[r] = _mm512_dpbf16_ps(acc0[r], ar, v0);
          acc1[r] = _mm512_dpbf16_ps(acc1[r], ar, v1);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < kVecRows; ++r) {
      _mm512_storeu_ps(c + (r0 + r) * ldc, acc0[r]);
      _mm512_storeu_ps(c + (r0 + r) * ldc + kRows, acc1[r]);
    }
  }
}

FERRY_AMX_ATTN_TARGET void ReleaseTiles() { _tile_release(); }

FERRY_BF16_ATTN_TARGET void AttentionHeads(const Bf16AttentionHeads& h, bool amx) {
  if (h.tokens <= 0 || h.heads <= 0) return;
  thread_local Buffers b;
  const int64_t hd = h.head_dim, T = h.tokens, G = h.heads;
  const int64_t tp = (T + kBlock - 1) / kBlock * kBlock;
  const int64_t dsteps = hd / kTileK;  // K steps of the scores
  const int64_t vcols = hd / kRows;    // 16-column tiles of V
  const int64_t head_elems = tp * hd;  // one head's q (bf16), K^T and V (bf16 pairs: half as many u32)
  Grow(b.q, G * head_elems);
  Grow(b.kt, G * head_elems / 2);
  Grow(b.v, G * head_elems / 2);
  Grow(b.s, kBlock * tp);
  Grow(b.p, kBlock * tp);
  Grow(b.o, kBlock * hd);
  Grow(b.sum, kBlock);
  // Row by row across the heads, so the reads are the rows' contiguous head ranges.
  const __m512 scale = _mm512_set1_ps(h.scale);
  for (int64_t t = 0; t < tp; ++t) {
    const int64_t kb = t / kRows, key = t % kRows;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t head = h.first_head + g, kv = head / h.group;
      // q scaled and rounded, row-major; zero rows past T.
      uint16_t* qdst = b.q.data() + g * head_elems + t * hd;
      // K as the scores' B tiles: tile (key block kb, step j) row i holds dims 32j + 2i and
      // 32j + 2i + 1 of the block's 16 keys.
      alignas(64) uint16_t row[kMaxHeadDim];
      if (t < T) {
        const float* q = h.q + t * h.ldq + head * hd;
        const float* k = h.k + t * h.ldk + kv * hd;
        for (int64_t d = 0; d < hd; d += 16) {
          const __m256i qv = ToBf16(_mm512_mul_ps(_mm512_loadu_ps(q + d), scale));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(qdst + d), qv);
          _mm256_store_si256(reinterpret_cast<__m256i*>(row + d), ToBf16(_mm512_loadu_ps(k + d)));
        }
      } else {
        for (int64_t d = 0; d < hd; d += 16) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(qdst + d), _mm256_setzero_si256());
          _mm256_store_si256(reinterpret_cast<__m256i*>(row + d), _mm256_setzero_si256());
        }
      }
      const uint32_t* pairs = reinterpret_cast<const uint32_t*>(row);
      uint32_t* kt = b.kt.data() + g * head_elems / 2;
      for (int64_t j = 0; j < dsteps; ++j) {
        uint32_t* tile = kt + (kb * dsteps + j) * kRows * kPairs;
        for (int64_t i = 0; i < kPairs; ++i) tile[i * kRows + key] = pairs[j * kPairs + i];
      }
      // V as P · V's B tiles: tile (key step ks, column block cb) row i holds keys 32ks + 2i
      // and 32ks + 2i + 1 of the block's 16 columns, interleaved.
      if (t % 2 == 0) {
        const int64_t ks = t / kTileK, i = (t % kTileK) / 2;
        const float* v0 = h.v + t * h.ldv + kv * hd;
        uint32_t* vt = b.v.data() + g * head_elems / 2;
        for (int64_t cb = 0; cb < vcols; ++cb) {
          const __m512 lo = t < T ? _mm512_loadu_ps(v0 + cb * 16) : _mm512_setzero_ps();
          const __m512 hi = t + 1 < T ? _mm512_loadu_ps(v0 + h.ldv + cb * 16) : _mm512_setzero_ps();
          const __m512i l32 = _mm512_maskz_cvtepu16_epi32(kAll, ToBf16(lo));
          const __m512i h32 = _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, ToBf16(hi)), 16);
          _mm512_storeu_si512(vt + ((ks * vcols + cb) * kPairs + i) * kRows, _mm512_or_si512(l32, h32));
        }
      }
    }
  }

  const auto block = amx ? BlockProductAmx : BlockProductAvx512;
  if (amx) ConfigureAmxTiles();
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
      // S = Qs . K^T for 32 rows, 32 keys at a time.
      const uint16_t* qa = b.q.data() + g * head_elems + r0 * hd;
      for (int64_t k0 = 0; k0 < tp; k0 += kBlock) {
        const uint32_t* kt0 = b.kt.data() + g * head_elems / 2 + (k0 / kRows) * dsteps * kRows * kPairs;
        block(qa, hd, kt0, dsteps * kRows * kPairs, kRows * kPairs, dsteps, b.s.data() + k0, tp);
      }
      const int64_t rows = std::min(kBlock, T - r0);
      for (int64_t r = 0; r < kBlock; ++r) {
        if (r < rows) {
          b.sum[r] = SoftmaxToBf16(b.s.data() + r * tp, T, tp, b.p.data() + r * tp);
        } else {
          // Query rows past T: zeros (their outputs are never stored; tile rows do not mix).
          uint16_t* p = b.p.data() + r * tp;
          for (int64_t j = 0; j < tp; j += 32) _mm512_storeu_si512(p + j, _mm512_setzero_si512());
        }
      }
      // O = P . V, 32 columns at a time.
      const uint32_t* vg = b.v.data() + g * head_elems / 2;
      for (int64_t c0 = 0; c0 < hd; c0 += kBlock) {
        block(b.p.data(), tp, vg + (c0 / kRows) * kPairs * kRows, kPairs * kRows, vcols * kPairs * kRows, tp / kTileK,
              b.o.data() + c0, hd);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const __m512 inv = _mm512_set1_ps(b.sum[r] > 0.0f ? 1.0f / b.sum[r] : 0.0f);
        float* dst = h.out + (r0 + r) * h.ldo + (h.first_head + g) * hd;
        for (int64_t d = 0; d < hd; d += 16) {
          const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(b.o.data() + r * hd + d), inv);
          if (h.stream) {
            _mm512_stream_ps(dst + d, v);
          } else {
            _mm512_storeu_ps(dst + d, v);
          }
        }
      }
    }
  }
  if (h.stream) _mm_sfence();
  if (amx) ReleaseTiles();
}

bool CpuHasAvx512Bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

std::atomic<bool>& DotSwitch() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("FERRY_BF16_DOT_ATTENTION");
    return Bf16DotSupported() && (v == nullptr || std::strcmp(v, "0") != 0);
  }()};
  return on;
}

}  // namespace

bool Bf16DotSupported() {
  static const bool supported = CpuHasAvx512Bf16();
  return supported;
}
bool Bf16DotAttentionEnabled() { return DotSwitch().load(std::memory_order_relaxed); }
bool SetBf16DotAttentionEnabled(bool enabled) {
  if (enabled && !Bf16DotSupported()) return false;
  DotSwitch().store(enabled, std::memory_order_relaxed);
  return true;
}

bool Bf16AttentionApplies(int head_dim) {
  return (AmxEnabled() || Bf16DotAttentionEnabled()) && head_dim > 0 && head_dim % kBlock == 0 &&
         head_dim <= kMaxHeadDim;
}

void Bf16Attention(const Bf16AttentionHeads& h) { AttentionHeads(h, AmxEnabled()); }

}  // namespace ferry::kernels::cpu
