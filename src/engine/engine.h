// Engine: a loaded model (config, tokenizer, weights prepared for one backend). Immutable
// after Load and shareable; per-sequence state (KV cache) lives in an engine core (sched::EngineCore).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "core/device_spec.h"
#include "io/engine_manifest.h"
#include "io/model_config.h"
#include "io/pooling_config.h"
#include "model/decoder.h"
#include "model/encoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace ferry::engine {

struct EngineOptions {
  int threads = 0;      // compute threads; 0 = all cores
  bool verify = true;   // engine files: check every blob's CRC-32C while loading
  // CPU engine files: use the weights from a mapping of the file (shared page cache, 4-KiB
  // pages) instead of a copy in huge-page memory (the default: faster steps, see FileLoad).
  bool map_weights = false;
  DeviceSpec device = DeviceSpec::Cpu();  // or a GPU
  DType cuda_activations = DType::kBF16;  // CUDA: activation dtype (bf16, f16, f32); engine files set their own
  std::optional<DType> cuda_kv_cache = std::nullopt;  // CUDA: KV-cache dtype (bf16, f16, f32, f8e4m3); unset: the activations'
  // CPU: what the prefill GEMMs of bf16 and int8-wo weights take x as. f32 keeps its 24 bits;
  // bf16 rounds it to bf16 and multiplies on AVX512-BF16's vdpbf16ps (about twice the f32 FMA
  // rate), where the CPU has it (kernels/cpu/bf16_gemm.h). Other weights, decode and decoders'
  // attention stay f32 (encoders' attention follows the layer: Backend::RoundsInputToBf16).
  DType cpu_activations = DType::kF32;
};

// The backend `options.device` names (Unavailable when that device is absent).
Result<std::unique_ptr<backend::Backend>> MakeBackend(const EngineOptions& options);

// The tokenizer of a model directory, tokenizer-only directory or engine file (its
// embedded files), without loading any weights.
Result<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizerFor(const std::string& path);

// Where a load's time went (coldstart reports, logs).
struct LoadStats {
  uint64_t weight_bytes = 0;  // bytes of weights read from the checkpoint or engine file
  double verify_ms = 0;       // engine files on a GPU: every blob's checksum, in parallel, first
  double weights_ms = 0;      // the model's weights read, converted and handed to the backend
  double finish_ms = 0;       // waiting for the backend's asynchronous copies (GPU) to arrive
  double total_ms() const { return verify_ms + weights_ms + finish_ms; }
};

class Engine {
 public:
  // `path`: a Hugging Face checkpoint directory (config.json + safetensors + tokenizer
  // files) or an engine file written by `ferry build`.
  static Result<std::shared_ptr<Engine>> Load(const std::string& path, const EngineOptions& options = {});

  // Engine files only (null for checkpoints): how the engine was built.
  const io::ManifestBuild* build_info() const { return build_info_ ? &*build_info_ : nullptr; }

  const io::ModelConfig& config() const { return config_; }
  // A sentence-transformers checkpoint's pooling (modules.json); nullopt for other models.
  const std::optional<io::SentencePooling>& sentence_pooling() const { return sentence_pooling_; }
  bool is_decoder() const { return decoder_ != nullptr; }
  // Null when the folder has no tokenizer files (token ids only).
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The transformers-side settings around the tokenizer (special tokens, chat templates),
  // from tokenizer_config.json, special_tokens_map.json, generation_config.json and
  // chat_template.jinja; empty when the model has none of them.
  const tokenizer::TokenizerConfig& tokenizer_config() const { return tokenizer_config_; }
  model::DecoderModel* decoder() const { return decoder_.get(); }
  model::EncoderModel* encoder() const { return encoder_.get(); }
  backend::Backend& backend() const { return *backend_; }
  const std::string& path() const { return path_; }
  const LoadStats& load_stats() const { return load_stats_; }

  // The ids that end generation: config/generation_config eos ids, else the tokenizer's.
  std::vector<int32_t> StopIds() const;
  // BOS to prepend to a text prompt, when the tokenizer's settings ask for one.
  Result<std::vector<int32_t>> EncodePrompt(std::string_view text) const;
  // True when `text` certainly has more than `tokens` tokens, judged from its length in bytes
  // alone: the check a server makes before it spends time tokenizing a huge prompt.
  bool TextSurelyLongerThan(std::string_view text, int64_t tokens) const;

 private:
  Engine() = default;
  static Result<std::shared_ptr<Engine>> LoadEngineFile(const std::string& path, const EngineOptions& options);

  std::string path_;
  io::ModelConfig config_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  tokenizer::TokenizerConfig tokenizer_config_;
  size_t max_token_bytes_ = 1;  // the longest text one token stands for
  void SetTokenizer(std::unique_ptr<tokenizer::Tokenizer> tok);
  std::shared_ptr<const void> weights_keepalive_;
  std::unique_ptr<model::DecoderModel> decoder_;
  std::unique_ptr<model::EncoderModel> encoder_;
  std::optional<io::ManifestBuild> build_info_;
  std::optional<io::SentencePooling> sentence_pooling_;
  LoadStats load_stats_;
};

}  // namespace ferry::engine
