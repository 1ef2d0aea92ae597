// Model hyper-parameters parsed from a Hugging Face config.json.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ferry::io {

enum class ModelFamily { kDecoder, kEncoder };

// RoPE frequency scaling ("rope_scaling" / "rope_parameters" in config.json).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;        // llama3
  float high_freq_factor = 4.0f;       // llama3
  int original_max_position = 8192;    // llama3
};

struct ModelConfig {
  std::string model_type;    // "llama", "mistral", "qwen2", "bert"
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"
  ModelFamily family = ModelFamily::kDecoder;

  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // == num_heads when absent
  int head_dim = 0;      // hidden_size / num_heads when absent
  int max_position_embeddings = 0;

  // Decoder.
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v bias (qwen2 always true)
  bool mlp_bias = false;
  std::string hidden_act = "silu";
  std::optional<int> sliding_window;  // mistral; ferry runs full attention and warns
  std::vector<int> bos_token_ids;
  std::vector<int> eos_token_ids;
  std::optional<int> pad_token_id;

  // Encoder.
  float layer_norm_eps = 1e-12f;
  int type_vocab_size = 0;
  std::map<int, std::string> id2label;  // ordered by id
  int num_labels = 0;                   // id2label.size() (0: no classification head)

  std::string torch_dtype;  // "float32", "bfloat16", "float16" or empty
};

// Parses config.json text. Unsupported model types (not llama/mistral/qwen2/bert) and
// missing or inconsistent fields are InvalidArgument errors naming the field.
Result<ModelConfig> ParseModelConfig(const std::string& json_text);
// Reads DIR/config.json (and DIR/generation_config.json for eos ids when present).
Result<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace ferry::io
