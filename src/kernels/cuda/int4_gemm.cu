// int4 weight-only GEMM: y[M, N] = act(x[M, K] . W^T + bias), W given as 4-bit values in
// groups along K (kernels/int4_groups.h), packed eight to a 32-bit word along K
// (PackInt4Rows), with an f32 scale and a u8 zero point per (row, group).
//
// Three routes (LtGemm picks one, or the engine's tuned choice does):
//   small M  CUDA cores. Decode is bound by reading the weight, and a 4-bit weight is a
//            quarter of a bf16 one: a warp owns four output rows, its lanes take 32-value
//            (16-byte) chunks of them, expand them in registers, and use them for every
//            activation row, which stay in L1/L2.
//   mma      Tensor cores (WMMA, bf16/f16 in, f32 accumulate) for mid M: a block expands a
//            64 x 128 weight tile into shared memory once (in 16-bit pairs, the scale rounded
//            to the activation type) and multiplies it with a BM x 128
//            activation tile; the next tile's global loads are issued before this tile's
//            MMAs. When the output tiles alone would leave multiprocessors idle (decode-sized
//            M), K is split across blocks and a second pass sums the f32 partials.
//   dequant  (gemm.cc) the weight expanded into scratch, then cuBLASLt: large M, where the
//            expansion is small next to the GEMM.
#include <mma.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"

namespace ferry::cuda::gemm_kernels {

namespace {

using kernels_internal::DispatchAct;
using kernels_internal::FromF32;

// (q - zero) as an exact float: 2^23 + q has q in its low mantissa bits.
__device__ __forceinline__ float Nibble(uint32_t word, int i, float zero_plus_magic) {
  return __uint_as_float(0x4B000000u | ((word >> (4 * i)) & 0xfu)) - zero_plus_magic;
}
constexpr float kMagic = 8388608.0f;  // 2^23

// Eight values of one word expanded to a 16-bit type in pairs, about two instructions a
// value: (q | magic) read as bf16 is 128 + q (f16: 1024 + q), exact; subtracting magic + zero
// leaves q - zero exactly; one multiply by the scale (rounded to the type) rounds once.
// Nibbles 0 and 4 land in one pair, 1 and 5 in the next...; byte permutes put them back in
// K order. Returns the eight values, K order, as 16 bytes.
template <typename T>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr uint32_t kMagicBits = 0x43004300u;  // 128, 128
  static constexpr float kMagicValue = 128.0f;
  static __device__ __forceinline__ T2 Make(float v) { return __float2bfloat162_rn(v); }
};
template <>
struct Pair<__half> {
  using T2 = __half2;
  static constexpr uint32_t kMagicBits = 0x64006400u;  // 1024, 1024
  static constexpr float kMagicValue = 1024.0f;
  static __device__ __forceinline__ T2 Make(float v) { return __float2half2_rn(v); }
};

template <typename T>
__device__ __forceinline__ uint4 Expand8(uint32_t word, typename Pair<T>::T2 magic_zero,
                                         typename Pair<T>::T2 scale) {
  using T2 = typename Pair<T>::T2;
  uint32_t pairs[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t bits = ((word >> (4 * i)) & 0x000f000fu) | Pair<T>::kMagicBits;  // nibbles i and i + 4
    T2 v;
    memcpy(&v, &bits, sizeof(v));
    v = __hmul2(__hsub2(v, magic_zero), scale);
    memcpy(&pairs[i], &v, sizeof(v));
  }
  // pairs[i] = (value i, value i + 4): gather the low halves of 0,1 and 2,3, then the high ones.
  return make_uint4(__byte_perm(pairs[0], pairs[1], 0x5410), __byte_perm(pairs[2], pairs[3], 0x5410),
                    __byte_perm(pairs[0], pairs[1], 0x7632), __byte_perm(pairs[2], pairs[3], 0x7632));
}

// ---------------------------------------------------------------------------------------
// Dequantization: one word (eight values) per thread.

template <typename Out>
__global__ void DequantizeInt4Kernel(const uint32_t* __restrict__ w, int64_t n, int64_t k, int64_t group,
                                     const float* __restrict__ scale, const uint8_t* __restrict__ zero,
                                     Out* __restrict__ out) {
  AwaitPriorGrids();
  const int64_t words = n * (k / 8);
  const int64_t words_per_row = k / 8;
  const int64_t groups = k / group;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / words_per_row;
    const int64_t col = (i % words_per_row) * 8;
    const int64_t g = row * groups + col / group;
    const float s = scale[g];
    const float zm = kMagic + static_cast<float>(zero[g]);
    const uint32_t word = w[i];
    Out v[8];
#pragma unroll
    for (int b = 0; b < 8; ++b) v[b] = FromF32<Out>(Nibble(word, b, zm) * s);
    uint4 bits;
    memcpy(&bits, v, sizeof(bits));
    *reinterpret_cast<uint4*>(out + row * k + col) = bits;
  }
}

// ---------------------------------------------------------------------------------------
// Small M.

// A warp owns kWarpRows output rows: its lanes take 16-byte chunks (32 values) of them in
// turn, with kSmallUnroll chunks of every row loaded before any is used (kWarpRows x
// kSmallUnroll 16-byte loads in flight per lane), expand them in registers and use each
// activation value, loaded once, for all the warp's rows. Partial sums meet in a warp
// shuffle: no shared memory, no block-wide barrier.
constexpr int kSmallWarps = 4;
constexpr int kWarpRows = 4;
constexpr int kSmallThreads = 32 * kSmallWarps;
constexpr int kSmallUnroll = 2;
constexpr int kSmallRowsPerLaunch = 8;

template <typename T, int kRows>
__global__ void __launch_bounds__(kSmallThreads)
    Int4SmallMKernel(const T* __restrict__ x, int64_t ldx, const uint32_t* __restrict__ w,
                     const float* __restrict__ scale, const uint8_t* __restrict__ zero, int64_t n, int64_t k,
                     int64_t group, BiasRef<T> bias, GemmActivation act, T* __restrict__ y, int64_t ldy) {
  {  // the block's packed weight rows, towards L2 while the kernel before this one finishes
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kSmallWarps * kWarpRows;
    const int64_t rows = first < n ? std::min<int64_t>(kSmallWarps * kWarpRows, n - first) : 0;
    PrefetchThenAwait(w + first * (k / 8), rows * (k / 8) * static_cast<int64_t>(sizeof(uint32_t)));
  }
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kSmallWarps + (threadIdx.x >> 5)) * kWarpRows;
  if (row0 >= n) return;
  const int64_t chunks = k / 32;
  const int64_t groups = k / group;
  const uint4* w_rows[kWarpRows];
  const float* s_rows[kWarpRows];
  const uint8_t* z_rows[kWarpRows];
#pragma unroll
  for (int j = 0; j < kWarpRows; ++j) {
    const int64_t row = row0 + j < n ? row0 + j : n - 1;  // past the end: computed, not stored
    w_rows[j] = reinterpret_cast<const uint4*>(w + row * (k / 8));
    s_rows[j] = scale + row * groups;
    z_rows[j] = zero + row * groups;
  }
  float acc[kWarpRows][kRows];
#pragma unroll
  for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = 0.0f;
  }
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kSmallUnroll) {
    uint4 wv[kSmallUnroll][kWarpRows];
    float s[kSmallUnroll][kWarpRows], zm[kSmallUnroll][kWarpRows];
#pragma unroll
    for (int u = 0; u < kSmallUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      const int64_t g = (c * 32) / group;
#pragma unroll
      for (int j = 0; j < kWarpRows; ++j) {
        if (c < chunks) {
          wv[u][j] = __ldg(w_rows[j] + c);
          s[u][j] = __ldg(s_rows[j] + g);
          zm[u][j] = kMagic + static_cast<float>(__ldg(z_rows[j] + g));
        } else {
          wv[u][j] = make_uint4(0, 0, 0, 0);
          s[u][j] = 0.0f;
          zm[u][j] = kMagic;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kSmallUnroll; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= chunks) break;
      // A chunk lies in one group: sum x * (q - zero) over it exactly as floats, then scale once.
      float part[kWarpRows][kRows];
#pragma unroll
      for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) part[j][r] = 0.0f;
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float wf[kWarpRows][16];
#pragma unroll
        for (int j = 0; j < kWarpRows; ++j) {
          const uint32_t lo = half == 0 ? wv[u][j].x : wv[u][j].z;
          const uint32_t hi = half == 0 ? wv[u][j].y : wv[u][j].w;
#pragma unroll
          for (int b = 0; b < 8; ++b) {
            wf[j][b] = Nibble(lo, b, zm[u][j]);
            wf[j][8 + b] = Nibble(hi, b, zm[u][j]);
          }
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float xv[16];
          Load16(x + r * ldx + c * 32 + half * 16, xv);
#pragma unroll
          for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
            for (int e = 0; e < 16; ++e) part[j][r] = fmaf(xv[e], wf[j][e], part[j][r]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[j][r] = fmaf(s[u][j], part[j][r], acc[j][r]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kWarpRows; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = acc[j][r];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == j * kRows + r && row0 + j < n) {
        y[r * ldy + row0 + j] = FromF32<T>(Activate(v + bias.At(row0 + j), act));
      }
    }
  }
}

template <typename T>
Status LaunchSmallM(const void* x, int64_t ldx, int64_t m, const uint32_t* w, const float* scale, const uint8_t* zero,
                    int64_t n, int64_t k, int64_t group, const void* bias, DType bias_dtype, GemmActivation act,
                    void* y, int64_t ldy, cudaStream_t stream) {
  const BiasRef<T> b = MakeBias<T>(bias, bias_dtype);
  const int64_t blocks = (n + kSmallWarps * kWarpRows - 1) / (kSmallWarps * kWarpRows);
  if (blocks > 0x7fffffff) return InvalidArgument("int4 weight-only GEMM: N too large");
  for (int64_t m0 = 0; m0 < m; m0 += kSmallRowsPerLaunch) {
    const int rows = static_cast<int>(std::min<int64_t>(kSmallRowsPerLaunch, m - m0));
    const T* xr = static_cast<const T*>(x) + m0 * ldx;
    T* yr = static_cast<T*>(y) + m0 * ldy;
    const dim3 grid(static_cast<unsigned>(blocks));
    switch (rows) {
#define FERRY_INT4_SMALL_M_CASE(R)                                                                                     \
  case R:                                                                                                              \
    LaunchKernel(Int4SmallMKernel<T, R>, grid, kSmallThreads, 0, stream, xr, ldx, w, scale, zero, n, k, group, b,      \
                 act, yr, ldy);                                                                                        \
    break;
      FERRY_INT4_SMALL_M_CASE(1)
      FERRY_INT4_SMALL_M_CASE(2)
      FERRY_INT4_SMALL_M_CASE(3)
      FERRY_INT4_SMALL_M_CASE(4)
      FERRY_INT4_SMALL_M_CASE(5)
      FERRY_INT4_SMALL_M_CASE(6)
      FERRY_INT4_SMALL_M_CASE(7)
      FERRY_INT4_SMALL_M_CASE(8)
#undef FERRY_INT4_SMALL_M_CASE
      default:
        break;
    }
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Tensor cores.

constexpr int kMmaBN = 64;          // output columns (weight rows) per block
constexpr int kMmaBK = 128;         // K per tile
constexpr int kMmaThreads = 128;    // four warps, each owning 16 of the block's columns
constexpr int kMmaLd = kMmaBK + 8;  // shared row stride in elements: 16-byte aligned rows, banks spread
constexpr int kMmaCLd = kMmaBN + 4;
// Split K until the grid has about this many blocks (eight per SM on a 132-SM H200): each
// block keeps only a tile or two of loads in flight, so the weight streams at the memory's
// rate only with many blocks. The f32 partials cost traffic, so splits stop where they would
// exceed a quarter of the weight's bytes (splits * M * N * 4 <= N * K / 8), and every split
// keeps at least two tiles.
constexpr int64_t kMmaTargetBlocks = 1024;
constexpr int64_t kMmaMinTilesPerSplit = 2;

int MmaBlockM(int64_t m) { return m <= 16 ? 16 : m <= 32 ? 32 : 64; }

int64_t MmaSplits(int64_t m, int64_t n, int64_t k) {
  const int64_t tiles = ((n + kMmaBN - 1) / kMmaBN) * ((m + MmaBlockM(m) - 1) / MmaBlockM(m));
  const int64_t k_tiles = k / kMmaBK;
  const int64_t max_splits =
      std::max<int64_t>(1, std::min(k_tiles / kMmaMinTilesPerSplit, k / (32 * std::max<int64_t>(m, 1))));
  int64_t splits = std::clamp<int64_t>((kMmaTargetBlocks + tiles - 1) / tiles, 1, max_splits);
  // Every split gets whole tiles; drop the splits the rounding leaves empty.
  const int64_t per = (k_tiles + splits - 1) / splits;
  return (k_tiles + per - 1) / per;
}

template <typename T, int BM>
constexpr size_t MmaSharedBytes() {
  const size_t tiles = static_cast<size_t>(BM + kMmaBN) * kMmaLd * sizeof(T);
  const size_t out = static_cast<size_t>(BM) * kMmaCLd * sizeof(float);
  return tiles > out ? tiles : out;
}

template <typename T, int BM>
__global__ void __launch_bounds__(kMmaThreads)
    Int4MmaKernel(const T* __restrict__ x, int64_t ldx, int64_t m, const uint32_t* __restrict__ w,
                  const float* __restrict__ scale, const uint8_t* __restrict__ zero, int64_t n, int64_t k,
                  int64_t group, int64_t k_per_split, BiasRef<T> bias, GemmActivation act, T* __restrict__ y,
                  int64_t ldy, float* __restrict__ partials) {
  AwaitPriorGrids();
  namespace wmma = nvcuda::wmma;
  constexpr int kAChunks = BM * kMmaBK / 8 / kMmaThreads;  // 16-byte activation chunks per thread
  __shared__ __align__(128) unsigned char smem[MmaSharedBytes<T, BM>()];
  T* const sa = reinterpret_cast<T*>(smem);
  T* const sb = sa + BM * kMmaLd;
  float* const sc = reinterpret_cast<float*>(smem);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kMmaBN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * k_per_split;
  const int64_t k_end = k_begin + k_per_split < k ? k_begin + k_per_split : k;
  const int warp = threadIdx.x >> 5;
  const int64_t words_per_row = k / 8;
  const int64_t groups = k / group;
  // The weight tile: thread t expands 64 values of row t / 2, half t % 2 (two 16-byte words).
  const int w_row = threadIdx.x >> 1;
  const int w_half = threadIdx.x & 1;
  const int64_t w_global_row = n0 + w_row;
  const bool w_valid = w_global_row < n;

  using T2 = typename Pair<T>::T2;
  uint4 a_regs[kAChunks];
  uint4 w_regs[2];
  float w_scale[2], w_zm[2];  // the scale, and magic + zero, as floats
  const auto load_tile = [&](int64_t k0) {
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      const int chunk = threadIdx.x + i * kMmaThreads;
      const int r = chunk / (kMmaBK / 8);
      const int c = (chunk % (kMmaBK / 8)) * 8;
      a_regs[i] = m0 + r < m ? *reinterpret_cast<const uint4*>(x + (m0 + r) * ldx + k0 + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t kk = k0 + w_half * 64 + h * 32;
      if (w_valid) {
        w_regs[h] = __ldg(reinterpret_cast<const uint4*>(w + w_global_row * words_per_row + kk / 8));
        const int64_t g = w_global_row * groups + kk / group;
        w_scale[h] = __ldg(scale + g);
        w_zm[h] = Pair<T>::kMagicValue + static_cast<float>(__ldg(zero + g));
      } else {
        w_regs[h] = make_uint4(0, 0, 0, 0);
        w_scale[h] = 0.0f;
        w_zm[h] = Pair<T>::kMagicValue;
      }
    }
  };
  const auto store_tile = [&]() {
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      const int chunk = threadIdx.x + i * kMmaThreads;
      const int r = chunk / (kMmaBK / 8);
      const int c = (chunk % (kMmaBK / 8)) * 8;
      *reinterpret_cast<uint4*>(&sa[r * kMmaLd + c]) = a_regs[i];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t words[4] = {w_regs[h].x, w_regs[h].y, w_regs[h].z, w_regs[h].w};
      const T2 magic_zero = Pair<T>::Make(w_zm[h]);
      const T2 s2 = Pair<T>::Make(w_scale[h]);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        *reinterpret_cast<uint4*>(&sb[w_row * kMmaLd + w_half * 64 + h * 32 + q * 8]) =
            Expand8<T>(words[q], magic_zero, s2);
      }
    }
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[BM / 16];
#pragma unroll
  for (int i = 0; i < BM / 16; ++i) wmma::fill_fragment(acc[i], 0.0f);

  if (k_begin < k_end) load_tile(k_begin);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kMmaBK) {
    store_tile();
    __syncthreads();
    if (k0 + kMmaBK < k_end) load_tile(k0 + kMmaBK);  // in flight during this tile's MMAs
#pragma unroll
    for (int kk = 0; kk < kMmaBK; kk += 16) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
      wmma::load_matrix_sync(b, &sb[(warp * 16) * kMmaLd + kk], kMmaLd);
#pragma unroll
      for (int i = 0; i < BM / 16; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, &sa[(i * 16) * kMmaLd + kk], kMmaLd);
        wmma::mma_sync(acc[i], a, b, acc[i]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < BM / 16; ++i) {
    wmma::store_matrix_sync(&sc[(i * 16) * kMmaCLd + warp * 16], acc[i], kMmaCLd, wmma::mem_row_major);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < BM * kMmaBN; i += kMmaThreads) {
    const int r = i / kMmaBN;
    const int c = i % kMmaBN;
    const int64_t row = m0 + r, col = n0 + c;
    if (row >= m || col >= n) continue;
    const float v = sc[r * kMmaCLd + c];
    if (partials != nullptr) {
      partials[(static_cast<int64_t>(blockIdx.z) * m + row) * n + col] = v;
    } else {
      y[row * ldy + col] = FromF32<T>(Activate(v + bias.At(col), act));
    }
  }
}

template <typename T>
__global__ void SplitSumKernel(const float* __restrict__ partials, int64_t splits, int64_t m, int64_t n,
                               BiasRef<T> bias, GemmActivation act, T* __restrict__ y, int64_t ldy) {
  AwaitPriorGrids();
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = 0.0f;
    for (int64_t s = 0; s < splits; ++s) v += partials[s * total + i];  // fixed order: deterministic
    const int64_t col = i % n;
    y[(i / n) * ldy + col] = FromF32<T>(Activate(v + bias.At(col), act));
  }
}

template <typename T, int BM>
Status LaunchMma(const void* x, int64_t ldx, int64_t m, const uint32_t* w, const float* scale, const uint8_t* zero,
                 int64_t n, int64_t k, int64_t group, const void* bias, DType bias_dtype, GemmActivation act, void* y,
                 int64_t ldy, float* partials, cudaStream_t stream) {
  const BiasRef<T> b = MakeBias<T>(bias, bias_dtype);
  const int64_t splits = MmaSplits(m, n, k);
  const int64_t k_tiles = k / kMmaBK;
  const int64_t k_per_split = (k_tiles + splits - 1) / splits * kMmaBK;
  const int64_t grid_n = (n + kMmaBN - 1) / kMmaBN;
  const int64_t grid_m = (m + BM - 1) / BM;
  if (grid_n > 0x7fffffff || grid_m > 65535) return InvalidArgument("int4 tensor-core GEMM: problem too large");
  const dim3 grid(static_cast<unsigned>(grid_n), static_cast<unsigned>(grid_m), static_cast<unsigned>(splits));
  LaunchKernel(Int4MmaKernel<T, BM>, grid, kMmaThreads, 0, stream, static_cast<const T*>(x), ldx, m, w, scale, zero,
               n, k, group, k_per_split, b, act, static_cast<T*>(y), ldy, splits > 1 ? partials : nullptr);
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  if (splits > 1) {
    const int64_t blocks = std::clamp<int64_t>((m * n + 255) / 256, 1, 8192);
    LaunchKernel(SplitSumKernel<T>, static_cast<unsigned>(blocks), 256, 0, stream, partials, splits, m, n, b, act,
                 static_cast<T*>(y), ldy);
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  return Status::Ok();
}

template <typename F>
Status DispatchHalf(DType dtype, const char* what, F&& f) {
  if (dtype == DType::kBF16) return f(__nv_bfloat16{});
  if (dtype == DType::kF16) return f(__half{});
  return InvalidArgument(std::string(what) + " takes bf16 or f16, not " + std::string(DTypeName(dtype)));
}

}  // namespace

bool Int4Supported(const void* x, DType x_dtype, int64_t ldx, const void* w, int64_t k, int64_t group) {
  using kernels_internal::Aligned;
  return (x_dtype == DType::kBF16 || x_dtype == DType::kF16) && k % 32 == 0 && group > 0 && group % 32 == 0 &&
         k % group == 0 && Aligned(x, 16) && Aligned(w, 16) && (ldx * 2) % 16 == 0;
}

Status DequantizeInt4Rows(const uint32_t* w, int64_t n, int64_t k, int64_t group, const float* scale,
                          const uint8_t* zero, void* out, DType out_dtype, cudaStream_t stream) {
  if (n == 0 || k == 0) return Status::Ok();
  if (k % 8 != 0 || group <= 0 || k % group != 0 || group % 8 != 0 || !kernels_internal::Aligned(out, 16)) {
    return InvalidArgument("int4 dequantization needs K % 8 == 0, a group dividing K and a 16-byte aligned output");
  }
  return DispatchHalf(out_dtype, "int4 dequantization", [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t words = n * (k / 8);
    const int blocks = static_cast<int>(std::clamp<int64_t>((words + 255) / 256, 1, 8192));
    LaunchKernel(DequantizeInt4Kernel<T>, blocks, 256, 0, stream, w, n, k, group, scale, zero, static_cast<T*>(out));
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

Status Int4SmallM(const void* x, DType x_dtype, int64_t ldx, int64_t m, const uint32_t* w, const float* scale,
                  const uint8_t* zero, int64_t n, int64_t k, int64_t group, const void* bias, DType bias_dtype,
                  GemmActivation act, void* y, int64_t ldy, cudaStream_t stream) {
  if (!Int4Supported(x, x_dtype, ldx, w, k, group)) {
    return InvalidArgument(
        "int4 weight-only small-M kernel needs bf16/f16 activations, K and the group size "
        "multiples of 32, and 16-byte aligned rows");
  }
  if (m == 0) return Status::Ok();
  return DispatchHalf(x_dtype, "int4 weight-only small-M kernel", [&](auto tag) {
    return LaunchSmallM<decltype(tag)>(x, ldx, m, w, scale, zero, n, k, group, bias, bias_dtype, act, y, ldy, stream);
  });
}

bool Int4MmaSupported(const void* x, DType x_dtype, int64_t ldx, const void* w, int64_t k, int64_t group) {
  return Int4Supported(x, x_dtype, ldx, w, k, group) && k % kMmaBK == 0;
}

size_t Int4MmaScratchBytes(int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k < kMmaBK) return 0;
  const int64_t splits = MmaSplits(m, n, k);
  return splits > 1 ? static_cast<size_t>(splits * m * n) * sizeof(float) : 0;
}

Status Int4Mma(const void* x, DType x_dtype, int64_t ldx, int64_t m, const uint32_t* w, const float* scale,
               const uint8_t* zero, int64_t n, int64_t k, int64_t group, const void* bias, DType bias_dtype,
               GemmActivation act, void* y, int64_t ldy, float* partials, cudaStream_t stream) {
  if (!Int4MmaSupported(x, x_dtype, ldx, w, k, group)) {
    return InvalidArgument(
        "int4 tensor-core kernel needs bf16/f16 activations, K a multiple of 128, a group size "
        "that is a multiple of 32, and 16-byte aligned rows");
  }
  if (m == 0) return Status::Ok();
  if (MmaSplits(m, n, k) > 1 && partials == nullptr) return InvalidArgument("int4 tensor-core kernel needs scratch");
  return DispatchHalf(x_dtype, "int4 tensor-core kernel", [&](auto tag) -> Status {
    using T = decltype(tag);
    switch (MmaBlockM(m)) {
      case 16:
        return LaunchMma<T, 16>(x, ldx, m, w, scale, zero, n, k, group, bias, bias_dtype, act, y, ldy, partials,
                                stream);
      case 32:
        return LaunchMma<T, 32>(x, ldx, m, w, scale, zero, n, k, group, bias, bias_dtype, act, y, ldy, partials,
                                stream);
      default:
        return LaunchMma<T, 64>(x, ldx, m, w, scale, zero, n, k, group, bias, bias_dtype, act, y, ldy, partials,
                                stream);
    }
  });
}

}  // namespace ferry::cuda::gemm_kernels
