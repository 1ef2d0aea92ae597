// The CUDA backend: cuBLASLt for GEMMs, ferry's own kernels for the rest (kernels/cuda).
// Activations live on the GPU in bf16 (or f16/f32, chosen at construction); weights are
// converted once at PrepareLinear; host-side weight tensors that ops receive (norm
// gammas, embedding tables, RoPE frequencies) are uploaded on first use and cached.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace ferry::backend {

struct CudaBackendOptions {
  int device = 0;
  DType activations = DType::kBF16;  // kBF16, kF16 or kF32
  DType kv_cache = DType::kBF16;     // the KV cache dtype the model allocates (kBF16, kF16, kF32, kF8E4M3)
};

// Whether a CUDA device is present and usable (false when built without CUDA).
bool CudaAvailable();

// What a GPU engine file is tied to: the device's architecture and the libraries whose
// kernels and algorithm ids it stores.
struct CudaDeviceInfo {
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int runtime_version = 0;   // cudaRuntimeGetVersion, e.g. 13000
  int driver_version = 0;    // cudaDriverGetVersion
  size_t cublaslt_version = 0;  // cublasLtGetVersion
  std::string arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }
};
// Unavailable without a device (or without the CUDA backend in this build).
Result<CudaDeviceInfo> QueryCudaDevice(int device);

// A device's memory as cudaMemGetInfo reports it (free counts what this process and
// others have taken already).
struct CudaMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
// Unavailable without a device (or without the CUDA backend in this build).
Result<CudaMemoryInfo> QueryCudaMemory(int device);

// Unavailable when there is no GPU or the build has no CUDA backend.
Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options);

}  // namespace ferry::backend
