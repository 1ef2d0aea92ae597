#include "backend/cuda/weight_loader.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// Pinned slots, device scratch for converted chunks (allocated at the first conversion),
// one event per slot, and the copy stream. Owns them all (RAII).
class CudaStagingTarget final : public StagingTarget {
 public:
  explicit CudaStagingTarget(int device) : device_(device) {}
  ~CudaStagingTarget() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (void* p : host_) cudaFreeHost(p);
    for (void* p : scratch_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    FERRY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (int s = 0; s < WeightLoader::kSlots; ++s) {
      void* p = nullptr;
      FERRY_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, WeightLoader::kSlotBytes, cudaHostAllocDefault));
      host_.push_back(p);
      cudaEvent_t e = nullptr;
      FERRY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events_.push_back(e);
    }
    return Status::Ok();
  }

  int slot_count() const override { return static_cast<int>(host_.size()); }
  size_t slot_bytes() const override { return WeightLoader::kSlotBytes; }
  void* slot_memory(int slot) override { return host_[slot]; }

  Status Enqueue(int slot, const StagedCopy& copy, const StagedChunk& chunk) override {
    const size_t src_bytes = static_cast<size_t>(chunk.count) * DTypeSize(copy.src_dtype);
    char* dst = static_cast<char*>(copy.dst) + static_cast<size_t>(chunk.first) * DTypeSize(copy.dst_dtype);
    if (copy.src_dtype == copy.dst_dtype) {
      FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, host_[slot], src_bytes, cudaMemcpyHostToDevice, stream_));
    } else {
      if (scratch_.empty()) {
        for (int s = 0; s < slot_count(); ++s) {
          void* p = nullptr;
          FERRY_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, WeightLoader::kSlotBytes));
          scratch_.push_back(p);
        }
      }
      // Raw bytes first, then the conversion kernel on the same stream: the next chunk's
      // copy into another slot overlaps this kernel.
      FERRY_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(scratch_[slot], host_[slot], src_bytes, cudaMemcpyHostToDevice, stream_));
      FERRY_RETURN_IF_ERROR(cuda::Convert(scratch_[slot], copy.src_dtype, dst, copy.dst_dtype, chunk.count, stream_));
    }
    FERRY_CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[slot], stream_));
    return Status::Ok();
  }
  Status WaitSlot(int slot) override {
    FERRY_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events_[slot]));
    return Status::Ok();
  }
  Status Drain() override {
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

 private:
  const int device_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> host_;
  std::vector<void*> scratch_;
  std::vector<cudaEvent_t> events_;
};

Result<std::unique_ptr<WeightLoader>> WeightLoader::Create(CudaContext& ctx) {
  std::unique_ptr<WeightLoader> l(new WeightLoader());
  l->ctx_ = &ctx;
  l->target_ = std::make_unique<CudaStagingTarget>(ctx.device().index);
  FERRY_RETURN_IF_ERROR(l->target_->Init().WithContext("setting up the weight loader's pinned buffers"));
  // Host threads fill the slots (and fault the mapping's pages in) in parallel; a few are
  // enough to outrun a PCIe link from the page cache.
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  l->copier_ = std::make_unique<StagedCopier>(*l->target_, threads);
  l->started_ = Now();
  return l;
}

WeightLoader::~WeightLoader() = default;

Status WeightLoader::CopyToDevice(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t elements) {
  return copier_->Copy(StagedCopy{src, src_dtype, dst, dst_dtype, elements});
}

Result<Tensor> WeightLoader::Upload(const Tensor& t, DType dtype) {
  if (!t.is_contiguous()) return InvalidArgument("uploading a non-contiguous weight " + t.DebugString());
  FERRY_ASSIGN_OR_RETURN(Tensor dev, ctx_->Allocate(t.shape(), dtype));
  FERRY_RETURN_IF_ERROR(CopyToDevice(t.raw(), t.dtype(), dev.raw(), dtype, t.numel()));
  return dev;
}

Status WeightLoader::Finish() {
  FERRY_RETURN_IF_ERROR(copier_->Finish());
  const StagedCopyStats& s = copier_->stats();
  const double seconds = Now() - started_;
  FERRY_LOG_INFO("{}: {:.2f} GB of weights staged in {} chunks in {:.2f} s ({:.2f} GB/s; host fill {:.2f} s, "
                 "waiting for the device {:.2f} s)",
                 ctx_->device().ToString(), s.bytes / 1e9, s.chunks, seconds,
                 seconds > 0 ? s.bytes / 1e9 / seconds : 0.0, s.fill_seconds, s.wait_seconds);
  return Status::Ok();
}

const StagedCopyStats& WeightLoader::stats() const { return copier_->stats(); }

}  // namespace ferry::backend
