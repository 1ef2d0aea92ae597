#include "tools/checkpoint_maker.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "core/mapped_file.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"

namespace ferry::tools {

namespace {

struct Preset {
  std::string arch;  // llama, mistral, qwen2, qwen3, gemma2, phi3, bert
  int vocab, hidden, inter, layers, heads, kv_heads, max_pos;
  double theta = 10000.0;
  bool tied = false;
  bool llama3_rope = false;
  double rope_factor = 8.0;
  int type_vocab = 2;
  int head_dim = 0;       // 0: hidden / heads
  int window = 0;         // mistral, gemma2: sliding_window (0: none)
  int original_max = 0;   // phi3: longrope from this original window (0: no rope scaling)
};

// The presets of the architectures whose shapes need the fields after type_vocab.
Preset With(Preset p, int head_dim, int window, int original_max = 0) {
  p.head_dim = head_dim;
  p.window = window;
  p.original_max = original_max;
  return p;
}

const std::map<std::string, Preset>& Presets() {
  static const std::map<std::string, Preset> presets = {
      {"llama-3.2-1b", {"llama", 128256, 2048, 8192, 16, 32, 8, 131072, 500000.0, true, true, 32.0}},
      {"llama-3.2-3b", {"llama", 128256, 3072, 8192, 28, 24, 8, 131072, 500000.0, true, true, 32.0}},
      {"llama-3-8b", {"llama", 128256, 4096, 14336, 32, 32, 8, 8192, 500000.0, false}},
      {"llama-2-7b", {"llama", 32000, 4096, 11008, 32, 32, 32, 4096, 10000.0, false}},
      {"mistral-7b", {"mistral", 32000, 4096, 14336, 32, 32, 8, 32768, 1000000.0, false}},
      {"qwen2-0.5b", {"qwen2", 151936, 896, 4864, 24, 14, 2, 32768, 1000000.0, true}},
      {"qwen3-0.6b", With({"qwen3", 151936, 1024, 3072, 28, 16, 8, 40960, 1000000.0, true}, 128, 0)},
      {"gemma-2-2b", With({"gemma2", 256000, 2304, 9216, 26, 8, 4, 8192, 10000.0, true}, 256, 4096)},
      {"phi-3-mini-4k", With({"phi3", 32064, 3072, 8192, 32, 32, 32, 4096, 10000.0, false}, 0, 0)},
      {"phi-3.5-mini", With({"phi3", 32064, 3072, 8192, 32, 32, 32, 131072, 10000.0, false}, 0, 0, 4096)},
      {"bert-base", {"bert", 30522, 768, 3072, 12, 12, 12, 512}},
      {"bert-large", {"bert", 30522, 1024, 4096, 24, 16, 16, 512}},
      // Small shapes for tests.
      {"llama-test", {"llama", 512, 64, 160, 2, 4, 2, 256, 10000.0, false}},
      {"qwen3-test", With({"qwen3", 512, 64, 160, 2, 4, 2, 256, 1000000.0, true}, 32, 0)},
      {"gemma2-test", With({"gemma2", 512, 64, 160, 4, 4, 2, 256, 10000.0, true}, 32, 8)},
      {"phi3-test", With({"phi3", 512, 64, 160, 2, 4, 2, 256, 10000.0, false}, 0, 0, 32)},
      {"mistral-swa-test", With({"mistral", 512, 64, 160, 2, 4, 2, 256, 10000.0, false}, 0, 8)},
      {"bert-test", {"bert", 512, 64, 128, 2, 4, 4, 128}},
      // XLM-RoBERTa (a bge-reranker-style classifier): max_pos counts usable tokens.
      {"xlmr-test", {"xlm-roberta", 512, 64, 128, 2, 4, 4, 128, 10000.0, false, false, 8.0, 1}},
      // BERT's WordPiece vocabulary (bert-base-uncased's size) on a small body: text tests.
      {"bert-test-vocab", {"bert", 30522, 64, 128, 2, 4, 4, 512}},
  };
  return presets;
}

// Counter-based generator: each element's value depends only on (seed, tensor, index), so
// filling in parallel is deterministic.
inline uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Approximately N(0, 1): sum of four uniforms (Irwin-Hall), rescaled. Plenty for benchmarks.
inline float Gaussianish(uint64_t key) {
  const uint64_t r = SplitMix(key);
  float s = 0.0f;
  for (int i = 0; i < 4; ++i) s += static_cast<float>((r >> (16 * i)) & 0xffff) / 65535.0f;
  return (s - 2.0f) * 1.7320508f;
}

Tensor RandomTensor(const Shape& shape, DType dtype, uint64_t seed, float std_dev, float mean) {
  Tensor t = Tensor::Empty(shape, dtype);
  const int64_t n = t.numel();
  const size_t esize = DTypeSize(dtype);
  ParallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
    float buf[1024];
    for (int64_t i = begin; i < end; i += 1024) {
      const int64_t m = std::min<int64_t>(1024, end - i);
      for (int64_t j = 0; j < m; ++j) buf[j] = mean + std_dev * Gaussianish(seed * 0x100000001b3ull + i + j);
      ConvertFromF32(dtype, buf, t.data<char>() + i * esize, static_cast<size_t>(m));
    }
  });
  return t;
}

struct TensorSpec {
  std::string name;
  Shape shape;
  float std_dev;
  float mean;
};

std::vector<TensorSpec> DecoderTensors(const Preset& p) {
  const int64_t hd = p.head_dim > 0 ? p.head_dim : p.hidden / p.heads;
  std::vector<TensorSpec> t;
  const float w = 0.02f;
  // Gemma scales by (1 + w): its norm weights are stored around 0.
  const float norm_mean = p.arch == "gemma2" ? 0.0f : 1.0f;
  t.push_back({"model.embed_tokens.weight", {p.vocab, p.hidden}, w, 0});
  for (int l = 0; l < p.layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    t.push_back({pre + "input_layernorm.weight", {p.hidden}, 0.0f, norm_mean});
    if (p.arch == "phi3") {
      // Phi-3 stores the fused projections.
      t.push_back({pre + "self_attn.qkv_proj.weight", {(p.heads + 2 * p.kv_heads) * hd, p.hidden}, w, 0});
      t.push_back({pre + "self_attn.o_proj.weight", {p.hidden, p.heads * hd}, w, 0});
      t.push_back({pre + "post_attention_layernorm.weight", {p.hidden}, 0.0f, 1.0f});
      t.push_back({pre + "mlp.gate_up_proj.weight", {2 * p.inter, p.hidden}, w, 0});
      t.push_back({pre + "mlp.down_proj.weight", {p.hidden, p.inter}, w, 0});
      continue;
    }
    t.push_back({pre + "self_attn.q_proj.weight", {p.heads * hd, p.hidden}, w, 0});
    t.push_back({pre + "self_attn.k_proj.weight", {p.kv_heads * hd, p.hidden}, w, 0});
    t.push_back({pre + "self_attn.v_proj.weight", {p.kv_heads * hd, p.hidden}, w, 0});
    if (p.arch == "qwen3") {
      t.push_back({pre + "self_attn.q_norm.weight", {hd}, 0.0f, 1.0f});
      t.push_back({pre + "self_attn.k_norm.weight", {hd}, 0.0f, 1.0f});
    }
    if (p.arch == "gemma2") {
      t.push_back({pre + "pre_feedforward_layernorm.weight", {p.hidden}, 0.0f, norm_mean});
      t.push_back({pre + "post_feedforward_layernorm.weight", {p.hidden}, 0.0f, norm_mean});
    }
    if (p.arch == "qwen2") {
      t.push_back({pre + "self_attn.q_proj.bias", {p.heads * hd}, w, 0});
      t.push_back({pre + "self_attn.k_proj.bias", {p.kv_heads * hd}, w, 0});
      t.push_back({pre + "self_attn.v_proj.bias", {p.kv_heads * hd}, w, 0});
    }
    t.push_back({pre + "self_attn.o_proj.weight", {p.hidden, p.heads * hd}, w, 0});
    t.push_back({pre + "post_attention_layernorm.weight", {p.hidden}, 0.0f, norm_mean});
    t.push_back({pre + "mlp.gate_proj.weight", {p.inter, p.hidden}, w, 0});
    t.push_back({pre + "mlp.up_proj.weight", {p.inter, p.hidden}, w, 0});
    t.push_back({pre + "mlp.down_proj.weight", {p.hidden, p.inter}, w, 0});
  }
  t.push_back({"model.norm.weight", {p.hidden}, 0.0f, norm_mean});
  if (!p.tied) t.push_back({"lm_head.weight", {p.vocab, p.hidden}, w, 0});
  return t;
}

// CoNLL-2003's tags, the usual labels of a BERT token classifier.
const std::vector<std::string> kConllLabels = {"O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                                               "I-MISC"};

std::vector<std::string> Labels(const std::string& head, int num_labels) {
  if (head == "token" && (num_labels == 0 || num_labels == static_cast<int>(kConllLabels.size()))) return kConllLabels;
  std::vector<std::string> labels;
  for (int i = 0; i < (num_labels > 0 ? num_labels : 2); ++i) labels.push_back("LABEL_" + std::to_string(i));
  return labels;
}

std::vector<TensorSpec> EncoderTensors(const Preset& p, const std::string& head, int labels) {
  std::vector<TensorSpec> t;
  const float w = 0.02f;
  const bool roberta = p.arch == "xlm-roberta";
  const std::string root = roberta ? "roberta." : "bert.";
  const std::string e = root + "embeddings.";
  t.push_back({e + "word_embeddings.weight", {p.vocab, p.hidden}, w, 0});
  // RoBERTa's table has padding_idx + 1 = 2 rows below the first real position.
  t.push_back({e + "position_embeddings.weight", {p.max_pos + (roberta ? 2 : 0), p.hidden}, w, 0});
  t.push_back({e + "token_type_embeddings.weight", {p.type_vocab, p.hidden}, w, 0});
  t.push_back({e + "LayerNorm.weight", {p.hidden}, 0.0f, 1.0f});
  t.push_back({e + "LayerNorm.bias", {p.hidden}, 0.0f, 0.0f});
  for (int l = 0; l < p.layers; ++l) {
    const std::string pre = root + "encoder.layer." + std::to_string(l) + ".";
    for (const char* n : {"query", "key", "value"}) {
      t.push_back({pre + "attention.self." + n + ".weight", {p.hidden, p.hidden}, w, 0});
      t.push_back({pre + "attention.self." + n + ".bias", {p.hidden}, w, 0});
    }
    t.push_back({pre + "attention.output.dense.weight", {p.hidden, p.hidden}, w, 0});
    t.push_back({pre + "attention.output.dense.bias", {p.hidden}, w, 0});
    t.push_back({pre + "attention.output.LayerNorm.weight", {p.hidden}, 0.0f, 1.0f});
    t.push_back({pre + "attention.output.LayerNorm.bias", {p.hidden}, 0.0f, 0.0f});
    t.push_back({pre + "intermediate.dense.weight", {p.inter, p.hidden}, w, 0});
    t.push_back({pre + "intermediate.dense.bias", {p.inter}, w, 0});
    t.push_back({pre + "output.dense.weight", {p.hidden, p.inter}, w, 0});
    t.push_back({pre + "output.dense.bias", {p.hidden}, w, 0});
    t.push_back({pre + "output.LayerNorm.weight", {p.hidden}, 0.0f, 1.0f});
    t.push_back({pre + "output.LayerNorm.bias", {p.hidden}, 0.0f, 0.0f});
  }
  if (roberta) {
    // RobertaClassificationHead (sequence head only).
    t.push_back({"classifier.dense.weight", {p.hidden, p.hidden}, w, 0});
    t.push_back({"classifier.dense.bias", {p.hidden}, w, 0});
    t.push_back({"classifier.out_proj.weight", {labels, p.hidden}, w, 0});
    t.push_back({"classifier.out_proj.bias", {labels}, w, 0});
    return t;
  }
  if (head != "token") {
    t.push_back({"bert.pooler.dense.weight", {p.hidden, p.hidden}, w, 0});
    t.push_back({"bert.pooler.dense.bias", {p.hidden}, w, 0});
  }
  if (head != "none") {
    t.push_back({"classifier.weight", {labels, p.hidden}, w, 0});
    t.push_back({"classifier.bias", {labels}, w, 0});
  }
  return t;
}

std::string TorchDtypeName(DType d) {
  switch (d) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

nlohmann::json ConfigJson(const Preset& p, DType dtype, const std::string& head, const std::vector<std::string>& labels) {
  nlohmann::json c;
  c["model_type"] = p.arch;
  c["vocab_size"] = p.vocab;
  c["hidden_size"] = p.hidden;
  c["intermediate_size"] = p.inter;
  c["num_hidden_layers"] = p.layers;
  c["num_attention_heads"] = p.heads;
  c["max_position_embeddings"] = p.max_pos;
  c["torch_dtype"] = TorchDtypeName(dtype);
  if (p.arch == "bert" || p.arch == "xlm-roberta") {
    c["architectures"] = {p.arch == "xlm-roberta" ? "XLMRobertaForSequenceClassification"
                          : head == "token"       ? "BertForTokenClassification"
                          : head == "none"        ? "BertModel"
                                                  : "BertForSequenceClassification"};
    c["hidden_act"] = "gelu";
    c["type_vocab_size"] = p.type_vocab;
    c["layer_norm_eps"] = p.arch == "xlm-roberta" ? 1e-5 : 1e-12;
    c["pad_token_id"] = p.arch == "xlm-roberta" ? 1 : 0;
    if (p.arch == "xlm-roberta") {
      c["max_position_embeddings"] = p.max_pos + 2;
      c["bos_token_id"] = 0;
      c["eos_token_id"] = 2;
    }
    if (head != "none") {
      nlohmann::json id2label, label2id;
      for (size_t i = 0; i < labels.size(); ++i) {
        id2label[std::to_string(i)] = labels[i];
        label2id[labels[i]] = i;
      }
      c["id2label"] = id2label;
      c["label2id"] = label2id;
    }
    return c;
  }
  const std::map<std::string, std::string> archs = {{"llama", "LlamaForCausalLM"},   {"mistral", "MistralForCausalLM"},
                                                    {"qwen2", "Qwen2ForCausalLM"},   {"qwen3", "Qwen3ForCausalLM"},
                                                    {"gemma2", "Gemma2ForCausalLM"}, {"phi3", "Phi3ForCausalLM"}};
  c["architectures"] = {archs.at(p.arch)};
  c["num_key_value_heads"] = p.kv_heads;
  const int head_dim = p.head_dim > 0 ? p.head_dim : p.hidden / p.heads;
  c["head_dim"] = head_dim;
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = 1e-5;
  c["rope_theta"] = p.theta;
  c["tie_word_embeddings"] = p.tied;
  c["attention_bias"] = p.arch == "qwen2";
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  if (p.llama3_rope) {
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", p.rope_factor},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  } else {
    c["rope_scaling"] = nullptr;
  }
  if (p.arch == "mistral") c["sliding_window"] = p.window > 0 ? nlohmann::json(p.window) : nlohmann::json(nullptr);
  if (p.arch == "gemma2") {
    // Gemma 2's published settings (gemma-2-2b): GeGLU, scaled queries, soft-capping.
    c["hidden_act"] = "gelu_pytorch_tanh";
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["query_pre_attn_scalar"] = head_dim;
    c["sliding_window"] = p.window;
    c["attn_logit_softcapping"] = 50.0;
    c["final_logit_softcapping"] = 30.0;
    c["rms_norm_eps"] = 1e-6;
    c["bos_token_id"] = 2;
    c["eos_token_id"] = 1;
    c["pad_token_id"] = 0;
  }
  if (p.arch == "phi3") {
    c["sliding_window"] = nullptr;
    if (p.original_max > 0) {
      // longrope with Phi-3.5-mini's shape of factors: 1 for the fastest pairs, growing.
      std::vector<double> short_factor, long_factor;
      for (int i = 0; i < head_dim / 2; ++i) {
        const double x = static_cast<double>(i) / std::max(1, head_dim / 2 - 1);
        short_factor.push_back(1.0 + 0.5 * x * x);
        long_factor.push_back(1.0 + 30.0 * x * x);
      }
      c["original_max_position_embeddings"] = p.original_max;
      c["rope_scaling"] = {{"type", "longrope"}, {"short_factor", short_factor}, {"long_factor", long_factor}};
    }
  }
  return c;
}

}  // namespace

std::vector<std::string> CheckpointPresets() {
  std::vector<std::string> names;
  for (const auto& [name, _] : Presets()) names.push_back(name);
  return names;
}

Status MakeCheckpoint(const CheckpointSpec& spec, const std::string& dir) {
  auto it = Presets().find(spec.preset);
  if (it == Presets().end()) {
    std::string known;
    for (const std::string& n : CheckpointPresets()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("unknown preset '" + spec.preset + "' (known: " + known + ")");
  }
  if (spec.dtype != DType::kF32 && spec.dtype != DType::kBF16 && spec.dtype != DType::kF16) {
    return InvalidArgument("checkpoint dtype must be fp32, bf16 or fp16");
  }
  const Preset& p = it->second;
  if (spec.head != "sequence" && spec.head != "token" && spec.head != "none") {
    return InvalidArgument("head must be sequence, token or none, got '" + spec.head + "'");
  }
  if (p.arch != "bert" && (spec.head != "sequence" || spec.num_labels != 0)) {
    return InvalidArgument("--head and --labels apply to BERT presets only");
  }
  if (spec.num_labels < 0 || spec.num_labels > 4096) return InvalidArgument("labels must be in [1, 4096]");
  const std::vector<std::string> labels = Labels(spec.head, spec.num_labels);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgument("cannot create '" + dir + "': " + ec.message());
  if (!spec.tokenizer_dir.empty()) {
    int copied = 0;
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                             "tokenizer.model"}) {
      const std::filesystem::path from = std::filesystem::path(spec.tokenizer_dir) / name;
      if (!std::filesystem::exists(from, ec)) continue;
      std::filesystem::copy_file(from, std::filesystem::path(dir) / name,
                                 std::filesystem::copy_options::overwrite_existing, ec);
      if (ec) return InvalidArgument("cannot copy " + from.string() + ": " + ec.message());
      ++copied;
    }
    if (copied == 0) return NotFound("no tokenizer files in '" + spec.tokenizer_dir + "'");
  }

  const bool encoder = p.arch == "bert" || p.arch == "xlm-roberta";
  const std::vector<TensorSpec> specs =
      encoder ? EncoderTensors(p, spec.head, static_cast<int>(labels.size())) : DecoderTensors(p);
  // Group tensors into shards of about spec.shard_bytes.
  std::vector<std::vector<const TensorSpec*>> shards(1);
  double bytes = 0;
  for (const TensorSpec& t : specs) {
    const double tb = static_cast<double>(NumElements(t.shape) * DTypeSize(spec.dtype));
    if (bytes > 0 && bytes + tb > spec.shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(&t);
    bytes += tb;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  double total = 0;
  uint64_t tensor_index = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? "model.safetensors"
                                                : "model-" + std::string(5 - std::to_string(s + 1).size(), '0') +
                                                      std::to_string(s + 1) + "-of-" +
                                                      std::string(5 - std::to_string(shards.size()).size(), '0') +
                                                      std::to_string(shards.size()) + ".safetensors";
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const TensorSpec* t : shards[s]) {
      const uint64_t seed = SplitMix(spec.seed * 7919 + (++tensor_index));
      tensors.emplace_back(t->name, RandomTensor(t->shape, spec.dtype, seed, t->std_dev, t->mean));
      weight_map[t->name] = file;
      total += static_cast<double>(tensors.back().second.nbytes());
    }
    FERRY_RETURN_IF_ERROR(io::WriteSafetensors(dir + "/" + file, tensors, {{"format", "pt"}}));
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", static_cast<int64_t>(total)}}}, {"weight_map", weight_map}};
    FERRY_RETURN_IF_ERROR(WriteStringToFile(dir + "/model.safetensors.index.json", index.dump(2)));
  }
  FERRY_RETURN_IF_ERROR(WriteStringToFile(dir + "/config.json", ConfigJson(p, spec.dtype, spec.head, labels).dump(2)));
  return Status::Ok();
}

}  // namespace ferry::tools
