// Runs a prepared weight's GEMM (y = x · W^T, + bias) on cuBLASLt or ferry's small-M
// kernel, with the tuned choice of its M bucket when the engine has one.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "backend/cuda/linear_weights.h"
#include "kernels/cuda/gemm.h"

namespace ferry::backend {

// The GEMM of y = x · W^T: problem, pointers and (W8A8, fp8) the activations quantized per
// token into q and row_scales, which must live until the GEMM has run.
Status SetUpGemm(CudaContext& ctx, const Tensor& x, const CudaLinear& lin, int64_t n, Tensor& y, cuda::GemmProblem& p,
                 cuda::GemmArgs& a, Tensor& q, Tensor& row_scales);
// y[M, N] = x[M, K] · W[N, K]^T (+ bias), enqueued on the context's stream.
Status RunLinear(CudaContext& ctx, cuda::LtGemm& gemm, const Tensor& x, const LinearWeight& w, Tensor& y);

}  // namespace ferry::backend
