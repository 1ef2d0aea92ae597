// A step's inputs onto the GPU: packed on the host straight into the pinned staging ring
// (backend/step_inputs.h lays them out) and copied over with one transfer, either into the
// ring's device side (an eager step) or into a step graph's persistent input buffer.
#pragma once

#include "backend/cuda/context.h"
#include "backend/step_inputs.h"

namespace ferry::backend {

// Backend::UploadStep: the inputs planned for the batch's own longest context, in the ring
// (valid until the next Synchronize).
Result<StepTensors> UploadStepInputs(CudaContext& ctx, const StepInputs& inputs);
// Enqueues the copy of `inputs`, packed as `layout` says, into device memory at `dst`
// (layout.bytes() of it).
Status CopyStepInputs(CudaContext& ctx, const StepInputs& inputs, const StepInputLayout& layout, void* dst);

}  // namespace ferry::backend
