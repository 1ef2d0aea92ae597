#include "kernels/cpu/activations.h"

#include <immintrin.h>

#include <string>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_checks.h"
#include "kernels/cpu/vec_math.h"

namespace ferry::kernels::cpu {
namespace {

// Element-wise functions as functors of both widths: op(__m256) for the AVX2 loops and
// op(__m512) for the AVX-512 ones, lane for lane the same bytes (vec_math.h).
struct GeluOp {
  __m256 operator()(__m256 v) const { return Gelu(v); }
  FERRY_AVX512_INLINE __m512 operator()(__m512 v) const { return Gelu(v); }
};
struct SiluOp {
  __m256 operator()(__m256 v) const { return Silu(v); }
  FERRY_AVX512_INLINE __m512 operator()(__m512 v) const { return Silu(v); }
};
struct TanhOp {
  __m256 operator()(__m256 v) const { return Tanh(v); }
  FERRY_AVX512_INLINE __m512 operator()(__m512 v) const { return Tanh(v); }
};
// 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), written as x / (1 + e^-2z): the
// same value without the cancellation of 1 + tanh(z) in the negative tail.
struct GeluTanhOp {
  __m256 operator()(__m256 x) const {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 z2 = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f),
                                    _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), Exp(z2)));
  }
  FERRY_AVX512_INLINE __m512 operator()(__m512 x) const {
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 z2 = _mm512_mul_ps(_mm512_set1_ps(-2.0f * 0.7978845608028654f),
                                    _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), Exp(z2)));
  }
};

struct ScaleOp {
  float s;
  __m256 operator()(__m256 v) const { return _mm256_mul_ps(v, _mm256_set1_ps(s)); }
  FERRY_AVX512_INLINE __m512 operator()(__m512 v) const { return _mm512_mul_ps(v, _mm512_set1_ps(s)); }
};
struct SoftCapOp {
  float cap, inv;
  __m256 operator()(__m256 v) const {
    return _mm256_mul_ps(_mm256_set1_ps(cap), Tanh(_mm256_mul_ps(v, _mm256_set1_ps(inv))));
  }
  FERRY_AVX512_INLINE __m512 operator()(__m512 v) const {
    return _mm512_mul_ps(_mm512_set1_ps(cap), Tanh(_mm512_mul_ps(v, _mm512_set1_ps(inv))));
  }
};

// Rows [b, e) of m through op, 16 lanes at a time (the tail through a masked vector).
template <typename Op>
__attribute__((target("avx512f"))) void MapRows512(const RowMajor& m, int64_t b, int64_t e, Op op) {
  for (int64_t r = b; r < e; ++r) {
    float* row = m.data + r * m.ld;
    int64_t i = 0;
    for (; i + 16 <= m.cols; i += 16) _mm512_storeu_ps(row + i, op(_mm512_loadu_ps(row + i)));
    if (i < m.cols) {
      const __mmask16 rest = static_cast<__mmask16>((1u << (m.cols - i)) - 1);
      _mm512_mask_storeu_ps(row + i, rest, op(_mm512_maskz_loadu_ps(rest, row + i)));
    }
  }
}

// Applies op to every element of a row-major matrix in place, tails through a padded vector.
template <typename Op>
void MapInPlace(const RowMajor& m, int64_t cost_per_elem, Op op) {
  const bool wide = ActiveGemmKernel() == GemmKernel::kAvx512;
  ParallelRows(m.rows, m.cols * cost_per_elem, [&](int64_t b, int64_t e) {
    if (wide) return MapRows512(m, b, e, op);
    for (int64_t r = b; r < e; ++r) {
      float* row = m.data + r * m.ld;
      int64_t i = 0;
      for (; i + 8 <= m.cols; i += 8) _mm256_storeu_ps(row + i, op(_mm256_loadu_ps(row + i)));
      if (i < m.cols) {
        const int rest = static_cast<int>(m.cols - i);
        StorePartial(row + i, op(LoadPartial(row + i, rest)), rest);
      }
    }
  });
}

// out = act(gate) * up for rows [b, e), 16 lanes at a time.
template <typename Act>
__attribute__((target("avx512f"))) void GatedRows512(const RowMajor& gm, const RowMajor& om, int64_t inter,
                                                     int64_t b, int64_t e, Act act) {
  for (int64_t r = b; r < e; ++r) {
    const float* g = gm.data + r * gm.ld;
    const float* u = g + inter;
    float* o = om.data + r * om.ld;
    int64_t i = 0;
    for (; i + 16 <= inter; i += 16) {
      _mm512_storeu_ps(o + i, _mm512_mul_ps(act(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
    }
    if (i < inter) {
      const __mmask16 rest = static_cast<__mmask16>((1u << (inter - i)) - 1);
      _mm512_mask_storeu_ps(o + i, rest,
                            _mm512_mul_ps(act(_mm512_maskz_loadu_ps(rest, g + i)), _mm512_maskz_loadu_ps(rest, u + i)));
    }
  }
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
  const bool wide = ActiveGemmKernel() == GemmKernel::kAvx512;
  ParallelRows(gm.rows, inter * cost, [&](int64_t b, int64_t e) {
    if (wide) return GatedRows512(gm, om, inter, b, e, act);
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

Status SiluMul(const Tensor& gate_up, Tensor& out) { return GatedMul("SiluMul", gate_up, out, 8, SiluOp()); }

Status GeluTanhMul(const Tensor& gate_up, Tensor& out) {
  return GatedMul("GeluTanhMul", gate_up, out, 12, GeluTanhOp());
}

Status GeluMul(const Tensor& gate_up, Tensor& out) { return GatedMul("GeluMul", gate_up, out, 12, GeluOp()); }

Status Scale(Tensor& x, float s) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor m, CheckRows("Scale: x", x, -1, -1));
  MapInPlace(m, 1, ScaleOp{s});
  return Status::Ok();
}

Status SoftCap(Tensor& x, float cap) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor m, CheckRows("SoftCap: x", x, -1, -1));
  if (!(cap > 0.0f)) return InvalidArgument("SoftCap: cap must be positive");
  MapInPlace(m, 8, SoftCapOp{cap, 1.0f / cap});
  return Status::Ok();
}

Status Gelu(Tensor& x) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor m, CheckRows("Gelu: x", x, -1, -1));
  MapInPlace(m, 12, GeluOp());
  return Status::Ok();
}

void GeluRows(float* data, int64_t rows, int64_t cols, int64_t ld) {
  MapInPlace(RowMajor{data, rows, cols, ld}, 12, GeluOp());
}

Status Tanh(Tensor& x) {
  FERRY_ASSIGN_OR_RETURN(const RowMajor m, CheckRows("Tanh: x", x, -1, -1));
  MapInPlace(m, 8, TanhOp());
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
