// Kernel launches with programmatic dependent launch (PDL). On compute capability 9.0 and
// newer, a kernel launched with programmatic stream serialization may start while the
// kernel before it on the stream is still finishing: its blocks are scheduled on the
// multiprocessors that the earlier kernel's last wave leaves free, and what they do before
// `griddepcontrol.wait` (a GEMV prefetching its weight rows into L2) overlaps that tail.
// Inside a CUDA graph the same launch becomes a programmatic edge, so captured decode steps
// keep the overlap.
//
// The contract, for every kernel launched through LaunchKernel: its first statement is
// AwaitPriorGrids() (or PrefetchThenAwait), so it touches no memory that earlier work on the
// stream writes or reads (activations, caches, outputs) before that work has finished and
// its writes are visible. Only constant data (weights) may be read before the wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace ferry::cuda {

// Whether LaunchKernel asks for programmatic stream serialization on the current device:
// compute capability 9.0 or newer, unless FERRY_PDL=0 (read once per process; for
// comparisons and as a way out). Cached per device.
bool DependentLaunchEnabled();

// Launches `kernel` like kernel<<<grid, block, smem, stream>>>(args...), with programmatic
// stream serialization when DependentLaunchEnabled(). Errors are left for cudaGetLastError,
// as with <<<>>>.
template <typename... Params, typename... Args>
void LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                  Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = DependentLaunchEnabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

#if defined(__CUDACC__)

// Waits until every earlier kernel on the stream has finished and its writes are visible,
// then lets the next kernel launch (its blocks wait in their own AwaitPriorGrids, so this
// kernel's remaining work overlaps only their scheduling and prefetch). A no-op without
// PDL or before sm_90.
__device__ __forceinline__ void AwaitPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Prefetches [begin, begin + bytes) into L2 (one 128-byte line per thread and step), then
// AwaitPriorGrids(). For constant data only: a GEMV's weight rows.
__device__ __forceinline__ void PrefetchThenAwait(const void* begin, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const char* p = static_cast<const char*>(begin);
  for (int64_t off = static_cast<int64_t>(threadIdx.x) * 128; off < bytes; off += static_cast<int64_t>(blockDim.x) * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
  }
#else
  (void)begin;
  (void)bytes;
#endif
  AwaitPriorGrids();
}

#endif  // __CUDACC__

}  // namespace ferry::cuda
