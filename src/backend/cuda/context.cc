#include "backend/cuda/context.h"

#include <string>

#include "kernels/cuda/cuda_check.h"

namespace ferry::backend {

Result<std::unique_ptr<CudaContext>> CudaContext::Create(int device) {
  std::unique_ptr<CudaContext> ctx(new CudaContext(device));
  FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ctx->stream_, cudaStreamNonBlocking));
  ctx->pool_ = std::make_shared<DevicePool>(device);
  ctx->graph_pool_ = std::make_shared<DevicePool>(device);
  FERRY_RETURN_IF_ERROR(ctx->staging_.Init());
  cudaDeviceProp prop{};
  FERRY_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  ctx->name_ =
      std::string("cuda:") + prop.name + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  ctx->where_ = ctx->device().ToString() + " (" + prop.name + ")";
  return ctx;
}

CudaContext::~CudaContext() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

Result<Tensor> CudaContext::Allocate(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  DevicePool& pool = recording_ ? *graph_pool_ : *pool_;
  Result<std::shared_ptr<void>> block = pool.Get(bytes, /*may_trim=*/!recording_);
  if (!block.ok()) {
    return block.status().WithContext("allocating " + std::string(DTypeName(dtype)) + ShapeToString(shape) + " (" +
                                      std::to_string(bytes) + " bytes) on " + where_);
  }
  std::shared_ptr<void> mem = std::move(block).value();
  return Tensor::FromBorrowed(mem.get(), shape, dtype, mem, device());
}

Result<std::shared_ptr<void>> CudaContext::AllocatePersistent(size_t bytes) {
  Result<std::shared_ptr<void>> block = pool_->Get(bytes, /*may_trim=*/!recording_);
  if (!block.ok()) return block.status().WithContext("allocating " + std::to_string(bytes) + " bytes on " + where_);
  return block;
}

size_t CudaContext::held_bytes() const {
  return pool_->allocated_bytes() + graph_pool_->allocated_bytes() + StagingRing::kBytes;
}

void CudaContext::TrimPools() {
  pool_->Trim();
  graph_pool_->Trim();
}

Status CudaContext::NotRecording(const char* what) const {
  if (!recording_) return Status::Ok();
  return FailedPrecondition(std::string(what) + " cannot run inside a step graph");
}

Result<void*> CudaContext::Stage(const void* host, size_t bytes) {
  FERRY_RETURN_IF_ERROR(NotRecording("copying a host array to the device"));
  return staging_.Put(host, bytes, stream_);
}

Result<StagingRing::Slot> CudaContext::Reserve(size_t bytes) {
  FERRY_RETURN_IF_ERROR(NotRecording("uploading step inputs"));
  return staging_.Reserve(bytes, stream_);
}

Result<Tensor> CudaContext::Upload(const void* host, const Shape& shape, DType dtype) {
  FERRY_RETURN_IF_ERROR(NotRecording("uploading a weight"));
  FERRY_ASSIGN_OR_RETURN(Tensor dev, Allocate(shape, dtype));
  FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.raw(), host, dev.nbytes(), cudaMemcpyHostToDevice, stream_));
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return dev;
}

Status CudaContext::Synchronize() {
  FERRY_RETURN_IF_ERROR(NotRecording("Synchronize"));
  FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  staging_.Reset();
  return Status::Ok();
}

}  // namespace ferry::backend
