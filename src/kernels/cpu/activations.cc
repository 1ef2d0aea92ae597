#include "kernels/cpu/activations.h"

#include <immintrin.h>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_checks.h"
#include "kernels/cpu/vec_math.h"

namespace ferry::kernels::cpu {
namespace {

// Applies f to every element of a row-major matrix in place, tails through a padded vector.
template <typename F>
void MapInPlace(const RowMajor& m, int64_t cost_per_elem, F f) {
  ParallelRows(m.rows, m.cols * cost_per_elem, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* row = m.data + r * m.ld;
      int64_t i = 0;
      for (; i + 8 <= m.cols; i += 8) _mm256_storeu_ps(row + i, f(_mm256_loadu_ps(row + i)));
      if (i < m.cols) {
        const int rest = static_cast<int>(m.cols - i);
        StorePartial(row + i, f(LoadPartial(row + i, rest)), rest);
      }
    }
  });
}

}  // namespace

Status SiluMul(const Tensor& gate_up, Tensor& out) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor gm, CheckRows("SiluMul: gate_up", gate_up, -1, -1));
  if (gm.cols % 2 != 0) return InvalidArgument("SiluMul: gate_up width must be even, got " + gate_up.DebugString());
  const int64_t inter = gm.cols / 2;
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows("SiluMul: out", out, gm.rows, inter));
  ParallelRows(gm.rows, inter * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gm.data + r * gm.ld;
      const float* u = g + inter;
      float* o = om.data + r * om.ld;
      int64_t i = 0;
      for (; i + 8 <= inter; i += 8) {
        _mm256_storeu_ps(o + i, _mm256_mul_ps(Silu(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
      }
      if (i < inter) {
        const int rest = static_cast<int>(inter - i);
        StorePartial(o + i, _mm256_mul_ps(Silu(LoadPartial(g + i, rest)), LoadPartial(u + i, rest)), rest);
      }
    }
  });
  return Status::Ok();
}

Status Gelu(Tensor& x) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor m, CheckRows("Gelu: x", x, -1, -1));
  MapInPlace(m, 12, [](__m256 v) { return ferry::kernels::cpu::Gelu(v); });
  return Status::Ok();
}

Status Tanh(Tensor& x) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor m, CheckRows("Tanh: x", x, -1, -1));
  MapInPlace(m, 8, [](__m256 v) { return ferry::kernels::cpu::Tanh(v); });
  return Status::Ok();
}

Status Add(Tensor& x, const Tensor& y) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor xm, CheckRows("Add: x", x, -1, -1));
  FERRY_ASSIGN_OR_RETURN(const RowMajor ym, CheckRows("Add: y", y, xm.rows, xm.cols));
  ParallelRows(xm.rows, xm.cols, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* a = xm.data + r * xm.ld;
      const float* c = ym.data + r * ym.ld;
      int64_t i = 0;
      for (; i + 8 <= xm.cols; i += 8) {
        _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(c + i)));
      }
      for (; i < xm.cols; ++i) a[i] += c[i];
    }
  });
  return Status::Ok();
}

}  // namespace ferry::kernels::cpu
