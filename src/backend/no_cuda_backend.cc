// Builds without the CUDA toolkit: the CUDA backend's entry points say it is absent.
#ifndef FERRY_HAVE_CUDA

#include "backend/cuda_backend.h"

namespace ferry::backend {

bool CudaAvailable() { return false; }

Result<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions&) {
  return Unavailable("this ferry was built without the CUDA backend (configure with -DFERRY_CUDA=ON)");
}

Result<CudaDeviceInfo> QueryCudaDevice(int) {
  return Unavailable("this ferry was built without the CUDA backend (configure with -DFERRY_CUDA=ON)");
}

Result<CudaMemoryInfo> QueryCudaMemory(int) {
  return Unavailable("this ferry was built without the CUDA backend (configure with -DFERRY_CUDA=ON)");
}

}  // namespace ferry::backend

#endif  // FERRY_HAVE_CUDA
