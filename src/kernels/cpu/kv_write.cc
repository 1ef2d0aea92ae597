#include "kernels/cpu/kv_write.h"

#include <string>

#include "core/dtype.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_checks.h"

namespace ferry::kernels::cpu {

Status CheckKvCache(const Tensor& k_cache, const Tensor& v_cache, int block_tokens) {
  if (k_cache.rank() != 4 || v_cache.shape() != k_cache.shape()) {
    return InvalidArgument("KV cache k and v must both be [num_blocks, num_kv_heads, block_tokens, head_dim], got " +
                           k_cache.DebugString() + " and " + v_cache.DebugString());
  }
  if (k_cache.dtype() != v_cache.dtype() ||
      (k_cache.dtype() != DType::kF32 && k_cache.dtype() != DType::kBF16 && k_cache.dtype() != DType::kF16)) {
    return InvalidArgument("KV cache must be f32, bf16 or f16 (k and v alike), got " + k_cache.DebugString() +
                           " and " + v_cache.DebugString());
  }
  if (!k_cache.is_contiguous() || !v_cache.is_contiguous() || !k_cache.device().is_cpu() ||
      !v_cache.device().is_cpu()) {
    return InvalidArgument("KV cache must be contiguous host memory");
  }
  if (block_tokens <= 0 || k_cache.dim(2) != block_tokens) {
    return InvalidArgument("KV cache block_tokens " + std::to_string(block_tokens) + " does not match its shape " +
                           k_cache.DebugString());
  }
  return Status::Ok();
}

Status WriteKv(const Tensor& k, const Tensor& v, const int32_t* slots, Tensor& k_cache, Tensor& v_cache,
               int block_tokens) {
  FERRY_RETURN_IF_ERROR(CheckKvCache(k_cache, v_cache, block_tokens));
  const int64_t num_blocks = k_cache.dim(0);
  const int64_t kv_heads = k_cache.dim(1);
  const int64_t head_dim = k_cache.dim(3);
  FERRY_ASSIGN_OR_RETURN(const RowMajor km, CheckRows("WriteKv: k", k, -1, kv_heads * head_dim));
  FERRY_ASSIGN_OR_RETURN(const RowMajor vm, CheckRows("WriteKv: v", v, km.rows, kv_heads * head_dim));
  if (km.rows > 0 && slots == nullptr) return InvalidArgument("WriteKv: slots is null");
  const int64_t capacity = num_blocks * block_tokens;
  for (int64_t t = 0; t < km.rows; ++t) {
    if (slots[t] >= capacity) {
      return InvalidArgument("WriteKv: slot " + std::to_string(slots[t]) + " of row " + std::to_string(t) +
                             " is outside the cache (" + std::to_string(capacity) + " slots)");
    }
  }
  const DType dtype = k_cache.dtype();
  const size_t elem = DTypeSize(dtype);
  ParallelRows(km.rows, 2 * kv_heads * head_dim, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (slots[t] < 0) continue;
      const int64_t block = slots[t] / block_tokens;
      const int64_t offset = slots[t] % block_tokens;
      for (int64_t h = 0; h < kv_heads; ++h) {
        const size_t dst = static_cast<size_t>(((block * kv_heads + h) * block_tokens + offset) * head_dim) * elem;
        ConvertFromF32(dtype, km.data + t * km.ld + h * head_dim, static_cast<char*>(k_cache.raw()) + dst,
                       static_cast<size_t>(head_dim));
        ConvertFromF32(dtype, vm.data + t * vm.ld + h * head_dim, static_cast<char*>(v_cache.raw()) + dst,
                       static_cast<size_t>(head_dim));
      }
    }
  });
  return Status::Ok();
}

}  // namespace ferry::kernels::cpu
