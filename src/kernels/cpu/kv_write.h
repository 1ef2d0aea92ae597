// Scatter of new keys/values into a paged KV cache.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"

namespace ferry::kernels::cpu {

// Checks that k_cache/v_cache are matching [num_blocks, num_kv_heads, block_tokens,
// head_dim] host tensors of f32, bf16 or f16.
Status CheckKvCache(const Tensor& k_cache, const Tensor& v_cache, int block_tokens);

// Writes k/v rows [T, num_kv_heads*head_dim] (f32) into caches k_cache/v_cache [num_blocks,
// num_kv_heads, block_tokens, head_dim] (f32, bf16 or f16; bf16/f16 rounded to nearest
// even) at slots[t] = block * block_tokens + offset. A negative slot marks a padding row
// and is skipped. All slots are validated before anything is written.
Status WriteKv(const Tensor& k, const Tensor& v, const int32_t* slots, Tensor& k_cache, Tensor& v_cache,
               int block_tokens);

}  // namespace ferry::kernels::cpu
