#include "kernels/cpu/activations.h"

#include <immintrin.h>

#include <string>

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

namespace {

// out = act(gate) * up over rows [gate | up] of gate_up; `cost`: work per row element.
template <typename Act>
Status GatedMul(const char* name, const Tensor& gate_up, Tensor& out, int64_t cost, Act act) {
  const std::string what(name);
  FERRY_ASSIGN_OR_RETURN(const RowMajor gm, CheckRows(what + ": gate_up", gate_up, -1, -1));
  if (gm.cols % 2 != 0) return InvalidArgument(what + ": gate_up width must be even, got " + gate_up.DebugString());
  const int64_t inter = gm.cols / 2;
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows(what + ": out", out, gm.rows, inter));
  ParallelRows(gm.rows, inter * cost, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gm.data + r * gm.ld;
      const float* u = g + inter;
      float* o = om.data + r * om.ld;
      int64_t i = 0;
      for (; i + 8 <= inter; i += 8) {
        _mm256_storeu_ps(o + i, _mm256_mul_ps(act(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
      }
      if (i < inter) {
        const int rest = static_cast<int>(inter - i);
        StorePartial(o + i, _mm256_mul_ps(act(LoadPartial(g + i, rest)), LoadPartial(u + i, rest)), rest);
      }
    }
  });
  return Status::Ok();
}

}  // namespace

Status SiluMul(const Tensor& gate_up, Tensor& out) {
  return GatedMul("SiluMul", gate_up, out, 8, [](__m256 x) { return Silu(x); });
}

Status GeluTanhMul(const Tensor& gate_up, Tensor& out) {
  // 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), written as x / (1 + e^-2z): the
  // same value without the cancellation of 1 + tanh(z) in the negative tail.
  return GatedMul("GeluTanhMul", gate_up, out, 12, [](__m256 x) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 z2 = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f),
                                    _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), Exp(z2)));
  });
}

Status GeluMul(const Tensor& gate_up, Tensor& out) {
  return GatedMul("GeluMul", gate_up, out, 12, [](__m256 x) { return ferry::kernels::cpu::Gelu(x); });
}

Status Scale(Tensor& x, float s) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor m, CheckRows("Scale: x", x, -1, -1));
  const __m256 vs = _mm256_set1_ps(s);
  MapInPlace(m, 1, [vs](__m256 v) { return _mm256_mul_ps(v, vs); });
  return Status::Ok();
}

Status SoftCap(Tensor& x, float cap) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor m, CheckRows("SoftCap: x", x, -1, -1));
  if (!(cap > 0.0f)) return InvalidArgument("SoftCap: cap must be positive");
  const __m256 vc = _mm256_set1_ps(cap), vi = _mm256_set1_ps(1.0f / cap);
  MapInPlace(m, 8, [vc, vi](__m256 v) { return _mm256_mul_ps(vc, ferry::kernels::cpu::Tanh(_mm256_mul_ps(v, vi))); });
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
