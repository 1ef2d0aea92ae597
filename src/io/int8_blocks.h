// Weights stored as int8 with one scale per block of consecutive inputs of a row: GGUF's Q8_0
// (blocks of 32, an f16 scale each). w[o, i] = q[o, i] * scales[o, i / block_size], computed in
// f32, where it is exact (an 11-bit significand times an integer of at most 8 bits). A backend that keeps the blocks (Backend::TakesInt8Blocks) runs the
// file's own numbers at about a byte a weight; others get the f32 matrix (GgufFile::Get).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ferry::io {

struct Int8Blocks {
  int64_t block_size = 0;  // inputs per scale; divides in()
  Tensor q;                // i8 [out, in]
  Tensor scales;           // f16 [out, in / block_size], the file's bits
  int64_t stored_bytes = 0;  // what the file holds them in (progress and load statistics)

  int64_t out() const { return q.defined() && q.rank() == 2 ? q.dim(0) : 0; }
  int64_t in() const { return q.defined() && q.rank() == 2 ? q.dim(1) : 0; }
};

}  // namespace ferry::io
