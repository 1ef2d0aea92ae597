// Row normalizations: RMSNorm (optionally fused with the residual add) and LayerNorm.
#pragma once

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// out = x * rsqrt(mean(x^2) + eps) * gamma. x, out [rows, cols] f32 (may be the same
// tensor); gamma [cols] f32/bf16/f16.
Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out);

// residual += delta; out = RmsNorm(residual). out must not alias residual.
Status AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps, Tensor& out);

// In place RMSNorm of each head_dim-wide head in columns [col_begin, col_begin + heads *
// head_dim) of every row of x [rows, cols] f32, all heads scaled by gamma [head_dim] (Qwen3's
// q_norm / k_norm on a fused QKV projection).
Status HeadRmsNorm(Tensor& x, int64_t col_begin, int heads, int head_dim, const Tensor& gamma, float eps);

// out = LayerNorm(x (+ delta when defined)) * gamma + beta over the last dim.
Status LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta, float eps,
                 Tensor& out);

}  // namespace ferry::kernels::cpu
