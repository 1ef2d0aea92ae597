#include "io/gguf_model.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/gguf_tokenizer.h"

namespace ferry::io {

namespace {

using json = nlohmann::ordered_json;

// Hugging Face name suffix within model.layers.N -> GGUF name suffix within blk.N.
struct LayerTensor {
  const char* hf;
  const char* gguf;
};
constexpr LayerTensor kLayerTensors[] = {
    {"self_attn.q_proj.weight", "attn_q.weight"},     {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},     {"self_attn.o_proj.weight", "attn_output.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},      {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},      {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
};

// What config.json's torch_dtype says: the dtype the weights come back in.
std::string TorchDType(const GgufFile& f) {
  const GgufTensorInfo* t = f.FindTensor("blk.0.attn_q.weight");
  if (t == nullptr) t = f.FindTensor("token_embd.weight");
  if (t == nullptr) return "float32";
  switch (static_cast<GgmlType>(t->type)) {
    case GgmlType::kF32: return "float32";
    case GgmlType::kBF16: return "bfloat16";
    case GgmlType::kQ8_0: return "float32";  // dequantized to f32
    default: return "float16";
  }
}

Result<int> PositiveInt(const GgufFile& f, const std::string& key) {
  FERRY_ASSIGN_OR_RETURN(const int64_t v, f.Int(key));
  if (v <= 0 || v > (int64_t{1} << 30)) {
    return InvalidArgument("GGUF key '" + key + "' must be a positive count, got " + std::to_string(v));
  }
  return static_cast<int>(v);
}

Result<std::string> ConfigJson(const GgufFile& f, int num_heads, int num_kv_heads,
                               const std::map<std::string, std::string>& tokenizer_files) {
  const std::string a = "llama.";
  json c;
  c["architectures"] = json::array({"LlamaForCausalLM"});
  c["model_type"] = "llama";
  FERRY_ASSIGN_OR_RETURN(const int hidden, PositiveInt(f, a + "embedding_length"));
  FERRY_ASSIGN_OR_RETURN(const int layers, PositiveInt(f, a + "block_count"));
  FERRY_ASSIGN_OR_RETURN(const int context, PositiveInt(f, a + "context_length"));
  FERRY_ASSIGN_OR_RETURN(const int ffn, PositiveInt(f, a + "feed_forward_length"));
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->ne.size() != 2) {
    return InvalidArgument("GGUF '" + f.name() + "' has no 2-D token_embd.weight");
  }
  int64_t vocab = static_cast<int64_t>(embd->ne[1]);
  FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> vocab_key, f.OptionalInt(a + "vocab_size"));
  if (vocab_key && *vocab_key != vocab) {
    return InvalidArgument("GGUF '" + f.name() + "': llama.vocab_size " + std::to_string(*vocab_key) +
                           " disagrees with token_embd.weight's " + std::to_string(vocab) + " rows");
  }
  if (num_heads <= 0 || hidden % num_heads != 0) {
    return InvalidArgument("GGUF '" + f.name() + "': embedding_length " + std::to_string(hidden) +
                           " is not a multiple of the head count");
  }
  int head_dim = hidden / num_heads;
  FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> key_length, f.OptionalInt(a + "attention.key_length"));
  if (key_length) head_dim = static_cast<int>(*key_length);
  FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> rope_dims, f.OptionalInt(a + "rope.dimension_count"));
  if (rope_dims && *rope_dims != head_dim) {
    return Unimplemented("GGUF '" + f.name() + "': rope.dimension_count " + std::to_string(*rope_dims) +
                         " differs from the head size " + std::to_string(head_dim) +
                         " (partial rotary embeddings are not supported)");
  }
  FERRY_ASSIGN_OR_RETURN(std::optional<double> eps, f.OptionalFloat(a + "attention.layer_norm_rms_epsilon"));
  FERRY_ASSIGN_OR_RETURN(std::optional<double> theta, f.OptionalFloat(a + "rope.freq_base"));
  c["vocab_size"] = vocab;
  c["hidden_size"] = hidden;
  c["intermediate_size"] = ffn;
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = num_heads;
  c["num_key_value_heads"] = num_kv_heads;
  if (key_length) c["head_dim"] = head_dim;
  c["max_position_embeddings"] = context;
  c["rms_norm_eps"] = eps.value_or(1e-5);
  c["rope_theta"] = theta.value_or(10000.0);
  c["tie_word_embeddings"] = f.FindTensor("output.weight") == nullptr;
  c["hidden_act"] = "silu";
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  c["torch_dtype"] = TorchDType(f);

  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> scaling, f.OptionalString(a + "rope.scaling.type"));
  if (scaling && *scaling == "linear") {
    FERRY_ASSIGN_OR_RETURN(std::optional<double> factor, f.OptionalFloat(a + "rope.scaling.factor"));
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor.value_or(1.0)}};
  } else if (scaling && *scaling != "none") {
    return Unimplemented("GGUF '" + f.name() + "': rope scaling '" + *scaling +
                         "' is not supported (supported: none, linear, and rope_freqs.weight factors)");
  }
  if (f.FindTensor("rope_freqs.weight") != nullptr) {
    if (c.contains("rope_scaling")) {
      return Unimplemented("GGUF '" + f.name() + "' has both rope.scaling.type and rope_freqs.weight");
    }
    FERRY_ASSIGN_OR_RETURN(Tensor freqs, f.Get("rope_freqs.weight"));
    if (freqs.rank() != 1 || freqs.dim(0) != head_dim / 2) {
      return InvalidArgument("GGUF '" + f.name() + "': rope_freqs.weight must hold head_dim / 2 = " +
                             std::to_string(head_dim / 2) + " factors");
    }
    Tensor f32 = freqs.ToF32();
    std::vector<double> factors;
    for (int64_t i = 0; i < f32.dim(0); ++i) factors.push_back(f32.data<float>()[i]);
    // Per-pair divisors of the frequencies: what longrope applies (below its original length,
    // and beyond it with the same set), with no attention factor.
    c["rope_scaling"] = {{"rope_type", "longrope"},
                         {"short_factor", factors},
                         {"long_factor", factors},
                         {"factor", 1.0},
                         {"attention_factor", 1.0},
                         {"original_max_position_embeddings", context}};
  }
  // Special token ids, as the tokenizer metadata gives them.
  if (auto it = tokenizer_files.find("generation_config.json"); it != tokenizer_files.end()) {
    const json g = json::parse(it->second);
    if (g.contains("bos_token_id")) c["bos_token_id"] = g["bos_token_id"];
    if (g.contains("eos_token_id")) c["eos_token_id"] = g["eos_token_id"];
  }
  return c.dump(1);
}

// Rows of a [heads * head_dim, in] matrix from llama.cpp's interleaved rotary order back to
// Hugging Face's halves: hf row h*d + j*d/2 + i is GGUF row h*d + 2i + j.
Result<Tensor> UnpermuteRows(const Tensor& t, int heads, const std::string& name) {
  if (t.rank() != 2 || heads <= 0 || t.dim(0) % heads != 0 || (t.dim(0) / heads) % 2 != 0) {
    return InvalidArgument("GGUF tensor for '" + name + "' has shape " + ShapeToString(t.shape()) +
                           ", not [" + std::to_string(heads) + " heads * an even head size, in]");
  }
  const int64_t d = t.dim(0) / heads, half = d / 2;
  const size_t row_bytes = static_cast<size_t>(t.dim(1)) * DTypeSize(t.dtype());
  Tensor out = Tensor::Empty(t.shape(), t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i) {
        std::memcpy(dst + static_cast<size_t>(h * d + j * half + i) * row_bytes,
                    src + static_cast<size_t>(h * d + 2 * i + j) * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<GgufModel>> GgufModel::Open(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> file, GgufFile::Open(path));
  return FromFile(std::move(file));
}

Result<std::shared_ptr<GgufModel>> GgufModel::FromFile(std::shared_ptr<GgufFile> file) {
  const GgufFile& f = *file;
  FERRY_ASSIGN_OR_RETURN(const std::string arch, f.String("general.architecture"));
  if (arch != "llama") {
    return Unimplemented("GGUF '" + f.name() + "' holds a '" + arch +
                         "' model; ferry imports the llama architecture from GGUF");
  }
  std::shared_ptr<GgufModel> m(new GgufModel());
  FERRY_ASSIGN_OR_RETURN(m->num_heads_, PositiveInt(f, "llama.attention.head_count"));
  FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> kv, f.OptionalInt("llama.attention.head_count_kv"));
  m->num_kv_heads_ = kv ? static_cast<int>(*kv) : m->num_heads_;
  if (m->num_kv_heads_ <= 0 || m->num_heads_ % m->num_kv_heads_ != 0) {
    return InvalidArgument("GGUF '" + f.name() + "': head_count_kv " + std::to_string(m->num_kv_heads_) +
                           " does not divide head_count " + std::to_string(m->num_heads_));
  }
  std::map<std::string, std::string> tok;
  std::string config;
  try {
    // Writing JSON throws on text that is not UTF-8 (a token, the chat template).
    FERRY_ASSIGN_OR_RETURN(tok, GgufTokenizerFiles(f));
    FERRY_ASSIGN_OR_RETURN(config, ConfigJson(f, m->num_heads_, m->num_kv_heads_, tok));
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("GGUF '") + f.name() + "': its metadata cannot be written as JSON: " +
                           e.what());
  }
  m->files_ = std::move(tok);
  m->files_["config.json"] = std::move(config);
  m->file_ = std::move(file);
  return m;
}

std::optional<GgufModel::Mapped> GgufModel::Map(const std::string& hf) const {
  if (hf == "model.embed_tokens.weight") return Mapped{"token_embd.weight"};
  if (hf == "model.norm.weight") return Mapped{"output_norm.weight"};
  if (hf == "lm_head.weight") return Mapped{"output.weight"};
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot - prefix.size() > 6) return std::nullopt;
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  if (layer.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const std::string rest = hf.substr(dot + 1);
  for (const LayerTensor& t : kLayerTensors) {
    if (rest != t.hf) continue;
    Mapped m{"blk." + layer + "." + t.gguf};
    if (rest == "self_attn.q_proj.weight") m.permute_heads = num_heads_;
    if (rest == "self_attn.k_proj.weight") m.permute_heads = num_kv_heads_;
    return m;
  }
  return std::nullopt;
}

bool GgufModel::Has(const std::string& hf_name) const {
  const std::optional<Mapped> m = Map(hf_name);
  return m && file_->FindTensor(m->gguf_name) != nullptr;
}

Result<Tensor> GgufModel::Get(const std::string& hf_name) const {
  const std::optional<Mapped> m = Map(hf_name);
  if (!m) return NotFound("tensor '" + hf_name + "' has no GGUF counterpart in '" + file_->name() + "'");
  Result<Tensor> t = file_->Get(m->gguf_name);
  if (!t.ok()) return t.status().WithContext("reading '" + hf_name + "'");
  if (m->permute_heads == 0) return t;
  return UnpermuteRows(*t, m->permute_heads, hf_name);
}

Result<std::optional<Int8Blocks>> GgufModel::GetInt8Blocks(const std::string& hf_name) const {
  const std::optional<Mapped> m = Map(hf_name);
  if (!m) return NotFound("tensor '" + hf_name + "' has no GGUF counterpart in '" + file_->name() + "'");
  Result<std::optional<Int8Blocks>> b = file_->GetInt8Blocks(m->gguf_name);
  if (!b.ok()) return b.status().WithContext("reading '" + hf_name + "'");
  if (m->permute_heads == 0 || !b->has_value()) return b;
  Int8Blocks& blocks = **b;
  // A row's blocks move with it: the same row order for q and for the scales.
  FERRY_ASSIGN_OR_RETURN(blocks.q, UnpermuteRows(blocks.q, m->permute_heads, hf_name));
  FERRY_ASSIGN_OR_RETURN(blocks.scales, UnpermuteRows(blocks.scales, m->permute_heads, hf_name));
  return b;
}

}  // namespace ferry::io
