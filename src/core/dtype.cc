#include "core/dtype.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace ferry {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF8E4M3: case DType::kI8: case DType::kU8: return 1;
    case DType::kI64: return 8;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "f8e4m3";
    case DType::kI8: return "i8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "F32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "F16" || name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "BF16" || name == "bfloat16") return DType::kBF16;
  if (name == "f8e4m3" || name == "F8_E4M3" || name == "fp8") return DType::kF8E4M3;
  if (name == "i8" || name == "I8" || name == "int8") return DType::kI8;
  if (name == "i32" || name == "I32" || name == "int32") return DType::kI32;
  if (name == "i64" || name == "I64" || name == "int64") return DType::kI64;
  if (name == "u8" || name == "U8" || name == "uint8") return DType::kU8;
  return InvalidArgument("unknown dtype '" + std::string(name) + "'");
}

float F16ToF32(uint16_t h) { return _cvtsh_ss(h); }
uint16_t F32ToF16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

float F8E4M3ToF32(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 0x7;
  float out;
  if (exp == 0xf && man == 0x7) return NAN;
  if (exp == 0) out = std::ldexp(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
  else out = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
  return sign ? -out : out;
}

uint8_t F32ToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (E4M3 has no infinity; 0x7f is NaN)
  // Round to nearest, ties to even, on the 3 mantissa bits. Scaling by a power of two is
  // exact, so nearbyint (the default rounding mode) rounds the exact value.
  if (a < 0x1p-6f) {
    // Subnormals (and zero) are multiples of 2^-9; 8 * 2^-9 rounds up into the first normal,
    // whose code is 0x08 too.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 7;                // a = (2m) * 2^(e-1), biased exponent
  int man = static_cast<int>(std::nearbyint((2.0f * m - 1.0f) * 8.0f));
  if (man == 8) {
    man = 0;
    ++exp;
  }
  const int code = (exp << 3) | man;
  return sign | static_cast<uint8_t>(std::min(code, 0x7e));
}

void ConvertToF32(DType dtype, const void* src, float* dst, size_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      size_t i = 0;
      for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
      }
      for (; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      size_t i = 0;
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
      for (; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(s[i]);
      return;
    }
    case DType::kI8: {
      const auto* s = static_cast<const int8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::kU8: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::kI32: {
      const auto* s = static_cast<const int32_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kI64: {
      const auto* s = static_cast<const int64_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
  }
}

void ConvertFromF32(DType dtype, const float* src, void* dst, size_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      size_t i = 0;
      for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
      for (; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kF8E4M3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToF8E4M3(src[i]);
      return;
    }
    default: {
      auto* d = static_cast<unsigned char*>(dst);
      const size_t size = DTypeSize(dtype);
      for (size_t i = 0; i < n; ++i) {
        if (dtype == DType::kI8) { int8_t v = static_cast<int8_t>(std::lrint(src[i])); std::memcpy(d + i * size, &v, size); }
        else if (dtype == DType::kU8) { uint8_t v = static_cast<uint8_t>(std::lrint(src[i])); std::memcpy(d + i * size, &v, size); }
        else if (dtype == DType::kI32) { int32_t v = static_cast<int32_t>(std::lrint(src[i])); std::memcpy(d + i * size, &v, size); }
        else { int64_t v = std::llrint(src[i]); std::memcpy(d + i * size, &v, size); }
      }
      return;
    }
  }
}

}  // namespace ferry
