// CUDA graphs for step graphs (backend/step_graphs.h): a step recorded by capturing the
// backend's stream while the body runs on a persistent input buffer that the recording
// owns, and replayed as one host-to-device copy of the step's packed inputs into that buffer
// plus cudaGraphLaunch. Thread-compatible (the backend's stream).
#pragma once

#include <memory>

#include "backend/cuda/context.h"
#include "backend/step_graphs.h"

namespace ferry::backend {

class CudaGraphRecorder final : public GraphRecorder {
 public:
  explicit CudaGraphRecorder(CudaContext& ctx) : ctx_(ctx) {}

  Result<Tensor> RunEager(const StepInputs& inputs, const StepBody& body) override;
  // While the body is captured, device memory comes from the graphs' pool (those buffers go
  // back to it afterwards and may serve other recordings, which never run at the same time),
  // and nothing may wait for the stream or stage host data: such a body fails to record.
  Result<std::unique_ptr<Recording>> Record(const StepInputs& inputs, const StepInputLayout& layout,
                                            const StepBody& body, Tensor& output) override;
  Status Replay(Recording& recording, const StepInputs& inputs, const StepInputLayout& layout) override;

 private:
  CudaContext& ctx_;
};

}  // namespace ferry::backend
