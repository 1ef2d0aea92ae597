// y = x · W^T + bias on the CPU: validation and the choice of kernel for the weight's
// format and the row count (decode GEMV or blocked prefill GEMM, f32 or int8 activations).
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed_weight.h"

namespace ferry::kernels::cpu {

struct LinearConfig {
  // Row counts up to this use the one-pass GEMV; larger ones the blocked GEMM.
  int64_t gemv_max_rows = kGemvMaxRows;
  // y = GELU(x · W^T + bias) (exact erf GELU): in the epilogue of the AMX, f32 AVX-512 and
  // vdpbf16ps routes, otherwise a pass over y; the same bytes either way.
  bool gelu = false;
  // bf16 and int8-wo weights past gemv_max_rows: round x to bf16 and multiply on vdpbf16ps (bf16_gemm.h)
  // where the CPU has AVX512-BF16 and AMX does not run the product; otherwise ignored. The
  // decode GEMV keeps f32 x either way (it is bound by reading the weights).
  bool bf16_activations = false;
};

// x [M, K] f32 and y [M, N] f32 with unit column stride (rows may be strided); `w` packed
// W[N, K] in any format; bias [N] (any float dtype) or undefined.
Status Linear(const Tensor& x, const PackedWeight& w, const Tensor& bias, Tensor& y,
              const LinearConfig& config = LinearConfig());

}  // namespace ferry::kernels::cpu
