// Small host arrays on their way to the device (a step's packed inputs, an op's index array):
// written into pinned memory at once (the caller's array may die on return), then copied to
// the device asynchronously on the stream. The ring restarts after every stream synchronize.
// Thread-compatible: used on its backend's stream only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace ferry::backend {

class StagingRing {
 public:
  static constexpr size_t kBytes = 16 << 20;

  // Pinned host bytes to fill and the device bytes that mirror them (256-byte aligned).
  struct Slot {
    void* host = nullptr;
    void* device = nullptr;
    size_t bytes = 0;
  };

  StagingRing() = default;
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  Status Init();
  // The next `bytes` of the ring. When the ring is full it waits for `stream` and starts
  // over, so it must not be called while the stream is captured.
  Result<Slot> Reserve(size_t bytes, cudaStream_t stream);
  // A device copy of `bytes` bytes at `src`, enqueued on `stream`. The layers of a step may
  // stage the same array again and again: one already staged since the last reset, from the
  // same address with the same bytes, is not copied twice.
  Result<void*> Put(const void* src, size_t bytes, cudaStream_t stream);
  // After the stream has been synchronized: everything staged so far has arrived.
  void Reset();

 private:
  struct Entry {
    const void* host = nullptr;
    std::vector<char> bytes;
    void* device = nullptr;
  };
  static constexpr size_t kMaxEntries = 16;

  void* host_ = nullptr;
  void* device_ = nullptr;
  size_t offset_ = 0;
  std::vector<Entry> entries_;  // [0, used_): staged by Put since the last reset
  size_t used_ = 0;
};

}  // namespace ferry::backend
