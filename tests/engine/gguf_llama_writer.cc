#include "engine/gguf_llama_writer.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "io/safetensors.h"

namespace ferry::testing {

namespace {

using json = nlohmann::json;

struct Piece {
  std::string text;
  float score = 0;
  int32_t type = 1;
};

// Protocol buffer reading, enough for SentencePiece's ModelProto pieces (field 1).
bool ReadVarint(const std::string& b, size_t& i, uint64_t* v) {
  *v = 0;
  for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
    const uint8_t c = static_cast<uint8_t>(b[i++]);
    *v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (c < 0x80) return true;
  }
  return false;
}

Result<std::vector<Piece>> SentencePieces(const std::string& model) {
  std::vector<Piece> pieces;
  size_t i = 0;
  while (i < model.size()) {
    uint64_t key, len;
    if (!ReadVarint(model, i, &key) || (key & 7) != 2 || !ReadVarint(model, i, &len) || i + len > model.size()) {
      return InvalidArgument("unexpected tokenizer.model layout");
    }
    const std::string body = model.substr(i, len);
    i += len;
    if ((key >> 3) != 1) continue;
    Piece p;
    size_t j = 0;
    while (j < body.size()) {
      uint64_t k, v;
      if (!ReadVarint(body, j, &k)) return InvalidArgument("bad piece");
      if ((k & 7) == 2) {
        if (!ReadVarint(body, j, &v)) return InvalidArgument("bad piece");
        p.text = body.substr(j, v);
        j += v;
      } else if ((k & 7) == 5) {
        std::memcpy(&p.score, body.data() + j, 4);
        j += 4;
      } else {
        if (!ReadVarint(body, j, &v)) return InvalidArgument("bad piece");
        p.type = static_cast<int32_t>(v);
      }
    }
    pieces.push_back(std::move(p));
  }
  return pieces;
}

// The tensor data in `type`; `t` is [rows, cols] (or a vector) in any float dtype.
std::string Encode(const Tensor& t, uint32_t type) {
  const Tensor f = t.ToF32();
  const float* x = f.data<float>();
  const size_t n = static_cast<size_t>(f.numel());
  std::string out;
  if (type == GgufBuilder::kTF32) {
    out.assign(reinterpret_cast<const char*>(x), n * 4);
  } else if (type == GgufBuilder::kTF16 || type == GgufBuilder::kTBF16) {
    for (size_t i = 0; i < n; ++i) {
      GgufBuilder::Put<uint16_t>(&out, type == GgufBuilder::kTF16 ? F32ToF16(x[i]) : F32ToBf16(x[i]));
    }
  } else {  // Q8_0: per block of 32, d = max|x| / 127, q = round(x / d)
    for (size_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      GgufBuilder::Put<uint16_t>(&out, F32ToF16(d));
      for (size_t j = 0; j < 32; ++j) {
        out.push_back(static_cast<char>(static_cast<int8_t>(std::round(x[b * 32 + j] * id))));
      }
    }
  }
  return out;
}

// llama.cpp's permutation of q/k rows: [heads, 2, d/2, in] -> [heads, d/2, 2, in].
Tensor Permute(const Tensor& w, int heads) {
  const Tensor f = w.ToF32();
  const int64_t rows = f.dim(0), cols = f.dim(1), d = rows / heads, half = d / 2;
  Tensor out = Tensor::Empty(f.shape(), DType::kF32);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(out.data<float>() + (h * d + 2 * i + j) * cols, f.data<float>() + (h * d + j * half + i) * cols,
                    static_cast<size_t>(cols) * 4);
  return out;
}

}  // namespace

Status WriteLlamaGguf(const std::string& dir, const std::string& out_path, const GgufLlamaOptions& o) {
  FERRY_ASSIGN_OR_RETURN(const std::string config_text, ReadFileToString(dir + "/config.json"));
  const json c = json::parse(config_text);
  const int hidden = c["hidden_size"], heads = c["num_attention_heads"];
  const int kv_heads = c.value("num_key_value_heads", heads);
  const int layers = c["num_hidden_layers"];
  const int head_dim = hidden / heads;
  GgufBuilder b(o.version);
  b.Str("general.architecture", "llama");
  b.Str("general.name", "test");
  b.U32("llama.block_count", layers);
  b.U32("llama.context_length", c["max_position_embeddings"].get<uint32_t>());
  b.U32("llama.embedding_length", hidden);
  b.U32("llama.feed_forward_length", c["intermediate_size"].get<uint32_t>());
  b.U32("llama.attention.head_count", heads);
  b.U32("llama.attention.head_count_kv", kv_heads);
  b.F32("llama.attention.layer_norm_rms_epsilon", c["rms_norm_eps"].get<float>());
  b.F32("llama.rope.freq_base", c.value("rope_theta", 10000.0f));
  b.U32("llama.rope.dimension_count", head_dim);
  b.U32("llama.vocab_size", c["vocab_size"].get<uint32_t>());
  b.U32("general.file_type", o.type);

  // Tokenizer.
  std::ifstream sp(dir + "/tokenizer.model");
  if (sp.good()) {
    FERRY_ASSIGN_OR_RETURN(const std::string model, ReadFileToString(dir + "/tokenizer.model"));
    FERRY_ASSIGN_OR_RETURN(std::vector<Piece> pieces, SentencePieces(model));
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    for (const Piece& p : pieces) {
      tokens.push_back(p.text);
      scores.push_back(p.score);
      types.push_back(p.type);
    }
    b.Str("tokenizer.ggml.model", "llama");
    b.Str("tokenizer.ggml.pre", "default");
    b.StrArray("tokenizer.ggml.tokens", tokens);
    b.Array<float>("tokenizer.ggml.scores", GgufBuilder::kF32, scores);
    b.Array<int32_t>("tokenizer.ggml.token_type", GgufBuilder::kI32, types);
    b.U32("tokenizer.ggml.unknown_token_id", 0);
    b.Bool("tokenizer.ggml.add_bos_token", true);
    b.Bool("tokenizer.ggml.add_eos_token", false);
  } else {
    FERRY_ASSIGN_OR_RETURN(const std::string tok_text, ReadFileToString(dir + "/tokenizer.json"));
    const json tok = json::parse(tok_text);
    std::vector<std::string> tokens(tok["model"]["vocab"].size());
    for (auto it = tok["model"]["vocab"].begin(); it != tok["model"]["vocab"].end(); ++it) {
      tokens.at(it.value().get<size_t>()) = it.key();
    }
    std::vector<int32_t> types(tokens.size(), 1);
    for (const json& a : tok["added_tokens"]) {
      const size_t id = a["id"];
      if (id >= tokens.size()) tokens.resize(id + 1), types.resize(id + 1, 1);
      tokens[id] = a["content"];
      types[id] = a.value("special", false) ? 3 : 4;
    }
    std::vector<std::string> merges;
    for (const json& m : tok["model"]["merges"]) {
      merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
    b.Str("tokenizer.ggml.model", "gpt2");
    b.Str("tokenizer.ggml.pre", o.pre);
    b.StrArray("tokenizer.ggml.tokens", tokens);
    b.Array<int32_t>("tokenizer.ggml.token_type", GgufBuilder::kI32, types);
    b.StrArray("tokenizer.ggml.merges", merges);
    b.Bool("tokenizer.ggml.add_bos_token", false);
  }
  b.U32("tokenizer.ggml.bos_token_id", c["bos_token_id"].get<uint32_t>());
  b.U32("tokenizer.ggml.eos_token_id", c["eos_token_id"].get<uint32_t>());
  b.Str("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}");

  // Tensors.
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<io::Checkpoint> ckpt, io::Checkpoint::Open(dir));
  auto add = [&](const std::string& hf, const std::string& gguf, int permute_heads) -> Status {
    FERRY_ASSIGN_OR_RETURN(Tensor t, ckpt->Get(hf));
    if (permute_heads > 0) t = Permute(t, permute_heads);
    std::vector<uint64_t> ne;
    for (auto it = t.shape().rbegin(); it != t.shape().rend(); ++it) ne.push_back(static_cast<uint64_t>(*it));
    const uint32_t type = t.rank() == 1 ? static_cast<uint32_t>(GgufBuilder::kTF32) : o.type;
    b.Tensor(gguf, ne, type, Encode(t, type));
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(add("model.embed_tokens.weight", "token_embd.weight", 0));
  FERRY_RETURN_IF_ERROR(add("model.norm.weight", "output_norm.weight", 0));
  if (ckpt->Has("lm_head.weight")) FERRY_RETURN_IF_ERROR(add("lm_head.weight", "output.weight", 0));
  for (int l = 0; l < layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    const std::string g = "blk." + std::to_string(l) + ".";
    FERRY_RETURN_IF_ERROR(add(hf + "self_attn.q_proj.weight", g + "attn_q.weight", heads));
    FERRY_RETURN_IF_ERROR(add(hf + "self_attn.k_proj.weight", g + "attn_k.weight", kv_heads));
    FERRY_RETURN_IF_ERROR(add(hf + "self_attn.v_proj.weight", g + "attn_v.weight", 0));
    FERRY_RETURN_IF_ERROR(add(hf + "self_attn.o_proj.weight", g + "attn_output.weight", 0));
    FERRY_RETURN_IF_ERROR(add(hf + "mlp.gate_proj.weight", g + "ffn_gate.weight", 0));
    FERRY_RETURN_IF_ERROR(add(hf + "mlp.up_proj.weight", g + "ffn_up.weight", 0));
    FERRY_RETURN_IF_ERROR(add(hf + "mlp.down_proj.weight", g + "ffn_down.weight", 0));
    FERRY_RETURN_IF_ERROR(add(hf + "input_layernorm.weight", g + "attn_norm.weight", 0));
    FERRY_RETURN_IF_ERROR(add(hf + "post_attention_layernorm.weight", g + "ffn_norm.weight", 0));
  }
  // Llama 3 scaling as llama.cpp stores it: per-pair divisors of the frequencies.
  const json* rs = c.contains("rope_scaling") ? &c["rope_scaling"] : nullptr;
  if (o.rope_freqs && rs != nullptr && rs->value("rope_type", "") == "llama3") {
    const double factor = (*rs)["factor"], low = (*rs)["low_freq_factor"], high = (*rs)["high_freq_factor"];
    const double old_ctx = (*rs)["original_max_position_embeddings"];
    const double theta = c.value("rope_theta", 10000.0);
    std::vector<float> divisors;
    for (int i = 0; i < head_dim / 2; ++i) {
      const double freq = 1.0 / std::pow(theta, 2.0 * i / head_dim);
      const double wavelen = 2 * M_PI / freq;
      double d = 1.0;
      if (wavelen > old_ctx / low) {
        d = factor;
      } else if (wavelen >= old_ctx / high) {
        const double smooth = (old_ctx / wavelen - low) / (high - low);
        d = 1.0 / ((1 - smooth) / factor + smooth);
      }
      divisors.push_back(static_cast<float>(d));
    }
    b.Tensor("rope_freqs.weight", {divisors.size()}, GgufBuilder::kTF32,
             std::string(reinterpret_cast<const char*>(divisors.data()), divisors.size() * 4));
  }
  return WriteStringToFile(out_path, b.Build());
}

}  // namespace ferry::testing
