// AmxAttentionBf16 (declared in amx_gemm.h with the other AMX routes).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/vec_math.h"

#define FERRY_AMX_ATTN_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ferry::kernels::cpu {
namespace {

constexpr int64_t kRows = 16;      // tile rows
constexpr int64_t kPairs = 16;     // bf16 pairs in a tile row (32 K)
constexpr int64_t kTileK = 32;     // K of one tile product
constexpr int64_t kBlock = 32;     // query rows, keys and output columns per 2 x 2 tile block
constexpr int64_t kMaxHeadDim = 256;
constexpr __mmask16 kAll = 0xffff;

// 16 floats to bf16 (round to nearest even), as 16 bit patterns.
FERRY_AMX_ATTN_TARGET inline __m256i ToBf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }

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
FERRY_AMX_ATTN_TARGET float SoftmaxToBf16(const float* s, int64_t tokens, int64_t tp, uint16_t* p) {
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

FERRY_AMX_ATTN_TARGET void AttentionHeads(const AmxAttentionHeads& h) {
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

  ConfigureAmxTiles();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t q_stride = hd * 2, sp_stride = tp * 4, p_stride = tp * 2;
    for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
      // S = Qs · K^T for 32 rows, 32 keys at a time.
      const uint16_t* qa = b.q.data() + g * head_elems + r0 * hd;
      for (int64_t k0 = 0; k0 < tp; k0 += kBlock) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        const uint32_t* kt0 = b.kt.data() + g * head_elems / 2 + (k0 / kRows) * dsteps * kRows * kPairs;
        const uint32_t* kt1 = kt0 + dsteps * kRows * kPairs;
        for (int64_t j = 0; j < dsteps; ++j) {
          _tile_loadd(4, qa + j * kTileK, q_stride);
          _tile_loadd(5, qa + kRows * hd + j * kTileK, q_stride);
          _tile_loadd(6, kt0 + j * kRows * kPairs, 64);
          _tile_loadd(7, kt1 + j * kRows * kPairs, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        float* s = b.s.data() + k0;
        _tile_stored(0, s, sp_stride);
        _tile_stored(1, s + kRows, sp_stride);
        _tile_stored(2, s + kRows * tp, sp_stride);
        _tile_stored(3, s + kRows * tp + kRows, sp_stride);
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
      // O = P · V, 32 columns at a time.
      for (int64_t c0 = 0; c0 < hd; c0 += kBlock) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t ks = 0; ks < tp / kTileK; ++ks) {
          _tile_loadd(4, b.p.data() + ks * kTileK, p_stride);
          _tile_loadd(5, b.p.data() + kRows * tp + ks * kTileK, p_stride);
          _tile_loadd(6, b.v.data() + g * head_elems / 2 + (ks * vcols + c0 / kRows) * kPairs * kRows, 64);
          _tile_loadd(7, b.v.data() + g * head_elems / 2 + (ks * vcols + c0 / kRows + 1) * kPairs * kRows, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        float* o = b.o.data() + c0;
        _tile_stored(0, o, hd * 4);
        _tile_stored(1, o + kRows, hd * 4);
        _tile_stored(2, o + kRows * hd, hd * 4);
        _tile_stored(3, o + kRows * hd + kRows, hd * 4);
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
  _tile_release();
}

}  // namespace

bool AmxAttentionApplies(int head_dim) {
  return AmxEnabled() && head_dim > 0 && head_dim % kBlock == 0 && head_dim <= kMaxHeadDim;
}

void AmxAttentionBf16(const AmxAttentionHeads& h) { AttentionHeads(h); }

}  // namespace ferry::kernels::cpu
