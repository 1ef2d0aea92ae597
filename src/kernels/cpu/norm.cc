#include "kernels/cpu/norm.h"

#include <immintrin.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_checks.h"
#include "kernels/cpu/vec_math.h"

namespace ferry::kernels::cpu {
namespace {

// Norm parameters usually come straight from the checkpoint (often bf16); widening them
// once per call is negligible next to the rows they scale.
const float* AsF32(const Tensor& t, std::vector<float>& scratch) {
  if (t.dtype() == DType::kF32) return t.data<float>();
  scratch.resize(static_cast<size_t>(t.numel()));
  ConvertToF32(t.dtype(), t.raw(), scratch.data(), scratch.size());
  return scratch.data();
}

float SumSquares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  float s = HSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

// out[i] = x[i] * scale * gamma[i]
void ScaleByGamma(const float* x, float scale, const float* gamma, int64_t n, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(gamma + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * gamma[i];
}

float RmsScale(float sum_squares, int64_t n, float eps) {
  return 1.0f / std::sqrt(sum_squares / static_cast<float>(n) + eps);
}

}  // namespace

Status HeadRmsNorm(Tensor& x, int64_t col_begin, int heads, int head_dim, const Tensor& gamma, float eps) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor xm, CheckRows("HeadRmsNorm: x", x, -1, -1));
  if (heads <= 0 || head_dim <= 0 || col_begin < 0 || col_begin + static_cast<int64_t>(heads) * head_dim > xm.cols) {
    return InvalidArgument("HeadRmsNorm: " + std::to_string(heads) + " heads of " + std::to_string(head_dim) +
                           " from column " + std::to_string(col_begin) + " do not fit " + x.DebugString());
  }
  if (gamma.numel() != head_dim) return InvalidArgument("HeadRmsNorm: gamma " + gamma.DebugString() + " != head_dim");
  std::vector<float> gamma_scratch;
  const float* g = AsF32(gamma, gamma_scratch);
  ParallelRows(xm.rows, static_cast<int64_t>(heads) * head_dim * 3, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      for (int h = 0; h < heads; ++h) {
        float* v = xm.data + r * xm.ld + col_begin + static_cast<int64_t>(h) * head_dim;
        ScaleByGamma(v, RmsScale(SumSquares(v, head_dim), head_dim, eps), g, head_dim, v);
      }
    }
  });
  return Status::Ok();
}

Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor xm, CheckRows("RmsNorm: x", x, -1, -1));
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows("RmsNorm: out", out, xm.rows, xm.cols));
  FERRY_RETURN_IF_ERROR(CheckVector("RmsNorm: gamma", gamma, xm.cols));
  std::vector<float> gamma_scratch;
  const float* g = AsF32(gamma, gamma_scratch);
  const int64_t n = xm.cols;
  ParallelRows(xm.rows, n, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* row = xm.data + r * xm.ld;
      ScaleByGamma(row, RmsScale(SumSquares(row, n), n, eps), g, n, om.data + r * om.ld);
    }
  });
  return Status::Ok();
}

Status AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps, Tensor& out) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor rm, CheckRows("AddRmsNorm: residual", residual, -1, -1));
  FERRY_ASSIGN_OR_RETURN(const RowMajor dm, CheckRows("AddRmsNorm: delta", delta, rm.rows, rm.cols));
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows("AddRmsNorm: out", out, rm.rows, rm.cols));
  FERRY_RETURN_IF_ERROR(CheckVector("AddRmsNorm: gamma", gamma, rm.cols));
  if (RowsOverlap(rm, om)) return InvalidArgument("AddRmsNorm: out must not alias residual");
  std::vector<float> gamma_scratch;
  const float* g = AsF32(gamma, gamma_scratch);
  const int64_t n = rm.cols;
  ParallelRows(rm.rows, n, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* row = rm.data + r * rm.ld;
      const float* d = dm.data + r * dm.ld;
      // Add and square-sum in one pass while the row is in registers.
      __m256 a0 = _mm256_setzero_ps();
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_add_ps(_mm256_loadu_ps(row + i), _mm256_loadu_ps(d + i));
        _mm256_storeu_ps(row + i, v);
        a0 = _mm256_fmadd_ps(v, v, a0);
      }
      float ss = HSum(a0);
      for (; i < n; ++i) {
        row[i] += d[i];
        ss += row[i] * row[i];
      }
      ScaleByGamma(row, RmsScale(ss, n, eps), g, n, om.data + r * om.ld);
    }
  });
  return Status::Ok();
}

Status LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta, float eps,
                 Tensor& out) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor xm, CheckRows("LayerNorm: x", x, -1, -1));
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows("LayerNorm: out", out, xm.rows, xm.cols));
  RowMajor dm;
  if (delta.defined()) {
    FERRY_ASSIGN_OR_RETURN(dm, CheckRows("LayerNorm: delta", delta, xm.rows, xm.cols));
  }
  FERRY_RETURN_IF_ERROR(CheckVector("LayerNorm: gamma", gamma, xm.cols));
  FERRY_RETURN_IF_ERROR(CheckVector("LayerNorm: beta", beta, xm.cols));
  std::vector<float> gamma_scratch, beta_scratch;
  const float* g = AsF32(gamma, gamma_scratch);
  const float* bt = AsF32(beta, beta_scratch);
  const int64_t n = xm.cols;
  const bool has_delta = delta.defined();
  ParallelRows(xm.rows, n, [&](int64_t b, int64_t e) {
    std::vector<float> sum(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      const float* row = xm.data + r * xm.ld;
      if (has_delta) {
        const float* d = dm.data + r * dm.ld;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
          _mm256_storeu_ps(sum.data() + i, _mm256_add_ps(_mm256_loadu_ps(row + i), _mm256_loadu_ps(d + i)));
        }
        for (; i < n; ++i) sum[i] = row[i] + d[i];
        row = sum.data();
      }
      // Two passes (mean, then centred squares; the row is in L1) avoid the cancellation of
      // E[x^2] - E[x]^2, and summing x - row[0] keeps the mean exact to f32 rounding even
      // when the row sits on a large offset.
      const float shift = row[0];
      const __m256 vshift = _mm256_set1_ps(shift);
      __m256 acc = _mm256_setzero_ps();
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_sub_ps(_mm256_loadu_ps(row + i), vshift));
      float s = HSum(acc);
      for (; i < n; ++i) s += row[i] - shift;
      const float mean = shift + s / static_cast<float>(n);
      const __m256 vmean = _mm256_set1_ps(mean);
      acc = _mm256_setzero_ps();
      for (i = 0; i + 8 <= n; i += 8) {
        const __m256 c = _mm256_sub_ps(_mm256_loadu_ps(row + i), vmean);
        acc = _mm256_fmadd_ps(c, c, acc);
      }
      float var = HSum(acc);
      for (; i < n; ++i) var += (row[i] - mean) * (row[i] - mean);
      const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
      const __m256 vinv = _mm256_set1_ps(inv);
      float* o = om.data + r * om.ld;
      for (i = 0; i + 8 <= n; i += 8) {
        const __m256 c = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(row + i), vmean), vinv);
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(c, _mm256_loadu_ps(g + i), _mm256_loadu_ps(bt + i)));
      }
      for (; i < n; ++i) o[i] = (row[i] - mean) * inv * g[i] + bt[i];
    }
  });
  return Status::Ok();
}

}  // namespace ferry::kernels::cpu
