// Attention over a paged KV cache (decoders) and over packed K/V rows (encoders).
#pragma once

#include <span>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/attention_params.h"

namespace ferry::kernels::cpu {

// FlashAttention-2 style on the CPU: for one span, one KV head and a tile of query rows,
// the queries of all heads sharing that KV head (GQA/MQA) form one block of rows, so each
// chunk of keys/values is read once per group. Keys stream in chunks of up to 64 (never
// crossing a cache block); per chunk S = Q·K^T and O += P·V run on the GEMM micro-kernel
// with an online softmax in between; accumulation is f32. Work items (span, KV head, query
// tile) are handed out dynamically, most expensive first.
//
// q, out [T, num_heads*head_dim] f32; caches as for WriteKv (f32/bf16/f16).
Status PagedAttention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int block_tokens,
                      std::span<const SeqSpan> spans, const AttentionParams& params,
                      Tensor& out);

// The same without a cache: k, v [T, num_kv_heads*head_dim] f32 rows; each span attends
// within its own rows [q_begin, q_begin + q_len) (context_len is ignored).
Status DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, std::span<const SeqSpan> spans,
                      const AttentionParams& params, Tensor& out);

// The same reading q, k and v in place from the columns of one projection's output,
// qkv [T, (num_heads + 2 num_kv_heads) head_dim] = [q | k | v] (no copies into separate
// tensors); the same bytes as DenseAttention on the three column blocks.
Status DenseAttentionQkv(const Tensor& qkv, std::span<const SeqSpan> spans, const AttentionParams& params,
                         Tensor& out);

}  // namespace ferry::kernels::cpu
