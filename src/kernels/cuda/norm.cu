// Row normalizations: RMSNorm, the fused residual-add RMSNorm and LayerNorm. One block per
// row, warp-shuffle reductions. When a row fits, each thread keeps its share of the row in
// registers (kIters vectors) between the reduction and the scaled store, so the row is
// read from memory once; very wide rows take the generic path, which reads the row again
// (from L1/L2) instead.
#include <string>
#include <type_traits>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda {
namespace {

using namespace kernels_internal;  // NOLINT(google-build-using-namespace)

constexpr int kMaxThreads = 512;
// Register-held vectors per thread: 4 keeps even f32 x 4-wide rows at 64 registers of
// values (8192 f32 or 16384 bf16 columns at 512 threads); wider rows re-read.
constexpr int kMaxIters = 4;

// gamma (and beta) are f32; V of them for vector j, as float4 loads when V allows (the
// host checks 16-byte alignment before choosing a vector width).
template <int V>
__device__ __forceinline__ void LoadParams(const float* p, int64_t j, float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int k = 0; k < V; k += 4) {
      const float4 f = *reinterpret_cast<const float4*>(p + j * V + k);
      out[k] = f.x;
      out[k + 1] = f.y;
      out[k + 2] = f.z;
      out[k + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = p[j * V + k];
  }
}

// gamma for vector j, times col_mul (when not null) in f32: a W8A8 linear's 1 / SmoothQuant
// factors applied where its unquantized input is formed.
template <int V>
__device__ __forceinline__ void LoadGamma(const float* gamma, const float* col_mul, int64_t j, float (&g)[V]) {
  LoadParams<V>(gamma, j, g);
  if (col_mul != nullptr) {
    float m[V];
    LoadParams<V>(col_mul, j, m);
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] *= m[k];
  }
}

// RMSNorm. kIters > 0: the row is held in registers; 0: read twice.
template <typename T, int V, int kIters>
__global__ void __launch_bounds__(kMaxThreads) RmsNormKernel(const T* x, const float* gamma, const float* col_mul, float eps, int64_t rows, int64_t cols, T* out) {
  AwaitPriorGrids();
  __shared__ float scratch[32];
  const int64_t nvec = cols / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* orow = out + r * cols;
    float ss = 0.0f;
    if constexpr (kIters > 0) {
      float v[kIters][V];
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
        if (j < nvec) {
          LoadF32<T, V>(xr + j * V, v[it]);
#pragma unroll
          for (int k = 0; k < V; ++k) ss += v[it][k] * v[it][k];
        }
      }
      ss = BlockSum(ss, scratch);
      const float scale = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
        if (j < nvec) {
          float g[V];
          LoadGamma<V>(gamma, col_mul, j, g);
#pragma unroll
          for (int k = 0; k < V; ++k) v[it][k] = v[it][k] * scale * g[k];
          StoreF32<T, V>(orow + j * V, v[it]);
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float v[V];
        LoadF32<T, V>(xr + j * V, v);
#pragma unroll
        for (int k = 0; k < V; ++k) ss += v[k] * v[k];
      }
      ss = BlockSum(ss, scratch);
      const float scale = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float v[V], g[V];
        LoadF32<T, V>(xr + j * V, v);
        LoadGamma<V>(gamma, col_mul, j, g);
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = v[k] * scale * g[k];
        StoreF32<T, V>(orow + j * V, v);
      }
    }
  }
}

// residual += delta; out = RMSNorm(the f32 sum). Each thread writes only the elements it
// read, so out may alias delta.
template <typename T, int V, int kIters>
__global__ void __launch_bounds__(kMaxThreads) AddRmsNormKernel(T* residual, const T* delta, const float* gamma, const float* col_mul, float eps,
                                 int64_t rows, int64_t cols, T* out) {
  AwaitPriorGrids();
  __shared__ float scratch[32];
  const int64_t nvec = cols / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* res = residual + r * cols;
    const T* d = delta + r * cols;
    T* orow = out + r * cols;
    float ss = 0.0f;
    if constexpr (kIters > 0) {
      float v[kIters][V];
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
        if (j < nvec) {
          float b[V];
          LoadF32<T, V>(res + j * V, v[it]);
          LoadF32<T, V>(d + j * V, b);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            v[it][k] += b[k];
            ss += v[it][k] * v[it][k];
          }
          StoreF32<T, V>(res + j * V, v[it]);
        }
      }
      ss = BlockSum(ss, scratch);
      const float scale = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
        if (j < nvec) {
          float g[V];
          LoadGamma<V>(gamma, col_mul, j, g);
#pragma unroll
          for (int k = 0; k < V; ++k) v[it][k] = v[it][k] * scale * g[k];
          StoreF32<T, V>(orow + j * V, v[it]);
        }
      }
    } else {
      // First pass: the sum of squares only; residual is left intact so the second pass
      // can rebuild the exact f32 sum (the stored one is rounded to T).
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float a[V], b[V];
        LoadF32<T, V>(res + j * V, a);
        LoadF32<T, V>(d + j * V, b);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          a[k] += b[k];
          ss += a[k] * a[k];
        }
      }
      ss = BlockSum(ss, scratch);
      const float scale = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float a[V], b[V], g[V];
        LoadF32<T, V>(res + j * V, a);
        LoadF32<T, V>(d + j * V, b);
        LoadGamma<V>(gamma, col_mul, j, g);
#pragma unroll
        for (int k = 0; k < V; ++k) a[k] += b[k];
        StoreF32<T, V>(res + j * V, a);
#pragma unroll
        for (int k = 0; k < V; ++k) a[k] = a[k] * scale * g[k];
        StoreF32<T, V>(orow + j * V, a);
      }
    }
  }
}

template <typename T, int V>
__device__ __forceinline__ void LoadSum(const T* x, const T* delta, int64_t j, float (&v)[V]) {
  LoadF32<T, V>(x + j * V, v);
  if (delta != nullptr) {
    float b[V];
    LoadF32<T, V>(delta + j * V, b);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] += b[k];
  }
}

// residual += delta (delta null: residual is only read); y = RMSNorm(the f32 sum) * gamma
// (* inv_smooth), then y quantized per row as QuantizeRowsInt8 / QuantizeRowsFp8 do, from the
// f32 y (never rounded to T): the norm and the next GEMM's activation quantization in one
// pass. Rows are held in registers (kIters > 0) between the three steps.
template <typename T, typename Q, int V, int kIters>
__global__ void __launch_bounds__(kMaxThreads)
    RmsNormQuantizeKernel(T* residual, const T* delta, const float* gamma, float eps, int64_t rows, int64_t cols,
                          const float* inv_smooth, Q* q, float* row_scales) {
  AwaitPriorGrids();
  static_assert(kIters > 0, "rows are held in registers");
  constexpr float kMax = kQuantMax<Q>;
  __shared__ float scratch[32];
  const int64_t nvec = cols / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* res = residual + r * cols;
    const T* d = delta != nullptr ? delta + r * cols : nullptr;
    float v[kIters][V];
    float ss = 0.0f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
      if (j < nvec) {
        LoadSum<T, V>(res, d, j, v[it]);
        if (d != nullptr) StoreF32<T, V>(res + j * V, v[it]);
#pragma unroll
        for (int k = 0; k < V; ++k) ss += v[it][k] * v[it][k];
      }
    }
    ss = BlockSum(ss, scratch);
    const float scale = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
    float amax = 0.0f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
      if (j < nvec) {
        float g[V];
        LoadParams<V>(gamma, j, g);
#pragma unroll
        for (int k = 0; k < V; ++k) v[it][k] = v[it][k] * scale * g[k];
        if (inv_smooth != nullptr) {
          float sm[V];
          LoadParams<V>(inv_smooth, j, sm);
#pragma unroll
          for (int k = 0; k < V; ++k) v[it][k] = v[it][k] * sm[k];
        }
#pragma unroll
        for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(v[it][k]));
      }
    }
    amax = BlockMax(amax, scratch);
    const float inv = amax > 0.0f ? kMax / amax : 0.0f;
    Q* qrow = q + r * cols;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
      if (j < nvec) StoreQuantized<Q, V>(qrow + j * V, v[it], inv);
    }
    if (threadIdx.x == 0) row_scales[r] = amax / kMax;
  }
}

// LayerNorm of x (+ delta). As on the CPU: the mean sums x - x[0] (exact to f32 rounding
// even on a large offset) and the variance sums centred squares (no E[x^2] - E[x]^2).
// Q (int8 or e4m3; void: none, the plain LayerNorm): the row as stored in out, widened again,
// is also quantized per row as QuantizeRowsInt8 / QuantizeRowsFp8 quantize out (times inv_smooth
// when given): the next linear's activation quantization in the norm's pass, the same bytes as
// the two passes. Q needs kIters > 0 (the row held in registers).
template <typename T, int V, int kIters, typename Q = void>
__global__ void __launch_bounds__(kMaxThreads) LayerNormKernel(const T* x, const T* delta, const float* gamma, const float* beta, float eps,
                                int64_t rows, int64_t cols, T* out, const float* inv_smooth, Q* q, float* row_scales) {
  static_assert(std::is_void_v<Q> || kIters > 0, "the quantizing form holds the row in registers");
  AwaitPriorGrids();
  __shared__ float scratch[32];
  const int64_t nvec = cols / V;
  const float n = static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dr = delta != nullptr ? delta + r * cols : nullptr;
    T* orow = out + r * cols;
    const float shift = ToF32(xr[0]) + (dr != nullptr ? ToF32(dr[0]) : 0.0f);
    float s = 0.0f;
    if constexpr (kIters > 0) {
      float v[kIters][V];
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
        if (j < nvec) {
          LoadSum<T, V>(xr, dr, j, v[it]);
#pragma unroll
          for (int k = 0; k < V; ++k) s += v[it][k] - shift;
        }
      }
      const float mean = shift + BlockSum(s, scratch) / n;
      float var = 0.0f;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
        if (j < nvec) {
#pragma unroll
          for (int k = 0; k < V; ++k) var += (v[it][k] - mean) * (v[it][k] - mean);
        }
      }
      const float inv = 1.0f / sqrtf(BlockSum(var, scratch) / n + eps);
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
        if (j < nvec) {
          float g[V], b[V];
          LoadParams<V>(gamma, j, g);
          LoadParams<V>(beta, j, b);
#pragma unroll
          for (int k = 0; k < V; ++k) v[it][k] = fmaf((v[it][k] - mean) * inv, g[k], b[k]);
          StoreF32<T, V>(orow + j * V, v[it]);
        }
      }
      if constexpr (!std::is_void_v<Q>) {
        constexpr float kMax = kQuantMax<Q>;
        float amax = 0.0f;
#pragma unroll
        for (int it = 0; it < kIters; ++it) {
          const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
          if (j < nvec) {
            float sm[V];
            if (inv_smooth != nullptr) LoadParams<V>(inv_smooth, j, sm);
#pragma unroll
            for (int k = 0; k < V; ++k) {
              float a = ToF32(FromF32<T>(v[it][k]));  // the value out holds
              if (inv_smooth != nullptr) a = a * sm[k];
              v[it][k] = a;
              amax = fmaxf(amax, fabsf(a));
            }
          }
        }
        amax = BlockMax(amax, scratch);
        const float qinv = amax > 0.0f ? kMax / amax : 0.0f;
        Q* qrow = q + r * cols;
#pragma unroll
        for (int it = 0; it < kIters; ++it) {
          const int64_t j = threadIdx.x + static_cast<int64_t>(it) * blockDim.x;
          if (j < nvec) StoreQuantized<Q, V>(qrow + j * V, v[it], qinv);
        }
        if (threadIdx.x == 0) row_scales[r] = amax / kMax;
      }
    } else {
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float v[V];
        LoadSum<T, V>(xr, dr, j, v);
#pragma unroll
        for (int k = 0; k < V; ++k) s += v[k] - shift;
      }
      const float mean = shift + BlockSum(s, scratch) / n;
      float var = 0.0f;
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float v[V];
        LoadSum<T, V>(xr, dr, j, v);
#pragma unroll
        for (int k = 0; k < V; ++k) var += (v[k] - mean) * (v[k] - mean);
      }
      const float inv = 1.0f / sqrtf(BlockSum(var, scratch) / n + eps);
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float v[V], g[V], b[V];
        LoadSum<T, V>(xr, dr, j, v);
        LoadParams<V>(gamma, j, g);
        LoadParams<V>(beta, j, b);
#pragma unroll
        for (int k = 0; k < V; ++k) v[k] = fmaf((v[k] - mean) * inv, g[k], b[k]);
        StoreF32<T, V>(orow + j * V, v);
      }
    }
    // The next row's shift is read before any of its elements are written; nothing else
    // crosses rows, and BlockSum's barriers order the scratch reuse.
  }
}

// Launch shape for one block per row: the vector width, threads, and register iterations
// (0: the generic path).
struct RowPlan {
  bool vectorized = false;
  int threads = 32;
  int iters = 0;
};

RowPlan PlanRows(int64_t cols, int vec, bool aligned) {
  RowPlan p;
  p.vectorized = aligned && cols % vec == 0;
  const int64_t nvec = p.vectorized ? cols / vec : cols;
  p.threads = RowThreads(nvec, kMaxThreads);
  const int64_t iters = CeilDiv(nvec, p.threads);
  // Scalar rows are rare (odd widths); they always take the generic path.
  if (!p.vectorized || iters > kMaxIters) {
    p.iters = 0;
  } else {
    p.iters = iters <= 1 ? 1 : kMaxIters;
  }
  return p;
}

// Calls launch(std::integral_constant V, std::integral_constant kIters) for the plan.
template <typename T, typename Launch>
void DispatchRowPlan(const RowPlan& p, Launch&& launch) {
  constexpr int V = kVec16<T>;
  if (!p.vectorized) {
    launch(std::integral_constant<int, 1>{}, std::integral_constant<int, 0>{});
  } else if (p.iters == 1) {
    launch(std::integral_constant<int, V>{}, std::integral_constant<int, 1>{});
  } else if (p.iters == kMaxIters) {
    launch(std::integral_constant<int, V>{}, std::integral_constant<int, kMaxIters>{});
  } else {
    launch(std::integral_constant<int, V>{}, std::integral_constant<int, 0>{});
  }
}

int RowBlocks(int64_t rows) { return static_cast<int>(rows < (1 << 20) ? rows : (1 << 20)); }

Status CheckRowArgs(const char* what, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) return InvalidArgument(std::string(what) + ": negative shape");
  if (rows > 0 && cols == 0) return InvalidArgument(std::string(what) + ": rows of zero width");
  return Status::Ok();
}

// One warp per (row, head): the head's sum of squares in f32, then x * rsqrt(mean + eps) * gamma.
template <typename T>
__global__ void HeadRmsNormKernel(T* x, int64_t items, int heads, int head_dim, int64_t cols, int64_t col_begin,
                                  const float* gamma, float eps) {
  AwaitPriorGrids();
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (item >= items) return;
  const int lane = threadIdx.x & 31;
  T* v = x + (item / heads) * cols + col_begin + (item % heads) * head_dim;
  float ss = 0.0f;
  for (int d = lane; d < head_dim; d += 32) {
    const float f = ToF32(v[d]);
    ss += f * f;
  }
  ss = WarpSum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(head_dim) + eps);
  for (int d = lane; d < head_dim; d += 32) v[d] = FromF32<T>(ToF32(v[d]) * rs * gamma[d]);
}

// The quantizing norms' host side: whether a row fits their register-held kernels, the
// checks both make of their quantized output, and the launch for q's dtype and the plan's
// iterations: launch(Q{}, std::integral_constant<int, iters>{}).
template <typename T>
bool QuantizingNormFits(int64_t cols, bool aligned) {
  const RowPlan plan = PlanRows(cols, kVec16<T>, aligned);
  return cols > 0 && plan.vectorized && plan.iters > 0;
}

Status CheckQuantizedOutput(const char* what, DType q_dtype, const float* inv_smooth) {
  if (q_dtype != DType::kI8 && q_dtype != DType::kF8E4M3) {
    return InvalidArgument(std::string(what) + ": quantizes to int8 or fp8 e4m3, not " + std::string(DTypeName(q_dtype)));
  }
  if (q_dtype == DType::kF8E4M3 && inv_smooth != nullptr) return InvalidArgument(std::string(what) + ": fp8 takes no smoothing");
  return Status::Ok();
}

template <typename F>
void LaunchQuantizing(DType q_dtype, int iters, F&& launch) {
  const auto with_iters = [&](auto qtag) {
    if (iters == 1) {
      launch(qtag, std::integral_constant<int, 1>{});
    } else {
      launch(qtag, std::integral_constant<int, kMaxIters>{});
    }
  };
  if (q_dtype == DType::kI8) {
    with_iters(int8_t{});
  } else {
    with_iters(__nv_fp8_e4m3{});
  }
}

}  // namespace

Status HeadRmsNorm(void* x, int64_t rows, int64_t cols, int64_t col_begin, int heads, int head_dim,
                   const float* gamma, float eps, DType act, cudaStream_t stream) {
  if (rows < 0 || heads <= 0 || head_dim <= 0 || col_begin < 0 ||
      col_begin + static_cast<int64_t>(heads) * head_dim > cols) {
    return InvalidArgument("HeadRmsNorm: " + std::to_string(heads) + " heads of " + std::to_string(head_dim) +
                           " from column " + std::to_string(col_begin) + " do not fit rows of " + std::to_string(cols));
  }
  if (rows == 0) return Status::Ok();
  if (x == nullptr || gamma == nullptr) return InvalidArgument("HeadRmsNorm: null pointer");
  return DispatchAct(act, "HeadRmsNorm", [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t items = rows * heads;
    constexpr int kWarpsPerBlock = 8;
    const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
    LaunchKernel(HeadRmsNormKernel<T>, static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, stream,
                 static_cast<T*>(x), items, heads, head_dim, cols, col_begin, gamma, eps);
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

Status RmsNorm(const void* x, const float* gamma, float eps, int64_t rows, int64_t cols, void* out, DType act,
               cudaStream_t stream, const float* col_mul) {
  FERRY_RETURN_IF_ERROR(CheckRowArgs("RmsNorm", rows, cols));
  if (rows == 0) return Status::Ok();
  if (x == nullptr || gamma == nullptr || out == nullptr) return InvalidArgument("RmsNorm: null pointer");
  return DispatchAct(act, "RmsNorm", [&](auto tag) -> Status {
    using T = decltype(tag);
    const RowPlan plan = PlanRows(cols, kVec16<T>, Aligned(x, 16) && Aligned(out, 16) && Aligned(gamma, 16) && Aligned(col_mul, 16));
    DispatchRowPlan<T>(plan, [&](auto v, auto iters) {
      LaunchKernel(RmsNormKernel<T, decltype(v)::value, decltype(iters)::value>, RowBlocks(rows), plan.threads, 0,
                   stream, static_cast<const T*>(x), gamma, col_mul, eps, rows, cols, static_cast<T*>(out));
    });
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

Status AddRmsNorm(void* residual, const void* delta, const float* gamma, float eps, int64_t rows, int64_t cols,
                  void* out, DType act, cudaStream_t stream, const float* col_mul) {
  FERRY_RETURN_IF_ERROR(CheckRowArgs("AddRmsNorm", rows, cols));
  if (rows == 0) return Status::Ok();
  if (residual == nullptr || delta == nullptr || gamma == nullptr || out == nullptr) {
    return InvalidArgument("AddRmsNorm: null pointer");
  }
  if (residual == out) return InvalidArgument("AddRmsNorm: out must not alias residual");
  return DispatchAct(act, "AddRmsNorm", [&](auto tag) -> Status {
    using T = decltype(tag);
    const RowPlan plan = PlanRows(
        cols, kVec16<T>,
        Aligned(residual, 16) && Aligned(delta, 16) && Aligned(out, 16) && Aligned(gamma, 16) && Aligned(col_mul, 16));
    DispatchRowPlan<T>(plan, [&](auto v, auto iters) {
      LaunchKernel(AddRmsNormKernel<T, decltype(v)::value, decltype(iters)::value>, RowBlocks(rows), plan.threads, 0,
                   stream, static_cast<T*>(residual), static_cast<const T*>(delta), gamma, col_mul, eps, rows, cols,
                   static_cast<T*>(out));
    });
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

bool RmsNormQuantizeFits(const void* residual, const void* delta, const float* gamma, const float* inv_smooth,
                         int64_t cols, DType act) {
  bool fits = false;
  (void)DispatchAct(act, "RmsNormQuantize", [&](auto tag) -> Status {
    fits = QuantizingNormFits<decltype(tag)>(cols, Aligned(residual, 16) && (delta == nullptr || Aligned(delta, 16)) &&
                                                       Aligned(gamma, 16) && (inv_smooth == nullptr || Aligned(inv_smooth, 16)));
    return Status::Ok();
  });
  return fits;
}

Status RmsNormQuantize(void* residual, const void* delta, const float* gamma, float eps, int64_t rows, int64_t cols,
                       const float* inv_smooth, void* q, DType q_dtype, float* row_scales, DType act,
                       cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(CheckRowArgs("RmsNormQuantize", rows, cols));
  if (rows == 0) return Status::Ok();
  if (residual == nullptr || gamma == nullptr || q == nullptr || row_scales == nullptr) {
    return InvalidArgument("RmsNormQuantize: null pointer");
  }
  FERRY_RETURN_IF_ERROR(CheckQuantizedOutput("RmsNormQuantize", q_dtype, inv_smooth));
  if (!RmsNormQuantizeFits(residual, delta, gamma, inv_smooth, cols, act)) {
    return FailedPrecondition("RmsNormQuantize: rows of " + std::to_string(cols) +
                              " columns do not fit in registers (or are not 16-byte aligned); use RmsNorm or "
                              "AddRmsNorm, then the quantization");
  }
  return DispatchAct(act, "RmsNormQuantize", [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const RowPlan plan = PlanRows(cols, V, true);
    const auto launch = [&](auto qtag, auto iters) {
      using Q = decltype(qtag);
      LaunchKernel(RmsNormQuantizeKernel<T, Q, V, decltype(iters)::value>, RowBlocks(rows), plan.threads, 0, stream,
                   static_cast<T*>(residual), static_cast<const T*>(delta), gamma, eps, rows, cols, inv_smooth,
                   static_cast<Q*>(q), row_scales);
    };
    LaunchQuantizing(q_dtype, plan.iters, launch);
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

Status LayerNorm(const void* x, const void* delta, const float* gamma, const float* beta, float eps, int64_t rows,
                 int64_t cols, void* out, DType act, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(CheckRowArgs("LayerNorm", rows, cols));
  if (rows == 0) return Status::Ok();
  if (x == nullptr || gamma == nullptr || beta == nullptr || out == nullptr) {
    return InvalidArgument("LayerNorm: null pointer");
  }
  return DispatchAct(act, "LayerNorm", [&](auto tag) -> Status {
    using T = decltype(tag);
    const bool aligned = Aligned(x, 16) && (delta == nullptr || Aligned(delta, 16)) && Aligned(out, 16) &&
                         Aligned(gamma, 16) && Aligned(beta, 16);
    const RowPlan plan = PlanRows(cols, kVec16<T>, aligned);
    DispatchRowPlan<T>(plan, [&](auto v, auto iters) {
      LaunchKernel(LayerNormKernel<T, decltype(v)::value, decltype(iters)::value>, RowBlocks(rows), plan.threads, 0,
                   stream, static_cast<const T*>(x), static_cast<const T*>(delta), gamma, beta, eps, rows, cols,
                   static_cast<T*>(out), static_cast<const float*>(nullptr), static_cast<void*>(nullptr),
                   static_cast<float*>(nullptr));
    });
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

bool LayerNormQuantizeFits(const void* x, const void* delta, const void* out, const float* gamma, const float* beta,
                           const float* inv_smooth, int64_t cols, DType act) {
  bool fits = false;
  (void)DispatchAct(act, "LayerNormQuantize", [&](auto tag) -> Status {
    fits = QuantizingNormFits<decltype(tag)>(
        cols, Aligned(x, 16) && (delta == nullptr || Aligned(delta, 16)) && Aligned(out, 16) && Aligned(gamma, 16) &&
                  Aligned(beta, 16) && (inv_smooth == nullptr || Aligned(inv_smooth, 16)));
    return Status::Ok();
  });
  return fits;
}

Status LayerNormQuantize(const void* x, const void* delta, const float* gamma, const float* beta, float eps,
                         int64_t rows, int64_t cols, void* out, const float* inv_smooth, void* q, DType q_dtype,
                         float* row_scales, DType act, cudaStream_t stream) {
  FERRY_RETURN_IF_ERROR(CheckRowArgs("LayerNormQuantize", rows, cols));
  if (rows == 0) return Status::Ok();
  if (x == nullptr || gamma == nullptr || beta == nullptr || out == nullptr || q == nullptr || row_scales == nullptr) {
    return InvalidArgument("LayerNormQuantize: null pointer");
  }
  FERRY_RETURN_IF_ERROR(CheckQuantizedOutput("LayerNormQuantize", q_dtype, inv_smooth));
  if (!LayerNormQuantizeFits(x, delta, out, gamma, beta, inv_smooth, cols, act)) {
    return FailedPrecondition("LayerNormQuantize: rows of " + std::to_string(cols) +
                              " columns do not fit in registers (or are not 16-byte aligned); use LayerNorm, then "
                              "the quantization");
  }
  return DispatchAct(act, "LayerNormQuantize", [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const RowPlan plan = PlanRows(cols, V, true);
    const auto launch = [&](auto qtag, auto iters) {
      using Q = decltype(qtag);
      LaunchKernel(LayerNormKernel<T, V, decltype(iters)::value, Q>, RowBlocks(rows), plan.threads, 0, stream,
                   static_cast<const T*>(x), static_cast<const T*>(delta), gamma, beta, eps, rows, cols,
                   static_cast<T*>(out), inv_smooth, static_cast<Q*>(q), row_scales);
    };
    LaunchQuantizing(q_dtype, plan.iters, launch);
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

}  // namespace ferry::cuda
