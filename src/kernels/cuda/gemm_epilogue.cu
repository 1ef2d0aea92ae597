// The kernels around cuBLASLt GEMMs: dequantizing epilogues (int32 / f32 accumulators with
// per-row and per-column scales, bias, GELU), bias + activation in place, int8 weight
// dequantization, and the fused small-M kernel (int8 weight-only, dense bf16 / f16).
#include <algorithm>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/launch.h"

namespace ferry::cuda::gemm_kernels {

namespace {

constexpr int kThreads = 256;
// Grid-stride kernels stop growing the grid here: enough blocks to fill any current GPU.
constexpr int64_t kMaxBlocks = 8192;

int GridFor(int64_t items, int threads = kThreads) {
  return static_cast<int>(std::clamp<int64_t>((items + threads - 1) / threads, 1, kMaxBlocks));
}

using kernels_internal::DispatchAct;
using kernels_internal::FromF32;
using kernels_internal::ToF32;


// ---------------------------------------------------------------------------------------
// Scale epilogue: y = act(acc * xs * ws + bias)

// Rows over blockIdx.y (grid-stride), kVec-wide column groups over x: no divisions.
template <typename Acc, typename Out, int kVec>
__global__ void ScaleEpilogueKernel(const Acc* __restrict__ acc, int64_t m, int64_t n, const float* __restrict__ xs,
                                    bool per_row, const float* __restrict__ ws, bool per_col, BiasRef<Out> bias,
                                    GemmActivation act, Out* __restrict__ y, int64_t ldy) {
  AwaitPriorGrids();
  for (int64_t row = blockIdx.y; row < m; row += gridDim.y) {
    const float row_scale = xs != nullptr ? xs[per_row ? row : 0] : 1.0f;
    for (int64_t col = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * kVec; col < n;
         col += static_cast<int64_t>(gridDim.x) * blockDim.x * kVec) {
      Acc a[kVec];
      if constexpr (kVec == 4) {
        // 16-byte loads: acc is dense with n % 4 == 0 and a 16-byte aligned base.
        static_assert(sizeof(Acc) == 4);
        const int4 v = *reinterpret_cast<const int4*>(acc + row * n + col);
        memcpy(a, &v, sizeof(v));
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) a[i] = acc[row * n + col + i];
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float col_scale = ws != nullptr ? ws[per_col ? col + i : 0] : 1.0f;
        const float v = ScaleAndBias(ToF32(a[i]), row_scale, col_scale, bias.At(col + i));
        y[row * ldy + col + i] = FromF32<Out>(Activate(v, act));
      }
    }
  }
}

// Blocks for a row-major [m, groups] pass: columns on x, rows on y (capped; kernels stride).
dim3 Grid2d(int64_t m, int64_t groups) {
  const int64_t x = std::clamp<int64_t>((groups + kThreads - 1) / kThreads, 1, 64);
  const int64_t y = std::clamp<int64_t>(m, 1, std::max<int64_t>(1, kMaxBlocks / x));
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(std::min<int64_t>(y, 65535)));
}

template <typename Acc, typename Out>
Status LaunchScaleEpilogue(const void* acc, int64_t m, int64_t n, const float* xs, bool per_row, const float* ws,
                           bool per_col, const void* bias, DType bias_dtype, GemmActivation act, void* y, int64_t ldy,
                           cudaStream_t stream) {
  const auto* a = static_cast<const Acc*>(acc);
  auto* out = static_cast<Out*>(y);
  const BiasRef<Out> b = MakeBias<Out>(bias, bias_dtype);
  const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(acc) % 16 == 0;
  if (vec) {
    LaunchKernel(ScaleEpilogueKernel<Acc, Out, 4>, Grid2d(m, n / 4), kThreads, 0, stream, a, m, n, xs, per_row, ws,
                 per_col, b, act, out, ldy);
  } else {
    LaunchKernel(ScaleEpilogueKernel<Acc, Out, 1>, Grid2d(m, n), kThreads, 0, stream, a, m, n, xs, per_row, ws,
                 per_col, b, act, out, ldy);
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

template <typename Acc>
Status DispatchScaleEpilogueOut(const void* acc, int64_t m, int64_t n, const float* xs, bool per_row,
                                const float* ws, bool per_col, const void* bias, DType bias_dtype,
                                GemmActivation act, void* y, DType y_dtype, int64_t ldy, cudaStream_t stream) {
  return DispatchAct(y_dtype, "GEMM scale epilogue output", [&](auto tag) {
    return LaunchScaleEpilogue<Acc, decltype(tag)>(acc, m, n, xs, per_row, ws, per_col, bias, bias_dtype, act, y, ldy,
                                                   stream);
  });
}

// ---------------------------------------------------------------------------------------
// Bias + activation in place

// kVec columns per thread: 16-byte loads and stores when the rows allow them.
template <typename Out, int kVec>
__global__ void BiasActivationKernel(Out* __restrict__ y, int64_t m, int64_t n, int64_t ldy, BiasRef<Out> bias,
                                     GemmActivation act) {
  AwaitPriorGrids();
  for (int64_t row = blockIdx.y; row < m; row += gridDim.y) {
    for (int64_t col = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * kVec; col < n;
         col += static_cast<int64_t>(gridDim.x) * blockDim.x * kVec) {
      Out* p = y + row * ldy + col;
      float v[kVec];
      kernels_internal::LoadF32<Out, kVec>(p, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[i] = Activate(v[i] + bias.At(col + i), act);
      kernels_internal::StoreF32<Out, kVec>(p, v);
    }
  }
}

template <typename Out>
Status LaunchBiasActivation(void* y, int64_t m, int64_t n, int64_t ldy, const void* bias, DType bias_dtype,
                            GemmActivation act, cudaStream_t stream) {
  constexpr int kVec = kernels_internal::kVec16<Out>;
  auto* out = static_cast<Out*>(y);
  const BiasRef<Out> b = MakeBias<Out>(bias, bias_dtype);
  if (n % kVec == 0 && ldy % kVec == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0) {
    LaunchKernel(BiasActivationKernel<Out, kVec>, Grid2d(m, n / kVec), kThreads, 0, stream, out, m, n, ldy, b, act);
  } else {
    LaunchKernel(BiasActivationKernel<Out, 1>, Grid2d(m, n), kThreads, 0, stream, out, m, n, ldy, b, act);
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Int8 row dequantization: out[r, c] = w[r, c] * scale[r]

template <typename Out>
__global__ void DequantizeRowsKernel(const int8_t* __restrict__ w, int64_t n, int64_t k,
                                     const float* __restrict__ scale, Out* __restrict__ out) {
  AwaitPriorGrids();
  const int64_t total = n * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromF32<Out>(static_cast<float>(w[i]) * scale[i / k]);
  }
}

// Eight weights per thread: one 8-byte load, 16 or 32 bytes stored. Needs k % 8 == 0.
template <typename Out>
__global__ void DequantizeRows8Kernel(const int8_t* __restrict__ w, int64_t n, int64_t k,
                                      const float* __restrict__ scale, Out* __restrict__ out) {
  AwaitPriorGrids();
  const int64_t groups = n * k / 8;
  const int64_t groups_per_row = k / 8;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float s = scale[g / groups_per_row];
    const uint2 packed = *reinterpret_cast<const uint2*>(w + g * 8);
    Out v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t word = i < 4 ? packed.x : packed.y;
      const auto q = static_cast<int8_t>((word >> (8 * (i % 4))) & 0xffu);
      v[i] = FromF32<Out>(static_cast<float>(q) * s);
    }
    if constexpr (sizeof(Out) == 2) {
      uint4 bits;
      memcpy(&bits, v, sizeof(bits));
      *reinterpret_cast<uint4*>(out + g * 8) = bits;
    } else {
      float4 lo, hi;
      memcpy(&lo, v, sizeof(lo));
      memcpy(&hi, v + 4, sizeof(hi));
      reinterpret_cast<float4*>(out + g * 8)[0] = lo;
      reinterpret_cast<float4*>(out + g * 8)[1] = hi;
    }
  }
}

template <typename Out>
Status LaunchDequantize(const int8_t* w, int64_t n, int64_t k, const float* scale, void* out, cudaStream_t stream) {
  const bool vec = k % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % (8 * sizeof(Out)) == 0;
  if (vec) {
    LaunchKernel(DequantizeRows8Kernel<Out>, GridFor(n * k / 8), kThreads, 0, stream, w, n, k, scale,
                 static_cast<Out*>(out));
  } else {
    LaunchKernel(DequantizeRowsKernel<Out>, GridFor(n * k), kThreads, 0, stream, w, n, k, scale,
                 static_cast<Out*>(out));
  }
  FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Small M: int8 weight-only and dense bf16 / f16 weights. Decode is bandwidth-bound on the
// weight, so each block owns kSmallMCols output channels and its threads split K in chunks
// of 16 weights (16 bytes of int8, 32 of bf16): every weight byte is read once (four rows
// in flight per thread, 64 to 128 bytes), converted in registers, and used for all kRows
// activation rows, which stay in L1/L2. Per-thread partial sums meet in a warp shuffle and
// one shared-memory pass.

constexpr int kSmallMCols = 4;
constexpr int kSmallMThreads = 128;
constexpr int kSmallMRowsPerLaunch = 8;

// 16 int8 weights as f32 without integer-to-float conversions (which issue at a quarter of
// the FMA rate and bound a decode GEMV on int8 weights): each byte, biased to 0..255, becomes
// the low mantissa byte of 2^23 (a float whose value is 2^23 + byte), and one exact subtraction
// of 2^23 + 128 gives the signed weight. One byte permute and one add per weight.
__device__ __forceinline__ void Int8x16ToF32(const int4 v, float (&out)[16]) {
  const uint32_t words[4] = {static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y), static_cast<uint32_t>(v.z),
                             static_cast<uint32_t>(v.w)};
  constexpr uint32_t kExponent = 0x4B000000u;  // 2^23
  constexpr float kOffset = 8388736.0f;        // 2^23 + 128
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t biased = words[i] ^ 0x80808080u;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      // Result bytes: biased byte b, 0x00, 0x00, 0x4B (bytes 4-7 are kExponent's).
      const uint32_t bits = __byte_perm(biased, kExponent, 0x7540u | static_cast<uint32_t>(b));
      out[4 * i + b] = __uint_as_float(bits) - kOffset;
    }
  }
}

// Chunk c (16 weights) of one weight row, as f32.
__device__ __forceinline__ void LoadWeights16(const int8_t* row, int64_t c, float (&out)[16]) {
  Int8x16ToF32(__ldg(reinterpret_cast<const int4*>(row) + c), out);
}
// e4m3 weights: 16 bytes widened pairwise (each pair through f16, exact for e4m3).
__device__ __forceinline__ void LoadWeights16(const __nv_fp8_e4m3* row, int64_t c, float (&out)[16]) {
  const int4 v = __ldg(reinterpret_cast<const int4*>(row) + c);
  const uint32_t words[4] = {static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y), static_cast<uint32_t>(v.z),
                             static_cast<uint32_t>(v.w)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw pair =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * h)), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&pair));
      out[4 * i + 2 * h] = f.x;
      out[4 * i + 2 * h + 1] = f.y;
    }
  }
}
template <typename W>
__device__ __forceinline__ void LoadWeights16(const W* row, int64_t c, float (&out)[16]) {
  Load16(row + c * 16, out);
}

// W: int8_t or e4m3 (scale per output channel) or T itself (dense, scale null). kXMul: each
// input column is multiplied by x_mul[k] first (a W8A8 weight's 1 / SmoothQuant factors).
template <typename T, typename W, int kRows, bool kXMul = false>
__global__ void __launch_bounds__(kSmallMThreads, 3)
    SmallMKernel(const T* __restrict__ x, int64_t ldx, const W* __restrict__ w, const float* __restrict__ scale,
                 int64_t n, int64_t k, BiasRef<T> bias, GemmActivation act, T* __restrict__ y, int64_t ldy,
                 const float* __restrict__ x_mul) {
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kSmallMCols;
  // The block's weight rows do not depend on earlier kernels: start them towards L2 while
  // the kernel before this one finishes.
  PrefetchThenAwait(w + n0 * k, (std::min<int64_t>(n0 + kSmallMCols, n) - n0) * k * static_cast<int64_t>(sizeof(W)));
  const int64_t chunks = k / 16;
  float acc[kSmallMCols][kRows];
#pragma unroll
  for (int j = 0; j < kSmallMCols; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = 0.0f;
  }
  const W* w_rows[kSmallMCols];
#pragma unroll
  for (int j = 0; j < kSmallMCols; ++j) {
    // Past the last channel, re-read the last row: computed, never stored.
    const int64_t row = n0 + j < n ? n0 + j : n - 1;
    w_rows[j] = w + row * k;
  }
  for (int64_t c = threadIdx.x; c < chunks; c += kSmallMThreads) {
    float wf[kSmallMCols][16];
#pragma unroll
    for (int j = 0; j < kSmallMCols; ++j) LoadWeights16(w_rows[j], c, wf[j]);
    float xm[kXMul ? 16 : 1];
    if constexpr (kXMul) Load16(x_mul + c * 16, xm);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float xv[16];
      Load16(x + r * ldx + c * 16, xv);
      if constexpr (kXMul) {
#pragma unroll
        for (int e = 0; e < 16; ++e) xv[e] *= xm[e];
      }
#pragma unroll
      for (int j = 0; j < kSmallMCols; ++j) {
#pragma unroll
        for (int e = 0; e < 16; ++e) acc[j][r] = fmaf(xv[e], wf[j][e], acc[j][r]);
      }
    }
  }

  __shared__ float partial[kSmallMThreads / 32][kSmallMCols * kRows];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < kSmallMCols; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = acc[j][r];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) partial[warp][j * kRows + r] = v;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kSmallMCols * kRows; i += kSmallMThreads) {
    const int j = i / kRows;
    const int r = i % kRows;
    const int64_t col = n0 + j;
    if (col >= n) continue;
    float sum = 0.0f;
#pragma unroll
    for (int wp = 0; wp < kSmallMThreads / 32; ++wp) sum += partial[wp][i];
    const float v = (scale != nullptr ? sum * scale[col] : sum) + bias.At(col);
    y[r * ldy + col] = FromF32<T>(Activate(v, act));
  }
}

template <typename T, typename W, bool kXMul = false>
Status LaunchSmallM(const void* x, int64_t ldx, int64_t m, const W* w, const float* scale, int64_t n, int64_t k,
                    const void* bias, DType bias_dtype, GemmActivation act, void* y, int64_t ldy,
                    cudaStream_t stream, const float* x_mul = nullptr) {
  const BiasRef<T> b = MakeBias<T>(bias, bias_dtype);
  const int64_t blocks = (n + kSmallMCols - 1) / kSmallMCols;
  if (blocks > 0x7fffffff) return InvalidArgument("small-M GEMM: N too large");
  for (int64_t m0 = 0; m0 < m; m0 += kSmallMRowsPerLaunch) {
    const int rows = static_cast<int>(std::min<int64_t>(kSmallMRowsPerLaunch, m - m0));
    const T* xr = static_cast<const T*>(x) + m0 * ldx;
    T* yr = static_cast<T*>(y) + m0 * ldy;
    const dim3 grid(static_cast<unsigned>(blocks));
    switch (rows) {
#define FERRY_SMALL_M_CASE(R)                                                                          \
  case R:                                                                                              \
    LaunchKernel(SmallMKernel<T, W, R, kXMul>, grid, kSmallMThreads, 0, stream, xr, ldx, w, scale, n, k, \
                 b, act, yr, ldy, x_mul);                                                              \
    break;
      FERRY_SMALL_M_CASE(1)
      FERRY_SMALL_M_CASE(2)
      FERRY_SMALL_M_CASE(3)
      FERRY_SMALL_M_CASE(4)
      FERRY_SMALL_M_CASE(5)
      FERRY_SMALL_M_CASE(6)
      FERRY_SMALL_M_CASE(7)
      FERRY_SMALL_M_CASE(8)
#undef FERRY_SMALL_M_CASE
      default:
        break;
    }
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  return Status::Ok();
}

}  // namespace

Status ScaleEpilogue(const void* acc, DType acc_dtype, int64_t m, int64_t n, const float* x_scale, bool per_row,
                     const float* w_scale, bool per_col, const void* bias, DType bias_dtype, GemmActivation act,
                     void* y, DType y_dtype, int64_t ldy, cudaStream_t stream) {
  if (m == 0 || n == 0) return Status::Ok();
  if (acc_dtype == DType::kI32) {
    return DispatchScaleEpilogueOut<int32_t>(acc, m, n, x_scale, per_row, w_scale, per_col, bias, bias_dtype, act, y,
                                             y_dtype, ldy, stream);
  }
  if (acc_dtype == DType::kF32) {
    return DispatchScaleEpilogueOut<float>(acc, m, n, x_scale, per_row, w_scale, per_col, bias, bias_dtype, act, y,
                                           y_dtype, ldy, stream);
  }
  return InvalidArgument("GEMM scale epilogue reads i32 or f32 accumulators, not " +
                         std::string(DTypeName(acc_dtype)));
}

Status BiasActivation(void* y, DType y_dtype, int64_t m, int64_t n, int64_t ldy, const void* bias, DType bias_dtype,
                      GemmActivation act, cudaStream_t stream) {
  if (m == 0 || n == 0 || (bias == nullptr && act == GemmActivation::kNone)) return Status::Ok();
  return DispatchAct(y_dtype, "GEMM bias/activation output", [&](auto tag) {
    return LaunchBiasActivation<decltype(tag)>(y, m, n, ldy, bias, bias_dtype, act, stream);
  });
}

Status DequantizeInt8Rows(const int8_t* w, int64_t n, int64_t k, const float* scale, void* out, DType out_dtype,
                          cudaStream_t stream) {
  if (n == 0 || k == 0) return Status::Ok();
  return DispatchAct(out_dtype, "int8 dequantization output", [&](auto tag) {
    return LaunchDequantize<decltype(tag)>(w, n, k, scale, out, stream);
  });
}

bool SmallMSupported(const void* x, DType x_dtype, int64_t ldx, const int8_t* w, int64_t k) {
  using kernels_internal::Aligned;
  const bool float_type = x_dtype == DType::kF32 || x_dtype == DType::kBF16 || x_dtype == DType::kF16;
  return float_type && k % 16 == 0 && Aligned(x, 16) && Aligned(w, 16) &&
         (ldx * static_cast<int64_t>(DTypeSize(x_dtype))) % 16 == 0;
}

Status Int8WeightOnlySmallM(const void* x, DType x_dtype, int64_t ldx, int64_t m, const int8_t* w,
                            const float* scale, int64_t n, int64_t k, const void* bias, DType bias_dtype,
                            GemmActivation act, void* y, int64_t ldy, cudaStream_t stream) {
  if (!SmallMSupported(x, x_dtype, ldx, w, k)) {
    return InvalidArgument("int8 weight-only small-M kernel needs K % 16 == 0 and 16-byte aligned rows");
  }
  if (m == 0) return Status::Ok();
  return DispatchAct(x_dtype, "int8 weight-only small-M kernel", [&](auto tag) {
    return LaunchSmallM<decltype(tag)>(x, ldx, m, w, scale, n, k, bias, bias_dtype, act, y, ldy, stream);
  });
}

Status Fp8WeightOnlySmallM(const void* x, DType x_dtype, int64_t ldx, int64_t m, const void* w, const float* scale,
                           int64_t n, int64_t k, const void* bias, DType bias_dtype, GemmActivation act, void* y,
                           int64_t ldy, cudaStream_t stream) {
  if (!SmallMSupported(x, x_dtype, ldx, static_cast<const int8_t*>(w), k)) {
    return InvalidArgument("fp8 weight-only small-M kernel needs K % 16 == 0 and 16-byte aligned rows");
  }
  if (scale == nullptr) return InvalidArgument("fp8 weight-only small-M kernel needs the per-channel scales");
  if (m == 0) return Status::Ok();
  return DispatchAct(x_dtype, "fp8 weight-only small-M kernel", [&](auto tag) {
    return LaunchSmallM<decltype(tag)>(x, ldx, m, static_cast<const __nv_fp8_e4m3*>(w), scale, n, k, bias,
                                       bias_dtype, act, y, ldy, stream);
  });
}

Status Int8SmoothedSmallM(const void* x, DType x_dtype, int64_t ldx, int64_t m, const int8_t* w, const float* scale,
                          const float* inv_smooth, int64_t n, int64_t k, const void* bias, DType bias_dtype,
                          GemmActivation act, void* y, int64_t ldy, cudaStream_t stream) {
  if (inv_smooth == nullptr) {
    return Int8WeightOnlySmallM(x, x_dtype, ldx, m, w, scale, n, k, bias, bias_dtype, act, y, ldy, stream);
  }
  if (!SmallMSupported(x, x_dtype, ldx, w, k) || !kernels_internal::Aligned(inv_smooth, 16)) {
    return InvalidArgument("int8 small-M kernel needs K % 16 == 0 and 16-byte aligned rows and factors");
  }
  if (m == 0) return Status::Ok();
  return DispatchAct(x_dtype, "int8 small-M kernel", [&](auto tag) {
    return LaunchSmallM<decltype(tag), int8_t, true>(x, ldx, m, w, scale, n, k, bias, bias_dtype, act, y, ldy, stream,
                                                     inv_smooth);
  });
}

bool DenseSmallMSupported(const void* x, DType dtype, int64_t ldx, const void* w, int64_t k) {
  using kernels_internal::Aligned;
  return (dtype == DType::kBF16 || dtype == DType::kF16) && k % 16 == 0 && Aligned(x, 16) && Aligned(w, 16) &&
         (ldx * static_cast<int64_t>(DTypeSize(dtype))) % 16 == 0;
}

Status DenseSmallM(const void* x, DType dtype, int64_t ldx, int64_t m, const void* w, int64_t n, int64_t k,
                   const void* bias, DType bias_dtype, GemmActivation act, void* y, int64_t ldy, cudaStream_t stream) {
  if (!DenseSmallMSupported(x, dtype, ldx, w, k)) {
    return InvalidArgument("dense small-M kernel needs bf16 or f16, K % 16 == 0 and 16-byte aligned rows");
  }
  if (m == 0) return Status::Ok();
  if (dtype == DType::kBF16) {
    return LaunchSmallM<__nv_bfloat16>(x, ldx, m, static_cast<const __nv_bfloat16*>(w), nullptr, n, k, bias,
                                       bias_dtype, act, y, ldy, stream);
  }
  return LaunchSmallM<__half>(x, ldx, m, static_cast<const __half*>(w), nullptr, n, k, bias, bias_dtype, act, y, ldy,
                              stream);
}

}  // namespace ferry::cuda::gemm_kernels
