// Attention on the GPU: over a paged KV cache (decoders; decode and prefill rows of a ragged
// batch in one call) and over packed K/V rows (encoders). Device pointers only; the work is
// enqueued on the caller's stream and nothing is allocated (scratch comes from the caller's
// workspace), so both calls can be captured in a CUDA graph.
//
// Numerics: scores, softmax and the output accumulate in f32. With 16-bit activations the
// products run on the tensor cores (Q and P rounded to the activation dtype, as
// FlashAttention does); with f32 activations, an f32 cache, or a 16-bit cache of the other
// 16-bit dtype, a plain f32 kernel runs instead (exact to f32 rounding, slower).
//
// Head sizes: 16, 32, 64 and 128, on both paths.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::cuda {

// One layer's attention over a paged KV cache for a ragged batch of sequences.
//
// Sequence s owns activation rows [q_begin[s], q_begin[s] + q_len[s]); its cache holds
// context_len[s] tokens after this step, the new ones at positions
// [context_len - q_len, context_len). Cache position j of sequence s lives in block
// block_tables[s * max_blocks_per_seq + j / block_tokens], offset j % block_tokens.
// Rows with q_len == 1 (decode) and q_len > 1 (prefill, chunked prefill) may be mixed in
// any order; rows of q that no sequence covers are left untouched.
struct PagedAttentionArgs {
  // [num_tokens, row stride] activations in act_dtype (kBF16, kF16 or kF32); head h of a row
  // is columns [h * head_dim, (h + 1) * head_dim). Row strides are in elements; 0 means
  // packed (num_heads * head_dim). Pointers 16-byte aligned, strides multiples of 8.
  const void* q = nullptr;
  void* out = nullptr;  // must not overlap q
  DType act_dtype = DType::kBF16;
  int num_tokens = 0;
  int64_t q_row_stride = 0;
  int64_t out_row_stride = 0;

  // [num_blocks, num_kv_heads, block_tokens, head_dim] in kv_dtype: kBF16, kF16, kF8E4M3
  // (values stored directly, scale 1, widened on load), or kF32 (read by the f32 kernel,
  // whatever the activation dtype).
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  DType kv_dtype = DType::kBF16;
  int block_tokens = 0;

  // The batch: device int32 arrays of num_seqs entries; block_tables is
  // [num_seqs, max_blocks_per_seq]. Every entry must be valid (the kernels cannot report
  // a bad block id): context_len >= q_len >= 0, ceil(context_len / block_tokens) valid
  // block ids per sequence.
  int num_seqs = 0;
  const int32_t* q_begin = nullptr;
  const int32_t* q_len = nullptr;
  const int32_t* context_len = nullptr;
  const int32_t* block_tables = nullptr;
  int max_blocks_per_seq = 0;

  // Host-side bounds over the batch, which size the launches. max_q_len must bound every
  // q_len (1 means a decode-only batch: the prefill kernel is not launched). max_context_len
  // plans how many splits the decode grid has; each row divides its own context among them
  // on the device, so a graph captured for a bound replays correctly (and evenly) for any
  // shorter contexts, and a longer context is still correct, only less evenly split.
  int max_q_len = 0;
  int max_context_len = 0;
  // What the host knows of the batch's prefill rows (sequences with q_len > 1), where it
  // knows it (an eager step; -1: not known, and the prefill grid is sized from num_tokens and
  // num_seqs, every decode row and sequence counted, the extra CTAs finding nothing to do).
  // prefill_tokens: the sum of their q_len; prefill_seqs: how many; prefill_seq_begin: no
  // sequence before it has q_len > 1. In a mixed step of 1,024 decode rows and 8 prompts,
  // the bound was 1,159 CTAs per KV head for 64 that had work.
  int prefill_tokens = -1;
  int prefill_seqs = -1;
  int prefill_seq_begin = 0;

  int num_heads = 0;
  int num_kv_heads = 0;  // divides num_heads (GQA/MQA)
  int head_dim = 0;      // 16, 32, 64 or 128
  float scale = 0.0f;    // usually 1/sqrt(head_dim)
  bool causal = true;    // the query at position p sees positions <= p; false: all context_len
  int window = 0;        // causal only: the query at p sees (p - window, p]; 0: no window
  float softcap = 0.0f;  // scores -> softcap * tanh(scores / softcap) before the softmax; 0: none

  // Which kernel runs the decode rows. kAuto: head columns for GQA groups of up to 8 heads
  // (the group as the N side of the tensor-core products, keys streamed into registers), 16-row
  // tiles otherwise. The others force one (tests and benchmarks; kHeadColumns needs a group of
  // at most 8 and 16-bit activations).
  enum class DecodeKernel { kAuto, kRowTiles, kHeadColumns };
  DecodeKernel decode_kernel = DecodeKernel::kAuto;

  // Scratch for the split decode (partial maxima, sums and outputs), at least
  // PagedAttentionWorkspaceBytes(num_seqs, ...) bytes, 16-byte aligned. May be null when
  // that size is 0.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Workspace PagedAttention needs on the current device for any batch of at most max_seqs
// sequences whose max_context_len is at most the one given (so a buffer can be sized once
// for the largest batch). Fails only if the device cannot be queried.
Result<size_t> PagedAttentionWorkspaceBytes(int max_seqs, int num_heads, int num_kv_heads, int head_dim,
                                            int max_context_len);

// Enqueues the attention described by `a` on `stream`: a split ("flash-decoding") kernel for
// the decode rows, plus a reduction over the splits when a context is long enough to be
// split, and a FlashAttention-2 style kernel for the prefill rows.
Status PagedAttention(const PagedAttentionArgs& a, cudaStream_t stream);

// Attention without a cache (encoders). Span s attends only within its own rows
// [q_begin[s], q_begin[s] + q_len[s]) of q, k and v. Padding never needs a mask: the batch
// is packed raggedly, so a span's rows are exactly its real tokens and padded positions
// simply do not exist.
struct DenseAttentionArgs {
  // q/out [num_tokens, num_heads * head_dim], k/v [num_tokens, num_kv_heads * head_dim] rows,
  // all in `dtype` (kBF16, kF16 or kF32). Row strides in elements, 0 meaning packed (a fused
  // QKV buffer can be read in place with q/k/v pointing into it). Pointers 16-byte aligned,
  // strides multiples of 8.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;  // must not overlap q, k or v
  DType dtype = DType::kBF16;
  int num_tokens = 0;
  int64_t q_row_stride = 0;
  int64_t kv_row_stride = 0;
  int64_t out_row_stride = 0;

  // Device int32 arrays of num_seqs entries.
  int num_seqs = 0;
  const int32_t* q_begin = nullptr;
  const int32_t* q_len = nullptr;

  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // 16, 32, 64 or 128
  float scale = 0.0f;
  bool causal = false;  // encoders (BERT) attend both ways
  float softcap = 0.0f;  // as in PagedAttentionArgs
  // Sliding window; 0: none. Causal: the query at p sees (p - window, p]. Bidirectional
  // (ModernBERT's local layers): a half-width, the query at p sees [p - window, p + window].
  int window = 0;
};

Status DenseAttention(const DenseAttentionArgs& a, cudaStream_t stream);

}  // namespace ferry::cuda
