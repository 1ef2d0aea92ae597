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

Result<std::shared_ptr<void>> DevicePool::Get(size_t bytes) {
  const size_t size = RoundUp(std::max<size_t>(bytes, 256));
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = free_[size];
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
    }
  }
  if (p == nullptr) {
    FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    const cudaError_t error = cudaMalloc(&p, size);
    if (error != cudaSuccess) {
      // A failed cudaMalloc also sets the thread's last error; clear it, or the next kernel
      // launch check would report this allocation as its own failure.
      (void)cudaGetLastError();
      return ::ferry::cuda::CudaFailure(error, "cudaMalloc", __FILE__, __LINE__);
    }
    allocated_bytes_ += size;
  }
  std::weak_ptr<DevicePool> self = weak_from_this();
  return std::shared_ptr<void>(p, [self, size](void* q) {
    if (auto pool = self.lock()) {
      std::lock_guard<std::mutex> lock(pool->mu_);
      pool->free_[size].push_back(q);
    } else {
      cudaFree(q);
    }
  });
}

}  // namespace ferry::backend
