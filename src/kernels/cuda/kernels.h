// Host-callable CUDA kernels for everything but GEMM and attention: embedding, norms,
// RoPE, activations, KV-cache writes, dtype conversion, activation quantization and
// sampling. The CPU kernels in kernels/cpu are the reference semantics.
//
// Conventions for every function here:
//  - pointers are device pointers unless a comment says otherwise; tensors are row-major
//    and contiguous;
//  - `act` is the activation dtype (kF32, kF16 or kBF16); all arithmetic is in f32 and
//    results are rounded to `act` (nearest even) once, on store;
//  - the work is enqueued on `stream` and the returned Status reports argument errors and
//    the launch itself (not the kernel's completion); nothing is allocated;
//  - data-dependent indices (token ids, cache slots) cannot be checked on the device: the
//    caller validates them on the host, where they come from.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/logit_adjust.h"

namespace ferry::cuda {

// out[i, :] = table[ids[i], :]; table [vocab, hidden] in f32, bf16, f16 or fp8 e4m3, out
// [n, hidden] in `act`. ids must lie in [0, vocab).
Status EmbeddingGather(const void* table, DType table_dtype, const int32_t* ids, int64_t n, int64_t hidden, void* out,
                       DType act, cudaStream_t stream);

// out = x * rsqrt(mean(x^2) + eps) * gamma over each row of [rows, cols]; out may be x.
// col_mul (f32 [cols], optional) multiplies gamma in f32: the norm in front of a W8A8 linear
// read unquantized applies the linear's 1 / SmoothQuant factors there.
Status RmsNorm(const void* x, const float* gamma, float eps, int64_t rows, int64_t cols, void* out, DType act,
               cudaStream_t stream, const float* col_mul = nullptr);

// residual += delta (stored rounded to `act`); out = RmsNorm(residual) of the f32 sum, as
// the CPU computes it. out must not alias residual (it may alias delta). col_mul as RmsNorm's.
Status AddRmsNorm(void* residual, const void* delta, const float* gamma, float eps, int64_t rows, int64_t cols,
                  void* out, DType act, cudaStream_t stream, const float* col_mul = nullptr);

// The norm in front of a W8A8 or fp8 GEMM and that GEMM's activation quantization, in one
// pass: residual += delta (delta null: residual is only read), y = RmsNorm(the f32 sum), and
// y quantized per row as QuantizeRowsInt8 (x' = y * inv_smooth) or QuantizeRowsFp8 (inv_smooth null)
// do, from the f32 y rather than y rounded to `act`. q [rows, cols] of q_dtype (kI8 or
// kF8E4M3), row_scales [rows]. Only for rows that RmsNormQuantizeFits (held in registers:
// up to 16,384 bf16 columns, 16-byte aligned); FailedPrecondition otherwise.
bool RmsNormQuantizeFits(const void* residual, const void* delta, const float* gamma, const float* inv_smooth,
                         int64_t cols, DType act);
Status RmsNormQuantize(void* residual, const void* delta, const float* gamma, float eps, int64_t rows, int64_t cols,
                       const float* inv_smooth, void* q, DType q_dtype, float* row_scales, DType act,
                       cudaStream_t stream);

// out = LayerNorm(x (+ delta when delta is not null)) * gamma + beta over each row, with the
// CPU's shifted two-pass mean and variance. out may alias x or delta.
Status LayerNorm(const void* x, const void* delta, const float* gamma, const float* beta, float eps, int64_t rows,
                 int64_t cols, void* out, DType act, cudaStream_t stream);
// LayerNorm as above into out, and out's rows (as stored) quantized per row in the same pass as
// QuantizeRowsInt8 (x' = out * inv_smooth) or QuantizeRowsFp8 (inv_smooth null) would quantize them:
// the same bytes as LayerNorm then the quantization. q [rows, cols] of q_dtype (kI8 or
// kF8E4M3), row_scales [rows]. Only for rows that LayerNormQuantizeFits (held in registers: up
// to 16,384 bf16 columns, 16-byte aligned); FailedPrecondition otherwise.
bool LayerNormQuantizeFits(const void* x, const void* delta, const void* out, const float* gamma, const float* beta,
                           const float* inv_smooth, int64_t cols, DType act);
Status LayerNormQuantize(const void* x, const void* delta, const float* gamma, const float* beta, float eps,
                         int64_t rows, int64_t cols, void* out, const float* inv_smooth, void* q, DType q_dtype,
                         float* row_scales, DType act, cudaStream_t stream);

// Rotary embedding in place on q [tokens, num_heads*head_dim] and k [tokens,
// num_kv_heads*head_dim] (k may be null), Hugging Face rotate_half pairing: element i pairs
// with i + head_dim/2 and turns by positions[t] * inv_freq[i] (inv_freq has head_dim/2
// entries). The angle and its sine and cosine are computed in double, so positions of 128k
// and beyond keep full f32 accuracy.
Status Rope(void* q, void* k, int64_t tokens, int num_heads, int num_kv_heads, int head_dim, const int32_t* positions,
            const float* inv_freq, DType act, cudaStream_t stream);

// Writes k, v [tokens, num_kv_heads*head_dim] (in `act`) into the paged caches k_cache,
// v_cache [num_blocks, num_kv_heads, block_tokens, head_dim] (in `cache_dtype`) at
// slots[t] = block * block_tokens + offset; a negative slot marks a padding row and is
// skipped. cache_dtype is kF32, kF16, kBF16 or kF8E4M3. An fp8 cache stores the values
// themselves as e4m3 (per-tensor scale 1), rounded to nearest even and saturated to
// +-448; it suits models whose keys and values stay well inside that range.
Status WriteKv(const void* k, const void* v, const int32_t* slots, int64_t tokens, int num_kv_heads, int head_dim,
               int block_tokens, void* k_cache, void* v_cache, DType act, DType cache_dtype, cudaStream_t stream);

// Rope then WriteKv in one pass: q and k are rotated in place and the rotated k, with v,
// is written into the caches. Same arguments and semantics as the two calls in sequence.
Status RopeWriteKv(void* q, void* k, const void* v, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                   const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                   void* k_cache, void* v_cache, DType act, DType cache_dtype, cudaStream_t stream);

// RopeWriteKv reading a fused QKV projection qkv [tokens, (num_heads + 2 num_kv_heads) *
// head_dim] (the q columns, then k, then v), which is left as it is: q_out [tokens,
// num_heads * head_dim] gets the rotated queries, the caches the rotated keys and the values.
// The same results as splitting qkv into q, k and v and calling RopeWriteKv, in one pass.
Status RopeQkvWriteKv(const void* qkv, void* q_out, int64_t tokens, int num_heads, int num_kv_heads, int head_dim,
                      const int32_t* positions, const float* inv_freq, const int32_t* slots, int block_tokens,
                      void* k_cache, void* v_cache, DType act, DType cache_dtype, cudaStream_t stream);

// out[r, :] = silu(gate_up[r, :inter]) * gate_up[r, inter:]; gate_up [rows, 2*inter]. col_mul
// (f32 [inter], optional): each column is also multiplied by it before the rounding to `act`.
Status SiluMul(const void* gate_up, int64_t rows, int64_t inter, void* out, DType act, cudaStream_t stream,
               const float* col_mul = nullptr);

// out[r, :] = gelu_tanh(gate_up[r, :inter]) * gate_up[r, inter:] (GeGLU, tanh approximation);
// col_mul as SiluMul's.
Status GeluTanhMul(const void* gate_up, int64_t rows, int64_t inter, void* out, DType act, cudaStream_t stream,
                   const float* col_mul = nullptr);

// out[r, :] = gelu(gate_up[r, :inter]) * gate_up[r, inter:] (GeGLU, exact erf GELU).
Status GeluMul(const void* gate_up, int64_t rows, int64_t inter, void* out, DType act, cudaStream_t stream);

// In place x *= s over n elements.
Status Scale(void* x, int64_t n, float s, DType act, cudaStream_t stream);

// In place x = cap * tanh(x / cap) over n elements.
Status SoftCap(void* x, int64_t n, float cap, DType act, cudaStream_t stream);

// In place RMSNorm of each head_dim-wide head in columns [col_begin, col_begin + heads *
// head_dim) of every row of x [rows, cols], each scaled by gamma [head_dim] (f32, device).
Status HeadRmsNorm(void* x, int64_t rows, int64_t cols, int64_t col_begin, int heads, int head_dim,
                   const float* gamma, float eps, DType act, cudaStream_t stream);

// In place, exact (erf) GELU over n elements.
Status Gelu(void* x, int64_t n, DType act, cudaStream_t stream);

// In place tanh over n elements.
Status Tanh(void* x, int64_t n, DType act, cudaStream_t stream);

// x += y over n elements.
Status Add(void* x, const void* y, int64_t n, DType act, cudaStream_t stream);

// dst[r, :dst_cols] = src[r, col_begin : col_begin + dst_cols] for rows rows (splits a fused
// QKV result). src and dst must not overlap.
Status CopyColumns(const void* src, int64_t rows, int64_t src_cols, int64_t col_begin, void* dst, int64_t dst_cols,
                   DType act, cudaStream_t stream);

// How ReduceRows turns a range of rows into one.
enum class RowReduce { kMean, kMax, kLast };

// out[s, :] = the mean (f32 sums, in row order), the element-wise max or the last of rows
// [begin[s], begin[s] + len[s]) of x [*, cols]; an empty range gives zeros. begin and len
// are device arrays of n entries.
Status ReduceRows(const void* x, int64_t cols, const int32_t* begin, const int32_t* len, int64_t n, RowReduce reduce,
                  void* out, DType act, cudaStream_t stream);

// dst = src converted element-wise, among kF32, kF16, kBF16 and kF8E4M3 (to e4m3: nearest
// even, saturated to +-448, NaN stays NaN), as core/dtype.h converts on the host.
Status Convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t stream);

// What the quantization kernels apply to each value before quantizing it.
enum class QuantPrologue : uint8_t {
  kNone,
  kGeluErf,      // the exact GELU, in f32 (the input is the pre-activation)
  kSiluMul,      // x is [rows, 2 * cols] = [gate | up]; x' = silu(gate) * up (SiluMul's math)
  kGeluTanhMul,  // the same with the tanh GELU (GeluTanhMul's math)
};

// Per-row symmetric int8 quantization, bit-identical to the CPU W8A8 path: x' = x * inv_smooth
// (f32 products; inv_smooth null: x' = x; a linear's is SmoothReciprocals of its SmoothQuant
// factors, as on the CPU), amax = max |x'|, q = round_half_even(x' * (127 / amax)) clamped to
// [-127, 127], row_scales[r] = amax / 127 (an all-zero row: q = 0, scale 0). q [rows, cols].
// With a prologue, x' = prologue(x) * inv_smooth (the gated ones read rows of 2 * cols).
Status QuantizeRowsInt8(const void* x, int64_t rows, int64_t cols, const float* inv_smooth, int8_t* q, float* row_scales,
                        DType act, cudaStream_t stream, QuantPrologue prologue = QuantPrologue::kNone);

// Per-row fp8 quantization: amax = max |x|, q = e4m3(x * (448 / amax)) (nearest even,
// saturated), row_scales[r] = amax / 448 (an all-zero row: q = 0, scale 0). q [rows, cols].
Status QuantizeRowsFp8(const void* x, int64_t rows, int64_t cols, void* q, float* row_scales, DType act,
                       cudaStream_t stream, QuantPrologue prologue = QuantPrologue::kNone);

// One row's sampling settings (engine::SamplingParams with the seed resolved). The draw is
// a pure function of (seed, counter, logits): the same request samples the same tokens
// whatever batch it rides in. Use the number of tokens generated so far as the counter.
struct SamplingParamsGpu {
  float temperature = 1.0f;         // 0: greedy (argmax, ties to the lowest id)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off
  uint64_t seed = 0;
  uint64_t counter = 0;
};

// Picks one token per row of logits [rows, vocab] (f32) into out_tokens [rows], with the
// processors of engine::Sampler in its order: repetition penalty (each distinct token of
// the row's history once: positive logits divided, negative multiplied), temperature,
// top-k, top-p, min-p; then a draw from the renormalized survivors. `params` is a host
// array of rows entries (copied into the launch; it may be freed on return).
// history_tokens/history_offsets (device) hold each row's prompt and generated tokens:
// row r's are history_tokens[history_offsets[r] .. history_offsets[r + 1]); both may be
// null when no row has a repetition penalty. Ids outside [0, vocab) are ignored.
//
// Greedy rows reproduce engine::Argmax exactly. Sampled rows follow the CPU sampler's
// distribution, not its random stream: the draw is a Gumbel-max race over the survivors
// with counter-based (Philox) noise, and the top-p cut-off accumulates probabilities in
// 2^-42 fixed point so it is deterministic; its decision can differ from the CPU's only
// when the cumulative mass lies within about 1e-7 of top_p. A row with a NaN or infinite
// logit gets token -1.
Status SampleRows(const float* logits, int rows, int vocab, const SamplingParamsGpu* params,
                  const int32_t* history_tokens, const int64_t* history_offsets, int32_t* out_tokens,
                  cudaStream_t stream);

// Applies per-id adjustments (logit bias, banned ids, repetition, presence and frequency
// penalties; backend::AdjustLogit, the CPU sampler's function) in place to logits [rows,
// vocab] (f32): entries (device memory, `count` of them) name distinct (row, id) pairs.
Status AdjustLogits(float* logits, int vocab, const kernels::LogitAdjustment* entries, int count, cudaStream_t stream);

// Structured outputs: for each of `count` rows (rows[i], device memory), every id whose bit
// is clear in masks[i] (device memory, ceil(vocab / 64) words per row, bit id % 64 of word
// id / 64) gets kBannedLogit, in place in logits [*, vocab] (f32).
Status MaskLogits(float* logits, int vocab, const int32_t* rows, const uint64_t* masks, int count, cudaStream_t stream);

// Asynchronous steps: for each of `count` pairs (i, j) in `pairs` (device memory, 2 * count
// ids), token_ids[i] = source[j]: a step's placeholders become the ids an earlier step drew
// on the device. A failed draw (-1) becomes id 0 (its row is dropped by the caller).
Status PatchTokens(int32_t* token_ids, const int32_t* source, const int32_t* pairs, int count, cudaStream_t stream);

}  // namespace ferry::cuda
