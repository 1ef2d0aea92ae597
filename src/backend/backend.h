// The op set that model code is written against. One implementation per device
// (CpuBackend now, CudaBackend later); models never see oneDNN or CUDA.
//
// Conventions: activations are contiguous row-major 2-D tensors [tokens, features] in the
// backend's activation dtype (f32 on the CPU). Tokens of several sequences are packed
// back to back (a ragged batch); `SeqSpan`s say which rows belong to which sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/engine_fingerprint.h"

namespace ferry::backend {

// How PrepareLinear stores a weight for the kernels (the engine's precision variants).
enum class WeightFormat : uint8_t {
  kNative,    // the checkpoint's dtype (f32, bf16 or f16), as is
  kF32,
  kBF16,
  kF16,
  kInt8,      // int8-wo: int8 weights, symmetric per-output-channel f32 scales; f32 activations
  kInt8W8A8,  // int8 weights (per-channel) x int8 activations (per-token dynamic scales), with
              // SmoothQuant factors `smooth` (x / s, W * s) applied inside the kernels
  kFp8,       // GPUs (sm_89+): fp8 e4m3 weights (per-channel scales) x fp8 activations (per-token)
};
const char* WeightFormatName(WeightFormat f);
Result<WeightFormat> ParseWeightFormat(std::string_view name);

// A linear layer's weight. Before PrepareLinear: `weight` is [out, in] (Hugging Face
// layout), dtype f32, bf16 or f16; `bias` is [out] f32 or undefined; `format` says what
// to turn it into; `smooth` is [in] f32 SmoothQuant factors for kInt8W8A8 (undefined:
// all ones). After PrepareLinear the kernels read only `packed` (and `bias`); `weight`
// may then be dropped (a Tensor with only the shape kept, see `out`/`in`).
struct LinearWeight {
  Tensor weight;
  Tensor bias;
  WeightFormat format = WeightFormat::kNative;
  Tensor smooth;
  std::shared_ptr<void> packed;
  int64_t out = 0;  // set by PrepareLinear / DeserializeLinear
  int64_t in = 0;
  // Largest row count that runs the backend's small-M (decode) kernel; 0: its default,
  // negative: never.
  // Chosen per weight shape by the engine builder's timing (the engine's tuned choices).
  int small_m_max = 0;
  int64_t out_features() const { return out ? out : (weight.rank() == 2 ? weight.dim(0) : 0); }
  int64_t in_features() const { return in ? in : (weight.rank() == 2 ? weight.dim(1) : 0); }
};

// A prepared linear weight as bytes for an engine file: a JSON description of the layout
// and the blobs it refers to (in order). Blobs given back to DeserializeLinear may be
// read-only views into an mmap'd file; the backend keeps them (not copies) when it can.
struct SerializedLinear {
  std::string layout_json;
  std::vector<Tensor> blobs;
};

// Rotary embedding: inverse frequencies per pair (head_dim / 2 of them), already scaled
// (linear / llama3). HF "rotate_half" convention: element i pairs with i + head_dim/2.
struct RopeTable {
  int head_dim = 0;
  std::vector<float> inv_freq;
};

// One sequence's part of a ragged batch.
struct SeqSpan {
  int32_t q_begin = 0;      // first row of this sequence in the packed activations
  int32_t q_len = 0;        // rows (new tokens) this step
  int32_t context_len = 0;  // tokens in the KV cache after this step's writes (>= q_len);
                            // the new tokens sit at positions [context_len - q_len, context_len)
  const int32_t* block_table = nullptr;  // KV block ids, ceil(context_len / block_tokens) of them
};

// One layer of a paged KV cache. k and v are [num_blocks, num_kv_heads, block_tokens,
// head_dim] (f32, bf16 or f16), so one head's keys in a block are contiguous.
struct KvLayer {
  Tensor k;
  Tensor v;
  int block_tokens = 0;
};

struct AttentionParams {
  int num_heads = 0;
  int num_kv_heads = 0;  // divides num_heads (GQA/MQA)
  int head_dim = 0;
  float scale = 0.0f;    // usually 1/sqrt(head_dim)
  bool causal = true;
};

// Step graphs (CUDA graphs): which recording a step belongs to (recordings bake in their
// owner's KV cache, so each owner has its own), and the longest context any of its
// sequences may have (it sizes the attention launch and the staged block tables).
struct GraphKey {
  int64_t owner = 0;
  int64_t id = 0;
  int plan_context = 0;
};

// One row's sampling settings for Backend::SampleTokens (engine::SamplingParams with the
// seed resolved). The draw is a pure function of (seed, counter, logits); the caller passes
// the number of tokens generated so far as the counter.
struct TokenSampling {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  uint64_t counter = 0;
  std::span<const int32_t> history;  // prompt and generated tokens (repetition penalty)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string Name() const = 0;
  // Activation buffers live on the backend's device.
  virtual Tensor Allocate(const Shape& shape, DType dtype) = 0;
  // The dtype models keep activations in (f32 on the CPU; bf16 or f16 on GPUs).
  virtual DType activation_dtype() const { return DType::kF32; }
  // The dtype of the paged KV cache the engine allocates for this backend.
  virtual DType kv_cache_dtype() const { return DType::kF32; }

  // Called once per weight at load: converts/quantizes to w.format and packs.
  virtual Status PrepareLinear(LinearWeight& w) = 0;
  // Engine files: the prepared form out, and back in (zero-copy from the mapping on the CPU).
  virtual Result<SerializedLinear> SerializeLinear(const LinearWeight& w) = 0;
  virtual Result<LinearWeight> DeserializeLinear(const SerializedLinear& s) = 0;
  // y[M, N] = x[M, K] · W[N, K]^T (+ bias).
  virtual Status Linear(const Tensor& x, const LinearWeight& w, Tensor& y) = 0;
  // Engine builds: times this prepared weight's kernel choices on the device for each
  // row-count bucket the backend distinguishes and keeps the fastest in the weight, where
  // SerializeLinear stores them (the engine's tuned choices). Weights of one shape and
  // format are timed once: the first returns a JSON object describing its timings and
  // choice, later ones of that shape get the same choice and return "". A backend that
  // tunes nothing returns "".
  virtual Result<std::string> TuneLinear(LinearWeight& w) {
    (void)w;
    return std::string();
  }
  // Engine builds: what TuneLinear chooses and the conditions its timings hold for, as a
  // JSON object ({"choice": "...", ...}) that heads the manifest's "tuned" section; "" when
  // this backend tunes nothing.
  virtual std::string DescribeTuning() const { return std::string(); }

  // --- engine files ----------------------------------------------------------------------
  // The device's part of the fingerprint of an engine this backend lays out and tunes (the
  // device kind, and what its weights and tuned choices are only valid for: the CPU ISA;
  // the GPU architecture and library versions). The engine builder adds ferry's versions.
  virtual Result<io::EngineFingerprint> Fingerprint() const {
    return Unimplemented(Name() + " does not build engine files");
  }
  // Whether an engine with `fingerprint`, already known to be for this kind of device, can
  // run on this backend; FailedPrecondition naming the mismatch and the fix otherwise.
  virtual Status CheckFingerprint(const io::EngineFingerprint& fingerprint) const {
    (void)fingerprint;
    return Unimplemented(Name() + " does not load engine files");
  }

  // out[i, :] = table[ids[i], :] (table any float dtype, out activation dtype).
  virtual Status Embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out) = 0;
  // out = x * rsqrt(mean(x^2) + eps) * gamma.
  virtual Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out) = 0;
  // residual += delta; out = RmsNorm(residual). Fused so the sum is read once.
  virtual Status AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps,
                            Tensor& out) = 0;
  // out = LayerNorm(x (+ delta when defined)) * gamma + beta, over the last dim.
  virtual Status LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta,
                           float eps, Tensor& out) = 0;
  // In place on q [T, num_heads*head_dim] and k [T, num_kv_heads*head_dim] at `positions`.
  virtual Status Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const int32_t* positions,
                      const RopeTable& table) = 0;
  // out[M, I] = silu(gate_up[:, :I]) * gate_up[:, I:].
  virtual Status SiluMul(const Tensor& gate_up, Tensor& out) = 0;
  // In place, exact (erf) GELU.
  virtual Status Gelu(Tensor& x) = 0;
  // In place, tanh.
  virtual Status Tanh(Tensor& x) = 0;
  // x += y (same shape).
  virtual Status Add(Tensor& x, const Tensor& y) = 0;

  // The input side of attention on a fused QKV projection qkv [T, (nh + 2 nkv) * hd] (q
  // columns, then k, then v): q [T, nh * hd] gets the rotated queries; the rotated keys and
  // the values go into the cache at `slots`. k and v [T, nkv * hd] are scratch for backends
  // that run it as CopyColumns, Rope and WriteKv (the default); others do it in one pass.
  virtual Status RopeQkvWriteKv(const Tensor& qkv, int num_heads, int num_kv_heads, const int32_t* positions,
                                const RopeTable& table, const int32_t* slots, KvLayer& layer, Tensor& q, Tensor& k,
                                Tensor& v);

  // Writes k/v rows [T, num_kv_heads*head_dim] into the cache at slots
  // (slot = block_id * block_tokens + offset in block).
  virtual Status WriteKv(const Tensor& k, const Tensor& v, const int32_t* slots, KvLayer& layer) = 0;
  // out[T, num_heads*head_dim]: each span's queries attend over its first context_len
  // cached tokens (causal: query at position p sees positions <= p).
  virtual Status PagedAttention(const Tensor& q, const KvLayer& layer, const std::vector<SeqSpan>& spans,
                                const AttentionParams& params, Tensor& out) = 0;
  // Attention without a cache: q, k, v packed [T, heads*head_dim] (k/v with num_kv_heads);
  // each span attends only within itself (q_begin/q_len; context_len ignored).
  virtual Status DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                const std::vector<SeqSpan>& spans, const AttentionParams& params,
                                Tensor& out) = 0;

  // Sentence embeddings, reduced where the hidden states live: out[s, :] = x[q_begin, :] of
  // spans[s] (first: the CLS row) or the mean of its q_len rows (f32 sums). The default works
  // on host f32 memory.
  virtual Status PoolRows(const Tensor& x, const std::vector<SeqSpan>& spans, bool mean, Tensor& out);

  // DenseAttention on a fused QKV projection qkv [T, (nh + 2 nkv) * hd] (q columns, then k,
  // then v). q, k and v are scratch for backends that split it with CopyColumns first (the
  // default); others read it in place.
  virtual Status DenseAttentionQkv(const Tensor& qkv, const std::vector<SeqSpan>& spans,
                                   const AttentionParams& params, Tensor& q, Tensor& k, Tensor& v, Tensor& out);

  // dst[r, :] = src[r, col_begin : col_begin + dst.cols] for every row (splits a fused
  // QKV result into contiguous Q, K and V). The default works on host memory.
  virtual Status CopyColumns(const Tensor& src, int64_t col_begin, Tensor& dst);

  // Copies a device tensor to host memory (f32 contiguous); identity-ish on the CPU.
  virtual Result<Tensor> ToHost(const Tensor& t) = 0;
  virtual Status Synchronize() = 0;

  // --- step graphs -----------------------------------------------------------------------
  // A backend that can record a step's device work and replay it returns true. RunGraph then
  // runs `body` (one step's backend calls) eagerly and captures it the first time it sees
  // key.id, and afterwards replays the recording: `body` runs again on the host only so that
  // the step's small input arrays (token ids, positions, slots, block tables) reach the
  // recorded staging slots, and nothing is launched from it. The body must make the same
  // calls with the same shapes for the same key (the backend checks, and fails the call when
  // they differ, dropping the recording); tensors it allocates are the recording's buffers
  // and hold valid results until the next RunGraph. No sequence may exceed key.plan_context.
  virtual bool supports_graphs() const { return false; }
  virtual Status RunGraph(const GraphKey& key, const std::function<Status()>& body) {
    (void)key;
    return body();
  }
  // Drops every recording of `owner` (when its KV cache goes away).
  virtual void ReleaseGraphs(int64_t owner) { (void)owner; }
  // Recordings held (for reports and tests).
  virtual int graph_count() const { return 0; }

  // --- sampling on the device ------------------------------------------------------------
  // Whether SampleTokens runs where the logits are (a GPU), so that only token ids travel to
  // the host. The CPU backend's logits are host memory already: it returns false.
  virtual bool samples_on_device() const { return false; }
  // One token per row of logits [rows.size(), vocab] (any float dtype) into `tokens`; a row
  // with a NaN or infinite logit gets -1.
  virtual Status SampleTokens(const Tensor& logits, std::span<const TokenSampling> rows, std::vector<int32_t>& tokens) {
    (void)logits;
    (void)rows;
    (void)tokens;
    return Unimplemented(Name() + " samples on the host");
  }
};

// The CPU backend (oneDNN + ferry's vectorized kernels).
std::unique_ptr<Backend> MakeCpuBackend();

// Scaled inverse frequencies for RoPE (default, linear, llama3), as transformers computes them.
struct RopeScalingParams {
  enum class Type { kNone, kLinear, kLlama3 } type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};
RopeTable MakeRopeTable(int head_dim, float theta, const RopeScalingParams& scaling);

}  // namespace ferry::backend
