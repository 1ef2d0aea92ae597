#include "backend/cuda/device_pool.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"

namespace ferry::backend {

DevicePool::~DevicePool() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) cudaFree(p);
  }
}

void DevicePool::Trim() {
  std::lock_guard<std::mutex> lock(mu_);
  cudaSetDevice(device_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      cudaFree(p);
      allocated_bytes_ -= size;
    }
    blocks.clear();
  }
}

size_t DevicePool::RoundUp(size_t n) {
  if (n <= (1u << 20)) {
    size_t p = 256;
    while (p < n) p <<= 1;
    return p;
  }
  return (n + (1u << 20) - 1) & ~static_cast<size_t>((1u << 20) - 1);
}

Result<std::shared_ptr<void>> DevicePool::Get(size_t bytes, bool may_trim) {
  const size_t size = RoundUp(std::max<size_t>(bytes, 256));
  void* p = nullptr;
  size_t block_size = size;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest kept block of this class or, past 1 MiB, of one up to a quarter larger:
    // steps whose batch shrinks by a few rows reuse the last step's buffers instead of
    // adding a block per row count (each a different 1 MiB class for a decoder's logits).
    const size_t limit = size > (1u << 20) ? size + size / 4 : size;
    for (auto it = free_.lower_bound(size); it != free_.end() && it->first <= limit; ++it) {
      if (!it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        block_size = it->first;
        break;
      }
    }
  }
  if (p == nullptr) {
    FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    cudaError_t error = cudaMalloc(&p, size);
    if (error == cudaErrorMemoryAllocation && may_trim && cached_bytes() > 0) {
      // Blocks kept for reuse are still device memory: give them back and try once more.
      (void)cudaGetLastError();
      Trim();
      error = cudaMalloc(&p, size);
    }
    if (error != cudaSuccess) {
      // A failed cudaMalloc also sets the thread's last error; clear it, or the next kernel
      // launch check would report this allocation as its own failure.
      (void)cudaGetLastError();
      return ::ferry::cuda::CudaFailure(error, "cudaMalloc", __FILE__, __LINE__);
    }
    allocated_bytes_ += size;
  }
  std::weak_ptr<DevicePool> self = weak_from_this();
  return std::shared_ptr<void>(p, [self, block_size](void* q) {
    if (auto pool = self.lock()) {
      std::lock_guard<std::mutex> lock(pool->mu_);
      pool->free_[block_size].push_back(q);
    } else {
      cudaFree(q);
    }
  });
}

size_t DevicePool::cached_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& [size, blocks] : free_) total += size * blocks.size();
  return total;
}

}  // namespace ferry::backend
