// Dynamic per-row activation quantization for the int8 (W8A8) and fp8 GEMMs: one block per
// row finds max |x| with a block reduction, then writes the quantized row and its scale.
// The second pass reads the row again (from L1/L2) rather than holding it in registers.
// A prologue is applied to each value first, in f32 (never rounded to the activation
// dtype): the exact GELU between a BERT layer's two FFN GEMMs, or a gated MLP's act(gate) *
// up, becomes part of the quantization of the next GEMM's input, one pass instead of two.
#include <cstdlib>
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
// Vectors a thread holds for the plain and GELU prologues' rows when they fit (LaunchRowsWith).
constexpr int kHeldPerThread = 2;

// The raw vectors of vector j of a row: x, and for the gated prologues (the row is [gate |
// up], 2 * cols wide) the up half's.
template <typename T, int V, QuantPrologue kPro>
struct RawVec {
  static constexpr bool kGated = kPro == QuantPrologue::kSiluMul || kPro == QuantPrologue::kGeluTanhMul;
  Vec<T, V> x;
  Vec<T, kGated ? V : 1> up;
};

template <typename T, int V, QuantPrologue kPro>
__device__ __forceinline__ RawVec<T, V, kPro> LoadRaw(const T* row, int64_t cols, int64_t j) {
  RawVec<T, V, kPro> r;
  r.x = LoadVec<T, V>(row + j * V);
  if constexpr (RawVec<T, V, kPro>::kGated) r.up = LoadVec<T, V>(row + cols + j * V);
  return r;
}

// x' = prologue(x) (kInt8: times inv_smooth when given) for vector j of a row; for the gated
// prologues x' = act(gate) * up.
template <typename T, int V, QuantPrologue kPro>
__device__ __forceinline__ void Scaled(const RawVec<T, V, kPro>& raw, const float* inv_smooth, int64_t j, float (&a)[V]) {
  Widen(raw.x, a);
  if constexpr (kPro == QuantPrologue::kGeluErf) {
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = GeluErf(a[k]);
  } else if constexpr (kPro != QuantPrologue::kNone) {
    constexpr int kAct = kPro == QuantPrologue::kSiluMul ? kGatedSilu : kGatedGeluTanh;
    float u[V];
    Widen(raw.up, u);
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = GatedActivation<kAct>(a[k]) * u[k];
  }
  if (inv_smooth != nullptr) {
    float s[V];
    LoadF32<float, V>(inv_smooth + j * V, s);
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = a[k] * s[k];
  }
}

template <typename T, int V, QuantPrologue kPro>
__device__ __forceinline__ void LoadScaled(const T* row, int64_t cols, const float* inv_smooth, int64_t j, float (&a)[V]) {
  Scaled<T, V, kPro>(LoadRaw<T, V, kPro>(row, cols, j), inv_smooth, j, a);
}

// kHeld > 0: each thread keeps its (at most kHeld) vectors of the row in registers between
// the max and the write, so the row is read, and the prologue computed, once. kHeld = 0:
// rows too wide for that are read twice (the second time from L1/L2).
template <typename T, typename Q, int V, QuantPrologue kPro, int kHeld>
__device__ __forceinline__ void QuantizeRows(const T* x, int64_t rows, int64_t cols, const float* inv_smooth, Q* q,
                                             float* scales) {
  AwaitPriorGrids();
  constexpr float kMax = kQuantMax<Q>;
  constexpr bool kGated = kPro == QuantPrologue::kSiluMul || kPro == QuantPrologue::kGeluTanhMul;
  __shared__ float scratch[32];
  const int64_t nvec = cols / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * (kGated ? 2 * cols : cols);
    Q* qrow = q + r * cols;
    float amax = 0.0f;
    if constexpr (kHeld > 0) {
      float held[kHeld][V];
      if constexpr (kGated || kHeld > 2) {
        // Each vector loaded and combined in turn: holding every raw vector as well would not
        // fit the two-per-SM kernel's 64 registers (a gated prologue's gate and up were twice
        // as slow that way, spilled).
#pragma unroll
        for (int h = 0; h < kHeld; ++h) {
          const int64_t j = threadIdx.x + static_cast<int64_t>(h) * blockDim.x;
          if (j < nvec) {
            LoadScaled<T, V, kPro>(row, cols, inv_smooth, j, held[h]);
#pragma unroll
            for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(held[h][k]));
          }
        }
      } else {
        // Every vector's load is issued before any is widened, so they are in flight together.
        RawVec<T, V, kPro> raw[kHeld];
#pragma unroll
        for (int h = 0; h < kHeld; ++h) {
          const int64_t j = threadIdx.x + static_cast<int64_t>(h) * blockDim.x;
          if (j < nvec) raw[h] = LoadRaw<T, V, kPro>(row, cols, j);
        }
#pragma unroll
        for (int h = 0; h < kHeld; ++h) {
          const int64_t j = threadIdx.x + static_cast<int64_t>(h) * blockDim.x;
          if (j < nvec) {
            Scaled<T, V, kPro>(raw[h], inv_smooth, j, held[h]);
#pragma unroll
            for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(held[h][k]));
          }
        }
      }
      amax = BlockMax(amax, scratch);
      // As the CPU: scale = amax / max, and the reciprocal taken once (0 for an all-zero row).
      const float inv = amax > 0.0f ? kMax / amax : 0.0f;
#pragma unroll
      for (int h = 0; h < kHeld; ++h) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(h) * blockDim.x;
        if (j < nvec) StoreQuantized<Q, V>(qrow + j * V, held[h], inv);
      }
    } else {
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float a[V];
        LoadScaled<T, V, kPro>(row, cols, inv_smooth, j, a);
#pragma unroll
        for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(a[k]));
      }
      amax = BlockMax(amax, scratch);
      const float inv = amax > 0.0f ? kMax / amax : 0.0f;
      for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
        float a[V];
        LoadScaled<T, V, kPro>(row, cols, inv_smooth, j, a);
        StoreQuantized<Q, V>(qrow + j * V, a, inv);
      }
    }
    if (threadIdx.x == 0) scales[r] = amax / kMax;
  }
}

template <typename T, typename Q, int V, QuantPrologue kPro, int kHeld>
__global__ void QuantizeRowsKernel(const T* x, int64_t rows, int64_t cols, const float* inv_smooth, Q* q, float* scales) {
  QuantizeRows<T, Q, V, kPro, kHeld>(x, rows, cols, inv_smooth, q, scales);
}

// The same with two blocks of kMaxThreads per multiprocessor (at most 64 registers a thread).
// Holding four vectors a thread takes up to 96 registers, so one 512-thread block (one row) per
// multiprocessor: a gated down projection's 512 rows of 14,336 took four waves (24 us on an
// H200, an 8B fp8 prefill of 512 tokens) and 17 us capped. The cap is taken only when there
// are more rows than multiprocessors, where a second block can share one; fewer rows run the
// uncapped kernel as before (the capped one was not measured there).
template <typename T, typename Q, int V, QuantPrologue kPro, int kHeld>
__global__ void __launch_bounds__(kMaxThreads, 2)
    QuantizeRowsTwoPerSmKernel(const T* x, int64_t rows, int64_t cols, const float* inv_smooth, Q* q, float* scales) {
  QuantizeRows<T, Q, V, kPro, kHeld>(x, rows, cols, inv_smooth, q, scales);
}

// Rows of at most 32 * kPerLane vectors (bert-base's and bert-large's hidden rows of 768 and 1,024
// bf16 values): one warp a row, eight rows a block, each lane's vectors loaded together and
// held, the max taken by shuffles alone. One block a row of 64 threads waited on two block
// barriers for 1.5 KB of work, and an H100 quantized bert-base's 4,096 x 768 inputs at under
// 1 TB/s that way (docs/performance.md). The values, their max, the scale and the stores are
// QuantizeRows's (the same float operations on the same values, and a max does not depend on
// its order), so the bytes are the same.
constexpr int kWarpRowsPerBlock = 8;
template <typename T, typename Q, int V, QuantPrologue kPro, int kPerLane>
__global__ void __launch_bounds__(32 * kWarpRowsPerBlock)
    QuantizeWarpRowsKernel(const T* x, int64_t rows, int64_t cols, const float* inv_smooth, Q* q, float* scales) {
  static_assert(kPro == QuantPrologue::kNone || kPro == QuantPrologue::kGeluErf, "one input row per output row");
  AwaitPriorGrids();
  constexpr float kMax = kQuantMax<Q>;
  const int lane = threadIdx.x & 31;
  const int64_t nvec = cols / V;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  const T* row = x + r * cols;
  RawVec<T, V, kPro> raw[kPerLane];
#pragma unroll
  for (int h = 0; h < kPerLane; ++h) {
    const int64_t j = lane + 32 * h;
    if (j < nvec) raw[h] = LoadRaw<T, V, kPro>(row, cols, j);
  }
  float held[kPerLane][V];
  float amax = 0.0f;
#pragma unroll
  for (int h = 0; h < kPerLane; ++h) {
    const int64_t j = lane + 32 * h;
    if (j < nvec) {
      Scaled<T, V, kPro>(raw[h], inv_smooth, j, held[h]);
#pragma unroll
      for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(held[h][k]));
    }
  }
  amax = WarpMax(amax);
  const float inv = amax > 0.0f ? kMax / amax : 0.0f;
  Q* qrow = q + r * cols;
#pragma unroll
  for (int h = 0; h < kPerLane; ++h) {
    const int64_t j = lane + 32 * h;
    if (j < nvec) StoreQuantized<Q, V>(qrow + j * V, held[h], inv);
  }
  if (lane == 0) scales[r] = amax / kMax;
}

// Whether rows of nvec vectors take the warp-a-row kernel: FERRY_QUANT_WARP_ROWS=0 keeps the
// block-a-row kernel for every row (read once; for comparisons).
bool WarpRowsEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("FERRY_QUANT_WARP_ROWS");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

template <typename T, typename Q, int V, QuantPrologue kPro>
void LaunchRowsWith(const T* x, int64_t rows, int64_t cols, const float* inv_smooth, Q* q, float* row_scales,
                    cudaStream_t stream) {
  const int blocks = static_cast<int>(rows < (1 << 20) ? rows : (1 << 20));
  const int64_t nvec = cols / V;
  // Rows of the plain and GELU prologues that fit are held two vectors a thread (two loads in
  // flight per thread, half the threads a row): on an H200 the o projection's input of the
  // llama-3-8B shape (4,096 columns) quantizes in 3.7 us at 512 rows and 6.2 us at 1,024,
  // against 4.8 and 7.5 with one vector a thread (bench/cuda_gemm_bench --passes). The gated
  // prologues keep the plan they had (one vector a thread, up to four past 512 vectors): the
  // variant that held their raw gate and up vectors spilled and ran at half the speed.
  constexpr bool kGated = kPro == QuantPrologue::kSiluMul || kPro == QuantPrologue::kGeluTanhMul;
  if constexpr (!kGated && V > 1) {
    if (nvec <= 4 * 32 && WarpRowsEnabled()) {
      const int warp_blocks = static_cast<int>(CeilDiv(rows, kWarpRowsPerBlock));
      if (rows <= int64_t{kWarpRowsPerBlock} * ((int64_t{1} << 31) - 1)) {
        const auto launch = [&](auto kernel) {
          LaunchKernel(kernel, warp_blocks, 32 * kWarpRowsPerBlock, 0, stream, x, rows, cols, inv_smooth, q, row_scales);
        };
        if (nvec <= 32) return launch(QuantizeWarpRowsKernel<T, Q, V, kPro, 1>);
        if (nvec <= 64) return launch(QuantizeWarpRowsKernel<T, Q, V, kPro, 2>);
        if (nvec <= 96) return launch(QuantizeWarpRowsKernel<T, Q, V, kPro, 3>);
        return launch(QuantizeWarpRowsKernel<T, Q, V, kPro, 4>);
      }
    }
  }
  const int per_thread_target = kGated ? 1 : kHeldPerThread;
  const int threads = nvec <= 4 * kMaxThreads ? RowThreads(CeilDiv(nvec, per_thread_target), kMaxThreads)
                                              : RowThreads(nvec, kMaxThreads);
  const int64_t per_thread = (nvec + threads - 1) / threads;
  if constexpr (V > 1) {
    if (per_thread <= 1) {
      LaunchKernel(QuantizeRowsKernel<T, Q, V, kPro, 1>, blocks, threads, 0, stream, x, rows, cols, inv_smooth, q,
                   row_scales);
      return;
    }
    if (per_thread <= 2) {
      LaunchKernel(QuantizeRowsKernel<T, Q, V, kPro, 2>, blocks, threads, 0, stream, x, rows, cols, inv_smooth, q,
                   row_scales);
      return;
    }
    if (per_thread <= 4) {
      if (rows > DeviceSms()) {
        LaunchKernel(QuantizeRowsTwoPerSmKernel<T, Q, V, kPro, 4>, blocks, threads, 0, stream, x, rows, cols, inv_smooth, q,
                     row_scales);
      } else {
        LaunchKernel(QuantizeRowsKernel<T, Q, V, kPro, 4>, blocks, threads, 0, stream, x, rows, cols, inv_smooth, q,
                     row_scales);
      }
      return;
    }
  }
  LaunchKernel(QuantizeRowsKernel<T, Q, V, kPro, 0>, blocks, threads, 0, stream, x, rows, cols, inv_smooth, q,
               row_scales);
}

template <typename T, typename Q, int V>
void LaunchRows(const T* x, int64_t rows, int64_t cols, const float* inv_smooth, Q* q, float* row_scales,
                QuantPrologue prologue, cudaStream_t stream) {
  const auto launch = [&](auto pro) {
    LaunchRowsWith<T, Q, V, decltype(pro)::value>(x, rows, cols, inv_smooth, q, row_scales, stream);
  };
  using P = QuantPrologue;
  switch (prologue) {
    case P::kNone: return launch(std::integral_constant<P, P::kNone>{});
    case P::kGeluErf: return launch(std::integral_constant<P, P::kGeluErf>{});
    case P::kSiluMul: return launch(std::integral_constant<P, P::kSiluMul>{});
    case P::kGeluTanhMul: return launch(std::integral_constant<P, P::kGeluTanhMul>{});
  }
}

template <typename Q>
Status LaunchQuantize(const char* what, const void* x, int64_t rows, int64_t cols, const float* inv_smooth, Q* q,
                      float* row_scales, DType act, QuantPrologue prologue, cudaStream_t stream) {
  if (rows < 0 || cols <= 0) return InvalidArgument(std::string(what) + ": need rows >= 0 and cols > 0");
  if (rows == 0) return Status::Ok();
  if (x == nullptr || q == nullptr || row_scales == nullptr) return InvalidArgument(std::string(what) + ": null pointer");
  return DispatchAct(act, what, [&](auto tag) -> Status {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const T* xt = static_cast<const T*>(x);
    const bool vec = cols % V == 0 && Aligned(x, 16) && Aligned(q, V * sizeof(Q)) &&
                     (inv_smooth == nullptr || Aligned(inv_smooth, V * sizeof(float)));
    if (vec) {
      LaunchRows<T, Q, V>(xt, rows, cols, inv_smooth, q, row_scales, prologue, stream);
    } else {
      LaunchRows<T, Q, 1>(xt, rows, cols, inv_smooth, q, row_scales, prologue, stream);
    }
    FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
    return Status::Ok();
  });
}

}  // namespace

Status QuantizeRowsInt8(const void* x, int64_t rows, int64_t cols, const float* inv_smooth, int8_t* q, float* row_scales,
                        DType act, cudaStream_t stream, QuantPrologue prologue) {
  return LaunchQuantize<int8_t>("QuantizeRowsInt8", x, rows, cols, inv_smooth, q, row_scales, act, prologue, stream);
}

Status QuantizeRowsFp8(const void* x, int64_t rows, int64_t cols, void* q, float* row_scales, DType act,
                       cudaStream_t stream, QuantPrologue prologue) {
  return LaunchQuantize<__nv_fp8_e4m3>("QuantizeRowsFp8", x, rows, cols, nullptr, static_cast<__nv_fp8_e4m3*>(q),
                                       row_scales, act, prologue, stream);
}

}  // namespace ferry::cuda
