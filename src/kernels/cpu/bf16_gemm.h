// Prefill GEMMs of bf16 (and int8-wo) weights with bf16 activations on AVX512-BF16's vdpbf16ps:
// y[M, N] = bf16(x)[M, K] · W[N, K]^T (+ bias), W in ferry's kRows bf16 panels, or int8 panels
// whose values are widened to bf16 exactly and whose column scales multiply the sums. Each product
// of two bf16 is exact in f32 and the sums are f32, so the only rounding beyond the f32 kernels' is x
// to bf16 (round to nearest even), the rounding a GPU bf16 engine (and llama.cpp's BF16 path)
// applies to every GEMM input. Off unless the engine asks for bf16 activations on the CPU
// (LinearConfig::bf16_activations): the f32 kernels keep x's 24 bits.
#pragma once

#include <cstdint>

#include "kernels/cpu/packed_weight.h"

namespace ferry::kernels::cpu {

// w is a weight this route multiplies exactly: kRows bf16, or int8-wo (its quantized values are
// integers of [-127, 127], exact in bf16; the per-column scales multiply the f32 sums). Not
// int8 with block scales (PackedWeight::block_size): those run the f32 kernels.
bool Bf16DotTakesWeight(const PackedWeight& w);
// The CPU has AVX512-BF16 (with AVX512-BW/VL) and Bf16DotTakesWeight(w).
bool Bf16DotGemmApplies(const PackedWeight& w);

// Requires Bf16DotGemmApplies(w). x [m, K] f32 rows lda apart; y [m, N] rows ldy apart.
// gelu: y = GELU(x · W^T + bias), applied as each finished tile is stored (the bytes of a
// separate GeluRows pass).
void GemmBf16Dot(const float* x, int64_t lda, int64_t m, const PackedWeight& w, const float* bias, float* y,
                 int64_t ldy, bool gelu = false);

}  // namespace ferry::kernels::cpu
