// The precision an engine is built in: how its weights are stored and, for int8 and fp8,
// how its activations are quantized. Parsed once where the text enters (`ferry build
// --precision`), recorded by name in the engine manifest.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace ferry {

enum class Precision : uint8_t {
  kFp32,
  kBf16,
  kFp16,
  kInt8WeightOnly,  // "int8-wo": int8 weights, float activations
  kInt8,            // W8A8: int8 weights and per-token int8 activations (SmoothQuant calibrated)
  kFp8,             // e4m3 weights and activations; GPUs only (sm_89+)
  kInt4WeightOnly,  // "int4-wo": 4-bit weights in groups of 128 inputs, float activations (GPTQ /
                    // AWQ checkpoints keep their own grid); the CPU runs it expanded to f32
};

// "fp32", "bf16", "fp16", "int8-wo", "int8", "fp8", "int4-wo".
std::string_view PrecisionName(Precision precision);
// The inverse of PrecisionName; InvalidArgument listing the names for anything else.
Result<Precision> ParsePrecision(std::string_view name);

}  // namespace ferry
