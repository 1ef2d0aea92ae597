// Device-side building blocks shared by the element-wise, norm, RoPE, KV-cache,
// quantization, sampling and GEMM epilogue kernels: f32 widening/rounding of every storage type, 16-byte
// vector access, block reductions, and host-side dtype dispatch and launch sizing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::cuda::kernels_internal {

// ---- scalar conversions (f32 <-> storage), all rounding to nearest even ----

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToF32(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float ToF32(int32_t v) { return static_cast<float>(v); }  // GEMM accumulators

template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// Saturating (+-448, as core/dtype.h's F32ToF8E4M3); NaN stays NaN.
template <>
__device__ __forceinline__ __nv_fp8_e4m3 FromF32<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// ---- activations ----

// The exact GELU, 0.5 x erfc(-x / sqrt(2)), for the passes that apply it to whole
// activations (BERT's FFN, GeGLU, GEMM epilogues). erfc(z) for z >= 0 is t exp(-z^2 + P(t))
// with t = 1 / (1 + z / 2) and P a degree-9 Chebyshev fit (fractional error under 1.2e-7,
// about float32's rounding), and erfc(-z) = 2 - erfc(z). That is one exponential and a
// dozen FMAs, against about three times as many instructions for erfcf, which made these
// passes compute-bound on an H200. Written through erfc, so the negative tail keeps its
// relative precision (1 + erf would cancel there).
__device__ __forceinline__ float GeluErf(float x) {
  const float z = fabsf(x) * 0.70710678118654752f;
  const float t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  const float erfc_z = t * __expf(fmaf(-z, z, p));
  return 0.5f * x * (x >= 0.0f ? 2.0f - erfc_z : erfc_z);
}

// transformers' gelu_pytorch_tanh, 0.5 x (1 + tanh(z)), as x / (1 + e^-2z) (no cancellation
// in the negative tail).
__device__ __forceinline__ float GeluTanh(float x) {
  return x / (1.0f + expf(-2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

// The gate's activation of a gated MLP: out = act(gate) * up (SwiGLU, GeGLU).
enum GatedAct { kGatedSilu, kGatedGeluTanh, kGatedGelu };
template <int kAct>
__device__ __forceinline__ float GatedActivation(float x) {
  if constexpr (kAct == kGatedGeluTanh) return GeluTanh(x);
  if constexpr (kAct == kGatedGelu) return GeluErf(x);
  return x / (1.0f + expf(-x));  // SiLU
}

// ---- vector access ----

// N elements of T moved as one aligned access (16 bytes for the usual N = 16 / sizeof(T)).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> LoadVec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void Widen(const Vec<T, N>& a, float (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = ToF32(a.v[i]);
}

template <typename T, int N>
__device__ __forceinline__ void LoadF32(const T* p, float (&out)[N]) {
  Widen(LoadVec<T, N>(p), out);
}

template <typename T, int N>
__device__ __forceinline__ void StoreF32(T* p, const float (&in)[N]) {
  Vec<T, N> a;
#pragma unroll
  for (int i = 0; i < N; ++i) a.v[i] = FromF32<T>(in[i]);
  *reinterpret_cast<Vec<T, N>*>(p) = a;
}

// One vector of a row quantized with the reciprocal scale `inv`: Q is int8_t (symmetric,
// round half to even, clamped to +-127) or __nv_fp8_e4m3 (nearest even, saturated to +-448).
template <typename Q>
inline constexpr float kQuantMax = std::is_same_v<Q, int8_t> ? 127.0f : 448.0f;
template <typename Q, int V>
__device__ __forceinline__ void StoreQuantized(Q* dst, const float (&a)[V], float inv) {
  Vec<Q, V> out;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    if constexpr (std::is_same_v<Q, int8_t>) {
      out.v[k] = static_cast<int8_t>(fminf(fmaxf(rintf(a[k] * inv), -127.0f), 127.0f));
    } else {
      out.v[k] = FromF32<__nv_fp8_e4m3>(a[k] * inv);
    }
  }
  *reinterpret_cast<Vec<Q, V>*>(dst) = out;
}

// Elements per 16-byte access.
template <typename T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// ---- reductions (blockDim.x a multiple of 32, at most 1024) ----

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread gets the block's total. `scratch` holds 32 floats; the leading barrier lets
// consecutive reductions share it.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  v = WarpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  v = WarpMax(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0f;
  return WarpMax(v);
}

// ---- host side ----

inline bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Threads for one block per row of `nvec` vectors: a multiple of 32, at most `cap`.
inline int RowThreads(int64_t nvec, int cap) {
  const int64_t t = CeilDiv(nvec, 32) * 32;
  return static_cast<int>(t < 32 ? 32 : (t > cap ? cap : t));
}

// The current device's multiprocessors (two attribute queries: no synchronization); 132
// when they fail, and the launch that follows reports the error.
inline int DeviceSms() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    sms = 132;
  }
  return sms;
}

// Blocks for a grid-stride loop over `work_blocks` blocks of work: enough to fill the GPU
// several times over, no more.
inline int GridBlocks(int64_t work_blocks) {
  const int64_t cap = static_cast<int64_t>(DeviceSms()) * 16;
  if (work_blocks < 1) return 1;
  return static_cast<int>(work_blocks < cap ? work_blocks : cap);
}

// Calls f(T{}) with T the device type of a float dtype (kF32, kF16, kBF16).
template <typename F>
Status DispatchAct(DType act, const char* what, F&& f) {
  switch (act) {
    case DType::kF32:
      return f(float{});
    case DType::kF16:
      return f(__half{});
    case DType::kBF16:
      return f(__nv_bfloat16{});
    default:
      return InvalidArgument(std::string(what) + ": activations must be f32, f16 or bf16, got " +
                             std::string(DTypeName(act)));
  }
}

// As DispatchAct, also accepting kF8E4M3 (storage-only types: tables, caches, conversions).
template <typename F>
Status DispatchStorage(DType dtype, const char* what, F&& f) {
  if (dtype == DType::kF8E4M3) return f(__nv_fp8_e4m3{});
  if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) return DispatchAct(dtype, what, f);
  return InvalidArgument(std::string(what) + ": dtype must be f32, f16, bf16 or f8_e4m3, got " +
                         std::string(DTypeName(dtype)));
}

}  // namespace ferry::cuda::kernels_internal
