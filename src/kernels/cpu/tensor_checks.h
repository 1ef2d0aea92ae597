// Shape/dtype validation shared by the CPU kernels' entry points: every op turns a bad
// tensor into InvalidArgument with the op's name, never into a crash.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// An f32 matrix whose rows are contiguous and `ld` elements apart.
struct RowMajor {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
};

// Checks that `t` is a host f32 2-D tensor with unit column stride and, when the
// expectations are >= 0, the given row / column counts.
inline Result<RowMajor> CheckRows(const std::string& what, const Tensor& t, int64_t rows, int64_t cols) {
  if (!t.defined() || t.rank() != 2) return InvalidArgument(what + " must be a 2-D tensor, got " + t.DebugString());
  if (t.dtype() != DType::kF32) return InvalidArgument(what + " must be f32, got " + t.DebugString());
  if (!t.device().is_cpu()) return InvalidArgument(what + " is not in host memory: " + t.DebugString());
  if (rows >= 0 && t.dim(0) != rows) {
    return InvalidArgument(what + " must have " + std::to_string(rows) + " rows, got " + t.DebugString());
  }
  if (cols >= 0 && t.dim(1) != cols) {
    return InvalidArgument(what + " must have " + std::to_string(cols) + " columns, got " + t.DebugString());
  }
  if (t.dim(0) > 1 && t.dim(1) > 0 && (t.strides()[1] != 1 || t.strides()[0] < t.dim(1))) {
    return InvalidArgument(what + " rows must be contiguous");
  }
  if (t.dim(0) > 0 && t.dim(1) > 0 && t.raw() == nullptr) return InvalidArgument(what + " has no data");
  RowMajor m;
  m.data = t.data<float>();
  m.rows = t.dim(0);
  m.cols = t.dim(1);
  m.ld = t.dim(0) > 1 ? t.strides()[0] : t.dim(1);
  return m;
}

inline bool RowsOverlap(const RowMajor& a, const RowMajor& b) {
  if (a.rows == 0 || b.rows == 0 || a.cols == 0 || b.cols == 0) return false;
  const float* a_end = a.data + (a.rows - 1) * a.ld + a.cols;
  const float* b_end = b.data + (b.rows - 1) * b.ld + b.cols;
  return a.data < b_end && b.data < a_end;
}

// Checks a 1-D parameter vector (gamma, beta) of `n` elements in any float dtype.
inline Status CheckVector(const std::string& what, const Tensor& t, int64_t n) {
  if (!t.defined()) return InvalidArgument(what + " is undefined");
  if (t.numel() != n || !t.is_contiguous() || !t.device().is_cpu()) {
    return InvalidArgument(what + " must be contiguous host memory of " + std::to_string(n) + " elements, got " +
                           t.DebugString());
  }
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16) {
    return InvalidArgument(what + " must be f32, bf16 or f16, got " + t.DebugString());
  }
  return Status::Ok();
}

}  // namespace ferry::kernels::cpu
