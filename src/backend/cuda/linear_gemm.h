// Runs a prepared weight's GEMM (y = x · W^T, + bias) on cuBLASLt or ferry's small-M
// kernel, with the tuned choice of its M bucket when the engine has one.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "backend/cuda/linear_weights.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

// The norm that produces a linear's input when the quantization pass computes it. RMSNorm
// (beta null; cuda::RmsNormQuantize): the input is RmsNorm(residual (+= delta when delta is
// set)), never stored. LayerNorm (beta set; cuda::LayerNormQuantize): the input is
// LayerNorm(layer_input (+ delta)), stored in `out` as well (a BERT layer's residual stream).
struct NormInput {
  Tensor* residual = nullptr;
  const Tensor* delta = nullptr;
  const float* gamma = nullptr;  // f32, on the device
  float eps = 0.0f;
  const float* beta = nullptr;  // f32, on the device
  const Tensor* layer_input = nullptr;
  Tensor* out = nullptr;
};

// The GEMM of y = x · W^T: problem, pointers and (W8A8, fp8) the activations quantized per
// token into q and row_scales, which must live until the GEMM has run. `prologue` is applied
// to x by the quantization pass (kinds that quantize x only). With `norm`, x is norm's
// residual and the quantization pass computes the norm first (no prologue then).
Status SetUpGemm(CudaContext& ctx, const Tensor& x, const CudaLinear& lin, int64_t n, Tensor& y, cuda::GemmProblem& p,
                 cuda::GemmArgs& a, Tensor& q, Tensor& row_scales,
                 cuda::QuantPrologue prologue = cuda::QuantPrologue::kNone, const NormInput* norm = nullptr);
// fp8 and W8A8 weights (per-channel scales) for decode batches: the small-M kernel on the
// weight as it is stored and the unquantized input x [m, k] (activation dtype `act`), y [m, n].
// A W8A8 weight's input is multiplied by 1 / its SmoothQuant factors: in the kernel, or, with
// smoothed_input, already by the pass that formed x. An engine's `small_m` choice for such a
// weight's bucket selects it. Applies: the weight has what the kernel needs.
bool UnquantizedSmallMApplies(const CudaLinear& lin);
Status RunUnquantizedSmallM(const CudaLinear& lin, const void* x, DType act, int64_t m, int64_t n, int64_t k, void* y,
                            cudaStream_t stream, bool smoothed_input = false);
// y[M, N] = x[M, K] · W[N, K]^T (+ bias), enqueued on the context's stream.
Status RunLinear(CudaContext& ctx, cuda::LtGemm& gemm, const Tensor& x, const LinearWeight& w, Tensor& y);
// y = GELU(x) · W^T (+ bias): for W8A8 and fp8 weights the GELU is part of the activation
// quantization pass and x is left as it is; otherwise GELU runs in place on x first.
Status RunGeluLinear(CudaContext& ctx, cuda::LtGemm& gemm, Tensor& x, const LinearWeight& w, Tensor& y);
// Whether the weight quantizes its activations and RmsNorm(residual (+ delta)) fits the
// fused norm-and-quantization pass (cuda::RmsNormQuantizeFits). gamma: f32 on the device.
bool FusesNormLinear(const Tensor& residual, const Tensor* delta, const float* gamma, const LinearWeight& w);
// residual += delta (delta null: left as it is); y = RmsNorm(residual) · W^T (+ bias), the
// norm computed by the weight's activation quantization pass, so the normalized row is
// never stored. Only where FusesNormLinear; FailedPrecondition otherwise.
Status RunNormLinear(CudaContext& ctx, cuda::LtGemm& gemm, Tensor& residual, const Tensor* delta, const float* gamma,
                     float eps, const LinearWeight& w, Tensor& y);
// Whether the weight quantizes its activations and LayerNorm(x (+ delta)) into out fits the
// fused norm-and-quantization pass (cuda::LayerNormQuantizeFits). gamma, beta: f32 on the device.
bool FusesLayerNormLinear(const Tensor& x, const Tensor* delta, const float* gamma, const float* beta,
                          const Tensor& out, const LinearWeight& w);
// out = LayerNorm(x (+ delta)) * gamma + beta; y = out · W^T (+ bias), the weight's activation
// quantization done by the norm's pass (the same bytes as LayerNorm then the linear). Only where
// FusesLayerNormLinear; FailedPrecondition otherwise.
Status RunLayerNormLinear(CudaContext& ctx, cuda::LtGemm& gemm, const Tensor& x, const Tensor* delta,
                          const float* gamma, const float* beta, float eps, Tensor& out, const LinearWeight& w,
                          Tensor& y);
// Whether the weight's GEMM quantizes its activations per token (W8A8, fp8), the kinds whose
// quantization pass takes a prologue.
bool QuantizesActivations(const LinearWeight& w);
// y = (act(gate) * up) · W^T (+ bias), gate_up [M, 2K], for weights that QuantizesActivations:
// the gating is part of the quantization pass.
Status RunGatedLinear(CudaContext& ctx, cuda::LtGemm& gemm, const Tensor& gate_up, bool gelu_tanh,
                      const LinearWeight& w, Tensor& y);

}  // namespace ferry::backend
