#include "kernels/cpu/linear.h"

#include <string>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/int8_gemm.h"
#include "kernels/cpu/tensor_checks.h"

namespace ferry::kernels::cpu {

Status Linear(const Tensor& x, const PackedWeight& w, const Tensor& bias, Tensor& y, const LinearConfig& config) {
  const int64_t n = w.n;
  const int64_t k = w.k;
  FERRY_ASSIGN_OR_RETURN(const RowMajor xm, CheckRows("Linear: x", x, -1, k));
  FERRY_ASSIGN_OR_RETURN(const RowMajor ym, CheckRows("Linear: y", y, xm.rows, n));
  if (RowsOverlap(xm, ym)) return InvalidArgument("Linear: x and y must not overlap");
  const float* bias_ptr = nullptr;
  thread_local std::vector<float> bias_f32;
  if (bias.defined()) {
    if (bias.numel() != n || !bias.is_contiguous() || !bias.device().is_cpu()) {
      return InvalidArgument("Linear: bias must be contiguous with " + std::to_string(n) + " elements, got " +
                             bias.DebugString());
    }
    if (bias.dtype() == DType::kF32) {
      bias_ptr = bias.data<float>();
    } else if (bias.dtype() == DType::kBF16 || bias.dtype() == DType::kF16) {
      bias_f32.resize(static_cast<size_t>(n));
      ConvertToF32(bias.dtype(), bias.raw(), bias_f32.data(), static_cast<size_t>(n));
      bias_ptr = bias_f32.data();
    } else {
      return InvalidArgument("Linear: bias dtype must be a float type, got " + bias.DebugString());
    }
  }
  if (xm.rows == 0 || n == 0) return Status::Ok();
  if (k == 0) {
    for (int64_t i = 0; i < xm.rows; ++i) {
      for (int64_t j = 0; j < n; ++j) ym.data[i * ym.ld + j] = bias_ptr != nullptr ? bias_ptr[j] : 0.0f;
    }
    if (config.gelu) GeluRows(ym.data, ym.rows, n, ym.ld);
    return Status::Ok();
  }
  if (w.int8_activations()) {
    Int8Linear(xm.data, xm.ld, xm.rows, w, bias_ptr, ym.data, ym.ld, config.gemv_max_rows, config.gelu);
    return Status::Ok();
  }
  if (xm.rows > config.gemv_max_rows && AmxGemmApplies(w, xm.rows)) {
    GemmAmxBf16(xm.data, xm.ld, xm.rows, w, bias_ptr, ym.data, ym.ld, config.gelu);
    return Status::Ok();
  }
  bool gelu_done = false;
  if (xm.rows <= config.gemv_max_rows) {
    GemvPacked(xm.data, xm.ld, xm.rows, w, bias_ptr, ym.data, ym.ld);
  } else if (config.bf16_activations && Bf16DotGemmApplies(w)) {
    GemmBf16Dot(xm.data, xm.ld, xm.rows, w, bias_ptr, ym.data, ym.ld, config.gelu);
    gelu_done = true;
  } else {
    gelu_done = GemmPacked(xm.data, xm.ld, xm.rows, w, bias_ptr, ym.data, ym.ld, config.gelu);
  }
  if (config.gelu && !gelu_done) GeluRows(ym.data, ym.rows, n, ym.ld);
  return Status::Ok();
}

}  // namespace ferry::kernels::cpu
