// Embedding gather.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// out[i, :] = table[ids[i], :] widened to f32. table [vocab, dim] f32/bf16/f16; every id is
// checked against the vocabulary before anything is written.
Status Embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out);

}  // namespace ferry::kernels::cpu
