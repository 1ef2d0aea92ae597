// Element-wise activations and the residual add.
#pragma once

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// out[M, I] = silu(gate_up[:, :I]) * gate_up[:, I:].
Status SiluMul(const Tensor& gate_up, Tensor& out);
// In place, exact (erf) GELU.
Status Gelu(Tensor& x);
// In place tanh.
Status Tanh(Tensor& x);
// x += y (same shape).
Status Add(Tensor& x, const Tensor& y);

}  // namespace ferry::kernels::cpu
