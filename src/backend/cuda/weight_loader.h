// The GPU's side of the fast weight load (core/staged_copy.h): a ring of pinned host slots
// filled by several host threads, a stream of its own that copies each slot to the device
// as soon as it is full, an event per slot so a slot is refilled only once its copy is
// done, and device scratch per slot where a chunk whose dtype changes lands raw and is
// converted into place by a kernel (an f32 or f16 checkpoint served in bf16). Nothing
// waits per tensor: Finish is the one synchronization, after the last weight.
// Thread-compatible: one loading thread. Lives while an engine loads (the backend makes it
// at the first weight and drops it, pinned memory and scratch included, in FinishLoading).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "backend/cuda/context.h"
#include "core/staged_copy.h"
#include "core/status.h"
#include "core/tensor.h"

namespace ferry::backend {

class CudaStagingTarget;

class WeightLoader {
 public:
  static constexpr int kSlots = 4;
  static constexpr size_t kSlotBytes = 64u << 20;

  static Result<std::unique_ptr<WeightLoader>> Create(CudaContext& ctx);
  ~WeightLoader();
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;

  // `elements` values of `src_dtype` at host `src` into device memory at `dst` as
  // `dst_dtype`. Returns once `src` has been read; the bytes arrive by Finish.
  Status CopyToDevice(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t elements);
  // A new device tensor holding host tensor `t` (contiguous) converted to `dtype`.
  Result<Tensor> Upload(const Tensor& t, DType dtype);
  // Waits until everything copied so far is on the device (the loader's stream), and logs
  // what the load moved and how fast.
  Status Finish();
  const StagedCopyStats& stats() const;

 private:
  WeightLoader() = default;

  CudaContext* ctx_ = nullptr;
  std::unique_ptr<CudaStagingTarget> target_;
  std::unique_ptr<StagedCopier> copier_;
  double started_ = 0;  // seconds since the steady clock's epoch, for the log line
};

}  // namespace ferry::backend
