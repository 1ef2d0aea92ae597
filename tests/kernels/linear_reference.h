// Scalar references for the linear kernels in every weight format: the quantization rules
// written out independently of the kernels, and products in double / exact integers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernel_test_util.h"

namespace ferry::testing {

// Symmetric per-row int8 quantization as PrepareLinear documents it: W' = W * smooth (f32),
// scale = max|W'| / 127, q = round_half_even(W' / scale), all-zero rows -> scale 0.
struct QuantizedMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<int8_t> q;
  std::vector<float> scale;
  double Dequantized(int64_t r, int64_t c) const { return static_cast<double>(q[r * cols + c]) * scale[r]; }
};

inline QuantizedMatrix QuantizeWeightRef(const Tensor& w, const Tensor& smooth) {
  const Tensor f = w.ToF32();
  QuantizedMatrix out;
  out.rows = w.dim(0);
  out.cols = w.dim(1);
  out.q.assign(static_cast<size_t>(out.rows * out.cols), 0);
  out.scale.assign(static_cast<size_t>(out.rows), 0.0f);
  std::vector<float> row(static_cast<size_t>(out.cols));
  for (int64_t r = 0; r < out.rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < out.cols; ++c) {
      row[c] = f.data<float>()[r * out.cols + c];
      if (smooth.defined()) row[c] *= smooth.data<float>()[c];
      amax = std::max(amax, std::fabs(row[c]));
    }
    const float scale = amax / 127.0f;
    out.scale[r] = scale;
    if (scale == 0.0f) continue;
    for (int64_t c = 0; c < out.cols; ++c) {
      out.q[r * out.cols + c] = static_cast<int8_t>(std::clamp(std::nearbyint(row[c] / scale), -127.0f, 127.0f));
    }
  }
  return out;
}

// Per-token activation quantization as the W8A8 kernels document it: x' = x * (1 / smooth), the
// reciprocal and the product each rounded to f32,
// scale = max|x'| / 127, q = round_half_even(x' * (127 / max|x'|)) with the product in f32.
inline QuantizedMatrix QuantizeActivationsRef(const Tensor& x, const Tensor& smooth) {
  QuantizedMatrix out;
  out.rows = x.dim(0);
  out.cols = x.dim(1);
  out.q.assign(static_cast<size_t>(out.rows * out.cols), 0);
  out.scale.assign(static_cast<size_t>(out.rows), 0.0f);
  std::vector<float> row(static_cast<size_t>(out.cols));
  for (int64_t r = 0; r < out.rows; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < out.cols; ++c) {
      row[c] = x.data<float>()[r * x.strides()[0] + c];
      if (smooth.defined()) row[c] *= 1.0f / smooth.data<float>()[c];
      amax = std::max(amax, std::fabs(row[c]));
    }
    out.scale[r] = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t c = 0; c < out.cols; ++c) {
      const float prod = row[c] * inv;
      out.q[r * out.cols + c] = static_cast<int8_t>(std::clamp(std::nearbyint(prod), -127.0f, 127.0f));
    }
  }
  return out;
}

inline std::vector<double> BiasValues(const Tensor& bias, int64_t n) {
  return bias.defined() ? Values(bias) : std::vector<double>(static_cast<size_t>(n), 0.0);
}

// y = x · W^T + b in double from W's own (already rounded) values.
inline std::vector<double> ReferenceLinear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  const std::vector<double> xv = Values(x.Clone()), wv = Values(w), bv = BiasValues(bias, n);
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bv[j];
      for (int64_t l = 0; l < k; ++l) acc += xv[i * k + l] * wv[j * k + l];
      y[i * n + j] = acc;
    }
  }
  return y;
}

// int8 weight-only: f32 activations times the dequantized weights.
inline std::vector<double> ReferenceInt8WeightOnly(const Tensor& x, const QuantizedMatrix& w, const Tensor& bias) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.rows;
  const std::vector<double> xv = Values(x.Clone()), bv = BiasValues(bias, n);
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t l = 0; l < k; ++l) acc += xv[i * k + l] * w.q[j * k + l];
      y[i * n + j] = acc * w.scale[j] + bv[j];
    }
  }
  return y;
}

// W8A8: exact integer dot products of the quantized activations and weights, then scaled.
inline std::vector<double> ReferenceW8A8(const QuantizedMatrix& x, const QuantizedMatrix& w, const Tensor& bias) {
  const int64_t m = x.rows, k = x.cols, n = w.rows;
  const std::vector<double> bv = BiasValues(bias, n);
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t l = 0; l < k; ++l) acc += int64_t{x.q[i * k + l]} * w.q[j * k + l];
      y[i * n + j] = static_cast<double>(acc) * x.scale[i] * w.scale[j] + bv[j];
    }
  }
  return y;
}

}  // namespace ferry::testing
