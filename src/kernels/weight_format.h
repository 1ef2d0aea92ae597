// How a linear layer's weight is stored for the kernels (the engine's precision variants),
// and the names engine files and build options spell them with.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace ferry::kernels {

enum class WeightFormat : uint8_t {
  kNative,    // the checkpoint's dtype (f32, bf16 or f16), as is
  kF32,
  kBF16,
  kF16,
  kInt8,      // int8-wo: int8 weights, symmetric per-output-channel f32 scales; f32 activations
  kInt8W8A8,  // int8 weights (per-channel) x int8 activations (per-token dynamic scales), with
              // SmoothQuant factors `smooth` (x / s, W * s) applied inside the kernels
  kFp8,       // GPUs (sm_89+): fp8 e4m3 weights (per-channel scales) x fp8 activations (per-token)
  kInt4,      // int4-wo: 4-bit weights in groups along the input (kernels/int4_groups.h), float
              // activations; GPTQ / AWQ checkpoints keep their own grid. The GPU runs it; the
              // CPU expands it to f32 (same numbers, no int4 kernel)
};
const char* WeightFormatName(WeightFormat f);
Result<WeightFormat> ParseWeightFormat(std::string_view name);

}  // namespace ferry::kernels
