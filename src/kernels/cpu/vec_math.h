// AVX2 building blocks shared by the CPU kernels: widening loads for half-precision
// and int8 types, horizontal reductions and vectorized exp / GELU / tanh.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ferry::kernels::cpu {

// Element tags for 16-bit float storage, so templates can dispatch loads on the type.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
// bf16 is the top half of an f32: widening is a zero-extend and a shift.
inline __m256 Load8(const Bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 Load8(const F16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// int8 weights (scaled per output column elsewhere): sign-extend, then convert exactly.
inline __m256 Load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

inline float ToFloat(float v) { return v; }
inline float ToFloat(int8_t v) { return static_cast<float>(v); }
inline float ToFloat(Bf16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
inline float ToFloat(F16 v) { return _cvtsh_ss(v.bits); }

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Polynomial coefficients shared by the AVX2 and AVX-512 forms (highest power first).
// exp: Cephes' polynomial on r = x - n ln2, p(r) r^2 + r + 1.
inline constexpr float kExpPoly[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                     4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
// erfc(z) = t exp(-z^2 + p(t)), t = 1 / (1 + z / 2): Numerical Recipes' Chebyshev fit.
inline constexpr float kErfcPoly[] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                                      -0.18628806f, 0.09678418f, 0.37409196f, 1.00002368f, -1.26551223f};

// exp(x), relative error ~2 ulp (Cephes' polynomial on x - n*ln2). Inputs below the
// smallest normal result give exactly 0, so masked (-inf) softmax scores vanish cleanly.
inline __m256 Exp(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // Two-part ln2 keeps r exact enough for the polynomial.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
#pragma GCC unroll 8
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, y);
}

// Exact-erf GELU, 0.5·x·(1 + erf(x/√2)), written through erfc so the negative tail keeps
// its relative precision. erfc uses Numerical Recipes' Chebyshev fit (fractional error
// below 1.2e-7 everywhere).
inline __m256 Gelu(__m256 x) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(sign_mask, x), _mm256_set1_ps(0.70710678118654752f));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, one));
  __m256 p = _mm256_set1_ps(kErfcPoly[0]);
#pragma GCC unroll 10
  for (int i = 1; i < 10; ++i) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(kErfcPoly[i]));
  p = _mm256_fnmadd_ps(z, z, p);
  const __m256 erfc = _mm256_mul_ps(t, Exp(p));
  // x >= 0: 0.5·x·(2 - erfc); x < 0: 0.5·x·erfc.
  const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 factor = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), erfc), erfc, neg);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), factor);
}

// tanh: odd Taylor series near 0 (where 1 - e^-2|x| would cancel), the exp form elsewhere.
inline __m256 Tanh(__m256 x) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign_mask, x);
  const __m256 e = Exp(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 big = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 x2 = _mm256_mul_ps(ax, ax);
  __m256 p = _mm256_set1_ps(62.0f / 2835.0f);
  p = _mm256_fmsub_ps(p, x2, _mm256_set1_ps(17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmsub_ps(p, x2, _mm256_set1_ps(1.0f / 3.0f));
  p = _mm256_mul_ps(p, x2);
  const __m256 small = _mm256_fmadd_ps(p, ax, ax);
  const __m256 r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.25f), _CMP_LT_OQ));
  return _mm256_or_ps(r, _mm256_and_ps(x, sign_mask));
}

// silu(x) = x / (1 + e^-x).
inline __m256 Silu(__m256 x) {
  const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// AVX-512 forms of Exp, Gelu, Tanh and Silu: the same operations in the same order on 16
// lanes, so every lane gives the bytes of the AVX2 form (IEEE add, multiply, divide and FMA
// are exact per lane; rounding to an integer and the masks are lane-wise). Callable from
// functions compiled for AVX-512F.
#define FERRY_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline

// GCC 12's plain forms of these intrinsics pass an undefined vector as the merge source,
// which -Wmaybe-uninitialized reports; the all-lanes masked forms are the same instructions.
constexpr __mmask16 kAllLanes = 0xffff;
FERRY_AVX512_INLINE __m512 Max512(__m512 a, __m512 b) { return _mm512_mask_max_ps(a, kAllLanes, a, b); }
FERRY_AVX512_INLINE __m512 Min512(__m512 a, __m512 b) { return _mm512_mask_min_ps(a, kAllLanes, a, b); }

FERRY_AVX512_INLINE __m512 Exp(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = Min512(Max512(x, lo), _mm512_set1_ps(88.0f));
  const __m512 xl = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_mask_roundscale_ps(xl, kAllLanes, xl, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
#pragma GCC unroll 8
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i zero = _mm512_setzero_si512();
  const __m512i biased = _mm512_add_epi32(_mm512_mask_cvtps_epi32(zero, kAllLanes, n), _mm512_set1_epi32(127));
  const __m512i e = _mm512_mask_slli_epi32(zero, kAllLanes, biased, 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~underflow), p, _mm512_castsi512_ps(e));
}

FERRY_AVX512_INLINE __m512 Gelu(__m512 x) {
  const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.5f), z, one));
  __m512 p = _mm512_set1_ps(kErfcPoly[0]);
#pragma GCC unroll 10
  for (int i = 1; i < 10; ++i) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kErfcPoly[i]));
  p = _mm512_fnmadd_ps(z, z, p);
  const __m512 erfc = _mm512_mul_ps(t, Exp(p));
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 factor = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(2.0f), erfc), erfc);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), factor);
}

FERRY_AVX512_INLINE __m512 Tanh(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 e = Exp(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 big = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  const __m512 x2 = _mm512_mul_ps(ax, ax);
  __m512 p = _mm512_set1_ps(62.0f / 2835.0f);
  p = _mm512_fmsub_ps(p, x2, _mm512_set1_ps(17.0f / 315.0f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmsub_ps(p, x2, _mm512_set1_ps(1.0f / 3.0f));
  p = _mm512_mul_ps(p, x2);
  const __m512 small = _mm512_fmadd_ps(p, ax, ax);
  const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.25f), _CMP_LT_OQ), big, small);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}

FERRY_AVX512_INLINE __m512 Silu(__m512 x) {
  const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// Loads n < 8 floats, zero-filling the rest.
inline __m256 LoadPartial(const float* p, int n) {
  alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; ++i) tmp[i] = p[i];
  return _mm256_load_ps(tmp);
}
inline void StorePartial(float* p, __m256 v, int n) {
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int i = 0; i < n; ++i) p[i] = tmp[i];
}

}  // namespace ferry::kernels::cpu
