// The op set that model code is written against. One implementation per device
// (CpuBackend now, CudaBackend later); models never see oneDNN or CUDA.
//
// Conventions: activations are contiguous row-major 2-D tensors [tokens, features] in the
// backend's activation dtype (f32 on the CPU). Tokens of several sequences are packed
// back to back (a ragged batch); `SeqSpan`s say which rows belong to which sequence.
// Index arrays (token ids, positions, KV slots, rows) are i32 tensors: a step's come from
// UploadStep, uploaded once and read by every op of the step; a host tensor (HostIndices)
// also works, and a device backend copies it over in the op.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/step_inputs.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/engine_fingerprint.h"
#include "io/int8_blocks.h"
#include "kernels/attention_params.h"
#include "kernels/int4_groups.h"
#include "kernels/serialized_linear.h"
#include "kernels/weight_format.h"

namespace ferry::backend {

using kernels::AttentionParams;
using kernels::ParseWeightFormat;
using kernels::SerializedLinear;
using kernels::WeightFormat;
using kernels::WeightFormatName;

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
  // kInt4 only: the 4-bit groups to use as they are (a GPTQ / AWQ checkpoint's grid, `weight`
  // then undefined); unset, the backend quantizes `weight`. Dropped by PrepareLinear.
  std::shared_ptr<const kernels::Int4Groups> int4;
  // kInt8 only: int8 values with one scale per block of inputs (a GGUF Q8_0 matrix) to run as
  // they are, `weight` then undefined; only for a backend whose TakesInt8Blocks() is true.
  // Dropped by PrepareLinear.
  std::shared_ptr<const io::Int8Blocks> int8_blocks;
  // Set by PrepareLinear / DeserializeLinear from int8 blocks: their inputs per scale (the
  // prepared weight streams an f16 scale per block beside the int8 values); 0 otherwise.
  int64_t block_size = 0;
  int64_t out = 0;  // set by PrepareLinear / DeserializeLinear
  int64_t in = 0;
  // Largest row count that runs the backend's small-M (decode) kernel; 0: its default,
  // negative: never.
  // Chosen per weight shape by the engine builder's timing (the engine's tuned choices).
  int small_m_max = 0;
  // kFp8 only: the GEMM may keep its accumulator at the tensor cores' own precision over the
  // whole K (CUDA: cuBLASLt's fast accumulation) instead of promoting partial sums to f32.
  // Set at load or build; recorded with the prepared weight.
  bool fast_accumulation = false;
  int64_t out_features() const { return out ? out : (weight.rank() == 2 ? weight.dim(0) : 0); }
  int64_t in_features() const { return in ? in : (weight.rank() == 2 ? weight.dim(1) : 0); }
};

// Rotary embedding: inverse frequencies per pair (head_dim / 2 of them), already scaled
// (linear / llama3). HF "rotate_half" convention: element i pairs with i + head_dim/2.
struct RopeTable {
  int head_dim = 0;
  std::vector<float> inv_freq;
  // longrope: inv_freq holds head_dim entries, the short set then the long set, and positions
  // flagged with kernels::kRopeLongPosition take the long one.
  bool long_factors = false;
};

// One layer of a paged KV cache. k and v are [num_blocks, num_kv_heads, block_tokens,
// head_dim] (f32, bf16 or f16), so one head's keys in a block are contiguous.
struct KvLayer {
  Tensor k;
  Tensor v;
  int block_tokens = 0;
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
  std::span<const int32_t> history;  // prompt and generated tokens (the last `counter` are generated)
  float presence_penalty = 0.0f;     // OpenAI's, on generated tokens
  float frequency_penalty = 0.0f;
  std::span<const std::pair<int32_t, float>> logit_bias;  // token id -> added to its logit
  std::span<const int32_t> banned;   // ids that may not be drawn (stop ids before min_tokens)
  // Structured outputs: when not empty, a bitset over the vocabulary (bit id % 64 of word
  // id / 64) of the only ids that may be drawn; the others get kBannedLogit before sampling.
  std::span<const uint64_t> allowed;
};

// Tokens drawn on the device and still on their way to the host (Backend::SampleTokensAsync).
class PendingTokens {
 public:
  virtual ~PendingTokens() = default;
  // The tokens where they were drawn, i32 [rows], valid while this object lives: a later
  // step's inputs may take their ids from it (StepInputs::token_patches).
  virtual const Tensor& device_tokens() const = 0;
  // Waits for the copy and returns one token per row (-1: a row with a NaN or infinite logit).
  virtual Status Wait(std::vector<int32_t>& tokens) = 0;
  // After Wait: the f32 logits of the rows SampleTokensAsync was asked to bring back, as the
  // draw read them before any bias, ban or mask ([host_rows, vocab], back to back).
  virtual std::span<const float> host_rows() const = 0;
};

// How PoolRows reduces a sequence's rows to one (sentence-transformers' pooling modes).
enum class PoolMode { kFirst, kMean, kMax, kLast };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string Name() const = 0;
  // Activation buffers live on the backend's device. Out of memory is ResourceExhausted,
  // naming the size and the device.
  virtual Result<Tensor> Allocate(const Shape& shape, DType dtype) = 0;
  // A GPU's free and total memory in bytes (cudaMemGetInfo); nullopt for the host.
  virtual std::optional<std::pair<size_t, size_t>> DeviceMemory() const { return std::nullopt; }
  // The dtype models keep activations in (f32 on the CPU; bf16 or f16 on GPUs).
  virtual DType activation_dtype() const { return DType::kF32; }
  // The dtype of the paged KV cache the engine allocates for this backend.
  virtual DType kv_cache_dtype() const { return DType::kF32; }
  // Applies this backend's compute-thread count to the calling thread. Models call it at the
  // start of every forward pass: on the CPU the count is OpenMP's per-thread setting, which a
  // scheduler thread does not inherit from the thread that loaded the engine. Nothing on a GPU.
  virtual void BindComputeThreads() {}
  // CPU: the compute threads of the forward passes that start after the call, on any thread
  // (a QoS group's core split); 0: the engine's own `threads`. Nothing on a GPU.
  virtual void SetThreads(int threads) { (void)threads; }

  // Called once per weight at load: converts/quantizes to w.format and packs.
  virtual Status PrepareLinear(LinearWeight& w) = 0;
  // Whether PrepareLinear takes LinearWeight::int8_blocks (block-scaled int8 run as it is).
  // The CPU does; elsewhere the loader hands over the blocks' f32 matrix instead.
  virtual bool TakesInt8Blocks() const { return false; }
  // The same for a weight given as row blocks [n_i, in] of one dtype (the parts of a fused
  // QKV or gate/up layout, straight from the checkpoint's mapping), w.weight undefined. The
  // default concatenates them on the host into w.weight and calls PrepareLinear; a GPU
  // copies each part straight into its rows on the device.
  virtual Status PrepareLinearParts(const std::vector<Tensor>& parts, LinearWeight& w);
  // A weight that ops will receive as a host tensor (an embedding table): a device backend
  // may copy it now, with the other weights, rather than at its first use. Nothing on the CPU.
  virtual Status PreloadWeight(const Tensor& t) {
    (void)t;
    return Status::Ok();
  }
  // After a model's last weight: waits until every weight copied asynchronously is on the
  // device (the one synchronization of a load) and releases what loading used (a GPU's
  // pinned staging buffers). Ops that need the weights call it themselves if nobody did.
  virtual Status FinishLoading() { return Status::Ok(); }
  // Device memory this backend holds now, in bytes: weights, pools (including the blocks
  // they keep for reuse), workspaces. 0 for the host (the process's memory is all of it).
  virtual size_t DeviceBytesHeld() const { return 0; }
  // Returns the blocks a device pool keeps for reuse to the device (after a profiling step).
  virtual void ReleaseCachedMemory() {}
  // Engine files: the prepared form out, and back in (zero-copy from the mapping on the CPU).
  virtual Result<SerializedLinear> SerializeLinear(const LinearWeight& w) = 0;
  virtual Result<LinearWeight> DeserializeLinear(const SerializedLinear& s) = 0;
  // y[M, N] = x[M, K] · W[N, K]^T (+ bias).
  virtual Status Linear(const Tensor& x, const LinearWeight& w, Tensor& y) = 0;
  // y = GELU(x) · W^T (+ bias), exact GELU; x may be left holding GELU(x) or unchanged.
  // Backends that quantize activations fold the GELU into the quantization pass; the
  // default runs Gelu then Linear.
  virtual Status GeluLinear(Tensor& x, const LinearWeight& w, Tensor& y);
  // BERT's feed-forward: mid = x · W_in^T (+ bias), y = GELU(mid) · W_out^T (+ bias); mid
  // ([M, I]) is scratch. The default runs Linear then GeluLinear; the CPU applies the GELU
  // as the first GEMM stores its output.
  virtual Status GeluFeedForward(const Tensor& x, const LinearWeight& w_in, Tensor& mid, const LinearWeight& w_out,
                                 Tensor& y);
  // y = (act(gate) * up) · W^T (+ bias) for gate_up = [gate | up] ([M, 2I]); act is SiLU or,
  // with gelu_tanh, the tanh GELU. mlp ([M, I]) is scratch, left holding act(gate) * up or
  // unchanged. The default runs SiluMul (GeluTanhMul) then Linear.
  virtual Status GatedLinear(const Tensor& gate_up, bool gelu_tanh, Tensor& mlp, const LinearWeight& w, Tensor& y);
  // residual += delta (delta null: residual is left as it is); h = RmsNorm(residual);
  // y = h · W^T (+ bias). The norm in front of a linear: backends that quantize activations
  // compute it in the quantization pass and may leave h unwritten, so callers use h only as
  // this linear's input. The default runs RmsNorm (AddRmsNorm) then Linear.
  virtual Status NormLinear(Tensor& residual, const Tensor* delta, const Tensor& gamma, float eps, Tensor& h,
                            const LinearWeight& w, Tensor& y);
  // out = LayerNorm(x (+ delta when defined)) * gamma + beta; y = out · W^T (+ bias): a BERT
  // layer's norm (out is its residual stream, always written) and the linear that reads it.
  // The default runs LayerNorm then Linear. FusesLayerNormLinear says whether this backend
  // saves a pass for w (CUDA unless FERRY_FUSE_LAYERNORM=0: the norm writes the linear's
  // quantized input too, for W8A8 and fp8 weights, with the same bytes), so that callers with
  // a better unfused sequence (the CPU's GeluFeedForward) keep it elsewhere. LayerNormLinear
  // itself takes the fused pass wherever it fits, whatever FusesLayerNormLinear says.
  virtual bool FusesLayerNormLinear(const LinearWeight& w) const {
    (void)w;
    return false;
  }
  // Whether bf16 activations were asked of this backend for w's input (the CPU with
  // EngineOptions::cpu_activations = bf16 and a bf16 or int8-wo weight; its vdpbf16ps GEMM rounds x to
  // bf16, while AMX, where enabled, keeps its exact route). The encoders then let that layer's
  // attention multiply in bf16 (AttentionParams::bf16_products), as they do for W8A8 layers.
  virtual bool RoundsInputToBf16(const LinearWeight& w) const {
    (void)w;
    return false;
  }
  virtual Status LayerNormLinear(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta,
                                 float eps, Tensor& out, const LinearWeight& w, Tensor& y);
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

  // out[i, :] = table[ids[i], :] for the n = ids.numel() ids (table any float dtype, out
  // activation dtype).
  virtual Status Embedding(const Tensor& table, const Tensor& ids, Tensor& out) = 0;
  // out = x * rsqrt(mean(x^2) + eps) * gamma.
  virtual Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out) = 0;
  // residual += delta; out = RmsNorm(residual). Fused so the sum is read once.
  virtual Status AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps,
                            Tensor& out) = 0;
  // out = LayerNorm(x (+ delta when defined)) * gamma + beta, over the last dim.
  virtual Status LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta,
                           float eps, Tensor& out) = 0;
  // In place on q [T, num_heads*head_dim] and k [T, num_kv_heads*head_dim] at `positions` [T].
  virtual Status Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const Tensor& positions,
                      const RopeTable& table) = 0;
  // out[M, I] = silu(gate_up[:, :I]) * gate_up[:, I:].
  virtual Status SiluMul(const Tensor& gate_up, Tensor& out) = 0;
  // In place, exact (erf) GELU.
  virtual Status Gelu(Tensor& x) = 0;
  // In place, tanh.
  virtual Status Tanh(Tensor& x) = 0;
  // out[M, I] = gelu_tanh(gate_up[:, :I]) * gate_up[:, I:] (GeGLU, tanh-approximated GELU).
  virtual Status GeluTanhMul(const Tensor& gate_up, Tensor& out);
  // out[M, I] = gelu(gate_up[:, :I]) * gate_up[:, I:] (GeGLU, exact erf GELU: ModernBERT).
  virtual Status GeluMul(const Tensor& gate_up, Tensor& out);
  // In place x *= s.
  virtual Status Scale(Tensor& x, float s);
  // In place x = cap * tanh(x / cap).
  virtual Status SoftCap(Tensor& x, float cap);
  // In place RMSNorm of each head_dim-wide head in columns [col_begin, col_begin + heads *
  // head_dim) of every row of x (a fused QKV projection), every head scaled by gamma
  // [head_dim] f32 (Qwen3's q_norm / k_norm).
  virtual Status HeadRmsNorm(Tensor& x, int64_t col_begin, int heads, int head_dim, const Tensor& gamma, float eps);
  // x += y (same shape).
  virtual Status Add(Tensor& x, const Tensor& y) = 0;

  // The input side of attention on a fused QKV projection qkv [T, (nh + 2 nkv) * hd] (q
  // columns, then k, then v): q [T, nh * hd] gets the rotated queries; the rotated keys and
  // the values go into the cache at `slots` [T]. k and v [T, nkv * hd] are scratch for
  // backends that run it as CopyColumns, Rope and WriteKv (the default); others do it in one
  // pass.
  virtual Status RopeQkvWriteKv(const Tensor& qkv, int num_heads, int num_kv_heads, const Tensor& positions,
                                const RopeTable& table, const Tensor& slots, KvLayer& layer, Tensor& q, Tensor& k,
                                Tensor& v);

  // Writes k/v rows [T, num_kv_heads*head_dim] into the cache at slots [T]
  // (slot = block_id * block_tokens + offset in block).
  virtual Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots, KvLayer& layer) = 0;
  // out[T, num_heads*head_dim]: each span's queries attend over its first context_len
  // cached tokens (causal: query at position p sees positions <= p).
  virtual Status PagedAttention(const Tensor& q, const KvLayer& layer, const AttentionBatch& batch,
                                const AttentionParams& params, Tensor& out) = 0;
  // Attention without a cache: q, k, v packed [T, heads*head_dim] (k/v with num_kv_heads);
  // each span attends only within itself (q_begin/q_len; context_len ignored).
  virtual Status DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                                const AttentionParams& params, Tensor& out) = 0;

  // Sentence embeddings, reduced where the hidden states live: out[s, :] = the first row of
  // span s (the CLS row), the mean of its q_len rows (f32 sums), their element-wise max, or
  // its last row. The default works on host f32 memory.
  virtual Status PoolRows(const Tensor& x, const AttentionBatch& batch, PoolMode mode, Tensor& out);

  // DenseAttention on a fused QKV projection qkv [T, (nh + 2 nkv) * hd] (q columns, then k,
  // then v). The CPU and CUDA backends read it in place; the default splits it with
  // CopyColumns into tensors of its own first.
  virtual Status DenseAttentionQkv(const Tensor& qkv, const AttentionBatch& batch, const AttentionParams& params,
                                   Tensor& out);

  // dst[r, :] = src[r, col_begin : col_begin + dst.cols] for every row (splits a fused
  // QKV result into contiguous Q, K and V). The default works on host memory.
  virtual Status CopyColumns(const Tensor& src, int64_t col_begin, Tensor& dst);

  // Copies a device tensor to host memory (f32 contiguous); identity-ish on the CPU.
  virtual Result<Tensor> ToHost(const Tensor& t) = 0;
  virtual Status Synchronize() = 0;

  // --- step inputs and step graphs ---------------------------------------------------------
  // Puts a step's small inputs where its ops read them, once per step: the CPU reads the host
  // arrays in place (the default); a device packs them into one buffer and copies it over,
  // valid until its next Synchronize.
  virtual Result<StepTensors> UploadStep(const StepInputs& inputs) {
    if (!inputs.token_patches.empty()) return Unimplemented(Name() + " does not patch step tokens");
    return HostStepTensors(inputs);
  }

  // A backend that can record a step's device work and replay it returns true. RunGraph runs
  // one step as the recording for key.id: the first time, it runs `body` eagerly and then
  // records it over persistent input buffers that belong to the recording; afterwards a step
  // is only its inputs copied into those buffers and the recording launched (`body` does not
  // run). Steps of one key must have inputs of the same layout (StepInputLayout: sizes and
  // the planning context key.plan_context, which no sequence may exceed): one that differs
  // fails with the recording dropped, and the next step of the key records afresh. A key
  // whose recording fails runs eagerly from then on. The result is the body's output, in the
  // recording's buffer, valid until the next RunGraph. The default runs every step eagerly.
  virtual bool supports_graphs() const { return false; }
  virtual Result<Tensor> RunGraph(const GraphKey& key, const StepInputs& inputs, const StepBody& body) {
    (void)key;
    FERRY_ASSIGN_OR_RETURN(const StepTensors uploaded, UploadStep(inputs));
    return body(uploaded);
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
  // Asynchronous steps: a backend that returns true samples without waiting
  // (SampleTokensAsync), and its step uploads (UploadStep, RunGraph) apply
  // StepInputs::token_patches on the device, so the next step can be queued before this
  // step's tokens reach the host.
  virtual bool patches_step_tokens() const { return false; }
  // SampleTokens, returning as soon as the draw and the copy to the host are queued; the
  // logits of `host_rows` (row indices) come back too (log-probabilities).
  virtual Result<std::unique_ptr<PendingTokens>> SampleTokensAsync(const Tensor& logits,
                                                                   std::span<const TokenSampling> rows,
                                                                   std::span<const int32_t> host_rows = {}) {
    (void)logits;
    (void)rows;
    (void)host_rows;
    return Unimplemented(Name() + " does not sample asynchronously");
  }
};

// The CPU backend (oneDNN + ferry's vectorized kernels).
std::unique_ptr<Backend> MakeCpuBackend();

// Scaled inverse frequencies for RoPE (default, linear, llama3), as transformers computes them.
struct RopeScalingParams {
  enum class Type { kNone, kLinear, kLlama3, kLongRope } type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
  std::vector<float> short_factor;  // longrope, head_dim / 2 each
  std::vector<float> long_factor;
  float attention_factor = 1.0f;    // longrope: applied by the model (as a score scale)
};
RopeTable MakeRopeTable(int head_dim, float theta, const RopeScalingParams& scaling);

}  // namespace ferry::backend
