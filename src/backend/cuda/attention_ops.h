// Attention and pooling on the GPU over an AttentionBatch: the step's uploaded description
// of the batch when it has one (planned for the step graph's context when recorded), or the
// host spans packed and copied over for the call. Thread-compatible (the backend's stream).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace ferry::backend {

class CudaAttention {
 public:
  explicit CudaAttention(CudaContext& ctx) : ctx_(ctx) {}

  Status Paged(const Tensor& q, const KvLayer& layer, const AttentionBatch& batch, const AttentionParams& params,
               Tensor& out);
  // Dense attention over q, k and v rows `*_stride` elements apart (0: packed).
  Status Dense(const void* q, const void* k, const void* v, int64_t q_stride, int64_t kv_stride, DType dtype,
               int64_t tokens, const AttentionBatch& batch, const AttentionParams& params, Tensor& out);
  // Backend::PoolRows.
  Status Pool(const Tensor& x, const AttentionBatch& batch, PoolMode mode, Tensor& out);

 private:
  // The device batch description: the uploaded one, or the host spans' meta copied over with
  // `max_blocks` block-table entries per sequence (0: none, for attention without a cache).
  Result<const int32_t*> Meta(const AttentionBatch& batch, int block_tokens, int max_blocks);

  CudaContext& ctx_;
  std::vector<int32_t> meta_;  // the host form's packing, reused between calls
};

}  // namespace ferry::backend
