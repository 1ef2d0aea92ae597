// Element-wise kernels: activations (SiLU-and-multiply, GELU, tanh), the residual add,
// column copies and dtype conversion. All are bound by memory traffic: each thread moves
// 16-byte vectors in a grid-stride loop, and a scalar path covers unaligned pointers and
// sizes that are not a multiple of the vector width.
#include <string>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda {
namespace {

using namespace kernels_internal;  // NOLINT(google-build-using-namespace)

constexpr int kThreads = 256;

struct GeluOp {
  static constexpr bool kBinary = false;
  __device__ float operator()(float x, float) const { return GeluErf(x); }  // exact GELU (act_access.cuh)
};

struct TanhOp {
  static constexpr bool kBinary = false;
  __device__ float operator()(float x, float) const { return tanhf(x); }
};

struct AddOp {
  static constexpr bool kBinary = true;
  __device__ float operator()(float x, float y) const { return x + y; }
};

struct ScaleOp {
  static constexpr bool kBinary = false;
  float s;
  __device__ float operator()(float x, float) const { return x * s; }
};

struct SoftCapOp {
  static constexpr bool kBinary = false;
  float cap;
  __device__ float operator()(float x, float) const { return cap * tanhf(x / cap); }
};

// x[i] = op(x[i], y[i]) over n elements: V-wide vectors, then the n % V tail.
template <typename T, int V, typename Op>
__global__ void MapKernel(T* x, const T* y, int64_t n, Op op) {
  AwaitPriorGrids();
  const int64_t nvec = n / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t j = first; j < nvec; j += stride) {
    float a[V];
    LoadF32<T, V>(x + j * V, a);
    if constexpr (Op::kBinary) {
      float b[V];
      LoadF32<T, V>(y + j * V, b);
#pragma unroll
      for (int k = 0; k < V; ++k) a[k] = op(a[k], b[k]);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) a[k] = op(a[k], 0.0f);
    }
    StoreF32<T, V>(x + j * V, a);
  }
  const int64_t t = nvec * V + first;
  if (t < n) {
    const float b = Op::kBinary ? ToF32(y[t]) : 0.0f;
    x[t] = FromF32<T>(op(ToF32(x[t]), b));
  }
}

template <typename Op>
Status LaunchMap(const char* what, void* x, const void* y, int64_t n, DType act, cudaStream_t stream, Op op = Op{}) {
  if (n < 0) return InvalidArgument(std::string(what) + ": negative element count");
  if (n == 0) return Status::Ok();
  if (x == nullptr || (Op::kBinary && y == nullptr)) return InvalidArgument(std::string(what) + ": null pointer");
  return DispatchAct(act, what, [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    T* xt = static_cast<T*>(x);
    const T* yt = static_cast<const T*>(y);
    const bool vec = Aligned(x, 16) && (!Op::kBinary || Aligned(y, 16));
    if (vec) {
      LaunchKernel(MapKernel<T, V, Op>, GridBlocks(CeilDiv(n / V + 1, kThreads)), kThreads, 0, stream, xt, yt, n, op);
    } else {
      LaunchKernel(MapKernel<T, 1, Op>, GridBlocks(CeilDiv(n, kThreads)), kThreads, 0, stream, xt, yt, n, op);
    }
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

// out[r, j] = act(gate_up[r, j]) * gate_up[r, inter + j] (act: SiLU, GELU-tanh or exact
// GELU); V divides inter.
template <typename T, int V, int kAct = kGatedSilu>
__global__ void SiluMulKernel(const T* gate_up, int64_t rows, int64_t inter, T* out, const float* col_mul) {
  AwaitPriorGrids();
  const int64_t nvec = inter / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* g = gate_up + r * 2 * inter;
    const T* u = g + inter;
    T* o = out + r * inter;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < nvec; j += stride) {
      float a[V], b[V];
      LoadF32<T, V>(g + j * V, a);
      LoadF32<T, V>(u + j * V, b);
#pragma unroll
      for (int k = 0; k < V; ++k) a[k] = GatedActivation<kAct>(a[k]) * b[k];
      if (col_mul != nullptr) {
        float c[V];
        LoadF32<float, V>(col_mul + j * V, c);
#pragma unroll
        for (int k = 0; k < V; ++k) a[k] *= c[k];
      }
      StoreF32<T, V>(o + j * V, a);
    }
  }
}

// dst[r, j] = src[r, col_begin + j]; V divides src_cols, col_begin and dst_cols.
template <typename T, int V>
__global__ void CopyColumnsKernel(const T* src, int64_t rows, int64_t src_cols, int64_t col_begin, T* dst,
                                  int64_t dst_cols) {
  AwaitPriorGrids();
  const int64_t nvec = dst_cols / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* s = src + r * src_cols + col_begin;
    T* d = dst + r * dst_cols;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < nvec; j += stride) {
      *reinterpret_cast<Vec<T, V>*>(d + j * V) = *reinterpret_cast<const Vec<T, V>*>(s + j * V);
    }
  }
}

// Grid for [rows, nvec] work: x covers a row's vectors, y the rows (grid-stride beyond 65535).
dim3 RowGrid(int64_t rows, int64_t nvec) {
  const int64_t x = CeilDiv(nvec, kThreads);
  const int64_t y = rows < 65535 ? rows : 65535;
  const int64_t budget = GridBlocks(x * y);  // cap the total, keeping every row covered
  const int64_t gx = x < budget / y + 1 ? x : budget / y + 1;
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(y));
}

// dst[i] = D(S(src[i])) through f32.
// out[s, c] = mean, max or last of x[r, c] over rows [begin[s], begin[s] + len[s]): one thread
// per column, f32 accumulation, rows read in order (the CPU's summation order).
template <typename T>
__global__ void ReduceRowsKernel(const T* x, int64_t cols, const int32_t* begin, const int32_t* len, int reduce,
                                 T* out) {
  AwaitPriorGrids();
  const int s = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t first = begin[s];
  const int n = len[s];
  float value = 0.0f;
  if (n > 0) {
    if (reduce == static_cast<int>(RowReduce::kLast)) {
      value = ToF32(x[(first + n - 1) * cols + c]);
    } else if (reduce == static_cast<int>(RowReduce::kMax)) {
      value = ToF32(x[first * cols + c]);
      for (int r = 1; r < n; ++r) value = fmaxf(value, ToF32(x[(first + r) * cols + c]));
    } else {
      for (int r = 0; r < n; ++r) value += ToF32(x[(first + r) * cols + c]);
      value /= static_cast<float>(n);
    }
  }
  out[static_cast<int64_t>(s) * cols + c] = FromF32<T>(value);
}

template <typename S, typename D, int V>
__global__ void ConvertKernel(const S* src, D* dst, int64_t n) {
  AwaitPriorGrids();
  const int64_t nvec = n / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t j = first; j < nvec; j += stride) {
    float a[V];
    LoadF32<S, V>(src + j * V, a);
    StoreF32<D, V>(dst + j * V, a);
  }
  const int64_t t = nvec * V + first;
  if (t < n) dst[t] = FromF32<D>(ToF32(src[t]));
}

}  // namespace

template <int kAct>
Status LaunchGatedMul(const char* what, const void* gate_up, int64_t rows, int64_t inter, void* out, DType act,
                      cudaStream_t stream, const float* col_mul) {
  if (rows < 0 || inter < 0) return InvalidArgument(std::string(what) + ": negative shape");
  if (rows == 0 || inter == 0) return Status::Ok();
  if (gate_up == nullptr || out == nullptr) return InvalidArgument(std::string(what) + ": null pointer");
  return DispatchAct(act, what, [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const T* g = static_cast<const T*>(gate_up);
    T* o = static_cast<T*>(out);
    if (inter % V == 0 && Aligned(gate_up, 16) && Aligned(out, 16) && Aligned(col_mul, 16)) {
      LaunchKernel(SiluMulKernel<T, V, kAct>, RowGrid(rows, inter / V), kThreads, 0, stream, g, rows, inter, o,
                   col_mul);
    } else {
      LaunchKernel(SiluMulKernel<T, 1, kAct>, RowGrid(rows, inter), kThreads, 0, stream, g, rows, inter, o, col_mul);
    }
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

Status SiluMul(const void* gate_up, int64_t rows, int64_t inter, void* out, DType act, cudaStream_t stream,
               const float* col_mul) {
  return LaunchGatedMul<kGatedSilu>("SiluMul", gate_up, rows, inter, out, act, stream, col_mul);
}

Status GeluTanhMul(const void* gate_up, int64_t rows, int64_t inter, void* out, DType act, cudaStream_t stream,
                   const float* col_mul) {
  return LaunchGatedMul<kGatedGeluTanh>("GeluTanhMul", gate_up, rows, inter, out, act, stream, col_mul);
}

Status GeluMul(const void* gate_up, int64_t rows, int64_t inter, void* out, DType act, cudaStream_t stream) {
  return LaunchGatedMul<kGatedGelu>("GeluMul", gate_up, rows, inter, out, act, stream, nullptr);
}

Status Scale(void* x, int64_t n, float s, DType act, cudaStream_t stream) {
  return LaunchMap<ScaleOp>("Scale", x, nullptr, n, act, stream, ScaleOp{s});
}

Status SoftCap(void* x, int64_t n, float cap, DType act, cudaStream_t stream) {
  if (!(cap > 0.0f)) return InvalidArgument("SoftCap: cap must be positive");
  return LaunchMap<SoftCapOp>("SoftCap", x, nullptr, n, act, stream, SoftCapOp{cap});
}

Status Gelu(void* x, int64_t n, DType act, cudaStream_t stream) {
  return LaunchMap<GeluOp>("Gelu", x, nullptr, n, act, stream);
}

Status Tanh(void* x, int64_t n, DType act, cudaStream_t stream) {
  return LaunchMap<TanhOp>("Tanh", x, nullptr, n, act, stream);
}

Status Add(void* x, const void* y, int64_t n, DType act, cudaStream_t stream) {
  return LaunchMap<AddOp>("Add", x, y, n, act, stream);
}

Status CopyColumns(const void* src, int64_t rows, int64_t src_cols, int64_t col_begin, void* dst, int64_t dst_cols,
                   DType act, cudaStream_t stream) {
  if (rows < 0 || src_cols < 0 || dst_cols < 0 || col_begin < 0 || col_begin + dst_cols > src_cols) {
    return InvalidArgument("CopyColumns: columns [" + std::to_string(col_begin) + ", " +
                           std::to_string(col_begin + dst_cols) + ") are not inside a row of " +
                           std::to_string(src_cols));
  }
  if (rows == 0 || dst_cols == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr) return InvalidArgument("CopyColumns: null pointer");
  return DispatchAct(act, "CopyColumns", [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const T* s = static_cast<const T*>(src);
    T* d = static_cast<T*>(dst);
    if (src_cols % V == 0 && col_begin % V == 0 && dst_cols % V == 0 && Aligned(src, 16) && Aligned(dst, 16)) {
      LaunchKernel(CopyColumnsKernel<T, V>, RowGrid(rows, dst_cols / V), kThreads, 0, stream, s, rows, src_cols,
                   col_begin, d, dst_cols);
    } else {
      LaunchKernel(CopyColumnsKernel<T, 1>, RowGrid(rows, dst_cols), kThreads, 0, stream, s, rows, src_cols,
                   col_begin, d, dst_cols);
    }
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

Status ReduceRows(const void* x, int64_t cols, const int32_t* begin, const int32_t* len, int64_t n, RowReduce reduce,
                  void* out, DType act, cudaStream_t stream) {
  if (cols <= 0 || n < 0 || n > 65535) return InvalidArgument("ReduceRows: need cols > 0 and 0 <= n <= 65535");
  if (n == 0) return Status::Ok();
  if (x == nullptr || begin == nullptr || len == nullptr || out == nullptr) return InvalidArgument("ReduceRows: null pointer");
  return DispatchAct(act, "ReduceRows", [&](auto tag) -> Status {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(n));
    LaunchKernel(ReduceRowsKernel<T>, grid, kThreads, 0, stream, static_cast<const T*>(x), cols, begin, len,
                 static_cast<int>(reduce), static_cast<T*>(out));
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

Status Convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t stream) {
  if (n < 0) return InvalidArgument("Convert: negative element count");
  if (n == 0) return Status::Ok();
  if (src == nullptr || dst == nullptr) return InvalidArgument("Convert: null pointer");
  return DispatchStorage(src_dtype, "Convert", [&](auto src_tag) -> Status {
    using S = decltype(src_tag);
    return DispatchStorage(dst_dtype, "Convert", [&](auto dst_tag) -> Status {
      using D = decltype(dst_tag);
      constexpr int V = static_cast<int>(16 / (sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D)));
      const S* s = static_cast<const S*>(src);
      D* d = static_cast<D*>(dst);
      if (Aligned(src, V * sizeof(S)) && Aligned(dst, V * sizeof(D))) {
        LaunchKernel(ConvertKernel<S, D, V>, GridBlocks(CeilDiv(n / V + 1, kThreads)), kThreads, 0, stream, s, d, n);
      } else {
        LaunchKernel(ConvertKernel<S, D, 1>, GridBlocks(CeilDiv(n, kThreads)), kThreads, 0, stream, s, d, n);
      }
      FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
      return Status::Ok();
    });
  });
}

}  // namespace ferry::cuda
