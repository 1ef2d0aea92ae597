// GPTQ and AWQ checkpoints: a linear layer's integer weights, packed eight (4-bit) or four
// (8-bit) to an int32, with a zero point and a scale per group of input rows, unpacked to the
// float matrix they stand for. DequantizingSource (model/weights.h) calls this for every
// `P.weight` that the checkpoint holds as `P.qweight`.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "io/model_config.h"
#include "kernels/int4_groups.h"
#include "model/weights.h"

namespace ferry::model {

// The [out, in] weight of the layer whose tensors are `prefix`.qweight, .qzeros, .scales (and
// for gptq the optional .g_idx), in `dtype`: (q - zero) * scale per element, q, zero and
// scale those of the element's group. Layouts (q.method):
//   gptq: qweight [in * bits / 32, out], element (i, o) at bits (i % per) * bits of
//         qweight[i / per][o]; qzeros [groups, out * bits / 32] packed the same way along
//         the output; scales [groups, out]; g_idx [in] gives each input row's group (act-order
//         checkpoints permute them), else row / group_size. The v1 layout stores zero - 1.
//   awq:  qweight [in, out / 8] packed along the output, output column 8c + j of row i at
//         nibble kAwqNibble[j] of qweight[i][c] (AutoAWQ's interleaved order); qzeros
//         [groups, out / 8] packed the same way; scales [groups, out].
// Every shape is checked against the others before anything is read; a mismatch is an error
// naming the tensors and shapes.
Result<Tensor> DequantizePackedLinear(const WeightSource& src, const std::string& prefix,
                                      const io::QuantizationConfig& q, DType dtype);

// The layer's 4-bit grid as kernels::Int4Groups (the int4-wo precision keeps it instead of
// requantizing the dequantized matrix), or nullopt when it has no such form: 8 bits, an
// act-order g_idx, or groups that are not a multiple of 32 inputs.
Result<std::optional<kernels::Int4Groups>> PackedLinearInt4Groups(const WeightSource& src, const std::string& prefix,
                                                                  const io::QuantizationConfig& q);

// AWQ's nibble position of output column j (0..7) within its int32.
inline constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

}  // namespace ferry::model
