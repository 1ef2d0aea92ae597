// Dynamic per-row activation quantization for the int8 (W8A8) and fp8 GEMMs: one block per
// row finds max |x| with a block reduction, then writes the quantized row and its scale.
// The second pass reads the row again (from L1/L2) rather than holding it in registers.
#include <string>
#include <type_traits>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace ferry::cuda {
namespace {

using namespace kernels_internal;  // NOLINT(google-build-using-namespace)

constexpr int kMaxThreads = 512;

// x' = x (kInt8: divided by smooth when given) for vector j.
template <typename T, int V>
__device__ __forceinline__ void LoadScaled(const T* row, const float* smooth, int64_t j, float (&a)[V]) {
  LoadF32<T, V>(row + j * V, a);
  if (smooth != nullptr) {
    float s[V];
    LoadF32<float, V>(smooth + j * V, s);
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = a[k] / s[k];
  }
}

// Q is int8_t (symmetric, +-127) or __nv_fp8_e4m3 (+-448). V divides cols.
template <typename T, typename Q, int V>
__global__ void QuantizeRowsKernel(const T* x, int64_t rows, int64_t cols, const float* smooth, Q* q, float* scales) {
  constexpr bool kInt8 = std::is_same_v<Q, int8_t>;
  constexpr float kMax = kInt8 ? 127.0f : 448.0f;
  __shared__ float scratch[32];
  const int64_t nvec = cols / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * cols;
    float amax = 0.0f;
    for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
      float a[V];
      LoadScaled<T, V>(row, smooth, j, a);
#pragma unroll
      for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(a[k]));
    }
    amax = BlockMax(amax, scratch);
    // As the CPU: scale = amax / max, and the reciprocal taken once (0 for an all-zero row).
    const float inv = amax > 0.0f ? kMax / amax : 0.0f;
    for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
      float a[V];
      LoadScaled<T, V>(row, smooth, j, a);
      Vec<Q, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if constexpr (kInt8) {
          out.v[k] = static_cast<int8_t>(fminf(fmaxf(rintf(a[k] * inv), -127.0f), 127.0f));
        } else {
          out.v[k] = FromF32<__nv_fp8_e4m3>(a[k] * inv);
        }
      }
      *reinterpret_cast<Vec<Q, V>*>(q + r * cols + j * V) = out;
    }
    if (threadIdx.x == 0) scales[r] = amax / kMax;
  }
}

template <typename Q>
Status LaunchQuantize(const char* what, const void* x, int64_t rows, int64_t cols, const float* smooth, Q* q,
                      float* row_scales, DType act, cudaStream_t stream) {
  if (rows < 0 || cols <= 0) return InvalidArgument(std::string(what) + ": need rows >= 0 and cols > 0");
  if (rows == 0) return Status::Ok();
  if (x == nullptr || q == nullptr || row_scales == nullptr) return InvalidArgument(std::string(what) + ": null pointer");
  return DispatchAct(act, what, [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const T* xt = static_cast<const T*>(x);
    const int blocks = static_cast<int>(rows < (1 << 20) ? rows : (1 << 20));
    const bool vec = cols % V == 0 && Aligned(x, 16) && Aligned(q, V * sizeof(Q)) &&
                     (smooth == nullptr || Aligned(smooth, V * sizeof(float)));
    if (vec) {
      QuantizeRowsKernel<T, Q, V><<<blocks, RowThreads(cols / V, kMaxThreads), 0, stream>>>(xt, rows, cols, smooth, q,
                                                                                           row_scales);
    } else {
      QuantizeRowsKernel<T, Q, 1><<<blocks, RowThreads(cols, kMaxThreads), 0, stream>>>(xt, rows, cols, smooth, q,
                                                                                       row_scales);
    }
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

}  // namespace

Status QuantizeRowsInt8(const void* x, int64_t rows, int64_t cols, const float* smooth, int8_t* q, float* row_scales,
                        DType act, cudaStream_t stream) {
  return LaunchQuantize<int8_t>("QuantizeRowsInt8", x, rows, cols, smooth, q, row_scales, act, stream);
}

Status QuantizeRowsFp8(const void* x, int64_t rows, int64_t cols, void* q, float* row_scales, DType act,
                       cudaStream_t stream) {
  return LaunchQuantize<__nv_fp8_e4m3>("QuantizeRowsFp8", x, rows, cols, nullptr, static_cast<__nv_fp8_e4m3*>(q),
                                       row_scales, act, stream);
}

}  // namespace ferry::cuda
