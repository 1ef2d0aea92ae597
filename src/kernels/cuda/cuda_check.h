// Checked CUDA and cuBLASLt calls: every failure becomes a Status naming the expression,
// the file and line, and the library's own error string.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/status.h"

namespace ferry::cuda {

Status CudaFailure(cudaError_t error, const char* expr, const char* file, int line);
Status CublasFailure(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace ferry::cuda

#define FERRY_CUDA_RETURN_IF_ERROR(expr)                                              \
  do {                                                                                \
    const cudaError_t ferry_cuda_error_ = (expr);                                     \
    if (ferry_cuda_error_ != cudaSuccess) {                                           \
      return ::ferry::cuda::CudaFailure(ferry_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

#define FERRY_CUBLAS_RETURN_IF_ERROR(expr)                                              \
  do {                                                                                  \
    const cublasStatus_t ferry_cublas_status_ = (expr);                                 \
    if (ferry_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      return ::ferry::cuda::CublasFailure(ferry_cublas_status_, #expr, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

// After a kernel launch: the launch's own error (bad configuration, no device).
#define FERRY_CUDA_RETURN_IF_LAUNCH_FAILED() FERRY_CUDA_RETURN_IF_ERROR(cudaGetLastError())
