// Device memory in size classes, recycled when the last Tensor using a block goes away, so
// the steady state (the same bucket shapes every step) allocates nothing. Thread-safe; make
// it with std::make_shared (blocks find their pool through a weak pointer).
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"

namespace ferry::backend {

class DevicePool : public std::enable_shared_from_this<DevicePool> {
 public:
  explicit DevicePool(int device) : device_(device) {}
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // A block of at least `bytes` bytes (past 1 MiB, a kept block up to a quarter larger may
  // serve); ResourceExhausted when the device is out of memory. With may_trim, a failed
  // cudaMalloc frees the blocks kept for reuse (Trim) and tries once more: not while a CUDA
  // graph is captured, where cudaFree is not allowed.
  Result<std::shared_ptr<void>> Get(size_t bytes, bool may_trim = false);
  // Device memory the pool holds: blocks in use and blocks kept for reuse.
  size_t allocated_bytes() const { return allocated_bytes_; }
  // The part of it kept for reuse.
  size_t cached_bytes();
  // Frees the blocks kept for reuse (cudaFree waits for the device).
  void Trim();

 private:
  // Powers of two up to 1 MiB, then multiples of 1 MiB: little waste, few classes.
  static size_t RoundUp(size_t n);

  const int device_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // GUARDED_BY(mu_)
  std::atomic<size_t> allocated_bytes_{0};
};

}  // namespace ferry::backend
