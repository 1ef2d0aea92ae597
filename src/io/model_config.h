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
  enum class Type { kNone, kLinear, kLlama3, kLongRope };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;        // llama3
  float high_freq_factor = 4.0f;       // llama3
  int original_max_position = 8192;    // llama3, longrope
  // longrope (Phi-3): per-pair divisors of the frequencies, head_dim / 2 each; the short ones
  // while a sequence fits original_max_position, the long ones beyond; cos/sin are multiplied
  // by attention_factor (sqrt(1 + ln(factor) / ln(original)) unless the config gives it).
  std::vector<float> short_factor;
  std::vector<float> long_factor;
  float attention_factor = 1.0f;
};

// A checkpoint's `quantization_config`: the pre-quantized formats ferry imports. Loading
// dequantizes their weights (model/weights.h: DequantizingSource), after which any precision
// can be served or built from them.
//   - float8: "fp8", "fbgemm_fp8" and "compressed-tensors" with float weights: e4m3 weights
//     with a scale per tensor, per output row or per block beside them;
//   - packed integers: "gptq" (AutoGPTQ / GPTQModel: qweight packed along the input, qzeros,
//     scales, g_idx) and "awq" (AutoAWQ's GEMM layout: qweight packed along the output in
//     AWQ's interleaved order, qzeros, scales), 4 or 8 bits with a group size.
struct QuantizationConfig {
  std::string method;  // "fp8", "fbgemm_fp8", "compressed-tensors", "gptq", "awq"; empty: not quantized
  // Block-wise scales (`fp8` with weight_block_size, DeepSeek-V3's layout): [rows, cols] of
  // one scale block; 0: the scale's shape decides (per tensor or per output channel).
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  // gptq / awq: bits per weight, input rows per scale group (0: one group for the whole input,
  // the config's -1), and whether GPTQ's stored zero points are one less than the real ones
  // (checkpoint_format "gptq", the original v1 layout; "gptq_v2" stores them as they are).
  int bits = 0;
  int64_t group_size = 0;
  bool gptq_zeros_minus_one = false;

  bool packed_int() const { return method == "gptq" || method == "awq"; }
};

struct ModelConfig {
  std::string model_type;    // "llama", "mistral", "qwen2", "qwen3", "gemma2", "phi3", "bert", "xlm-roberta",
                             // "roberta", "modernbert"
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
  std::optional<int> sliding_window;  // the window of the layers that have one
  // Per layer: 0 for full attention, else the window: the query at position p sees keys at
  // positions (p - window, p] (transformers' sliding-window mask). Empty: every layer full.
  // Encoders (bidirectional, ModernBERT's local layers): a half-width, keys at positions
  // [p - window, p + window] (local_attention / 2).
  std::vector<int> layer_windows;
  // Architecture variants of the LLaMA block.
  bool qk_norm = false;                 // qwen3: RMSNorm over each head of q and k before RoPE
  bool fused_checkpoint_projections = false;  // phi3: qkv_proj and gate_up_proj in the checkpoint
  bool gemma_norms = false;             // gemma2: norms scale by (1 + w); post-attention and
                                        // post-feedforward norms; embeddings times sqrt(hidden)
  float attention_scale = 0.0f;         // 0: 1/sqrt(head_dim); gemma2: query_pre_attn_scalar^-1/2
  float attn_logit_softcap = 0.0f;      // gemma2: scores = cap * tanh(scores / cap); 0: none
  float final_logit_softcap = 0.0f;     // gemma2: logits = cap * tanh(logits / cap); 0: none
  std::vector<int> bos_token_ids;
  std::vector<int> eos_token_ids;
  std::optional<int> pad_token_id;

  // Encoder.
  float layer_norm_eps = 1e-12f;
  int type_vocab_size = 0;
  std::map<int, std::string> id2label;  // ordered by id
  int num_labels = 0;                   // id2label.size() (0: no classification head)
  // RoBERTa family: position ids start at padding_idx + 1 (pad_token_id + 1); 0 for BERT.
  int position_offset = 0;

  // ModernBERT (model_type "modernbert"): RoPE instead of position tables, pre-LN blocks,
  // GeGLU MLP, a prediction head (dense, classifier_activation, norm) before the classifier.
  bool norm_bias = true;                 // LayerNorms have a beta (ModernBERT: norm_bias, default false)
  bool classifier_bias = false;          // the prediction head's dense has a bias
  std::string classifier_activation;     // the prediction head's activation ("gelu")
  std::string classifier_pooling;        // sequence classifier input: "cls" (first row) or "mean"
  // Per layer RoPE theta (ModernBERT: global_rope_theta on global layers, local_rope_theta on
  // local ones); empty: rope_theta everywhere.
  std::vector<float> layer_rope_thetas;

  std::string torch_dtype;  // "float32", "bfloat16", "float16" or empty
  QuantizationConfig quantization;
};

// Parses config.json text. Unsupported model types (see kSupported in the .cc) and
// missing or inconsistent fields are InvalidArgument errors naming the field.
Result<ModelConfig> ParseModelConfig(const std::string& json_text);
// Reads DIR/config.json (and DIR/generation_config.json for eos ids when present).
Result<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace ferry::io
