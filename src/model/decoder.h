// Decoder-only transformers (LLaMA, Mistral, Qwen2/3, Gemma 2, Phi-3): written once against
// backend::Backend. The architectures differ only in what io::ModelConfig says: q/k norms,
// sandwich norms, soft-capping, sliding windows, GeGLU, the checkpoint's weight names.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/model_config.h"
#include "model/weights.h"

namespace ferry::model {

// One ragged step: tokens of several sequences packed back to back.
struct DecoderBatch {
  std::vector<int32_t> token_ids;        // [T]
  std::vector<int32_t> positions;        // [T] absolute position of each token
  std::vector<int32_t> slots;            // [T] KV cache slot each token's K/V is written to
  std::vector<backend::SeqSpan> spans;   // one per sequence
  std::vector<int32_t> logit_rows;       // packed rows whose logits are wanted (often each span's last)
  // Ids still on the device (StepInputs::token_patches): pairs (token index, row of
  // *patch_source); those token_ids are placeholders.
  std::vector<int32_t> token_patches;
  const Tensor* patch_source = nullptr;

  // The batch as the backend takes a step's inputs (views of the vectors above), for a KV
  // cache of `block_tokens`-token blocks.
  backend::StepInputs inputs(int block_tokens) const;
};

// longrope (Phi-3): flags the positions of every sequence whose context this step exceeds
// the original window (transformers' rule: the long factors once the largest position + 1
// passes original_max_position_embeddings) with kernels::kRopeLongPosition. Idempotent; a
// no-op for other models. Forward(DecoderBatch) applies it itself.
void MarkLongRopePositions(const io::ModelConfig& config, DecoderBatch& batch);

// Immutable after Load; Forward is thread-compatible (one caller at a time per KV cache).
class DecoderModel {
 public:
  // From a Hugging Face checkpoint: fuses Q/K/V and gate/up, converts to options' formats.
  static Result<std::unique_ptr<DecoderModel>> Load(const io::ModelConfig& config, const WeightSource& weights,
                                                    backend::Backend& backend, const LoadOptions& options = {});
  // From weights already prepared under ferry's keys (an engine file).
  static Result<std::unique_ptr<DecoderModel>> LoadPrepared(const io::ModelConfig& config,
                                                            const PreparedSource& weights, backend::Backend& backend);
  // Every weight under its key: "embed", "final_norm", "lm_head", "layers.N.{attn_norm,
  // mlp_norm, qkv, o, gate_up, down}", plus "layers.N.{q_norm, k_norm}" (qk_norm) and
  // "layers.N.{post_attn_norm, post_mlp_norm}" (gemma_norms; every Gemma norm with its + 1
  // applied).
  Status Visit(const WeightVisitor& visitor) const;
  // Observes linear-layer inputs during Forward (calibration); empty to stop.
  void SetLinearInputObserver(LinearInputObserver observer) { observer_ = std::move(observer); }

  // Runs the batch eagerly: checks it, uploads its inputs (Backend::UploadStep), writes K/V
  // for every token into `kv` (one KvLayer per layer), and sets `logits` to
  // [logit_rows.size(), vocab] in the activation dtype on the backend's device.
  Status Forward(const DecoderBatch& batch, std::vector<backend::KvLayer>& kv, Tensor& logits);
  // What Forward checks on the host before the device work: token ids in the vocabulary,
  // arrays that match, rows in range, one cache layer per layer.
  Status CheckBatch(const DecoderBatch& batch, const std::vector<backend::KvLayer>& kv) const;
  // The device work of a step whose inputs are uploaded already (a checked batch): reads
  // nothing from the host but the inputs' sizes, so Backend::RunGraph can record it. Returns
  // the logits [logit rows, vocab] in the activation dtype on the backend's device.
  Result<Tensor> Forward(const backend::StepTensors& in, std::vector<backend::KvLayer>& kv);

  const io::ModelConfig& config() const { return config_; }
  backend::Backend& backend() const { return backend_; }
  // Bytes of weights read by one decode step (for bandwidth accounting in benchmarks).
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  struct Layer {
    Tensor attn_norm;  // f32 [H]
    backend::LinearWeight qkv;       // [(nh + 2 nkv) hd, H]
    backend::LinearWeight o;         // [H, nh hd]
    Tensor mlp_norm;   // f32 [H]
    backend::LinearWeight gate_up;   // [2 I, H]
    backend::LinearWeight down;      // [H, I]
    Tensor q_norm, k_norm;           // f32 [hd] (qk_norm)
    Tensor post_attn_norm, post_mlp_norm;  // f32 [H] (gemma_norms)
  };

  DecoderModel(io::ModelConfig config, backend::Backend& backend) : config_(std::move(config)), backend_(backend) {}
  Status Validate() const;
  // The norm weight `name` [n] as f32; Gemma's (1 + w) is applied here, once.
  Result<Tensor> LoadNorm(const WeightSource& w, const std::string& name, int64_t n) const;
  void Finish();
  // Linear layer `name` of `layer` (-1: outside the layers), reported to the observer.
  Status RunLinear(int layer, const char* name, const Tensor& x, const backend::LinearWeight& w, Tensor& y);
  // x += delta (delta null: x as it is); y = RmsNorm(x) · W^T through Backend::NormLinear, h
  // its scratch (left unwritten when the backend fuses the norm into the quantization).
  Status NormLinear(int layer, const char* name, Tensor& x, const Tensor* delta, const Tensor& gamma, Tensor& h,
                    const backend::LinearWeight& w, Tensor& y);

  io::ModelConfig config_;
  backend::Backend& backend_;
  Tensor embed_;                  // [V, H]
  std::vector<Layer> layers_;
  Tensor final_norm_;             // f32 [H]
  backend::LinearWeight lm_head_; // [V, H] (the embedding table when tied)
  backend::RopeTable rope_;
  size_t weight_bytes_ = 0;
  float embed_scale_ = 1.0f;      // gemma: sqrt(hidden) rounded to the activation dtype
  LinearInputObserver observer_;
  std::vector<std::string> layer_prefix_;  // "layers.N." per layer
};

}  // namespace ferry::model
