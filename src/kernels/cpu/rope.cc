#include "kernels/cpu/rope.h"

#include <immintrin.h>

#include <cmath>
#include <string>

#include "kernels/attention_params.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_checks.h"

namespace ferry::kernels::cpu {
namespace {

void RotateHeads(float* row, int heads, int head_dim, int half, const float* cos_v, const float* sin_v) {
  for (int h = 0; h < heads; ++h) {
    float* x1 = row + static_cast<int64_t>(h) * head_dim;
    float* x2 = x1 + half;
    int i = 0;
    for (; i + 8 <= half; i += 8) {
      const __m256 a = _mm256_loadu_ps(x1 + i), b = _mm256_loadu_ps(x2 + i);
      const __m256 c = _mm256_loadu_ps(cos_v + i), s = _mm256_loadu_ps(sin_v + i);
      _mm256_storeu_ps(x1 + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
      _mm256_storeu_ps(x2 + i, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
    }
    for (; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * cos_v[i] - b * sin_v[i];
      x2[i] = b * cos_v[i] + a * sin_v[i];
    }
  }
}

}  // namespace

Status Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const int32_t* positions,
            const std::vector<float>& inv_freq, bool two_sets) {
  if (num_heads <= 0) return InvalidArgument("Rope: num_heads must be positive");
  FERRY_ASSIGN_OR_RETURN(const RowMajor qm, CheckRows("Rope: q", q, -1, -1));
  if (qm.cols % num_heads != 0) {
    return InvalidArgument("Rope: q width " + std::to_string(qm.cols) + " is not a multiple of num_heads " +
                           std::to_string(num_heads));
  }
  const int head_dim = static_cast<int>(qm.cols / num_heads);
  const int half = static_cast<int>(inv_freq.size()) / (two_sets ? 2 : 1);
  if (half == 0 || 2 * half > head_dim) {
    return InvalidArgument("Rope: table covers " + std::to_string(2 * half) + " dims but head_dim is " +
                           std::to_string(head_dim));
  }
  RowMajor km;
  if (k.defined()) {
    if (num_kv_heads <= 0) return InvalidArgument("Rope: num_kv_heads must be positive");
    FERRY_ASSIGN_OR_RETURN(km, CheckRows("Rope: k", k, qm.rows, static_cast<int64_t>(num_kv_heads) * head_dim));
  }
  if (qm.rows > 0 && positions == nullptr) return InvalidArgument("Rope: positions is null");
  const int64_t cost = (qm.cols + km.cols) * 2 + half * 40;  // sin/cos in double dominate small heads
  ParallelRows(qm.rows, cost, [&](int64_t b, int64_t e) {
    std::vector<float> cos_v(half), sin_v(half);
    for (int64_t t = b; t < e; ++t) {
      const int32_t raw = positions[t];
      const bool long_set = two_sets && (raw & kRopeLongPosition) != 0;
      const double pos = raw & (kRopeLongPosition - 1);
      const float* freq = inv_freq.data() + (long_set ? half : 0);
      for (int i = 0; i < half; ++i) {
        const double angle = pos * static_cast<double>(freq[i]);
        cos_v[i] = static_cast<float>(std::cos(angle));
        sin_v[i] = static_cast<float>(std::sin(angle));
      }
      RotateHeads(qm.data + t * qm.ld, num_heads, head_dim, half, cos_v.data(), sin_v.data());
      if (km.data != nullptr) RotateHeads(km.data + t * km.ld, num_kv_heads, head_dim, half, cos_v.data(), sin_v.data());
    }
  });
  return Status::Ok();
}

}  // namespace ferry::kernels::cpu
