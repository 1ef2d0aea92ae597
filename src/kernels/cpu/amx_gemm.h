// Prefill GEMMs on AMX tiles for bf16 and int8 weight-only weights: y[M, N] = x[M, K] ·
// W[N, K]^T (· per-column scale) (+ bias), straight from ferry's panels (no second copy of the
// weight). The activations are rounded to bf16 (round to nearest even) and the products
// summed in f32 by the tiles; int8 weights become bf16 exactly and their scales apply to the
// sums. So the results differ from the f32 kernels' by the activations' rounding, as a GPU's
// bf16 GEMM does; decode (up to kAmxMinRows rows) keeps the f32 kernels.
#pragma once

#include <cstdint>

#include "kernels/cpu/packed_weight.h"

namespace ferry::kernels::cpu {

// Rows from which a linear of an eligible weight runs on the tiles.
inline constexpr int64_t kAmxMinRows = 64;

// The CPU has AMX-BF16 and AVX512-BF16 and the kernel granted this process the tile state.
bool AmxBf16Supported();
// Supported, and not turned off by FERRY_AMX=0 in the environment at start-up or by
// SetAmxBf16Enabled(false).
bool AmxBf16Enabled();
// Tests and benchmarks compare the two routes; returns false (and changes nothing) when
// enabling on a CPU without support.
bool SetAmxBf16Enabled(bool enabled);

// bf16 weights and int8 weight-only weights (kRows panels), at least kAmxMinRows rows, enabled.
bool AmxGemmApplies(const PackedWeight& w, int64_t m);

// Requires AmxGemmApplies(w, m) (apart from the row count, which may be any m > 0).
void GemmAmxBf16(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                 int64_t ldy);

}  // namespace ferry::kernels::cpu
