#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_checks.h"
#include "kernels/cpu/tile_rows.h"
#include "kernels/cpu/vec_math.h"

namespace ferry::kernels::cpu {
namespace {


constexpr int kKeyChunk = 64;    // keys per online-softmax step (S tile = rows x 64)
// Query rows (tokens x heads of a group) per work item: a multiple of the 6-row register
// tile for the common group sizes (1, 2, 3, 4, 8 ...), large enough to amortize the key
// transposes, small enough to leave many items for the threads.
constexpr int kTargetRows = 96;
// Up to this many rows, scores are plain dot products (no key transpose); decode lives here.
constexpr int kDotRows = 8;

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A run of keys of one KV head: `count` tokens, rows `stride` elements apart.
template <typename KT>
struct KeyRun {
  const KT* k;
  const KT* v;
  int64_t k_stride;
  int64_t v_stride;
  int count;
};

// Keys of a span in the paged cache: chunks never cross a block.
template <typename KT>
struct PagedKeys {
  const KT* k;
  const KT* v;
  int64_t kv_heads;
  int64_t block_tokens;
  int64_t head_dim;

  // Whether every run starts at a multiple of `m` keys into a chunk.
  bool RunsAligned(int m) const { return block_tokens % m == 0; }

  KeyRun<KT> Get(const SeqSpan& s, int64_t h, int64_t j0, int64_t end) const {
    const int64_t block = j0 / block_tokens;
    const int64_t offset = j0 % block_tokens;
    const int64_t count = std::min<int64_t>({block_tokens - offset, kKeyChunk, end - j0});
    const int64_t base = ((static_cast<int64_t>(s.block_table[block]) * kv_heads + h) * block_tokens + offset) *
                         head_dim;
    return {k + base, v + base, head_dim, head_dim, static_cast<int>(count)};
  }
};

// Keys of a span packed as rows [q_begin, q_begin + q_len) of k/v.
struct DenseKeys {
  const float* k;
  const float* v;
  int64_t ldk;
  int64_t ldv;
  int64_t head_dim;

  bool RunsAligned(int) const { return true; }  // one run per chunk

  KeyRun<float> Get(const SeqSpan& s, int64_t h, int64_t j0, int64_t end) const {
    const int64_t row = s.q_begin + j0;
    const int count = static_cast<int>(std::min<int64_t>(kKeyChunk, end - j0));
    return {k + row * ldk + h * head_dim, v + row * ldv + h * head_dim, ldk, ldv, count};
  }
};

struct WorkItem {
  int32_t span;
  int32_t kv_head;
  int32_t t_begin;  // query rows [t_begin, t_end) of the span
  int32_t t_end;
  int64_t cost;
};

struct Geometry {
  int num_heads;
  int kv_heads;
  int group;
  int head_dim;
  int64_t head_dim_pad;  // O and padded V rows: a multiple of 16 for the micro-kernel
  float scale;
  bool causal;
  int window;     // 0: none
  float softcap;  // 0: none
};

// Per-thread scratch, grown to the high-water mark and then reused.
struct Scratch {
  std::vector<float> q, o, s, kt, v, m, l;
  std::vector<int64_t> limit, lower;
};

template <typename T>
void Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// 8x8 transpose of f32 registers (rows r[0..7] -> columns).
inline void Transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Transposes a run of keys into columns [first, first + count) of 16-key micro-panels:
// kt[p][d][c] holds key p*16 + c, so S = Q·K^T is a plain micro-kernel call. `first` is a
// multiple of 8 whenever head_dim is (see RunsAligned).
template <typename KT>
void TransposeKeys(const KeyRun<KT>& run, int head_dim, int first, float* kt) {
  auto column = [&](int j) {
    const int c = first + j;
    return kt + static_cast<int64_t>(c / kPanelCols) * head_dim * kPanelCols + c % kPanelCols;
  };
  int j0 = 0;
  if (head_dim % 8 == 0 && first % 8 == 0) {
    for (; j0 + 8 <= run.count; j0 += 8) {
      float* dst = column(j0);
      for (int d0 = 0; d0 < head_dim; d0 += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = Load8(run.k + static_cast<int64_t>(j0 + i) * run.k_stride + d0);
        Transpose8x8(r);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (d0 + i) * kPanelCols, r[i]);
      }
    }
  }
  for (int j = j0; j < run.count; ++j) {
    float* dst = column(j);
    const KT* src = run.k + static_cast<int64_t>(j) * run.k_stride;
    for (int d = 0; d < head_dim; ++d) dst[d * kPanelCols] = ToFloat(src[d]);
  }
}

// Zeroes key columns [count, count_pad) so padded scores are finite (they are masked).
inline void ZeroKeyColumns(int count, int count_pad, int head_dim, float* kt) {
  for (int c = count; c < count_pad; ++c) {
    float* dst = kt + static_cast<int64_t>(c / kPanelCols) * head_dim * kPanelCols + c % kPanelCols;
    for (int d = 0; d < head_dim; ++d) dst[d * kPanelCols] = 0.0f;
  }
}

// S[r][j] = q_r · k_j for R <= kDotRows rows by dot products straight from the cache: with
// so few rows a transpose would cost more than the scores. head_dim % 8 == 0.
template <int R, typename KT>
void DotScores(const float* q, int head_dim, const KeyRun<KT>& run, float* s, int64_t lds) {
  for (int j = 0; j < run.count; ++j) {
    const KT* k = run.k + static_cast<int64_t>(j) * run.k_stride;
    __m256 acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int d = 0; d < head_dim; d += 8) {
      const __m256 kv = Load8(k + d);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * head_dim + d), kv, acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) s[r * lds + j] = HSum(acc[r]);
  }
}

template <typename KT>
void DotScoresRows(int rows, const float* q, int head_dim, const KeyRun<KT>& run, float* s, int64_t lds) {
  switch (rows) {
    case 1: return DotScores<1>(q, head_dim, run, s, lds);
    case 2: return DotScores<2>(q, head_dim, run, s, lds);
    case 3: return DotScores<3>(q, head_dim, run, s, lds);
    case 4: return DotScores<4>(q, head_dim, run, s, lds);
    case 5: return DotScores<5>(q, head_dim, run, s, lds);
    case 6: return DotScores<6>(q, head_dim, run, s, lds);
    case 7: return DotScores<7>(q, head_dim, run, s, lds);
    default: return DotScores<8>(q, head_dim, run, s, lds);
  }
}

// The AVX-512 form of the attention tiles: C[0:R, 0:16 V] (+)= A[0:R, 0:kc] · B, A row-major
// (lda); B is V blocks of 16 columns `bstep` floats apart, each with its rows ldb apart (key
// micro-panels, or V rows in place). Each element is one FMA chain over k in order from zero, then C (accumulate) or
// +0 is added: the arithmetic of the AVX2 micro-kernel's tiles of three rows and more, so
// those rows get the same bytes.
template <int R, int V>
__attribute__((target("avx512f"))) void AttentionTile512(int64_t kc, const float* a, int64_t lda, const float* b,
                                                          int64_t ldb, int64_t bstep, float* c, int64_t ldc,
                                                          bool accumulate) {
  __m512 acc[R][V];
#pragma GCC unroll 12
  for (int m = 0; m < R; ++m) {
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[m][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) bv[v] = _mm512_loadu_ps(b + k * ldb + v * bstep);
#pragma GCC unroll 12
    for (int m = 0; m < R; ++m) {
      const __m512 am = _mm512_set1_ps(a[m * lda + k]);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[m][v] = _mm512_fmadd_ps(am, bv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 12
  for (int m = 0; m < R; ++m) {
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      float* cm = c + m * ldc + kPanelCols * v;
      const __m512 prev = accumulate ? _mm512_loadu_ps(cm) : _mm512_setzero_ps();
      _mm512_storeu_ps(cm, _mm512_add_ps(acc[m][v], prev));
    }
  }
}

template <int V>
void AttentionTileRows512(int rows, int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t bstep,
                          float* c, int64_t ldc, bool accumulate) {
  WithTileRows<3, 12>(rows, [&](auto mr) {
    AttentionTile512<decltype(mr)::value, V>(kc, a, lda, b, ldb, bstep, c, ldc, accumulate);
  });
}

// C[0:rows, 0:16 panels] (+)= A · B for B in `panels` (1 or 2) blocks of 16 columns `bstep`
// elements apart. AVX-512 tiles of up to 12 rows for f32 B; the AVX2 micro-kernel for the
// baseline, for 16-bit V read in place, and for the rows the AVX2 kernel would leave in a last
// tile of one or two rows (where it sums k in two chains), so both give the same bytes.
template <typename BT>
void AttentionTiles(bool wide, int rows, int64_t kc, const float* a, int64_t lda, const BT* b, int64_t ldb,
                    int64_t bstep, int panels, float* c, int64_t ldc, bool accumulate) {
  int r0 = 0;
  if (std::is_same_v<BT, float> && wide) {
    constexpr int kWideRows = 12;
    const int last = rows % kMaxTileRows <= 2 ? rows % kMaxTileRows : 0;
    // Every tile below has 3 rows or more: rows - last is a multiple of 6 or leaves 3-5.
    for (; r0 < rows - last; r0 += kWideRows) {
      const int r = std::min(kWideRows, rows - last - r0);
      const float* ar = a + static_cast<int64_t>(r0) * lda;
      const float* br = reinterpret_cast<const float*>(b);
      if (panels == 2) {
        AttentionTileRows512<2>(r, kc, ar, lda, br, ldb, bstep, c + r0 * ldc, ldc, accumulate);
      } else {
        AttentionTileRows512<1>(r, kc, ar, lda, br, ldb, bstep, c + r0 * ldc, ldc, accumulate);
      }
    }
    r0 = rows - last;
  }
  for (int p = 0; p < panels; ++p) {
    for (int r = r0; r < rows; r += kMaxTileRows) {
      MicroKernelRows(std::min(kMaxTileRows, rows - r), kc, a + static_cast<int64_t>(r) * lda, lda, b + p * bstep, ldb,
                      c + r * ldc + p * kPanelCols, ldc, kPanelCols, accumulate, nullptr);
    }
  }
}

// Online-softmax update of one row of S (in place into P) over `width` (a multiple of 8)
// columns, of which columns [lo, valid) are real scores. Returns the factor the row's running
// output must be rescaled by.
inline float SoftmaxRow(float* s, int lo, int valid, int width, float& m, float& l) {
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 vmax = neg_inf;
  for (int j = 0; j < width; j += 8) {
    __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(valid - j), lane));
    if (lo > j) {
      const __m256 above = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(lo - j - 1)));
      keep = _mm256_and_ps(keep, above);
    }
    const __m256 v = _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(s + j), keep);
    _mm256_storeu_ps(s + j, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  const float m_new = std::max(m, HMax(vmax));
  const __m256 vm = _mm256_set1_ps(m_new);
  __m256 vsum = _mm256_setzero_ps();
  for (int j = 0; j < width; j += 8) {
    // Masked lanes are -inf and come out of Exp as exactly 0.
    const __m256 p = Exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    _mm256_storeu_ps(s + j, p);
    vsum = _mm256_add_ps(vsum, p);
  }
  const float alpha = m == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m - m_new);
  l = l * alpha + HSum(vsum);
  m = m_new;
  return alpha;
}

// SoftmaxRow on 16 lanes: the same masks, maximum and exponentials per element, and the row
// sum folded into eight lanes in SoftmaxRow's order (each 16-lane block as its two halves),
// so the same bytes.
__attribute__((target("avx512f"))) float SoftmaxRow512(float* s, int lo, int valid, int width, float& m, float& l) {
  const float neg_inf_f = -std::numeric_limits<float>::infinity();
  const __m512 neg_inf = _mm512_set1_ps(neg_inf_f);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 vmax = neg_inf;
  for (int j = 0; j < width; j += 16) {
    const __mmask16 in = width - j >= 16 ? kAllLanes : static_cast<__mmask16>(0x00ff);
    __mmask16 keep = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(valid - j), lane);
    if (lo > j) keep &= _mm512_cmpgt_epi32_mask(lane, _mm512_set1_epi32(lo - j - 1));
    const __m512 v = _mm512_mask_blend_ps(keep, neg_inf, _mm512_maskz_loadu_ps(in, s + j));
    _mm512_mask_storeu_ps(s + j, in, v);
    vmax = Max512(vmax, v);
  }
  alignas(64) float lanes_max[16];
  _mm512_store_ps(lanes_max, vmax);
  const float m_new = std::max(m, *std::max_element(lanes_max, lanes_max + 16));
  const __m512 vm = _mm512_set1_ps(m_new);
  __m256 vsum = _mm256_setzero_ps();
  for (int j = 0; j < width; j += 16) {
    const __mmask16 in = width - j >= 16 ? kAllLanes : static_cast<__mmask16>(0x00ff);
    const __m512 p = Exp(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, in, s + j), vm));
    _mm512_mask_storeu_ps(s + j, in, p);
    vsum = _mm256_add_ps(vsum, _mm256_loadu_ps(s + j));
    if (in == kAllLanes) vsum = _mm256_add_ps(vsum, _mm256_loadu_ps(s + j + 8));
  }
  const float alpha = m == neg_inf_f ? 0.0f : std::exp(m - m_new);
  l = l * alpha + HSum(vsum);
  m = m_new;
  return alpha;
}

// Up to kKeyChunk consecutive keys of one KV head, as runs of contiguous rows; run i fills
// columns [first[i], first[i] + runs[i].count) of the score tile.
template <typename KT>
struct Chunk {
  KeyRun<KT> runs[kKeyChunk];
  int first[kKeyChunk];
  int num_runs = 0;
  int count = 0;
};

template <typename KT, typename Keys>
void NextChunk(const Keys& keys, const SeqSpan& span, int64_t kv_head, int64_t j0, int64_t key_end, bool merge,
               Chunk<KT>& chunk) {
  chunk.num_runs = 0;
  chunk.count = 0;
  const int64_t end = std::min<int64_t>(key_end, j0 + kKeyChunk);
  while (j0 + chunk.count < end) {
    const KeyRun<KT> run = keys.Get(span, kv_head, j0 + chunk.count, end);
    chunk.first[chunk.num_runs] = chunk.count;
    chunk.runs[chunk.num_runs++] = run;
    chunk.count += run.count;
    if (!merge) break;
  }
}

template <typename KT, typename Keys>
void RunItem(const WorkItem& item, const RowMajor& qm, const SeqSpan& span, const Keys& keys, const Geometry& g,
             const RowMajor& om, Scratch& sc) {
  const int group = g.group;
  const int hd = g.head_dim;
  const int64_t hdp = g.head_dim_pad;
  const int rows = (item.t_end - item.t_begin) * group;
  Grow(sc.q, static_cast<int64_t>(rows) * hd);
  Grow(sc.o, rows * hdp);
  Grow(sc.s, static_cast<int64_t>(rows) * kKeyChunk);
  Grow(sc.kt, kKeyChunk * static_cast<int64_t>(hd));
  Grow(sc.v, kKeyChunk * hdp);
  Grow(sc.m, rows);
  Grow(sc.l, rows);
  Grow(sc.limit, rows);
  Grow(sc.lower, rows);

  // Row r is query token t_begin + r / group, head kv_head * group + r % group.
  const int64_t first_pos = static_cast<int64_t>(span.context_len) - span.q_len;
  int64_t max_limit = -1;
  int64_t min_lower = std::numeric_limits<int64_t>::max();
  for (int r = 0; r < rows; ++r) {
    const int64_t t = item.t_begin + r / group;
    const int64_t h = static_cast<int64_t>(item.kv_head) * group + r % group;
    const float* src = qm.data + (span.q_begin + t) * qm.ld + h * hd;
    float* dst = sc.q.data() + static_cast<int64_t>(r) * hd;
    for (int d = 0; d < hd; ++d) dst[d] = src[d] * g.scale;
    std::fill(sc.o.data() + r * hdp, sc.o.data() + (r + 1) * hdp, 0.0f);
    sc.m[r] = -std::numeric_limits<float>::infinity();
    sc.l[r] = 0.0f;
    const int64_t pos = first_pos + t;
    if (g.causal) {
      sc.limit[r] = pos;
      sc.lower[r] = g.window > 0 ? std::max<int64_t>(0, pos - g.window + 1) : 0;
    } else {
      // Bidirectional: a window is a half-width, keys at [pos - window, pos + window].
      sc.limit[r] = g.window > 0 ? std::min<int64_t>(span.context_len - 1, pos + g.window) : span.context_len - 1;
      sc.lower[r] = g.window > 0 ? std::max<int64_t>(0, pos - g.window) : 0;
    }
    max_limit = std::max(max_limit, sc.limit[r]);
    min_lower = std::min(min_lower, sc.lower[r]);
  }
  const int64_t key_end = std::min<int64_t>(span.context_len, max_limit + 1);
  // With a sliding window the keys before every row's window are skipped; the start stays a
  // multiple of 8 so that chunk runs stay aligned.
  const int64_t key_begin = rows > 0 ? std::min(min_lower, key_end) / 8 * 8 : 0;
  // V is read in place when its rows can feed the micro-kernel directly; otherwise (a
  // head_dim that is not a multiple of 16, or 16-bit values reused by several row tiles)
  // the chunk is widened/padded once into scratch.
  const bool v_in_place = hd % kPanelCols == 0 && (std::is_same_v<KT, float> || rows <= kMaxTileRows);
  const bool dot_scores = rows <= kDotRows && hd % 8 == 0;
  const bool wide = ActiveGemmKernel() == GemmKernel::kAvx512;

  // A chunk gathers up to kKeyChunk keys from consecutive runs (cache blocks) so that the
  // softmax bookkeeping is paid per 64 keys even with small blocks. Runs are merged only
  // when every run boundary stays 8-aligned, which the vectorized transpose needs.
  const bool merge_runs = keys.RunsAligned(8);
  Chunk<KT> chunk;
  if (key_begin < key_end) NextChunk(keys, span, item.kv_head, key_begin, key_end, merge_runs, chunk);
  for (int64_t j0 = key_begin; j0 < key_end;) {
    const int count = chunk.count;
    const int count_pad = static_cast<int>(RoundUp(count, kPanelCols));
    if (dot_scores) {
      for (int i = 0; i < chunk.num_runs; ++i) {
        DotScoresRows(rows, sc.q.data(), hd, chunk.runs[i], sc.s.data() + chunk.first[i], kKeyChunk);
      }
    } else {
      for (int i = 0; i < chunk.num_runs; ++i) TransposeKeys(chunk.runs[i], hd, chunk.first[i], sc.kt.data());
      ZeroKeyColumns(count, count_pad, hd, sc.kt.data());
      // S[rows, count_pad] = Qs · K^T, two key micro-panels at a time.
      const int key_panels = count_pad / kPanelCols;
      for (int p = 0; p < key_panels; p += 2) {
        AttentionTiles(wide, rows, hd, sc.q.data(), hd, sc.kt.data() + static_cast<int64_t>(p) * hd * kPanelCols,
                       kPanelCols, static_cast<int64_t>(hd) * kPanelCols, std::min(2, key_panels - p),
                       sc.s.data() + p * kPanelCols, kKeyChunk, false);
      }
    }
    const int width = static_cast<int>(RoundUp(count, 8));
    for (int r = 0; r < rows; ++r) {
      float* srow = sc.s.data() + static_cast<int64_t>(r) * kKeyChunk;
      const int valid = static_cast<int>(std::clamp<int64_t>(sc.limit[r] - j0 + 1, 0, count));
      const int lo = static_cast<int>(std::clamp<int64_t>(sc.lower[r] - j0, 0, count));
      if (valid <= lo) {
        std::fill(srow, srow + count, 0.0f);
        continue;
      }
      if (g.softcap > 0.0f) {
        const float inv = 1.0f / g.softcap;
        for (int j = lo; j < valid; ++j) srow[j] = g.softcap * std::tanh(srow[j] * inv);
      }
      const float alpha = wide ? SoftmaxRow512(srow, lo, valid, width, sc.m[r], sc.l[r])
                               : SoftmaxRow(srow, lo, valid, width, sc.m[r], sc.l[r]);
      if (alpha != 1.0f) {
        float* o = sc.o.data() + r * hdp;
        const __m256 va = _mm256_set1_ps(alpha);
        for (int64_t d = 0; d < hdp; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), va));
      }
    }
    // O[rows, hd] += P · V
    if (v_in_place) {
      for (int i = 0; i < chunk.num_runs; ++i) {
        const KeyRun<KT>& run = chunk.runs[i];
        for (int64_t c0 = 0; c0 < hd; c0 += 2 * kPanelCols) {
          AttentionTiles(wide, rows, run.count, sc.s.data() + chunk.first[i], kKeyChunk, run.v + c0, run.v_stride,
                         kPanelCols, hd - c0 > kPanelCols ? 2 : 1, sc.o.data() + c0, hdp, true);
        }
      }
    } else {
      float* vs = sc.v.data();
      for (int i = 0; i < chunk.num_runs; ++i) {
        const KeyRun<KT>& run = chunk.runs[i];
        for (int j = 0; j < run.count; ++j) {
          const KT* src = run.v + static_cast<int64_t>(j) * run.v_stride;
          float* dst = vs + (chunk.first[i] + j) * hdp;
          for (int d = 0; d < hd; ++d) dst[d] = ToFloat(src[d]);
          for (int64_t d = hd; d < hdp; ++d) dst[d] = 0.0f;
        }
      }
      for (int64_t c0 = 0; c0 < hdp; c0 += 2 * kPanelCols) {
        AttentionTiles(wide, rows, count, sc.s.data(), kKeyChunk, vs + c0, hdp, kPanelCols,
                       hdp - c0 > kPanelCols ? 2 : 1, sc.o.data() + c0, hdp, true);
      }
    }
    j0 += count;
    if (j0 < key_end) NextChunk(keys, span, item.kv_head, j0, key_end, merge_runs, chunk);
  }

  for (int r = 0; r < rows; ++r) {
    const int64_t t = item.t_begin + r / group;
    const int64_t h = static_cast<int64_t>(item.kv_head) * group + r % group;
    float* dst = om.data + (span.q_begin + t) * om.ld + h * hd;
    const float* o = sc.o.data() + r * hdp;
    // A row that saw no keys (empty context) outputs zeros rather than 0/0.
    const float inv = sc.l[r] > 0.0f ? 1.0f / sc.l[r] : 0.0f;
    for (int d = 0; d < hd; ++d) dst[d] = o[d] * inv;
  }
}

Status CheckCommon(const char* op, const RowMajor& qm, const AttentionParams& p, std::span<const SeqSpan> spans) {
  const std::string name(op);
  if (p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0) {
    return InvalidArgument(name + ": num_heads, num_kv_heads and head_dim must be positive");
  }
  if (p.num_heads % p.num_kv_heads != 0) {
    return InvalidArgument(name + ": num_heads " + std::to_string(p.num_heads) + " is not a multiple of num_kv_heads " +
                           std::to_string(p.num_kv_heads));
  }
  if (p.window < 0 || p.softcap < 0.0f) return InvalidArgument(name + ": window and softcap must not be negative");
  if (qm.cols != static_cast<int64_t>(p.num_heads) * p.head_dim) {
    return InvalidArgument(name + ": q width " + std::to_string(qm.cols) + " != num_heads * head_dim");
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    const SeqSpan& s = spans[i];
    if (s.q_begin < 0 || s.q_len < 0 || static_cast<int64_t>(s.q_begin) + s.q_len > qm.rows) {
      return InvalidArgument(name + ": span " + std::to_string(i) + " rows [" + std::to_string(s.q_begin) + ", +" +
                             std::to_string(s.q_len) + ") exceed q's " + std::to_string(qm.rows) + " rows");
    }
  }
  return Status::Ok();
}

Geometry MakeGeometry(const AttentionParams& p) {
  Geometry g;
  g.num_heads = p.num_heads;
  g.kv_heads = p.num_kv_heads;
  g.group = p.num_heads / p.num_kv_heads;
  g.head_dim = p.head_dim;
  g.head_dim_pad = RoundUp(p.head_dim, kPanelCols);
  g.scale = p.scale;
  g.causal = p.causal;
  g.window = p.window;
  g.softcap = p.softcap;
  return g;
}

// One item per (span, KV head, query tile), ordered by decreasing cost for balance.
std::vector<WorkItem> MakeItems(std::span<const SeqSpan> spans, const Geometry& g, bool dense) {
  const int tile = std::max(1, kTargetRows / g.group);
  std::vector<WorkItem> items;
  for (size_t i = 0; i < spans.size(); ++i) {
    const SeqSpan& s = spans[i];
    const int64_t context = dense ? s.q_len : s.context_len;
    for (int32_t t0 = 0; t0 < s.q_len; t0 += tile) {
      const int32_t t1 = std::min(s.q_len, t0 + tile);
      int64_t keys = g.causal ? std::min<int64_t>(context, context - s.q_len + t1) : context;
      if (g.window > 0) keys = std::min<int64_t>(keys, (t1 - t0) + (g.causal ? 1 : 2) * int64_t{g.window});
      for (int32_t h = 0; h < g.kv_heads; ++h) {
        items.push_back({static_cast<int32_t>(i), h, t0, t1, (t1 - t0) * (keys + kKeyChunk)});
      }
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; });
  return items;
}

template <typename KT, typename Keys>
void RunAll(const std::vector<WorkItem>& items, std::span<const SeqSpan> spans, const RowMajor& qm,
            const Keys& keys, const Geometry& g, const RowMajor& om) {
  ParallelForDynamic(static_cast<int64_t>(items.size()), [&](int64_t i) {
    thread_local Scratch scratch;
    const WorkItem& item = items[static_cast<size_t>(i)];
    RunItem<KT>(item, qm, spans[static_cast<size_t>(item.span)], keys, g, om, scratch);
  });
}

}  // namespace

Status PagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int block_tokens,
                      std::span<const SeqSpan> spans, const AttentionParams& params, Tensor& out) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor qm, CheckRows("PagedAttention: q", q, -1, -1));
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows("PagedAttention: out", out, qm.rows, qm.cols));
  FERRY_RETURN_IF_ERROR(CheckCommon("PagedAttention", qm, params, spans));
  FERRY_RETURN_IF_ERROR(CheckKvCache(k_cache, v_cache, block_tokens));
  if (RowsOverlap(qm, om)) return InvalidArgument("PagedAttention: out must not alias q");
  if (k_cache.dim(1) != params.num_kv_heads || k_cache.dim(3) != params.head_dim) {
    return InvalidArgument("PagedAttention: cache " + k_cache.DebugString() + " does not match num_kv_heads " +
                           std::to_string(params.num_kv_heads) + " / head_dim " + std::to_string(params.head_dim));
  }
  const int64_t num_blocks = k_cache.dim(0);
  for (size_t i = 0; i < spans.size(); ++i) {
    const SeqSpan& s = spans[i];
    if (s.context_len < s.q_len) {
      return InvalidArgument("PagedAttention: span " + std::to_string(i) + " has context_len " +
                             std::to_string(s.context_len) + " < q_len " + std::to_string(s.q_len));
    }
    const int64_t blocks = (static_cast<int64_t>(s.context_len) + block_tokens - 1) / block_tokens;
    if (blocks > 0 && s.block_table == nullptr) {
      return InvalidArgument("PagedAttention: span " + std::to_string(i) + " has no block table");
    }
    for (int64_t b = 0; b < blocks; ++b) {
      if (s.block_table[b] < 0 || s.block_table[b] >= num_blocks) {
        return InvalidArgument("PagedAttention: span " + std::to_string(i) + " block " + std::to_string(b) + " is " +
                               std::to_string(s.block_table[b]) + ", outside the cache's " +
                               std::to_string(num_blocks) + " blocks");
      }
    }
  }
  const Geometry g = MakeGeometry(params);
  const std::vector<WorkItem> items = MakeItems(spans, g, false);
  switch (k_cache.dtype()) {
    case DType::kF32:
      RunAll<float>(items, spans, qm,
                    PagedKeys<float>{k_cache.data<float>(), v_cache.data<float>(), g.kv_heads, block_tokens, g.head_dim},
                    g, om);
      break;
    case DType::kBF16:
      RunAll<Bf16>(items, spans, qm,
                   PagedKeys<Bf16>{k_cache.data<Bf16>(), v_cache.data<Bf16>(), g.kv_heads, block_tokens, g.head_dim},
                   g, om);
      break;
    default:
      RunAll<F16>(items, spans, qm,
                  PagedKeys<F16>{k_cache.data<F16>(), v_cache.data<F16>(), g.kv_heads, block_tokens, g.head_dim}, g,
                  om);
      break;
  }
  return Status::Ok();
}

namespace {

Status DenseAttentionViews(const RowMajor& qm, const RowMajor& km, const RowMajor& vm,
                           std::span<const SeqSpan> spans, const AttentionParams& params, const RowMajor& om) {
  const Geometry g = MakeGeometry(params);
  if (params.bf16_products && !params.causal && params.window == 0 && params.softcap == 0.0f &&
      Bf16AttentionApplies(params.head_dim)) {
    // One item per (span, run of heads), longest spans first. A span's heads go together
    // (its rows are read once, front to back) unless that leaves too few items for the threads.
    const int64_t per_item = std::clamp<int64_t>(
        static_cast<int64_t>(spans.size()) * g.num_heads / (4 * ComputeThreads()), 1, g.num_heads);
    std::vector<std::pair<int32_t, int32_t>> items;
    for (size_t i = 0; i < spans.size(); ++i) {
      for (int32_t h = 0; h < g.num_heads; h += static_cast<int32_t>(per_item)) {
        items.emplace_back(static_cast<int32_t>(i), h);
      }
    }
    std::stable_sort(items.begin(), items.end(),
                     [&](const auto& a, const auto& b) { return spans[a.first].q_len > spans[b.first].q_len; });
    // A large output goes out with non-temporal stores, as the AMX GEMMs' do.
    const bool stream = om.rows * om.cols * static_cast<int64_t>(sizeof(float)) >= (int64_t{4} << 20) &&
                        om.ld % 16 == 0 && reinterpret_cast<uintptr_t>(om.data) % 64 == 0;
    ParallelForDynamic(static_cast<int64_t>(items.size()), [&](int64_t i) {
      const auto [si, h] = items[static_cast<size_t>(i)];
      const SeqSpan& s = spans[static_cast<size_t>(si)];
      Bf16Attention({qm.data + s.q_begin * qm.ld, km.data + s.q_begin * km.ld, vm.data + s.q_begin * vm.ld,
                        om.data + s.q_begin * om.ld, qm.ld, km.ld, vm.ld, om.ld, s.q_len, g.head_dim, h,
                        static_cast<int>(std::min<int64_t>(per_item, g.num_heads - h)), g.group, g.scale,
                        stream});
    });
    return Status::Ok();
  }
  // The dense path sees each span as a sequence of its own: context = its rows.
  std::vector<SeqSpan> dense_spans(spans.begin(), spans.end());
  for (SeqSpan& s : dense_spans) s.context_len = s.q_len;
  const std::vector<WorkItem> items = MakeItems(dense_spans, g, true);
  RunAll<float>(items, dense_spans, qm, DenseKeys{km.data, vm.data, km.ld, vm.ld, g.head_dim}, g, om);
  return Status::Ok();
}

}  // namespace

Status DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, std::span<const SeqSpan> spans,
                      const AttentionParams& params, Tensor& out) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor qm, CheckRows("DenseAttention: q", q, -1, -1));
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows("DenseAttention: out", out, qm.rows, qm.cols));
  FERRY_RETURN_IF_ERROR(CheckCommon("DenseAttention", qm, params, spans));
  const int64_t kv_width = static_cast<int64_t>(params.num_kv_heads) * params.head_dim;
  FERRY_ASSIGN_OR_RETURN(const RowMajor km, CheckRows("DenseAttention: k", k, qm.rows, kv_width));
  FERRY_ASSIGN_OR_RETURN(const RowMajor vm, CheckRows("DenseAttention: v", v, qm.rows, kv_width));
  if (RowsOverlap(qm, om) || RowsOverlap(km, om) || RowsOverlap(vm, om)) {
    return InvalidArgument("DenseAttention: out must not alias q, k or v");
  }
  return DenseAttentionViews(qm, km, vm, spans, params, om);
}

Status DenseAttentionQkv(const Tensor& qkv, std::span<const SeqSpan> spans, const AttentionParams& params,
                         Tensor& out) {
  if (params.num_heads <= 0 || params.num_kv_heads <= 0 || params.head_dim <= 0) {
    return InvalidArgument("DenseAttentionQkv: num_heads, num_kv_heads and head_dim must be positive");
  }
  const int64_t q_width = static_cast<int64_t>(params.num_heads) * params.head_dim;
  const int64_t kv_width = static_cast<int64_t>(params.num_kv_heads) * params.head_dim;
  FERRY_ASSIGN_OR_RETURN(const RowMajor all, CheckRows("DenseAttentionQkv: qkv", qkv, -1, q_width + 2 * kv_width));
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows("DenseAttentionQkv: out", out, all.rows, q_width));
  const RowMajor qm{all.data, all.rows, q_width, all.ld};
  const RowMajor km{all.data + q_width, all.rows, kv_width, all.ld};
  const RowMajor vm{all.data + q_width + kv_width, all.rows, kv_width, all.ld};
  FERRY_RETURN_IF_ERROR(CheckCommon("DenseAttentionQkv", qm, params, spans));
  if (RowsOverlap(all, om)) return InvalidArgument("DenseAttentionQkv: out must not alias qkv");
  return DenseAttentionViews(qm, km, vm, spans, params, om);
}

}  // namespace ferry::kernels::cpu
