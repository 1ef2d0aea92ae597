#include "backend/cuda/step_upload.h"

#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

namespace {

// Packs the inputs into the ring and enqueues their copy to `dst` (null: the ring's device
// side); returns where they land.
Result<void*> Send(CudaContext& ctx, const StepInputs& inputs, const StepInputLayout& layout, void* dst) {
  FERRY_ASSIGN_OR_RETURN(const StagingRing::Slot slot, ctx.Reserve(layout.bytes()));
  PackStepInputs(inputs, layout, static_cast<int32_t*>(slot.host));
  void* to = dst != nullptr ? dst : slot.device;
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to, slot.host, layout.bytes(), cudaMemcpyHostToDevice, ctx.stream()));
  if (!inputs.token_patches.empty()) {
    // Ids an earlier step drew on the device: written over the placeholders, in stream order
    // after that step's sampling and this copy.
    const Tensor* source = inputs.patch_source;
    const int64_t count = static_cast<int64_t>(inputs.token_patches.size()) / 2;
    if (source == nullptr || source->device().is_cpu() || source->dtype() != DType::kI32 ||
        inputs.token_patches.size() % 2 != 0) {
      return InvalidArgument("step token patches need pairs and an i32 source on the device");
    }
    for (int64_t k = 0; k < count; ++k) {
      const int32_t i = inputs.token_patches[2 * k];
      const int32_t j = inputs.token_patches[2 * k + 1];
      if (i < 0 || i >= layout.tokens || j < 0 || j >= source->numel()) {
        return InvalidArgument("step token patch (" + std::to_string(i) + ", " + std::to_string(j) +
                               ") is outside the step's " + std::to_string(layout.tokens) + " tokens or the " +
                               std::to_string(source->numel()) + " drawn ids");
      }
    }
    FERRY_RETURN_IF_ERROR(ctx.NotRecording("patching step tokens"));
    FERRY_ASSIGN_OR_RETURN(void* pairs, ctx.Stage(inputs.token_patches.data(), inputs.token_patches.size_bytes()));
    FERRY_RETURN_IF_ERROR(cuda::PatchTokens(static_cast<int32_t*>(to) + layout.token_ids_at,
                                            source->data<int32_t>(), static_cast<const int32_t*>(pairs),
                                            static_cast<int>(count), ctx.stream()));
  }
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
