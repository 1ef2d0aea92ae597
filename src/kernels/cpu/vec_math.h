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
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
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
  __m256 p = _mm256_set1_ps(0.17087277f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
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
