// What every part of one CUDA backend shares: its device and stream, the device memory
// pools, the pinned staging ring, and whether a step graph is being recorded, which decides
// where device memory comes from and forbids host round trips. Owned by the backend;
// thread-compatible (one stream), except Allocate, which may be called from any thread.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/device_pool.h"
#include "backend/cuda/staging_ring.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ferry::backend {

class CudaContext {
 public:
  static Result<std::unique_ptr<CudaContext>> Create(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  Device device() const { return Device::Cuda(device_); }
  cudaStream_t stream() const { return stream_; }
  // "cuda:<name> (sm_XY)", as the backend reports itself.
  const std::string& name() const { return name_; }

  // Device memory for a tensor: from the graphs' pool while a step graph is recorded (so no
  // eager work ever shares a recorded buffer), from the eager pool otherwise.
  // ResourceExhausted names the size and the device.
  Result<Tensor> Allocate(const Shape& shape, DType dtype);
  // Device memory that outlives any step: a recording's input buffers (the eager pool).
  Result<std::shared_ptr<void>> AllocatePersistent(size_t bytes);
  // A host array's device copy for one op (valid until the next Synchronize). Not while a
  // step graph is recorded: the recording would keep reading this step's copy.
  Result<void*> Stage(const void* host, size_t bytes);
  // Pinned bytes for one upload (see StagingRing::Reserve); not while recording either.
  Result<StagingRing::Slot> Reserve(size_t bytes);
  // A device copy of host data that persists (weights), complete when this returns.
  Result<Tensor> Upload(const void* host, const Shape& shape, DType dtype);
  // Waits for the stream and restarts the staging ring.
  Status Synchronize();

  // Step graphs: set while a recording captures the stream.
  bool recording() const { return recording_; }
  void set_recording(bool recording) { recording_ = recording; }
  // FailedPrecondition naming `what` while a step graph is recorded.
  Status NotRecording(const char* what) const;
  StagingRing& staging() { return staging_; }
  // Device memory held by the pools (in use or kept for reuse) and the staging ring.
  size_t held_bytes() const;
  // Frees the blocks the pools keep for reuse.
  void TrimPools();

 private:
  explicit CudaContext(int device) : device_(device) {}

  const int device_;
  std::string name_;
  std::string where_;  // "cuda:N (<device name>)", for messages
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<DevicePool> pool_;
  std::shared_ptr<DevicePool> graph_pool_;
  StagingRing staging_;
  bool recording_ = false;
};

}  // namespace ferry::backend
