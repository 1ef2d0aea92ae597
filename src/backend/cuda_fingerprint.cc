#include "backend/cuda_fingerprint.h"

#include <string>

#include "backend/cuda_backend.h"

namespace ferry::backend {

Result<io::EngineFingerprint> CudaFingerprint(int device) {
  FERRY_ASSIGN_OR_RETURN(const CudaDeviceInfo gpu, QueryCudaDevice(device));
  io::EngineFingerprint fp;
  fp.device = "cuda";
  fp.gpu = gpu.name;
  fp.arch = gpu.arch();
  fp.cuda_runtime_version = gpu.runtime_version;
  fp.cublaslt_version = gpu.cublaslt_version;
  return fp;
}

Status CheckCudaFingerprint(const io::EngineFingerprint& fp, int device) {
  if (fp.device != "cuda") return FailedPrecondition("engine was built for device '" + fp.device + "', not a GPU");
  auto gpu = QueryCudaDevice(device);
  if (!gpu.ok()) return gpu.status().WithContext("engine was built for a GPU (" + fp.arch + ")");
  if (gpu->arch() != fp.arch) {
    return FailedPrecondition("engine was built and tuned for " + fp.arch + " (" + fp.gpu + "), this GPU is " +
                              gpu->arch() + " (" + gpu->name + "): rebuild it on this GPU");
  }
  if (fp.cublaslt_version != gpu->cublaslt_version) {
    return FailedPrecondition("engine stores GEMM algorithms tuned with cuBLASLt " +
                              std::to_string(fp.cublaslt_version) + ", this process has cuBLASLt " +
                              std::to_string(gpu->cublaslt_version) + ": rebuild the engine");
  }
  return Status::Ok();
}

}  // namespace ferry::backend
