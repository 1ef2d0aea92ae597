#include "kernels/cpu/embedding.h"

#include <string>

#include "core/dtype.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_checks.h"

namespace ferry::kernels::cpu {

Status Embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out) {
  if (table.rank() != 2 || !table.is_contiguous() || !table.device().is_cpu()) {
    return InvalidArgument("Embedding: table must be a contiguous host [vocab, dim] tensor, got " +
                           table.DebugString());
  }
  const DType dtype = table.dtype();
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return InvalidArgument("Embedding: table must be f32, bf16 or f16, got " + table.DebugString());
  }
  const int64_t vocab = table.dim(0);
  const int64_t dim = table.dim(1);
  FERRY_ASSIGN_OR_RETURN(const RowMajor om, CheckRows("Embedding: out", out, n, dim));
  if (n > 0 && ids == nullptr) return InvalidArgument("Embedding: ids is null");
#ifndef NDEBUG
  // Ids are validated where requests enter (the engine core, the encoder's batch check);
  // this per-call scan only guards debug builds.
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return InvalidArgument("Embedding: id " + std::to_string(ids[i]) + " at " + std::to_string(i) +
                             " is outside the vocabulary of " + std::to_string(vocab));
    }
  }
#else
  (void)vocab;
#endif
  const size_t row_bytes = static_cast<size_t>(dim) * DTypeSize(dtype);
  ParallelRows(n, dim, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      ConvertToF32(dtype, static_cast<const char*>(table.raw()) + ids[i] * row_bytes, om.data + i * om.ld,
                   static_cast<size_t>(dim));
    }
  });
  return Status::Ok();
}

}  // namespace ferry::kernels::cpu
