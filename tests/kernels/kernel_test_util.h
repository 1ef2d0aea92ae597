// Helpers for the CPU kernel tests: seeded random tensors, NaN poisoning, dtype round trips
// and comparisons against double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace ferry::testing {

inline Tensor RandomTensor(const Shape& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// Filled with NaN so that any element a kernel fails to write shows up in the comparison.
inline Tensor Poisoned(const Shape& shape) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  std::fill(t.data<float>(), t.data<float>() + t.numel(), std::numeric_limits<float>::quiet_NaN());
  return t;
}

// A copy of an f32 tensor in `dtype` (rounded to nearest even).
inline Tensor ConvertTo(const Tensor& f32, DType dtype) {
  Tensor t = Tensor::Empty(f32.shape(), dtype);
  ConvertFromF32(dtype, f32.data<float>(), t.raw(), static_cast<size_t>(f32.numel()));
  return t;
}

// Element values of any float tensor, widened to double.
inline std::vector<double> Values(const Tensor& t) {
  Tensor f = t.ToF32();
  return std::vector<double>(f.data<float>(), f.data<float>() + f.numel());
}

// Asserts max |got - ref| <= rel_tol * max(max |ref|, floor) and no NaN in `got`.
inline void ExpectClose(const Tensor& got, const std::vector<double>& ref, double rel_tol, const std::string& what,
                        double floor = 1e-30) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(ref.size())) << what;
  const std::vector<double> g = Values(got);
  double ref_max = floor;
  for (double r : ref) ref_max = std::max(ref_max, std::abs(r));
  double worst = 0.0;
  int64_t worst_i = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_FALSE(std::isnan(g[i])) << what << ": NaN at element " << i << " (unwritten?)";
    const double err = std::abs(g[i] - ref[i]);
    if (err > worst) {
      worst = err;
      worst_i = static_cast<int64_t>(i);
    }
  }
  EXPECT_LE(worst, rel_tol * ref_max) << what << ": worst error at element " << worst_i << " got "
                                      << (worst_i >= 0 ? g[worst_i] : 0.0) << " want "
                                      << (worst_i >= 0 ? ref[worst_i] : 0.0) << " (max |ref| " << ref_max << ")";
}

}  // namespace ferry::testing
