#include "kernels/cuda/cuda_check.h"

#include <string>

namespace ferry::cuda {

namespace {

std::string Where(const char* expr, const char* file, int line) {
  return std::string(expr) + " at " + file + ":" + std::to_string(line);
}

}  // namespace

Status CudaFailure(cudaError_t error, const char* expr, const char* file, int line) {
  const std::string message = Where(expr, file, line) + ": " + cudaGetErrorName(error) + " (" +
                              cudaGetErrorString(error) + ")";
  if (error == cudaErrorMemoryAllocation) return ResourceExhausted(message);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver) return Unavailable(message);
  return Internal(message);
}

Status CublasFailure(cublasStatus_t status, const char* expr, const char* file, int line) {
  const std::string message = Where(expr, file, line) + ": " + cublasGetStatusName(status) + " (" +
                              cublasGetStatusString(status) + ")";
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return Unimplemented(message);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return ResourceExhausted(message);
  return Internal(message);
}

}  // namespace ferry::cuda
