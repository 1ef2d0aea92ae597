// Token embedding lookup: a gather of table rows into the activation dtype.
#include <string>

#include "kernels/cuda/act_access.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda {
namespace {

using namespace kernels_internal;  // NOLINT(google-build-using-namespace)

constexpr int kMaxThreads = 256;

// One block per id: out[i, :] = table[ids[i], :], V elements per step (V divides hidden).
template <typename S, typename T, int V>
__global__ void EmbeddingKernel(const S* table, const int32_t* ids, int64_t n, int64_t hidden, T* out) {
  AwaitPriorGrids();
  const int64_t nvec = hidden / V;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const S* row = table + static_cast<int64_t>(ids[i]) * hidden;
    T* o = out + i * hidden;
    for (int64_t j = threadIdx.x; j < nvec; j += blockDim.x) {
      float a[V];
      LoadF32<S, V>(row + j * V, a);
      StoreF32<T, V>(o + j * V, a);
    }
  }
}

}  // namespace

Status EmbeddingGather(const void* table, DType table_dtype, const int32_t* ids, int64_t n, int64_t hidden, void* out,
                       DType act, cudaStream_t stream) {
  if (n < 0 || hidden <= 0) {
    return InvalidArgument("EmbeddingGather: need n >= 0 and hidden > 0, got " + std::to_string(n) + " and " +
                           std::to_string(hidden));
  }
  if (n == 0) return Status::Ok();
  if (table == nullptr || ids == nullptr || out == nullptr) return InvalidArgument("EmbeddingGather: null pointer");
  return DispatchStorage(table_dtype, "EmbeddingGather table", [&](auto table_tag) -> Status {
    using S = decltype(table_tag);
    return DispatchAct(act, "EmbeddingGather", [&](auto act_tag) -> Status {
      using T = decltype(act_tag);
      constexpr int V = static_cast<int>(16 / (sizeof(S) > sizeof(T) ? sizeof(S) : sizeof(T)));
      const S* tab = static_cast<const S*>(table);
      T* o = static_cast<T*>(out);
      const int blocks = static_cast<int>(n < (1 << 20) ? n : (1 << 20));
      if (hidden % V == 0 && Aligned(table, V * sizeof(S)) && Aligned(out, V * sizeof(T))) {
        LaunchKernel(EmbeddingKernel<S, T, V>, blocks, RowThreads(hidden / V, kMaxThreads), 0, stream, tab, ids, n,
                     hidden, o);
      } else {
        LaunchKernel(EmbeddingKernel<S, T, 1>, blocks, RowThreads(hidden, kMaxThreads), 0, stream, tab, ids, n,
                     hidden, o);
      }
      FERRY_CUDA_RETURN_IF_LAUNCH_FAILED();
      return Status::Ok();
    });
  });
}

}  // namespace ferry::cuda
