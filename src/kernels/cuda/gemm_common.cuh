// Device pieces shared by the GEMM side kernels (gemm_epilogue.cu, int4_gemm.cu): the
// epilogue activation, a bias in f32 or the output type, and 16-element activation loads
// widened to f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/gemm.h"

namespace ferry::cuda::gemm_kernels {

using kernels_internal::GeluErf;
using kernels_internal::ToF32;

__device__ __forceinline__ float Activate(float v, GemmActivation act) {
  switch (act) {
    case GemmActivation::kGeluTanh: {
      const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
      return 0.5f * v * (1.0f + tanhf(inner));
    }
    case GemmActivation::kGeluErf:
      return GeluErf(v);
    default:
      return v;
  }
}

// A scaled accumulator plus its bias, acc * row_scale * col_scale + bias, with every rounding
// spelled out (a multiply, then one fused multiply-add): left to the compiler, whether the last
// multiply and the add are contracted depends on the surrounding code, and the kernels that
// finish an 8-bit accumulator (the epilogue pass after cuBLASLt, ferry's wgmma kernels) would
// then differ in the last bit wherever there is a bias.
__device__ __forceinline__ float ScaleAndBias(float acc, float row_scale, float col_scale, float bias) {
  return __fmaf_rn(__fmul_rn(acc, row_scale), col_scale, bias);
}

// A bias in f32 or in the output type; at most one pointer is set.
template <typename Out>
struct BiasRef {
  const float* f32 = nullptr;
  const Out* same = nullptr;
  __device__ __forceinline__ float At(int64_t i) const {
    if (f32 != nullptr) return f32[i];
    if (same != nullptr) return ToF32(same[i]);
    return 0.0f;
  }
};

template <typename Out>
inline BiasRef<Out> MakeBias(const void* bias, DType bias_dtype) {
  BiasRef<Out> b;
  if (bias == nullptr) return b;
  if (bias_dtype == DType::kF32) b.f32 = static_cast<const float*>(bias);
  else b.same = static_cast<const Out*>(bias);
  return b;
}

__device__ __forceinline__ void Load16(const float* p, float (&out)[16]) {
  const auto* v = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 f = v[i];
    out[4 * i + 0] = f.x;
    out[4 * i + 1] = f.y;
    out[4 * i + 2] = f.z;
    out[4 * i + 3] = f.w;
  }
}

__device__ __forceinline__ void Load16(const __nv_bfloat16* p, float (&out)[16]) {
  const auto* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 q = v[i];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      out[8 * i + 2 * j] = __uint_as_float(words[j] << 16);
      out[8 * i + 2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
    }
  }
}

__device__ __forceinline__ void Load16(const __half* p, float (&out)[16]) {
  const auto* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 q = v[i];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      __half2 h;
      memcpy(&h, &words[j], sizeof(h));
      const float2 f = __half22float2(h);
      out[8 * i + 2 * j] = f.x;
      out[8 * i + 2 * j + 1] = f.y;
    }
  }
}

}  // namespace ferry::cuda::gemm_kernels
