#include "backend/cuda/graph_recorder.h"

#include <cuda_runtime.h>

#include "backend/cuda/step_upload.h"
#include "kernels/cuda/cuda_check.h"

namespace ferry::backend {

namespace {

// One recorded step: the executable graph and the input buffer its kernels read.
struct CudaRecording final : GraphRecorder::Recording {
  std::shared_ptr<void> inputs;
  cudaGraphExec_t exec = nullptr;
  ~CudaRecording() override {
    // An executable graph still running is freed when it completes.
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
};

// Captures the stream for its lifetime. However the capture ends, the context leaves
// recording mode; unless it succeeded (an error, or an exception from the body), a capture
// still open is ended and its graph destroyed, the copies already enqueued are waited for
// and the staging ring restarts, so no half-recorded graph or unwritten staged data
// outlives the attempt.
class CaptureScope {
 public:
  explicit CaptureScope(CudaContext& ctx) : ctx_(ctx) {}
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
  ~CaptureScope() {
    ctx_.set_recording(false);
    if (succeeded_) return;
    if (open_) {
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(ctx_.stream(), &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
    }
    cudaStreamSynchronize(ctx_.stream());
    ctx_.staging().Reset();
  }

  Status Begin() {
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(ctx_.stream(), cudaStreamCaptureModeRelaxed));
    open_ = true;
    ctx_.set_recording(true);
    return Status::Ok();
  }
  // The captured graph (the caller destroys it).
  cudaError_t End(cudaGraph_t* graph) {
    open_ = false;
    ctx_.set_recording(false);
    return cudaStreamEndCapture(ctx_.stream(), graph);
  }
  void Succeeded() { succeeded_ = true; }

 private:
  CudaContext& ctx_;
  bool open_ = false;
  bool succeeded_ = false;
};

}  // namespace

Result<Tensor> CudaGraphRecorder::RunEager(const StepInputs& inputs, const StepBody& body) {
  FERRY_ASSIGN_OR_RETURN(const StepTensors uploaded, UploadStepInputs(ctx_, inputs));
  return body(uploaded);
}

Result<std::unique_ptr<GraphRecorder::Recording>> CudaGraphRecorder::Record(const StepInputs& inputs,
                                                                            const StepInputLayout& layout,
                                                                            const StepBody& body, Tensor& output) {
  if (ctx_.recording()) return FailedPrecondition("step graphs do not nest");
  // The eager run has finished with its staged data, and its uploads and GEMM plans are in place.
  FERRY_RETURN_IF_ERROR(ctx_.Synchronize());
  auto rec = std::make_unique<CudaRecording>();
  FERRY_ASSIGN_OR_RETURN(rec->inputs, ctx_.AllocatePersistent(layout.bytes()));
  // Enqueued before the capture begins, so the recording's first run reads this step's inputs.
  FERRY_RETURN_IF_ERROR(CopyStepInputs(ctx_, inputs, layout, rec->inputs.get()));
  const StepTensors views = StepTensorsAt(inputs, layout, rec->inputs.get(), ctx_.device());

  CaptureScope scope(ctx_);
  FERRY_RETURN_IF_ERROR(scope.Begin());
  Result<Tensor> out = body(views);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = scope.End(&graph);
  if (!out.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!out.ok()) return out.status();
    FERRY_CUDA_RETURN_IF_ERROR(ended);
  }
  if (out->defined() && !out->is_contiguous()) {
    cudaGraphDestroy(graph);
    return InvalidArgument("a step graph's output must be contiguous, got " + out->DebugString());
  }
  const cudaError_t instantiated = cudaGraphInstantiate(&rec->exec, graph, 0);
  cudaGraphDestroy(graph);
  FERRY_CUDA_RETURN_IF_ERROR(instantiated);
  // The eager run computed this step, but the caller gets the recording's buffers: fill them.
  FERRY_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(rec->exec, ctx_.stream()));
  // A view without ownership: like every buffer the body allocated, the output goes back to
  // the graphs' pool when the body's tensors die, and the recording keeps writing it.
  output =
      out->defined() ? Tensor::FromBorrowed(out->raw(), out->shape(), out->dtype(), nullptr, out->device()) : Tensor();
  scope.Succeeded();
  return std::unique_ptr<GraphRecorder::Recording>(std::move(rec));
}

Status CudaGraphRecorder::Replay(Recording& recording, const StepInputs& inputs, const StepInputLayout& layout) {
  if (ctx_.recording()) return FailedPrecondition("step graphs do not nest");
  auto& rec = static_cast<CudaRecording&>(recording);
  // Stream order puts the copy after the previous replay's reads and before this one's.
  FERRY_RETURN_IF_ERROR(CopyStepInputs(ctx_, inputs, layout, rec.inputs.get()));
  FERRY_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(rec.exec, ctx_.stream()));
  return Status::Ok();
}

}  // namespace ferry::backend
