// Small-M GEMM for decode: y[M, N] = x[M, K] · W[N, K]^T (+ bias), W read exactly once.
#pragma once

#include <cstdint>

#include "kernels/cpu/packed_weight.h"

namespace ferry::kernels::cpu {

// Up to about this many rows the weight stream, not the arithmetic, bounds the time, so all
// rows ride one pass over W. Measured on Zen 3 the GEMV and the blocked GEMM (gemm.h) are
// within noise of each other from 16 to 32 rows; 16 keeps the GEMM for anything compute
// bound.
inline constexpr int64_t kGemvMaxRows = 16;

// Panels are split across the compute threads; every weight byte is loaded once from
// memory and widened in registers (bf16 by a shift, f16 by F16C, int8 by sign extension
// and an exact int->f32 conversion, its scales applied to the finished sums): in AVX-512
// tiles of up to 8 rows where the GEMM's register tile is AVX-512 (`ActiveGemmKernel()`,
// FERRY_GEMM_KERNEL=avx2 turns both off), else in the AVX2 6-row tile. x and y rows
// may be strided (lda, ldy in elements). bias is f32 [N] or null. `w` must have
// PanelLayout::kRows (W8A8 weights go through int8_gemm.h).
void GemvPacked(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy);

}  // namespace ferry::kernels::cpu
