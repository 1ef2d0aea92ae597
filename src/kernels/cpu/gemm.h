// Large-M GEMM for prefill: y[M, N] = x[M, K] · W[N, K]^T (+ bias) over a PackedWeight.
#pragma once

#include <cstdint>

#include "kernels/cpu/packed_weight.h"

namespace ferry::kernels::cpu {

// Cache blocking (BLIS-style) around the 6x16 micro-kernel. For each K chunk and each
// block of rows, x is packed once into 6-row tiles (a sequential stream that stays in L2),
// then every weight micro-panel the thread owns (K chunk x 16, from L3/memory; bf16/f16
// widened into an L1 buffer first) is swept over all tiles of the block.
struct GemmBlocking {
  int64_t k_chunk = 256;    // micro-panel: 256 x 16 f32 = 16 KiB, stays in L1
  int64_t row_block = 288;  // packed x block: 288 x 256 f32 = 288 KiB, stays in L2
};

void GemmPacked(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                int64_t ldy, const GemmBlocking& blocking = GemmBlocking());

}  // namespace ferry::kernels::cpu
