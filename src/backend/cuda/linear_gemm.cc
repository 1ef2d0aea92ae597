#include "backend/cuda/linear_gemm.h"

#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace ferry::backend {

Status SetUpGemm(CudaContext& ctx, const Tensor& x, const CudaLinear& lin, int64_t n, Tensor& y, cuda::GemmProblem& p,
                 cuda::GemmArgs& a, Tensor& q, Tensor& row_scales, cuda::QuantPrologue prologue,
                 const NormInput* norm) {
  const bool gated = prologue == cuda::QuantPrologue::kSiluMul || prologue == cuda::QuantPrologue::kGeluTanhMul;
  const int64_t m = x.dim(0), k = gated ? x.dim(1) / 2 : x.dim(1);
  p.kind = lin.kind;
  p.out_dtype = y.dtype();
  p.m = m;
  p.n = n;
  p.k = k;
  p.has_bias = lin.bias.defined();
  p.bias_dtype = p.has_bias ? lin.bias.dtype() : DType::kF32;
  a.x = x.raw();
  a.w = lin.weight.raw();
  a.y = y.raw();
  a.bias = p.has_bias ? lin.bias.raw() : nullptr;
  if (lin.kind == cuda::GemmKind::kInt8 || lin.kind == cuda::GemmKind::kFp8) {
    // Per-token dynamic activation quantization.
    const bool int8 = lin.kind == cuda::GemmKind::kInt8;
    const float* inv_smooth = int8 && lin.inv_smooth.defined() ? lin.inv_smooth.data<float>() : nullptr;
    FERRY_ASSIGN_OR_RETURN(row_scales, ctx.Allocate({m}, DType::kF32));
    FERRY_ASSIGN_OR_RETURN(q, ctx.Allocate({m, k}, int8 ? DType::kI8 : DType::kF8E4M3));
    if (norm != nullptr && norm->beta != nullptr) {
      if (prologue != cuda::QuantPrologue::kNone) return InvalidArgument("SetUpGemm: a norm input takes no prologue");
      FERRY_RETURN_IF_ERROR(cuda::LayerNormQuantize(
          norm->layer_input->raw(), norm->delta != nullptr ? norm->delta->raw() : nullptr, norm->gamma, norm->beta,
          norm->eps, m, k, norm->out->raw(), inv_smooth, q.raw(), q.dtype(), row_scales.data<float>(), x.dtype(),
          ctx.stream()));
    } else if (norm != nullptr) {
      if (prologue != cuda::QuantPrologue::kNone) return InvalidArgument("SetUpGemm: a norm input takes no prologue");
      FERRY_RETURN_IF_ERROR(cuda::RmsNormQuantize(norm->residual->raw(),
                                                  norm->delta != nullptr ? norm->delta->raw() : nullptr, norm->gamma,
                                                  norm->eps, m, k, inv_smooth, q.raw(), q.dtype(),
                                                  row_scales.data<float>(), x.dtype(), ctx.stream()));
    } else if (int8) {
      FERRY_RETURN_IF_ERROR(cuda::QuantizeRowsInt8(x.raw(), m, k, inv_smooth, q.data<int8_t>(), row_scales.data<float>(),
                                                   x.dtype(), ctx.stream(), prologue));
    } else {
      FERRY_RETURN_IF_ERROR(
          cuda::QuantizeRowsFp8(x.raw(), m, k, q.raw(), row_scales.data<float>(), x.dtype(), ctx.stream(), prologue));
    }
    if (!int8) {
      p.fp8_scaling = cuda::Fp8Scaling::kPerRowCol;
      p.fp8_fast_accum = lin.fp8_fast_accum;
    }
    a.x = q.raw();
    a.x_scale = row_scales.data<float>();
  }
  if (lin.kind == cuda::GemmKind::kInt8 || lin.kind == cuda::GemmKind::kFp8 ||
      lin.kind == cuda::GemmKind::kInt8WeightOnly || lin.kind == cuda::GemmKind::kInt4WeightOnly) {
    a.w_scale = lin.scales.data<float>();
  }
  if (lin.kind == cuda::GemmKind::kInt4WeightOnly) {
    a.w_zero = lin.zeros.data<uint8_t>();
    p.group_size = lin.group_size;
  }
  return Status::Ok();
}

bool UnquantizedSmallMApplies(const CudaLinear& lin) {
  return (lin.kind == cuda::GemmKind::kFp8 || lin.kind == cuda::GemmKind::kInt8) && lin.scales.defined() &&
         lin.scales.numel() == lin.weight.dim(0) && lin.smooth.defined() == lin.inv_smooth.defined();
}

Status RunUnquantizedSmallM(const CudaLinear& lin, const void* x, DType act, int64_t m, int64_t n, int64_t k, void* y,
                            cudaStream_t stream, bool smoothed_input) {
  const bool has_bias = lin.bias.defined();
  const void* bias = has_bias ? lin.bias.raw() : nullptr;
  const DType bias_dtype = has_bias ? lin.bias.dtype() : DType::kF32;
  if (lin.kind == cuda::GemmKind::kFp8) {
    return cuda::gemm_kernels::Fp8WeightOnlySmallM(x, act, k, m, lin.weight.raw(), lin.scales.data<float>(), n, k, bias,
                                                   bias_dtype, cuda::GemmActivation::kNone, y, n, stream);
  }
  return cuda::gemm_kernels::Int8SmoothedSmallM(
      x, act, k, m, lin.weight.data<int8_t>(), lin.scales.data<float>(),
      lin.inv_smooth.defined() && !smoothed_input ? lin.inv_smooth.data<float>() : nullptr, n, k, bias, bias_dtype,
      cuda::GemmActivation::kNone, y, n, stream);
}

namespace {

// Whether a quantized linear's tuned choice for this M bucket is the small-M kernel on the
// unquantized input.
bool UnquantizedSmallMChosen(const CudaLinear& lin, const cuda::GemmChoice* choice) {
  return choice != nullptr && choice->route == cuda::GemmChoice::Route::kSmallM && UnquantizedSmallMApplies(lin);
}

// An fp8 or W8A8 linear through the small-M kernel: its input is formed in the activation
// dtype by the pass the quantization would have done it in (the norm, the gating, the GELU),
// and read unquantized. A W8A8 weight's 1 / SmoothQuant factors are applied by the norm and
// the gatings as they form the input (one multiply there, instead of a vector every block of
// the GEMM re-reads); an input formed elsewhere is multiplied in the GEMM.
Status RunUnquantized(CudaContext& ctx, const Tensor& x, const CudaLinear& lin, int64_t n, int64_t k, Tensor& y,
                      cuda::QuantPrologue prologue, const NormInput* norm) {
  const int64_t m = y.dim(0);
  const DType act = x.dtype();
  const float* inv_smooth =
      lin.kind == cuda::GemmKind::kInt8 && lin.inv_smooth.defined() ? lin.inv_smooth.data<float>() : nullptr;
  if (norm != nullptr && norm->beta != nullptr) {
    // LayerNorm: its output is stored anyway, and read unquantized (not smoothed).
    FERRY_RETURN_IF_ERROR(cuda::LayerNorm(norm->layer_input->raw(), norm->delta != nullptr ? norm->delta->raw() : nullptr,
                                          norm->gamma, norm->beta, norm->eps, m, k, norm->out->raw(), act,
                                          ctx.stream()));
    return RunUnquantizedSmallM(lin, norm->out->raw(), act, m, n, k, y.raw(), ctx.stream());
  }
  bool smoothed = false;
  Tensor in = x;
  if (norm != nullptr || prologue != cuda::QuantPrologue::kNone) {
    FERRY_ASSIGN_OR_RETURN(in, ctx.Allocate({m, k}, act));
  }
  if (norm != nullptr) {
    if (norm->delta != nullptr) {
      FERRY_RETURN_IF_ERROR(cuda::AddRmsNorm(norm->residual->raw(), norm->delta->raw(), norm->gamma, norm->eps, m, k,
                                             in.raw(), act, ctx.stream(), inv_smooth));
    } else {
      FERRY_RETURN_IF_ERROR(cuda::RmsNorm(norm->residual->raw(), norm->gamma, norm->eps, m, k, in.raw(), act,
                                          ctx.stream(), inv_smooth));
    }
    smoothed = true;
  } else if (prologue == cuda::QuantPrologue::kSiluMul) {
    FERRY_RETURN_IF_ERROR(cuda::SiluMul(x.raw(), m, k, in.raw(), act, ctx.stream(), inv_smooth));
    smoothed = true;
  } else if (prologue == cuda::QuantPrologue::kGeluTanhMul) {
    FERRY_RETURN_IF_ERROR(cuda::GeluTanhMul(x.raw(), m, k, in.raw(), act, ctx.stream(), inv_smooth));
    smoothed = true;
  } else if (prologue == cuda::QuantPrologue::kGeluErf) {
    FERRY_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(in.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, ctx.stream()));
    FERRY_RETURN_IF_ERROR(cuda::Gelu(in.raw(), in.numel(), act, ctx.stream()));
  }
  return RunUnquantizedSmallM(lin, in.raw(), act, m, n, k, y.raw(), ctx.stream(), smoothed);
}

Status RunPrepared(CudaContext& ctx, cuda::LtGemm& gemm, const Tensor& x, const LinearWeight& w, Tensor& y,
                   cuda::QuantPrologue prologue, const NormInput* norm = nullptr) {
  const auto* lin = static_cast<const CudaLinear*>(w.packed.get());
  if (lin == nullptr) return FailedPrecondition("Linear: weight was not prepared for the CUDA backend");
  const bool gated = prologue == cuda::QuantPrologue::kSiluMul || prologue == cuda::QuantPrologue::kGeluTanhMul;
  const int64_t m = x.dim(0), n = w.out_features(), k = w.in_features();
  if (x.dim(1) != (gated ? 2 * k : k) || y.dim(0) != m || y.dim(1) != n) {
    return InvalidArgument("Linear: shapes x " + x.DebugString() + ", y " + y.DebugString() + " do not fit [" +
                           std::to_string(n) + ", " + std::to_string(k) + "]");
  }
  if (m == 0) return Status::Ok();
  const cuda::GemmChoice* choice = nullptr;
  const int bucket = cuda::GemmMBucket(m);
  if (bucket < static_cast<int>(lin->choices.size()) && lin->choices[bucket].has_value())
    choice = &*lin->choices[bucket];
  if (UnquantizedSmallMChosen(*lin, choice)) return RunUnquantized(ctx, x, *lin, n, k, y, prologue, norm);
  cuda::GemmProblem p;
  cuda::GemmArgs a;
  Tensor q, row_scales;
  FERRY_RETURN_IF_ERROR(SetUpGemm(ctx, x, *lin, n, y, p, a, q, row_scales, prologue, norm));
  p.small_m_max = w.small_m_max;
  return gemm.Run(p, a, ctx.stream(), choice);
}

}  // namespace

Status RunLinear(CudaContext& ctx, cuda::LtGemm& gemm, const Tensor& x, const LinearWeight& w, Tensor& y) {
  return RunPrepared(ctx, gemm, x, w, y, cuda::QuantPrologue::kNone);
}

bool QuantizesActivations(const LinearWeight& w) {
  const auto* lin = static_cast<const CudaLinear*>(w.packed.get());
  return lin != nullptr && (lin->kind == cuda::GemmKind::kInt8 || lin->kind == cuda::GemmKind::kFp8);
}

Status RunGatedLinear(CudaContext& ctx, cuda::LtGemm& gemm, const Tensor& gate_up, bool gelu_tanh,
                      const LinearWeight& w, Tensor& y) {
  if (!QuantizesActivations(w)) return FailedPrecondition("GatedLinear: the weight does not quantize activations");
  return RunPrepared(ctx, gemm, gate_up, w, y,
                     gelu_tanh ? cuda::QuantPrologue::kGeluTanhMul : cuda::QuantPrologue::kSiluMul);
}

bool FusesNormLinear(const Tensor& residual, const Tensor* delta, const float* gamma, const LinearWeight& w) {
  if (!QuantizesActivations(w) || residual.rank() != 2 || (delta != nullptr && delta->shape() != residual.shape())) {
    return false;
  }
  const auto* lin = static_cast<const CudaLinear*>(w.packed.get());
  const float* inv_smooth =
      lin->kind == cuda::GemmKind::kInt8 && lin->inv_smooth.defined() ? lin->inv_smooth.data<float>() : nullptr;
  return cuda::RmsNormQuantizeFits(residual.raw(), delta != nullptr ? delta->raw() : nullptr, gamma, inv_smooth,
                                   residual.dim(1), residual.dtype());
}

Status RunNormLinear(CudaContext& ctx, cuda::LtGemm& gemm, Tensor& residual, const Tensor* delta, const float* gamma,
                     float eps, const LinearWeight& w, Tensor& y) {
  if (!FusesNormLinear(residual, delta, gamma, w)) return FailedPrecondition("NormLinear: the norm cannot be fused here");
  const NormInput norm{&residual, delta, gamma, eps};
  return RunPrepared(ctx, gemm, residual, w, y, cuda::QuantPrologue::kNone, &norm);
}

bool FusesLayerNormLinear(const Tensor& x, const Tensor* delta, const float* gamma, const float* beta,
                          const Tensor& out, const LinearWeight& w) {
  if (!QuantizesActivations(w) || x.rank() != 2 || out.shape() != x.shape() || out.dtype() != x.dtype() ||
      (delta != nullptr && delta->shape() != x.shape())) {
    return false;
  }
  const auto* lin = static_cast<const CudaLinear*>(w.packed.get());
  const float* inv_smooth =
      lin->kind == cuda::GemmKind::kInt8 && lin->inv_smooth.defined() ? lin->inv_smooth.data<float>() : nullptr;
  return cuda::LayerNormQuantizeFits(x.raw(), delta != nullptr ? delta->raw() : nullptr, out.raw(), gamma, beta, inv_smooth,
                                     x.dim(1), x.dtype());
}

Status RunLayerNormLinear(CudaContext& ctx, cuda::LtGemm& gemm, const Tensor& x, const Tensor* delta,
                          const float* gamma, const float* beta, float eps, Tensor& out, const LinearWeight& w,
                          Tensor& y) {
  if (!FusesLayerNormLinear(x, delta, gamma, beta, out, w)) {
    return FailedPrecondition("LayerNormLinear: the norm cannot be fused here");
  }
  NormInput norm;
  norm.delta = delta;
  norm.gamma = gamma;
  norm.eps = eps;
  norm.beta = beta;
  norm.layer_input = &x;
  norm.out = &out;
  return RunPrepared(ctx, gemm, x, w, y, cuda::QuantPrologue::kNone, &norm);
}

Status RunGeluLinear(CudaContext& ctx, cuda::LtGemm& gemm, Tensor& x, const LinearWeight& w, Tensor& y) {
  if (QuantizesActivations(w)) return RunPrepared(ctx, gemm, x, w, y, cuda::QuantPrologue::kGeluErf);
  FERRY_RETURN_IF_ERROR(cuda::Gelu(x.raw(), x.numel(), x.dtype(), ctx.stream()));
  return RunPrepared(ctx, gemm, x, w, y, cuda::QuantPrologue::kNone);
}

}  // namespace ferry::backend
