// y = x · W^T + bias on the CPU: validation and the choice between the decode GEMV and the
// blocked prefill GEMM (both over PackedWeight panels).
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/gemv.h"

namespace ferry::kernels::cpu {

struct LinearConfig {
  // Row counts up to this use the one-pass GEMV; larger ones the blocked GEMM.
  int64_t gemv_max_rows = kGemvMaxRows;
};

// x [M, K] f32 and y [M, N] f32 with unit column stride (rows may be strided); weight
// [N, K] f32/bf16/f16; bias [N] (any float dtype) or undefined. `packed` is the result of
// PackWeight(weight); without it (or if it belongs to another tensor) the weight is packed
// on the fly, which is correct but slow.
Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::shared_ptr<void>& packed,
              Tensor& y, const LinearConfig& config = LinearConfig());

}  // namespace ferry::kernels::cpu
