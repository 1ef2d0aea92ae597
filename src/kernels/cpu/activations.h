// Element-wise activations and the residual add.
#pragma once

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// out[M, I] = silu(gate_up[:, :I]) * gate_up[:, I:].
Status SiluMul(const Tensor& gate_up, Tensor& out);
// In place, exact (erf) GELU.
Status Gelu(Tensor& x);
// The same on rows [0, rows) x [0, cols) of row-major f32 data (row stride ld).
void GeluRows(float* data, int64_t rows, int64_t cols, int64_t ld);
// out[M, I] = gelu_tanh(gate_up[:, :I]) * gate_up[:, I:] (GeGLU with the tanh approximation,
// transformers' gelu_pytorch_tanh).
Status GeluTanhMul(const Tensor& gate_up, Tensor& out);
// out[M, I] = gelu(gate_up[:, :I]) * gate_up[:, I:] (GeGLU with the exact erf GELU,
// ModernBERT's MLP).
Status GeluMul(const Tensor& gate_up, Tensor& out);
// In place x *= s.
Status Scale(Tensor& x, float s);
// In place x = cap * tanh(x / cap) (Gemma 2's soft-capping).
Status SoftCap(Tensor& x, float cap);
// In place tanh.
Status Tanh(Tensor& x);
// x += y (same shape).
Status Add(Tensor& x, const Tensor& y);

}  // namespace ferry::kernels::cpu
