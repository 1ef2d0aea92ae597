// Element types and scalar conversions (bf16, fp16, fp8 e4m3 <-> f32).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/status.h"

namespace ferry {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kI8, kI32, kI64, kU8 };

size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);  // "f32", "bf16", ...
// Parses ferry names ("f32", "bf16") and safetensors names ("F32", "BF16", "F8_E4M3").
Result<DType> ParseDType(std::string_view name);

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float F8E4M3ToF32(uint8_t v);
uint8_t F32ToF8E4M3(float f);  // saturates to +-448

// Converts n elements of `src` (dtype) to f32.
void ConvertToF32(DType dtype, const void* src, float* dst, size_t n);
// Converts n f32 values to `dtype` (a float type).
void ConvertFromF32(DType dtype, const float* src, void* dst, size_t n);

}  // namespace ferry
