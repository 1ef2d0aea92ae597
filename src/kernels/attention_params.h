// How attention kernels see a ragged batch: which rows and cached tokens belong to which
// sequence (SeqSpan), and the heads and scale of the layer (AttentionParams).
#pragma once

#include <cstdint>

namespace ferry::kernels {

// A RoPE position with this bit set turns by the second half of a two-set frequency table
// (longrope's long factors); the bits below it are the position.
constexpr int32_t kRopeLongPosition = int32_t{1} << 30;

// One sequence's part of a ragged batch.
struct SeqSpan {
  int32_t q_begin = 0;      // first row of this sequence in the packed activations
  int32_t q_len = 0;        // rows (new tokens) this step
  int32_t context_len = 0;  // tokens in the KV cache after this step's writes (>= q_len);
                            // the new tokens sit at positions [context_len - q_len, context_len)
  const int32_t* block_table = nullptr;  // KV block ids, ceil(context_len / block_tokens) of them
};

struct AttentionParams {
  int num_heads = 0;
  int num_kv_heads = 0;  // divides num_heads (GQA/MQA)
  int head_dim = 0;
  float scale = 0.0f;    // usually 1/sqrt(head_dim)
  bool causal = true;
  // Sliding window; 0: no window. Causal: the query at position p sees keys at
  // (p - window, p] (transformers' sliding-window mask). Bidirectional (causal false): a
  // half-width, keys at [p - window, p + window] (ModernBERT's local attention with
  // window = local_attention / 2).
  int window = 0;
  // Soft-capping of the scaled scores, softcap * tanh(score / softcap) before the softmax
  // (Gemma 2); 0: none.
  float softcap = 0.0f;
  // Dense bidirectional attention without window or soft-capping may multiply in bf16 (bf16
  // q, k, probabilities and v; f32 sums and softmax) where the CPU has AMX or AVX512-BF16.
  // Encoders set it for W8A8 weights, whose activations are already int8, and where the
  // backend was asked for bf16 activations (Backend::RoundsInputToBf16); everything else keeps
  // f32 products.
  // The GPU's attention runs in the activation dtype either way.
  bool bf16_products = false;
};

}  // namespace ferry::kernels
