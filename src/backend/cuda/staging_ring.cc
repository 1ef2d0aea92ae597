#include "backend/cuda/staging_ring.h"

#include <cstring>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace ferry::backend {

StagingRing::~StagingRing() {
  if (host_ != nullptr) cudaFreeHost(host_);
  if (device_ != nullptr) cudaFree(device_);
}

Status StagingRing::Init() {
  FERRY_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host_, kBytes, cudaHostAllocDefault));
  FERRY_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_, kBytes));
  return Status::Ok();
}

Result<StagingRing::Slot> StagingRing::Reserve(size_t bytes, cudaStream_t stream) {
  const size_t size = (bytes + 255) & ~static_cast<size_t>(255);
  if (size > kBytes) {
    return ResourceExhausted("the staging ring of " + std::to_string(kBytes) + " bytes cannot take " +
                             std::to_string(bytes) + " bytes");
  }
  if (offset_ + size > kBytes) {
    FERRY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    Reset();
  }
  Slot slot{static_cast<char*>(host_) + offset_, static_cast<char*>(device_) + offset_, bytes};
  offset_ += size;
  return slot;
}

Result<void*> StagingRing::Put(const void* src, size_t bytes, cudaStream_t stream) {
  for (size_t i = 0; i < used_; ++i) {
    const Entry& e = entries_[i];
    if (e.host == src && e.bytes.size() == bytes && std::memcmp(e.bytes.data(), src, bytes) == 0) return e.device;
  }
  FERRY_ASSIGN_OR_RETURN(const Slot slot, Reserve(bytes, stream));
  if (bytes > 0) {
    std::memcpy(slot.host, src, bytes);
    FERRY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.device, slot.host, bytes, cudaMemcpyHostToDevice, stream));
  }
  if (used_ < kMaxEntries) {
    // Entries keep their buffers between steps, so the steady state allocates nothing.
    if (used_ == entries_.size()) entries_.emplace_back();
    Entry& e = entries_[used_++];
    const char* p = static_cast<const char*>(src);
    e.host = src;
    e.bytes.assign(p, p + bytes);
    e.device = slot.device;
  }
  return slot.device;
}

void StagingRing::Reset() {
  offset_ = 0;
  used_ = 0;
}

}  // namespace ferry::backend
