#include "backend/cuda/step_upload.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"

namespace ferry::backend {

namespace {

// Packs the inputs into the ring and enqueues their copy to `dst` (null: the ring's device
// side); returns where they land.
Result<void*> Send(CudaContext& ctx, const StepInputs& inputs, const StepInputLayout& layout, void* dst) {
  FERRY_ASSIGN_OR_RETURN(const StagingRing::Slot slot, ctx.Reserve(layout.bytes()));
  PackStepInputs(inputs, layout, static_cast<int32_t*>(slot.host));
  void* to = dst != nullptr ? dst : slot.device;
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to, slot.host, layout.bytes(), cudaMemcpyHostToDevice, ctx.stream()));
  return to;
}

}  // namespace

Result<StepTensors> UploadStepInputs(CudaContext& ctx, const StepInputs& inputs) {
  FERRY_ASSIGN_OR_RETURN(const StepInputLayout layout, PlanStepInputs(inputs, /*plan_context=*/0));
  FERRY_ASSIGN_OR_RETURN(void* device, Send(ctx, inputs, layout, nullptr));
  return StepTensorsAt(inputs, layout, device, ctx.device());
}

Status CopyStepInputs(CudaContext& ctx, const StepInputs& inputs, const StepInputLayout& layout, void* dst) {
  return Send(ctx, inputs, layout, dst).status();
}

}  // namespace ferry::backend
