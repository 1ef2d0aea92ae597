// Weights quantized to 4 bits in groups along the input (the int4-wo engine precision, and
// GPTQ / AWQ checkpoints' own grid): for output row o and input column i of group
// g = i / group_size, w[o, i] = (q[o, i] - zero[o, g]) * scale[o, g], q in 0..15 and zero a
// small integer (0..15; GPTQ's v1 layout, which stores zero - 1, reaches 16).
// Host-side: what the loader hands a backend, before the GPU packs it (kernels/cuda) or the
// CPU expands it back to f32.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace ferry::kernels {

struct Int4Groups {
  int64_t out = 0;
  int64_t in = 0;
  int64_t group_size = 0;      // input columns per group; divides `in`
  std::vector<uint8_t> q;      // [out, in], one value 0..15 per byte
  std::vector<float> scales;   // [out, groups]
  std::vector<uint8_t> zeros;  // [out, groups]

  int64_t groups() const { return group_size > 0 ? in / group_size : 0; }
};

// The group size ferry quantizes a layer of `in` inputs with: 128 (GPTQ's and AWQ's usual)
// when it divides `in`, else the whole row when `in` is a multiple of 32 (what the GPU
// kernels need); 0 when neither (the layer stays in floating point).
int64_t DefaultInt4GroupSize(int64_t in);

// Round-to-nearest asymmetric quantization of an f32 [out, in] matrix: per group,
// scale = (max - min) / 15 with the range widened to include 0, zero = round(-min / scale).
// InvalidArgument unless group_size divides in.
Result<Int4Groups> QuantizeInt4(const float* w, int64_t out, int64_t in, int64_t group_size);

// The f32 matrix the groups stand for, [out, in] into `w`.
void DequantizeInt4(const Int4Groups& g, float* w);

// Row blocks of one input width and group size, stacked (fused QKV / gate-up weights).
Result<Int4Groups> ConcatInt4Rows(const std::vector<Int4Groups>& parts);

// The GPU layout: [out, in / 8] 32-bit words per row, input column 8 * j + b of a row in
// bits 4b..4b+3 of its word j. in % 8 == 0.
std::vector<uint32_t> PackInt4Rows(const Int4Groups& g);

}  // namespace ferry::kernels
